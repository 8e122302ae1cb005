//! The serve daemon's counters, mirrored into a small file on tmpfs (`--stats FILE`) so that
//! they survive the daemon's death: after a SIGKILL the kill tests read how many writes had
//! been acknowledged and how many of those an fsync had covered.
//!
//! File format (4096 bytes, little-endian u64 words): 0 magic `NVSTATS1`, 1 version (4),
//! 2 daemon pid, 3 writes made durable (on a device durable only on flush, such as a UBJ
//! cache: written, durable at the next fsync), 4 writes acknowledged, 5 fsyncs completed,
//! 6 writes covered by a completed fsync, 7 discards; then a cache's live state (zero without
//! one): 8 the cache's kind (0 none, else nvcache's `CacheKind::code`: 1 UBJ, 2 write cache),
//! 9 dirty blocks (UBJ: written
//! since the last commit; write cache: cached, every cached block being newer than the backing
//! device's copy), 10 UBJ: frozen slots, write cache: used slots (cached and cleared), 11 UBJ
//! commits, 12 UBJ checkpoints completed, 13 UBJ: 1 while a checkpoint runs (from before its
//! first backing write until after its last slot is unfrozen); then the write cache's (zero
//! otherwise): 14-18 blocks destaged this run for room, by watermark, by max-age, by the
//! cleaner, by writeback, 19 blocks that bypassed the cache, 20 flushes from above, 21 1 in the
//! error state; then what FUSE INIT agreed (zero until it ran): 22 `max_write` bytes, 23
//! `max_pages`, 24 the device's block size, 25 the loop device's `max_sectors_kb` for loop
//! blocks of that size (`crate::loopdev`: every request one FUSE write; 0 if none fits).
//! Version 1 had words 0-7 only; version 2 words 0-13, word 8 being 1 for a UBJ cache;
//! version 3 words 0-21. Words are updated under one mutex (the cache's words under the cache's lock as
//! well, at every change), so the file always shows one consistent moment. Bounds: `writes_acked` counts a write only
//! after its acknowledgement was sent (a lower bound), and an fsync covers every write counted
//! durable when it began (an upper bound); so `writes_acked - fsync_covered`, when positive,
//! is a lower bound on the acknowledged writes that no fsync had covered.

use nvstack_core::error::{Error, Result};
use nvstack_nvcache::{CacheKind, CacheObserver, Live};
use nvstack_pmem::mmap::Backing;
use nvstack_pmem::{Access, MmapRegion, Region};
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub const STATS_MAGIC: u64 = u64::from_le_bytes(*b"NVSTATS1");
pub const STATS_VERSION: u64 = 4;
pub const STATS_FILE_BYTES: u64 = 4096;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StatsSnapshot {
    pub pid: u64,
    pub writes_durable: u64,
    pub writes_acked: u64,
    pub fsyncs: u64,
    pub fsync_covered: u64,
    pub discards: u64,
    /// A served cache's live state (words 8-21; None without a cache: word 8 is 0).
    pub cache: Option<Live>,
    /// What FUSE INIT agreed (all zero until it ran).
    pub fuse: FuseWords,
}

/// Words 22-25: the limits FUSE INIT agreed, and the loop device's request limit they give.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FuseWords {
    pub max_write_bytes: u64,
    pub max_pages: u64,
    pub block_bytes: u64,
    pub loop_max_sectors_kb: u64,
}

/// Words the file holds (the rest of its 4096 bytes are zero).
const WORDS: usize = 26;

impl StatsSnapshot {
    /// Acknowledged writes no completed fsync covered (a lower bound).
    pub fn acked_not_fsynced(&self) -> u64 {
        self.writes_acked.saturating_sub(self.fsync_covered)
    }

