//! The first backing device: a file on a real disk, opened with O_DIRECT (no page cache between
//! the cache and the disk, so a checkpoint's writes go to the device) and made durable with
//! fdatasync. A file system without O_DIRECT (tmpfs) gets buffered I/O, which `direct()` says.

use crate::common::format::BACKING_BLOCK_BYTES as BLOCK_BYTES;
use nvstack_core::blockdev::{BlockDevice, Caps, Durability};
use nvstack_core::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

const B: usize = BLOCK_BYTES as usize;

/// `len` zeroed bytes at an address aligned as O_DIRECT requires (4 KiB), in a vector that
/// owns them: (the vector, the offset of the aligned bytes in it), so that the backing file
/// takes them in one pwrite without a copy (a destage aligns its run buffers the same way).
pub fn aligned_buffer(len: usize) -> (Vec<u8>, usize) {
    let v = vec![0u8; len + B];
    let at = v.as_ptr().align_offset(B);
    assert!(at < B && at + len <= v.len(), "an aligned window fits");
    (v, at)
}

/// One block in memory aligned as O_DIRECT requires.
#[repr(C, align(4096))]
struct Aligned([u8; B]);

/// A backing file, locked exclusively while open.
pub struct FileDevice {
    file: File,
    path: PathBuf,
    blocks: u64,
    direct: bool,
    writable: bool,
}

impl FileDevice {
    /// Open `path` for reading and writing and lock it exclusively; Err names the file and
    /// what is wrong.
    pub fn open(path: &Path) -> Result<FileDevice> {
        FileDevice::open_mode(path, true)
    }

    /// Open `path` for reading only, under a shared lock (check and status): every write,
    /// discard or flush is refused.
    pub fn open_readonly(path: &Path) -> Result<FileDevice> {
        FileDevice::open_mode(path, false)
    }

    fn open_mode(path: &Path, writable: bool) -> Result<FileDevice> {
        let (file, direct) = match open_file(path, writable, libc::O_DIRECT) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (
                open_file(path, writable, 0).map_err(|e| io(path, e))?,
                false,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::bad(format!(
                    "{}: no such backing file",
                    path.display()
                )))
            }
            Err(e) => return Err(io(path, e)),
        };
        nvstack_core::lock::lock_file(&file, path, "backing file", writable)?;
        let bytes = file.metadata().map_err(|e| io(path, e))?.len();
        if bytes % B as u64 != 0 || bytes < 2 * B as u64 {
            return Err(Error::bad(format!(
                "{}: {bytes} bytes; a backing file is a whole number of 4096-byte blocks, at \
                 least 2",
                path.display()
            )));
        }
        Ok(FileDevice {
            file,
            path: path.to_path_buf(),
            blocks: bytes / B as u64,
            direct,
            writable,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether I/O bypasses the page cache (O_DIRECT).
    pub fn direct(&self) -> bool {
        self.direct
    }

    fn err(&self, what: &str, e: std::io::Error) -> Error {
        Error::env(format!("{}: {what}: {e}", self.path.display()))
    }

    fn check_writable(&self) -> Result<()> {
        if !self.writable {
            return Err(Error::env(format!(
                "{}: opened read-only: no write, discard or flush",
                self.path.display()
            )));
        }
        Ok(())
    }

    fn check(&self, lba: u64, bytes: usize) -> Result<()> {
        nvstack_core::blockdev::extent(self.blocks, BLOCK_BYTES, lba, bytes)
            .map(|_| ())
            .map_err(|e| e.context(self.path.display()))
    }
}

fn open_file(path: &Path, write: bool, flags: i32) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(flags)
        .open(path)
}

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::env(format!("{}: {e}", path.display()))
}

