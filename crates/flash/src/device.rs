//! [`FlashDevice`]: the FTL over its state file as a [`BlockDevice`], usable in real time as a
//! backing device. A block is one page. Each page program is one `pwrite` into the file, so
//! a write that returned survives a process kill (the kernel holds it); a power cut keeps only
//! what a [`BlockDevice::flush`] (fdatasync) covered, so the caps say durable on flush. At
//! open the mapping is rebuilt from the spare areas (a merge cut short is finished there).
//!
//! Latency: [`Latency::Counted`] only adds each operation's datasheet time to the counters'
//! totals; [`Latency::Injected`] also sleeps that long after each request, so the device runs
//! at the modelled chip's speed.

use crate::file::{FileMedia, Header, Saved, StateFile};
use crate::ftl::{Ftl, MergeStep};
use crate::nand::Nand;
use nvstack_core::blockdev::{BlockDevice, Caps, Durability};
use nvstack_core::error::{Error, Result, FIELD};
use nvstack_core::lock::lock_file;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// Whether the device waits for the modelled chip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Latency {
    Counted,
    Injected,
}

struct Inner {
    ftl: Ftl<FileMedia>,
    state: StateFile,
    host_reads: u64,
    host_writes: u64,
}

pub struct FlashDevice {
    path: PathBuf,
    header: Header,
    latency: Latency,
    /// Opened read-only: writes refused, nothing saved (the file is opened read-only too).
    readonly: bool,
    inner: Mutex<Inner>,
}

/// Create a state file at `path` (refused if it exists, unless `force`) with every page erased.
pub fn create(path: &Path, header: Header, force: bool) -> Result<()> {
    header.ftl.validate(&header.geo)?;
    let mut o = OpenOptions::new();
    o.read(true).write(true);
    if force {
        o.create(true);
    } else {
        o.create_new(true);
    }
    let file = o.open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => Error::invalid(
            "force",
            format!("{}: exists (pass {FIELD} to replace it)", path.display()),
        ),
        _ => Error::env(format!("{}: cannot create: {e}", path.display())),
    })?;
    lock_file(&file, path, "flash state file", true)?;
    StateFile::create(file, path, header)?;
    Ok(())
}

/// Open `path` for reading its header and saved counters only (shared lock; never writes).
pub fn inspect(path: &Path) -> Result<(Header, Saved)> {
    let file = File::open(path)
        .map_err(|e| Error::bad(format!("{}: cannot open: {e}", path.display())))?;
    lock_file(&file, path, "flash state file", false)?;
    let (state, saved) = StateFile::open(file, path)?;
    Ok((state.header, saved))
}

impl FlashDevice {
    /// Open a state file for reading and writing (exclusive lock), rebuilding the mapping.
    pub fn open(path: &Path, latency: Latency) -> Result<FlashDevice> {
        let dev = FlashDevice::open_with(path, latency, false)?;
        dev.save()?;
        Ok(dev)
    }

    /// Open a state file for reading only (shared lock, the file opened read-only): the
    /// mapping rebuilt in memory; nothing is ever written. A file a crash left needing
    /// recovery (a merge or an erase cut short) is refused, named: a writer's open finishes it.
    pub fn open_readonly(path: &Path, latency: Latency) -> Result<FlashDevice> {
        FlashDevice::open_with(path, latency, true).map_err(|e| match e {
            Error::Environment(m) if m.starts_with("flash state file:") => Error::env(format!(
                "{}: needs recovery that a read-only open cannot do (a merge or an erase a \
                 crash cut short; {m}): a command that writes it finishes it",
                path.display()
            )),
            e => e,
        })
    }

    fn open_with(path: &Path, latency: Latency, readonly: bool) -> Result<FlashDevice> {
        let file = OpenOptions::new()
            .read(true)
            .write(!readonly)
            .open(path)
            .map_err(|e| Error::bad(format!("{}: cannot open: {e}", path.display())))?;
        lock_file(&file, path, "flash state file", !readonly)?;
        let media_file = file
            .try_clone()
            .map_err(|e| Error::env(format!("{}: {e}", path.display())))?;
        let (state, saved) = StateFile::open(file, path)?;
        let header = state.header;
        let mut nand = Nand::new(header.geo, FileMedia::new(media_file, &header));
        nand.counters = saved.counters;
        let ftl = Ftl::rebuild(nand, header.ftl, saved.merges)?;
        Ok(FlashDevice {
            path: path.to_path_buf(),
            header,
            latency,
            readonly,
            inner: Mutex::new(Inner {
                ftl,
                state,
                host_reads: saved.host_reads,
                host_writes: saved.host_writes,
            }),
        })
    }

    pub fn header(&self) -> Header {
        self.header
    }