    fn words(&self) -> [u64; WORDS] {
        // No cache: words 8-21 zero (any kind's zero state, with word 8 saying none).
        let none = Live::new(CacheKind::Ubj);
        let c = self.cache.as_ref().unwrap_or(&none);
        [
            STATS_MAGIC,
            STATS_VERSION,
            self.pid,
            self.writes_durable,
            self.writes_acked,
            self.fsyncs,
            self.fsync_covered,
            self.discards,
            self.cache.map_or(0, |c| c.kind.code()),
            c.dirty_blocks,
            c.held_slots,
            c.commits,
            c.checkpoints,
            u64::from(c.writing_back),
            c.destaged_room,
            c.destaged_watermark,
            c.destaged_max_age,
            c.destaged_cleaner,
            c.destaged_writeback,
            c.bypassed,
            c.flushes,
            u64::from(c.error),
            self.fuse.max_write_bytes,
            self.fuse.max_pages,
            self.fuse.block_bytes,
            self.fuse.loop_max_sectors_kb,
        ]
    }
}

pub struct ServeStats {
    now: Mutex<StatsSnapshot>,
    mirror: Option<MmapRegion>,
}

impl ServeStats {
    /// Counters, mirrored into `path` (created or replaced; must be on tmpfs) when given.
    pub fn new(path: Option<&Path>) -> Result<ServeStats> {
        let now = StatsSnapshot {
            pid: std::process::id() as u64,
            ..Default::default()
        };
        let mirror = match path {
            None => None,
            Some(p) => {
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(p)
                    .map_err(|e| {
                        Error::env(format!("{}: cannot create stats file: {e}", p.display()))
                    })?;
                f.set_len(STATS_FILE_BYTES).map_err(|e| {
                    Error::env(format!("{}: cannot size stats file: {e}", p.display()))
                })?;
                let r = MmapRegion::map_file(f, p, Access::Shared)?;
                if r.backing() != Backing::EmulatedTmpfs {
                    return Err(Error::bad(format!(
                        "{}: the stats file must be on tmpfs (/dev/shm or /run)",
                        p.display()
                    )));
                }
                Some(r)
            }
        };
        let s = ServeStats {
            now: Mutex::new(now),
            mirror,
        };
        s.publish(&now);
        Ok(s)
    }