impl BlockDevice for FileDevice {
    fn block_bytes(&self) -> u32 {
        BLOCK_BYTES
    }
    fn blocks(&self) -> u64 {
        self.blocks
    }
    /// A 4 KiB write to a disk may tear: no atomic unit is promised.
    fn caps(&self) -> Caps {
        Caps {
            atomic_blocks: 0,
            scattered: false,
            durability: Durability::OnFlush,
        }
    }
    fn read(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
        self.check(lba, buf.len())?;
        let mut a = Box::new(Aligned([0; B]));
        for (i, out) in buf.chunks_mut(B).enumerate() {
            let off = (lba + i as u64) * B as u64;
            self.file
                .read_exact_at(&mut a.0, off)
                .map_err(|e| self.err("read", e))?;
            out.copy_from_slice(&a.0);
        }
        Ok(())
    }
    /// A buffer aligned as O_DIRECT requires (a destage's run, `aligned_buffer`) goes out in
    /// one pwrite; any other is copied block by block into an aligned block.
    fn write(&self, lba: u64, data: &[u8]) -> Result<()> {
        self.check_writable()?;
        self.check(lba, data.len())?;
        if data.as_ptr().align_offset(B) == 0 {
            return self
                .file
                .write_all_at(data, lba * B as u64)
                .map_err(|e| self.err("write", e));
        }
        let mut a = Box::new(Aligned([0; B]));
        for (i, block) in data.chunks(B).enumerate() {
            a.0.copy_from_slice(block);
            let off = (lba + i as u64) * B as u64;
            self.file
                .write_all_at(&a.0, off)
                .map_err(|e| self.err("write", e))?;
        }
        Ok(())
    }
    fn discard(&self, lba: u64, count: u64) -> Result<()> {
        self.check_writable()?;
        let bytes = usize::try_from(count).ok().and_then(|c| c.checked_mul(B));
        self.check(lba, bytes.ok_or_else(|| Error::bad("discard too long"))?)?;
        crate::common::sys::punch_hole(&self.file, lba * B as u64, count * B as u64)
            .map_err(|e| self.err("punch hole", e))
    }
    fn flush(&self) -> Result<()> {
        self.check_writable()?;
        self.file.sync_data().map_err(|e| self.err("fdatasync", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_in(dir: &str, blocks: u64) -> (PathBuf, File) {
        let path =
            PathBuf::from(dir).join(format!("nvcache-backing-{}-{blocks}", std::process::id()));
        let f = File::create(&path).unwrap();
        f.set_len(blocks * B as u64).unwrap();
        (path, f)
    }

    #[test]
    fn a_file_on_disk_is_direct_and_round_trips_writes_discards_and_flushes() {
        // The checkout is on a disk: O_DIRECT. /dev/shm is tmpfs, which has O_DIRECT only
        // from Linux 6.6: either way works.
        for (dir, disk) in [(env!("CARGO_MANIFEST_DIR"), true), ("/dev/shm", false)] {
            let (path, _f) = file_in(dir, 8);
            let d = FileDevice::open(&path).unwrap();
            assert!(d.direct() || !disk, "{dir}: O_DIRECT on a disk file");
            let data: Vec<u8> = (0..2 * B).map(|i| (i % 251) as u8).collect();
            d.write(3, &data).unwrap();
            d.flush().unwrap();
            let mut back = vec![0u8; 2 * B];
            d.read(3, &mut back).unwrap();
            assert_eq!(back, data, "{dir}");
            d.discard(3, 1).unwrap();
            d.read(3, &mut back).unwrap();
            assert!(
                back[..B].iter().all(|&b| b == 0) && back[B..] == data[B..],
                "{dir}"
            );
            assert!(d.write(7, &data).is_err(), "past the end");
            let again = FileDevice::open(&path).err().expect("locked");
            assert!(again.to_string().contains("locked"), "{again}");
            assert!(
                FileDevice::open_readonly(&path).is_err(),
                "a writer excludes readers"
            );
            drop(d);
            let r = FileDevice::open_readonly(&path).unwrap();
            let r2 = FileDevice::open_readonly(&path).unwrap();
            r2.read(4, &mut back).unwrap();
            assert!(back[..B] == data[B..], "{dir}: a reader reads");
            assert!(r.write(0, &data).is_err() && r.flush().is_err() && r.discard(0, 1).is_err());
            assert!(FileDevice::open(&path).is_err(), "readers exclude a writer");
            drop((r, r2));
            std::fs::remove_file(&path).unwrap();
        }
    }

    #[test]
    fn a_file_of_a_partial_block_is_refused() {
        let dir = std::env::temp_dir();
        let path = dir.join(format!("nvcache-odd-{}", std::process::id()));
        std::fs::write(&path, vec![0u8; B + 100]).unwrap();
        let e = FileDevice::open(&path).err().expect("refused");
        assert!(e.to_string().contains("whole number"), "{e}");
        std::fs::remove_file(&path).unwrap();
    }
}
