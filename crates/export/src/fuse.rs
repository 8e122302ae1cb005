//! The FUSE export: one directory holding one regular file, `disk`, whose bytes are the
//! device's blocks. A loop device attached to `disk` is a real kernel block device.
//!
//! Caching mode: every open of `disk` is answered with `FOPEN_DIRECT_IO`, so the kernel keeps
//! no page cache for it and every write(2) (and every write the loop device issues) arrives
//! here synchronously, is handed to the device, and only then acknowledged. Nothing above the
//! daemon holds dirty data, so an fsync has nothing to drain above the device: it calls the
//! device's flush (nothing to do for nvramdisk and raw, durable on return; a commit for a UBJ
//! cache; an fdatasync for a plain file) and answers. A FUSE `flush` (sent at every close) is
//! no durability point and does nothing. (The alternative, writeback caching, would let the kernel acknowledge
//! writes that only reach the daemon at the next flush, doubling the data in memory and
//! making every fsync a long drain.) `FOPEN_PARALLEL_DIRECT_WRITES` lets the kernel send
//! several writes to the file at once instead of serialising them on the inode lock, and
//! the session runs several threads, each with its own cloned /dev/fuse descriptor.
//!
//! `max_write` is derived from the device's capabilities ([`BlockFile::write_bytes_max`]): the
//! atomic unit less one block when the unit is at least 2 blocks (63 for nvramdisk's 64),
//! otherwise 63 blocks with no atomicity promise. Less one block, because a write's alignment
//! counts too (64 blocks' worth of bytes at an unaligned offset touch 65 blocks, more than one
//! atomic device write): with a 64-block `max_write` (256 KiB), fuser offers the kernel
//! `max_pages` 64 and the kernel does send 262,144-byte writes at unaligned offsets. The kernel
//! never sends a write longer than `max_write` (direct I/O included), so with 63 blocks every
//! write it sends touches at most 64 blocks at any offset and is a single device write (atomic
//! on nvramdisk); a longer one (which the kernel does not send) is refused with `EINVAL`, never
//! split.
//!
//! [`mount`] mounts the file system and hands back a [`Mounted`] session to run and an
//! [`Unmounter`] to end it from another thread, so no other crate speaks FUSE.

use super::file::BlockFile;
use super::loopdev::{FuseLimits, PAGE_BYTES};
use super::stats::ServeStats;
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use nvstack_core::error::{Error, Result};
use std::ffi::OsStr;
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The kernel's cap on a FUSE server's `max_pages` (fs.fuse.max_pages_limit; 256, the
/// kernel's FUSE_MAX_MAX_PAGES, where the sysctl is absent or unreadable).
fn max_pages_limit() -> u64 {
    std::fs::read_to_string("/proc/sys/fs/fuse/max_pages_limit")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(256)
}

/// The name of the one file.
pub const DISK_NAME: &str = "disk";
const DISK_INO: INodeNo = INodeNo(2);
/// Attributes never change except by us, so the kernel may cache them for long.
const ATTR_TTL: Duration = Duration::from_secs(3600);
const FALLOC_FL_KEEP_SIZE: i32 = 0x01;
const FALLOC_FL_PUNCH_HOLE: i32 = 0x02;
const FALLOC_FL_ZERO_RANGE: i32 = 0x10;

/// The FUSE options the daemon requests, switchable so their effect can be measured.
#[derive(Clone, Copy, Debug)]
pub struct FuseOptions {
    /// `FOPEN_PARALLEL_DIRECT_WRITES` on every open.
    pub parallel_direct_writes: bool,
    /// Largest write the kernel may send, bytes (at most [`BlockFile::write_bytes_max`], so
    /// every write is one device write at any offset, atomic when the device is).
    pub max_write_bytes: u32,
}

pub struct DiskFs {
    file: Arc<BlockFile>,
    stats: Arc<ServeStats>,
    opts: FuseOptions,
    /// Where INIT's outcome goes, once (the daemon reports ready only after it).
    negotiated: std::sync::Mutex<Option<SyncSender<std::result::Result<FuseLimits, String>>>>,
    started: SystemTime,
    uid: u32,
    gid: u32,
}

/// INIT's outcome: the limits the kernel took, or why INIT failed.
pub type Negotiated = Receiver<std::result::Result<FuseLimits, String>>;

impl DiskFs {
    /// The file system, and where the limits agreed at the kernel's INIT arrive.
    pub fn new(
        file: Arc<BlockFile>,
        stats: Arc<ServeStats>,
        opts: FuseOptions,
        uid: u32,
        gid: u32,
    ) -> (DiskFs, Negotiated) {
        assert!(opts.max_write_bytes as u64 <= file.write_bytes_max());
        let (tx, rx) = sync_channel(1);
        let fs = DiskFs {
            file,
            stats,
            opts,
            negotiated: std::sync::Mutex::new(Some(tx)),
            started: SystemTime::now(),
            uid,
            gid,
        };
        (fs, rx)
    }

    /// The limits INIT leaves in force. fuser tells the kernel `max_pages` = the pages of
    /// max(max_write, max_readahead) (fuser 0.18, `KernelConfig::max_pages`) when the kernel
    /// offers FUSE_MAX_PAGES, and the kernel takes at most its `max_pages_limit` (sysctl
    /// fs.fuse.max_pages_limit, 256 by default); without FUSE_MAX_PAGES (before Linux 4.20)
    /// it uses 32. The serve tests check the result against the kernel's own splitting.
    fn agree(&self, config: &mut KernelConfig) -> std::result::Result<FuseLimits, String> {
        config
            .set_max_write(self.opts.max_write_bytes)
            .map_err(|nearest| {
                format!(
                    "max_write {} refused by fuser (nearest {nearest})",
                    self.opts.max_write_bytes
                )
            })?;
        // The kernel's readahead is fuser's ceiling: asking for more tells it, and taking it
        // makes it known (more readahead, more page slots a request may carry).
        let readahead_bytes = match config.set_max_readahead(u32::MAX) {
            Ok(_) => u32::MAX,
            Err(ceiling) => ceiling,
        };
        config
            .set_max_readahead(readahead_bytes)
            .map_err(|e| format!("max_readahead {readahead_bytes} refused (nearest {e})"))?;
        let max_write_bytes = u64::from(self.opts.max_write_bytes);
        let max_pages = if config.capabilities().contains(InitFlags::FUSE_MAX_PAGES) {
            let asked = max_write_bytes
                .max(u64::from(readahead_bytes))
                .div_ceil(PAGE_BYTES);
            asked.min(max_pages_limit())
        } else {
            32
        };
        assert!(max_pages >= 1 && max_write_bytes >= PAGE_BYTES);
        Ok(FuseLimits {
            max_write_bytes,
            max_pages,
        })
    }

    fn attr(&self, ino: INodeNo) -> Option<FileAttr> {
        let (kind, perm, size, nlink) = if ino == INodeNo::ROOT {
            (FileType::Directory, 0o755, 0, 2)
        } else if ino == DISK_INO {
            (FileType::RegularFile, 0o600, self.file.size_bytes(), 1)
        } else {
            return None;
        };
        Some(FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: self.started,
            mtime: self.started,
            ctime: self.started,
            crtime: self.started,
            kind,
            perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            flags: 0,
            blksize: self.file.block_bytes() as u32,
        })
    }
}