    fn update(&self, f: impl FnOnce(&mut StatsSnapshot)) {
        let mut g = self.now.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g);
        self.publish(&g);
    }

    fn publish(&self, s: &StatsSnapshot) {
        if let Some(r) = &self.mirror {
            for (i, w) in s.words().iter().enumerate() {
                r.store_u64(i as u64 * 8, *w);
            }
        }
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stop the counters for good at the first instant (polled every 100 us, for at most
    /// `wait`) at which `ready` holds, or when `wait` runs out: the lock is never released, so
    /// every later update (a write's durable count before its acknowledgement, an fsync's
    /// completion before its reply) blocks forever and the file keeps that instant. For a power
    /// cut: after it, nothing more is acknowledged, and the file shows what had been. Returns
    /// the frozen counters and whether `ready` held.
    pub fn freeze_when(
        &self,
        ready: impl Fn(&StatsSnapshot) -> bool,
        wait: std::time::Duration,
    ) -> (StatsSnapshot, bool) {
        let t = std::time::Instant::now();
        loop {
            let g = self.now.lock().unwrap_or_else(|e| e.into_inner());
            let now = *g;
            let hit = ready(&now);
            if hit || t.elapsed() >= wait {
                std::mem::forget(g);
                return (now, hit);
            }
            drop(g);
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }

    pub fn write_durable(&self) {
        self.update(|s| s.writes_durable += 1)
    }
    pub fn write_acked(&self) {
        self.update(|s| s.writes_acked += 1)
    }
    pub fn discard(&self) {
        self.update(|s| s.discards += 1)
    }
    /// Returns the writes this fsync covers: every one made durable before it began.
    pub fn fsync_begin(&self) -> u64 {
        self.snapshot().writes_durable
    }
    /// FUSE INIT agreed `limits` for a device of `block_bytes` blocks.
    pub fn fuse_agreed(&self, limits: &crate::loopdev::FuseLimits, block_bytes: u64) {
        let kb = crate::loopdev::max_sectors_kb(block_bytes, *limits).unwrap_or(0);
        self.update(|s| {
            s.fuse = FuseWords {
                max_write_bytes: limits.max_write_bytes,
                max_pages: limits.max_pages,
                block_bytes,
                loop_max_sectors_kb: kb,
            }
        })
    }
    pub fn fsync_done(&self, covered: u64) {
        self.update(|s| {
            s.fsyncs += 1;
            s.fsync_covered = s.fsync_covered.max(covered);
        })
    }
}

/// Read a stats file (the daemon may be dead).
pub fn read_stats_file(path: &Path) -> Result<StatsSnapshot> {
    let b = std::fs::read(path)
        .map_err(|e| Error::env(format!("{}: cannot read stats file: {e}", path.display())))?;
    if b.len() as u64 != STATS_FILE_BYTES {
        return Err(Error::bad(format!(
            "{}: not a stats file (length {})",
            path.display(),
            b.len()
        )));
    }
    let words: Vec<u64> = b[..WORDS * 8]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let w = |i: usize| words[i];
    if w(0) != STATS_MAGIC || w(1) != STATS_VERSION {
        return Err(Error::bad(format!(
            "{}: not a version-{STATS_VERSION} stats file",
            path.display()
        )));
    }
    Ok(StatsSnapshot {
        pid: w(2),
        writes_durable: w(3),
        writes_acked: w(4),
        fsyncs: w(5),
        fsync_covered: w(6),
        discards: w(7),
        cache: live_of(&words).map_err(|e| e.context(path.display()))?,
        fuse: FuseWords {
            max_write_bytes: w(22),
            max_pages: w(23),
            block_bytes: w(24),
            loop_max_sectors_kb: w(25),
        },
    })
}

/// Words 8-21 as a cache's live state (None when word 8 says no cache).
fn live_of(w: &[u64]) -> Result<Option<Live>> {
    assert_eq!(w.len(), WORDS, "a whole stats file");
    if w[8] == 0 {
        return Ok(None);
    }
    let kind = CacheKind::from_code(w[8])
        .ok_or_else(|| Error::bad(format!("word 8: no cache kind numbered {}", w[8])))?;
    Ok(Some(Live {
        kind,
        dirty_blocks: w[9],
        held_slots: w[10],
        commits: w[11],
        checkpoints: w[12],
        writing_back: w[13] != 0,
        destaged_room: w[14],
        destaged_watermark: w[15],
        destaged_max_age: w[16],
        destaged_cleaner: w[17],
        destaged_writeback: w[18],
        bypassed: w[19],
        flushes: w[20],
        error: w[21] != 0,
    }))
}

/// The serve daemon's counters as a served cache's observer (called under the cache's lock).
impl CacheObserver for ServeStats {
    fn changed(&self, live: &Live) {
        self.update(|s| s.cache = Some(*live))
    }
}

/// Where serve daemons publish a served cache's live state, always (`cache status` on a live
/// cache reads it): one entry per served image, named by the image file's device and inode
/// numbers, on tmpfs. The entry is the stats file itself, or a symbolic link to the one
/// `--stats FILE` names. Publishing sweeps the entries of daemons that died without removing
/// theirs (SIGKILLed, their images perhaps deleted since).
pub const LIVE_DIR: &str = "/dev/shm/nvstack-live";

/// The live-state entry of `image` (which must exist).
pub fn live_entry(image: &Path) -> Result<PathBuf> {
    entry_in(Path::new(LIVE_DIR), image)
}

/// The entry of `image` in the live directory `dir`.
fn entry_in(dir: &Path, image: &Path) -> Result<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(image)
        .map_err(|e| Error::env(format!("{}: cannot stat: {e}", image.display())))?;
    Ok(dir.join(format!("{:x}-{:x}", m.dev(), m.ino())))
}

/// A published live state: its entry is removed when this is dropped (a clean stop). After a
/// SIGKILL the entry stays; its daemon's pid, no longer running, marks it stale, and the next
/// daemon that publishes sweeps it (the next one serving the image replaces it).
pub struct Published {
    entry: PathBuf,
}

impl Drop for Published {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.entry);
    }
}