    /// The counters as they stand (what `flush` saves).
    pub fn saved(&self) -> Saved {
        let g = self.lock();
        Saved {
            counters: g.ftl.counters().clone(),
            merges: g.ftl.merges(),
            host_reads: g.host_reads,
            host_writes: g.host_writes,
        }
    }

    /// Call `hook` at each merge step (tests stop a process there).
    pub fn set_hook(&self, hook: Box<dyn FnMut(MergeStep) + Send>) {
        self.lock().ftl.set_hook(hook);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn save(&self) -> Result<()> {
        if self.readonly {
            return Ok(());
        }
        let saved = self.saved();
        self.lock().state.save(&saved, &self.path)
    }

    fn check_writable(&self) -> Result<()> {
        if self.readonly {
            return Err(Error::bad(format!(
                "{}: opened read-only",
                self.path.display()
            )));
        }
        Ok(())
    }

    fn check_range(&self, lba: u64, bytes: usize) -> Result<u64> {
        let page = u64::from(self.header.geo.page_data_bytes);
        if !(bytes as u64).is_multiple_of(page) {
            return Err(Error::bad(format!(
                "{} bytes: not a whole number of {page}-byte blocks",
                bytes
            )));
        }
        let n = bytes as u64 / page;
        if lba.checked_add(n).is_none_or(|end| end > self.blocks()) {
            return Err(Error::bad(format!(
                "blocks {lba}..{}: beyond the device ({} blocks)",
                lba.saturating_add(n),
                self.blocks()
            )));
        }
        Ok(n)
    }

    /// Run `f` on the FTL; with injected latency, sleep for the chip time it took.
    fn with_ftl<T>(&self, f: impl FnOnce(&mut Inner) -> Result<T>) -> Result<T> {
        let mut g = self.lock();
        let before = chip_time_ns(&self.header, g.ftl.counters());
        let r = f(&mut g);
        let spent = chip_time_ns(&self.header, g.ftl.counters()) - before;
        drop(g);
        if self.latency == Latency::Injected && spent > 0 {
            std::thread::sleep(Duration::from_nanos(spent));
        }
        r
    }
}

/// The chip time these counters add up to.
pub fn chip_time_ns(h: &Header, c: &crate::nand::Counters) -> u64 {
    h.timing.time_ns(&h.geo, c.reads, c.programs, c.erases)
}

impl BlockDevice for FlashDevice {
    fn block_bytes(&self) -> u32 {
        self.header.geo.page_data_bytes
    }

    fn blocks(&self) -> u64 {
        self.header.geo.logical_pages()
    }

    fn caps(&self) -> Caps {
        Caps {
            atomic_blocks: 1,
            scattered: false,
            durability: Durability::OnFlush,
        }
    }

    fn read(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
        self.check_range(lba, buf.len())?;
        let page = self.header.geo.page_data_bytes as usize;
        self.with_ftl(|g| {
            for (i, chunk) in buf.chunks_mut(page).enumerate() {
                g.ftl.read((lba + i as u64) as u32, chunk)?;
                g.host_reads += 1;
            }
            Ok(())
        })
    }

    fn write(&self, lba: u64, data: &[u8]) -> Result<()> {
        self.check_writable()?;
        self.check_range(lba, data.len())?;
        let page = self.header.geo.page_data_bytes as usize;
        self.with_ftl(|g| {
            for (i, chunk) in data.chunks(page).enumerate() {
                g.ftl.write((lba + i as u64) as u32, chunk)?;
                g.host_writes += 1;
            }
            Ok(())
        })
    }

    /// The model keeps no trim record in the spare area, so a discarded page is written with
    /// zeros (it then reads as zeros, also after a crash).
    fn discard(&self, lba: u64, count: u64) -> Result<()> {
        self.check_writable()?;
        let page = self.header.geo.page_data_bytes as usize;
        self.check_range(lba, (count as usize).saturating_mul(page))?;
        let zeros = vec![0u8; page];
        self.with_ftl(|g| {
            for l in lba..lba + count {
                g.ftl.write(l as u32, &zeros)?;
                g.host_writes += 1;
            }
            Ok(())
        })
    }

    /// Save the counters and make every page durable (fdatasync); nothing for a reader.
    fn flush(&self) -> Result<()> {
        if self.readonly {
            return Ok(());
        }
        self.save()?;
        let g = self.lock();
        g.state
            .file
            .sync_data()
            .map_err(|e| Error::env(format!("{}: fdatasync: {e}", self.path.display())))
    }
}

impl Drop for FlashDevice {
    fn drop(&mut self) {
        // Counters are statistics: a failure to save them at close loses no data.
        let _ = self.save();
    }
}