fn errno_of(e: &Error) -> Errno {
    match e {
        // Out of range: what a block device answers for I/O past its end.
        Error::BadInput(_) => Errno::ENOSPC,
        Error::NoSpace(_) => Errno::ENOSPC,
        _ => Errno::EIO,
    }
}

impl Filesystem for DiskFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Exactly this max_write or nothing: a larger one would not be atomic at every offset.
        let agreed = self.agree(config);
        if let Ok(limits) = &agreed {
            self.stats.fuse_agreed(limits, self.file.block_bytes());
        }
        let tx = self.negotiated.lock().ok().and_then(|mut g| g.take());
        if let Some(tx) = tx {
            let _ = tx.send(agreed.clone());
        }
        agreed.map(|_| ()).map_err(std::io::Error::other)
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent == INodeNo::ROOT && name == DISK_NAME {
            let a = self.attr(DISK_INO).expect("disk inode");
            reply.entry(&ATTR_TTL, &a, Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(ino) {
            Some(a) => reply.attr(&ATTR_TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    /// Only what leaves the file as it is: the size it already has, and times (ignored: the
    /// file's times are the daemon's start). A chmod, chown or resize is refused.
    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let Some(a) = self.attr(ino) else {
            return reply.error(Errno::ENOENT);
        };
        if mode.is_some() || uid.is_some() || gid.is_some() {
            return reply.error(Errno::EPERM);
        }
        if size.is_some_and(|s| s != a.size) {
            return reply.error(Errno::EINVAL);
        }
        reply.attr(&ATTR_TTL, &a)
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if ino != DISK_INO {
            return reply.error(Errno::EISDIR);
        }
        let mut f = FopenFlags::FOPEN_DIRECT_IO;
        if self.opts.parallel_direct_writes {
            f |= FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES;
        }
        reply.opened(FileHandle(0), f);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if ino != DISK_INO {
            return reply.error(Errno::EISDIR);
        }
        let mut buf = vec![0u8; size as usize];
        match self.file.read_at(offset, &mut buf) {
            Ok(n) => reply.data(&buf[..n]),
            Err(e) => {
                eprintln!("nvstack serve: read of {size} bytes at {offset}: {e}");
                reply.error(errno_of(&e))
            }
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if ino != DISK_INO {
            return reply.error(Errno::EISDIR);
        }
        if data.len() as u64 > self.file.write_bytes_max()
            && self.file.blocks_touched(offset, data.len() as u64) > self.file.write_blocks_max()
        {
            // Longer than the max_write the kernel was given: never split (not one write).
            eprintln!(
                "nvstack serve: write of {} bytes at {offset} exceeds {}; refused",
                data.len(),
                self.file.limit_name()
            );
            return reply.error(Errno::EINVAL);
        }
        match self.file.write_at(offset, data) {
            Ok(()) => {
                // Counted durable before the acknowledgement, acknowledged after it: the
                // kill tests' count of acknowledged writes is then a lower bound.
                self.stats.write_durable();
                reply.written(data.len() as u32);
                self.stats.write_acked();
            }
            Err(e) => {
                eprintln!(
                    "nvstack serve: write of {} bytes at {offset}: {e}",
                    data.len()
                );
                reply.error(errno_of(&e))
            }
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok()
    }

    /// Nothing above the daemon holds dirty data (direct I/O), so the device's flush is all an
    /// fsync needs: a no-op for a device durable on return (nvramdisk, raw), the moment writes
    /// become durable for one durable on flush.
    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let covered = self.stats.fsync_begin();
        match self.file.flush() {
            Ok(()) => {
                self.stats.fsync_done(covered);
                reply.ok()
            }
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    /// Discard: `PUNCH_HOLE|KEEP_SIZE` (what the loop device sends for a discard, and so for
    /// fstrim) and `ZERO_RANGE` free the blocks; plain allocation inside the file is a no-op
    /// (every block exists); anything that would change the size is refused.
    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if ino != DISK_INO {
            return reply.error(Errno::EISDIR);
        }
        let in_file = offset
            .checked_add(length)
            .is_some_and(|e| e <= self.file.size_bytes());
        let punch = mode == FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
            || mode == FALLOC_FL_ZERO_RANGE
            || mode == FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE;
        if !punch && mode != 0 && mode != FALLOC_FL_KEEP_SIZE {
            return reply.error(Errno::EOPNOTSUPP);
        }
        if !in_file {
            return reply.error(if punch { Errno::EINVAL } else { Errno::EFBIG });
        }
        if !punch {
            return reply.ok();
        }
        match self.file.punch_hole(offset, length) {
            Ok(()) => {
                self.stats.discard();
                reply.ok()
            }
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if ino != INodeNo::ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let entries = [
            (INodeNo::ROOT, FileType::Directory, "."),
            (INodeNo::ROOT, FileType::Directory, ".."),
            (DISK_INO, FileType::RegularFile, DISK_NAME),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(*ino, (i + 1) as u64, *kind, name) {
                break;
            }
        }
        reply.ok()
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let bb = self.file.block_bytes();
        let blocks = self.file.size_bytes() / bb;
        reply.statfs(blocks, 0, 0, 2, 0, bb as u32, 255, bb as u32)
    }
}

/// How [`mount`] mounts the file system.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// The source shown in /proc/mounts (`nvstack:IMAGE`); the type is `fuse.nvstack`.
    pub fs_name: String,
    /// Session threads, each with its own cloned /dev/fuse descriptor (at least 1).
    pub threads: usize,
}

/// A mounted FUSE session, not serving yet: [`Mounted::run`] serves until it is unmounted.
pub struct Mounted {
    session: fuser::Session<DiskFs>,
}

/// Ends a [`Mounted`] session from another thread (a signal handler's).
pub struct Unmounter {
    inner: fuser::SessionUnmounter,
}

/// Mount `fs` at `mountpoint` (an existing empty directory): `nodev`, `nosuid`, subtype
/// `nvstack`, `opts.threads` threads with cloned descriptors. Fails (exit code 3) when the
/// kernel refuses: no /dev/fuse, not root.
pub fn mount(fs: DiskFs, mountpoint: &Path, opts: &MountOptions) -> Result<Mounted> {
    assert!(opts.threads >= 1, "a session needs a thread");
    let mut cfg = fuser::Config::default();
    cfg.mount_options = vec![
        fuser::MountOption::FSName(opts.fs_name.clone()),
        fuser::MountOption::Subtype("nvstack".into()),
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
    ];
    cfg.n_threads = Some(opts.threads);
    cfg.clone_fd = true;
    let session = fuser::Session::new(fs, mountpoint, &cfg).map_err(|e| {
        Error::env(format!(
            "cannot mount FUSE at {}: {e} (is /dev/fuse there, and are you root?)",
            mountpoint.display()
        ))
    })?;
    Ok(Mounted { session })
}

impl Mounted {
    /// A handle that unmounts this session (and so ends [`Mounted::run`]) from anywhere.
    pub fn unmounter(&mut self) -> Unmounter {
        Unmounter {
            inner: self.session.unmount_callable(),
        }
    }

    /// Serve requests until the file system is unmounted; the error is fuser's.
    pub fn run(self) -> std::io::Result<()> {
        self.session.run()
    }
}

impl Unmounter {
    /// Unmount now. Fails (EBUSY) while something, such as a loop device, holds the file.
    pub fn unmount(&mut self) -> std::io::Result<()> {
        self.inner.unmount()
    }
}