/// Publish the live state of `image`, which the caller serves (it holds the image's lock, so
/// an entry already there is a dead daemon's), and sweep the stale entries of other images.
/// Returns the guard and the daemon's counters, mirrored into `stats` when given (the entry
/// links to it), else into the entry itself.
pub fn publish_live(image: &Path, stats: Option<&Path>) -> Result<(Published, ServeStats)> {
    publish_live_in(Path::new(LIVE_DIR), image, stats)
}

/// [`publish_live`] into the live directory `dir`. Every change to the directory's entries
/// (this sweep, this publication) happens under an exclusive lock of the directory, so a sweep
/// never removes an entry that another daemon has just published over a stale one; and an
/// entry appears only once its stats file names this daemon's pid, so a sweep never finds a
/// live daemon's entry stale.
fn publish_live_in(
    dir: &Path,
    image: &Path,
    stats: Option<&Path>,
) -> Result<(Published, ServeStats)> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::env(format!("{}: cannot create: {e}", dir.display())))?;
    let lock = lock_dir(dir)?;
    sweep_stale_in(dir);
    let entry = entry_in(dir, image)?;
    let _ = std::fs::remove_file(&entry);
    let counters = match stats {
        None => ServeStats::new(Some(&entry))?,
        Some(p) => {
            let abs =
                std::path::absolute(p).map_err(|e| Error::env(format!("{}: {e}", p.display())))?;
            let counters = ServeStats::new(Some(&abs))?;
            std::os::unix::fs::symlink(&abs, &entry)
                .map_err(|e| Error::env(format!("{}: cannot link: {e}", entry.display())))?;
            counters
        }
    };
    // The entry names this daemon before the lock goes: a sweep from now on keeps it.
    assert_eq!(counters.snapshot().pid, u64::from(std::process::id()));
    drop(lock);
    Ok((Published { entry }, counters))
}

/// The live directory, locked exclusively (released when the file is dropped, or when the
/// daemon dies).
fn lock_dir(dir: &Path) -> Result<std::fs::File> {
    let f = std::fs::File::open(dir)
        .map_err(|e| Error::env(format!("{}: cannot open: {e}", dir.display())))?;
    f.lock()
        .map_err(|e| Error::env(format!("{}: cannot lock: {e}", dir.display())))?;
    Ok(f)
}

/// Remove the stale entries of the live directory `dir` (whose lock the caller holds): a
/// dangling link (its stats file gone), or a stats file whose daemon's pid is not running. An
/// entry that cannot be read as a stats file is kept: it may be a live daemon's.
fn sweep_stale_in(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let path = e.path();
        let dangling = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_symlink())
            && std::fs::metadata(&path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound);
        let dead = pid_of_stats_file(&path).is_some_and(|pid| !pid_running(pid));
        if dangling || dead {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// The daemon's pid a stats file of any version names (word 2 since version 1), if it is one.
fn pid_of_stats_file(path: &Path) -> Option<u64> {
    use std::io::Read;
    let mut b = Vec::new();
    let f = std::fs::File::open(path).ok()?;
    f.take(STATS_FILE_BYTES + 1).read_to_end(&mut b).ok()?;
    let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    (b.len() as u64 == STATS_FILE_BYTES && w(0) == STATS_MAGIC).then(|| w(2))
}

/// Is a process `pid` running? (Pid 0 is no daemon's.)
fn pid_running(pid: u64) -> bool {
    pid > 0 && Path::new(&format!("/proc/{pid}")).exists()
}

/// The live state of the daemon serving `image`, if one runs: its entry names a stats file
/// of this version whose daemon is alive.
pub fn read_live(image: &Path) -> Option<StatsSnapshot> {
    let entry = live_entry(image).ok()?;
    let s = read_stats_file(&entry).ok()?;
    pid_running(s.pid).then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stats file naming `pid`, as a daemon's mirror holds it.
    fn write_stats_file(path: &Path, pid: u64) {
        let s = StatsSnapshot {
            pid,
            ..Default::default()
        };
        let mut b: Vec<u8> = s.words().iter().flat_map(|w| w.to_le_bytes()).collect();
        b.resize(STATS_FILE_BYTES as usize, 0);
        std::fs::write(path, b).unwrap();
    }

    /// A pid no process can have: above the kernel's largest pid_max (2^22).
    const DEAD_PID: u64 = (1 << 22) + 1;

    /// A directory of its own on tmpfs (the counters are mapped from tmpfs only).
    fn shm_dir() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("nvstack-test-live-")
            .tempdir_in("/dev/shm")
            .unwrap()
    }

    #[test]
    fn publishing_sweeps_the_dead_daemons_entries_and_keeps_the_live_ones() {
        let (live_dir, elsewhere) = (shm_dir(), shm_dir());
        let dir = live_dir.path();
        let image = tempfile::NamedTempFile::new().unwrap();
        let dangling = dir.join("1-1");
        std::os::unix::fs::symlink(dir.join("deleted-stats"), &dangling).unwrap();
        let dead = dir.join("1-2");
        write_stats_file(&dead, DEAD_PID);
        let dead_target = elsewhere.path().join("dead-stats");
        write_stats_file(&dead_target, DEAD_PID);
        let dead_link = dir.join("1-3");
        std::os::unix::fs::symlink(&dead_target, &dead_link).unwrap();
        let alive = dir.join("1-4");
        write_stats_file(&alive, u64::from(std::process::id()));
        let unknown = dir.join("1-5");
        std::fs::write(&unknown, b"not a stats file").unwrap();

        let (published, counters) = publish_live_in(dir, image.path(), None).unwrap();
        let gone = |p: &Path| std::fs::symlink_metadata(p).is_err();
        assert!(gone(&dangling), "a dangling link is swept");
        assert!(gone(&dead), "a dead daemon's stats file is swept");
        assert!(
            gone(&dead_link),
            "a link to a dead daemon's stats file is swept"
        );
        assert!(
            !gone(&dead_target),
            "the stats file a link names outlives its daemon"
        );
        assert!(!gone(&alive), "a live daemon's entry stays");
        assert!(!gone(&unknown), "what is not a stats file stays");
        let entry = entry_in(dir, image.path()).unwrap();
        let s = read_stats_file(&entry).unwrap();
        assert_eq!(s.pid, u64::from(std::process::id()));
        assert_eq!(counters.snapshot().pid, s.pid);

        // Publishing again (another daemon) keeps this live entry; a clean stop removes it.
        let other = tempfile::NamedTempFile::new().unwrap();
        let (second, _) = publish_live_in(dir, other.path(), None).unwrap();
        assert!(!gone(&entry), "a live daemon's entry stays");
        drop(published);
        assert!(gone(&entry), "a clean stop removes its entry");
        drop(second);
        assert!(gone(&entry_in(dir, other.path()).unwrap()));
    }

    #[test]
    fn publishing_with_a_stats_file_links_the_entry_to_it() {
        let (live_dir, elsewhere) = (shm_dir(), shm_dir());
        let dir = live_dir.path();
        let image = tempfile::NamedTempFile::new().unwrap();
        let stats = elsewhere.path().join("stats");
        // A dead daemon's stats file at the path: replaced, and the entry is not swept.
        write_stats_file(&stats, DEAD_PID);
        let (_published, _counters) = publish_live_in(dir, image.path(), Some(&stats)).unwrap();
        let entry = entry_in(dir, image.path()).unwrap();
        assert_eq!(std::fs::read_link(&entry).unwrap(), stats);
        assert_eq!(
            read_stats_file(&entry).unwrap().pid,
            u64::from(std::process::id())
        );
    }
}
