//! One replay of a recording in virtual time: the trace's requests through nvcache's write
//! cache (the same code `nvstack cache --cache write` runs, on an anonymous memory region, in
//! front of a memory-backed 4 KiB device holding the volume's bytes) and onto NAND under an FTL
//! (`nvstack_flash::replay`, no bytes kept), with the simulator's volatile write-back model for
//! the asynchronous runs.
//!
//! Time: a virtual clock advances by each request's host gap (input.rs), then by the device
//! time the request waits for: NVRAM sector accesses, and flash operations (its datasheet
//! times from the operation counts) which queue behind the flash's background write-backs.
//! Execution time is the clock after the last request.

use super::changed::Changed;
use super::fatcount::{FatTracker, KindCounts};
use super::input::{Ev, Input, SECTOR_BYTES};
use crate::field::{Field, Invalid, LabResult};
use nvstack_core::blockdev::{BlockDevice, Caps, Durability, MemDevice};
use nvstack_core::error::{Error, Result};
use nvstack_flash::ftl::{FtlConfig, FtlKind};
use nvstack_flash::geometry::{Geometry, Timing};
use nvstack_flash::replay::Replay;
// The one place the lab names nvcache's modules.
pub use nvstack_nvcache::write::format::DestagePolicy;
use nvstack_nvcache::write::format::{Admit, Layout, Settings};
use nvstack_nvcache::write::{create, WriteCache};
use nvstack_pmem::{MmapRegion, Prefix};
use nvstack_sim::cache::{Cache, CacheConfig, Model};
use nvstack_sim::trace::nvstack::DeviceOp;
use nvstack_sim::trace::{BlockAccess, Op};
use std::sync::Arc;

/// How the file system writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Sync-PostMark: every write reaches the device when made (the recorded trace).
    Sync,
    /// Sync-PostMark in the changed-sector view (changed.rs): only the sectors whose bytes a
    /// write changed reach the device, as the seed's VFAT wrote only its dirty buffers.
    SyncChanged,
    /// Async-PostMark on NVFAT: metadata to the NVRAM write cache when made, file data through
    /// the volatile write-back model.
    Async,
    /// The seed's VFAT baseline under Async-PostMark: every write through the volatile model.
    VfatAsync,
}

impl Mode {
    /// Every write waits for the device (the recorded trace, or its changed-sector view).
    pub fn synchronous(self) -> bool {
        matches!(self, Mode::Sync | Mode::SyncChanged)
    }
}

/// What the admission takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdmitKind {
    FatMetadata,
    All,
}

/// One replay's settings.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Job {
    pub mode: Mode,
    /// NVRAM data capacity, bytes (0: no write cache).
    pub nvram_bytes: u64,
    pub policy: DestagePolicy,
    pub admit: AdmitKind,
    pub ftl: FtlKind,
    /// Keep per-page counts (Figures 5 and 6).
    #[serde(skip)]
    pub keep_pages: bool,
    /// Count metadata writes with the independent counter (the admission check).
    #[serde(skip)]
    pub check_admission: bool,
}

/// Device settings shared by every job.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Device {
    pub geometry: Geometry,
    pub timing: Timing,
    pub log_blocks: u32,
    /// One 512-byte NVRAM sector access, ns.
    pub nvram_sector_ns: u64,
    /// The volatile model's cleaner age (Sprite's and Linux's 30 s).
    pub delayed_writeback_ns: u64,
    /// The volatile cache, blocks (the seed's board: RAM twice the partition).
    pub volatile_blocks: u64,
    /// Compare the write cache's FAT classification, kept up to date incrementally, with a
    /// full walk after every write to a metadata sector (`--check-fat-walk`).
    pub check_fat_walk: bool,
}

/// The admission check's counts (sectors written).
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct AdmissionCheck {
    /// Sector writes the independent counter calls metadata.
    pub metadata_writes: u64,
    /// Of them, taken by the write cache.
    pub caught: u64,
    /// Sector writes the cache took that the counter calls file data.
    pub admitted_data: u64,
    pub directory_sectors_at_end: u64,
    pub caught_pct: f64,
}

/// Sync-PostMark with a volatile page cache in front of the device for reads, as the seed's
/// in-kernel VFAT read through Linux's buffer cache (fusefat re-reads its FAT from the device
/// at every operation; the seed's board had RAM twice the partition, so nothing read or written
/// is evicted, and a sector is in the cache once read or written). Derived in the same pass:
/// reads change no FTL state and a synchronous run has no background flash work, so the
/// figures with the cache are the raw ones less the device time and flash reads of the reads
/// it serves. The asynchronous runs read through the volatile model already.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct PageCache {
    /// Sector reads the page cache serves (the sector was read or written before).
    pub hit_sectors: u64,
    pub flash_reads_saved: u64,
    pub nvram_reads_saved: u64,
    /// The device time those reads took in the raw run, ns.
    pub device_ns_saved: u64,
    pub exec_ns: u64,
    pub energy_j: f64,
}

/// What one replay measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Outcome {
    #[serde(flatten)]
    pub job: Job,
    pub slots: u32,
    pub exec_ns: u64,
    pub host_ns: u64,
    /// Device time the application waited for (NVRAM and flash).
    pub foreground_device_ns: u64,
    pub nvram_sector_writes: u64,
    pub nvram_sector_reads: u64,
    pub destaged: u64,
    /// Of them, sectors in the data area (directory clusters, sharing flash blocks with file
    /// data); the others are the FATs and the root directory.
    pub destaged_data_area: u64,
    pub bypassed: u64,
    pub volatile_writebacks: u64,
    pub held_in_nvram_at_end: u64,
    pub flash: nvstack_flash::replay::ReplayReport,
    pub admission: Option<AdmissionCheck>,
    /// Full FAT walks that agreed with the write cache's classification, one after each
    /// metadata write (`--check-fat-walk`).
    pub fat_walk_checks: u64,
    /// Sync-PostMark only: the figures with a page cache for reads.
    pub page_cache: Option<PageCache>,
    /// The run that checks the admission: the sector writes it made by kind, and the unchanged
    /// ones among them (the independent counter, fatcount.rs).
    pub kinds: Option<KindCounts>,
    /// Physical blocks erased at least once (with the erase mean, what the sd is spread over).
    pub blocks_erased: u64,
    #[serde(skip)]
    pub logical_writes: Vec<u32>,
    #[serde(skip)]
    pub page_programs: Vec<u32>,
}

/// The flash and its clock: when it is free, and each operation's device time.
struct Flash {
    replay: Replay,
    geo: Geometry,
    timing: Timing,
    free_at_ns: u64,
}

impl Flash {
    fn op(&mut self, write: bool, lba: u64) -> Result<u64> {
        let c = self.replay.counters();
        let (r, p, e) = (c.reads, c.programs, c.erases);
        self.replay
            .request(write, lba * SECTOR_BYTES, SECTOR_BYTES)?;
        let c = self.replay.counters();
        // A host write programs at least its own page (and a merge may add more).
        assert!(
            !write || c.programs > p,
            "a write of sector {lba} programmed nothing"
        );
        Ok(self
            .timing
            .time_ns(&self.geo, c.reads - r, c.programs - p, c.erases - e))
    }

    /// A request the application waits for, issued at `now`: returns when it ends.
    fn foreground(&mut self, now: u64, write: bool, lba: u64) -> Result<u64> {
        let t = self.op(write, lba)?;
        let end = now.max(self.free_at_ns) + t;
        self.free_at_ns = end;
        Ok(end)
    }

    /// A write-back queued at `now` that nobody waits for.
    fn background(&mut self, now: u64, lba: u64) -> Result<()> {
        let t = self.op(true, lba)?;
        self.free_at_ns = now.max(self.free_at_ns) + t;
        Ok(())
    }
}

/// The NVRAM: the first bytes of anonymous memory (mapped in whole pages): the write cache
/// sizes itself by its region's length, and the seed's sizes are not whole pages.
pub type Window = Prefix<MmapRegion>;

fn window(len: u64) -> Result<Window> {
    let pages = MmapRegion::anonymous(len.div_ceil(4096).max(1) * 4096)?;
    Ok(Prefix::new(Arc::new(pages), len))
}

/// The volume under the write cache: 4 KiB blocks in memory, copied with plain stores and no
/// fences (a simulation's device needs no durability; `RawDevice`'s non-temporal stores and
/// fences were a tenth of a replay); an asynchronous run's sectors are written in place.
const VOLUME_BLOCK_BYTES: u64 = 4096;

fn volume(image: &[u8]) -> Result<MemDevice> {
    let len = image.len() as u64 + VOLUME_BLOCK_BYTES;
    let caps = Caps {
        atomic_blocks: 0,
        scattered: false,
        durability: Durability::OnReturn,
    };
    let v = MemDevice::new(VOLUME_BLOCK_BYTES as u32, len / VOLUME_BLOCK_BYTES, caps)?;
    v.write(0, image)?;
    Ok(v)
}

/// The write cache over the volume's bytes, and which sectors it holds (kept from what each
/// request took and the cache's destage log, so that a read asks no lock).
struct Nvram {
    wc: WriteCache<Window>,
    cached: Vec<bool>,
    /// The volume under the cache: an asynchronous run's file data is written into it
    /// directly (those sectors are not cached), so the FAT walk reads what the run wrote.
    backing: Arc<MemDevice>,
}

fn nvram(input: &Input, job: &Job, dev: &Device) -> LabResult<Option<(Nvram, u32)>> {
    if job.nvram_bytes == 0 {
        return Ok(None);
    }
    // The seed's size counts sectors of data; nvcache keeps one slot spare for overwrites.
    let slots = u32::try_from(job.nvram_bytes / SECTOR_BYTES + 1).map_err(|_| {
        Invalid::new(
            Field::NvramBytes,
            format!(" {}: too large", job.nvram_bytes),
        )
    })?;
    let layout = Layout::new(slots, SECTOR_BYTES as u32);
    let region = Arc::new(window(layout.region_bytes)?);
    let backing = Arc::new(volume(&input.image)?);
    let settings = Settings {
        policy: job.policy,
        ..Settings::default()
    };
    let admit = match job.admit {
        AdmitKind::FatMetadata => Admit::FatMetadata,
        AdmitKind::All => Admit::All,
    };
    let sb = create(&*region, &*backing, SECTOR_BYTES as u32, settings, &admit)?;
    if sb.slots != slots || sb.blocks != input.header.blocks {
        return Err(Error::env(format!(
            "the write cache made {} slots over {} sectors; wanted {slots} over {}",
            sb.slots, sb.blocks, input.header.blocks
        ))
        .into());
    }
    let wc = WriteCache::open(region, backing.clone() as Arc<dyn BlockDevice>, None)?;
    assert_eq!(wc.cached_blocks(), 0, "a new write cache holds no block");
    wc.set_destage_log(true);
    wc.set_fat_cross_check(dev.check_fat_walk);
    Ok(Some((
        Nvram {
            wc,
            cached: vec![false; input.header.blocks as usize],
            backing,
        },
        slots,
    )))
}

/// A replay in progress.
struct Run {
    job: Job,
    dev: Device,
    flash: Flash,
    nv: Option<Nvram>,
    vol: Option<Cache>,
    /// The independent counter: the admission check, and the metadata classifier of an
    /// asynchronous run with no NVRAM.
    fat: Option<FatTracker>,
    check: AdmissionCheck,
    /// The volume's first data-area sector (from its boot sector).
    data_start: u64,
    /// The destage log's buffer, kept between requests.
    destaged: Vec<u64>,
    /// Sync-PostMark: the sectors a page cache would hold (read or written so far).
    page: Option<Vec<bool>>,
    pc: PageCache,
    now: u64,
    out: Outcome,
}

/// One replay; `view` is the changed-sector view, which a `SyncChanged` run needs.
pub fn run(input: &Input, job: Job, dev: Device, view: Option<&Changed>) -> LabResult<Outcome> {
    let view = match (job.mode, view) {
        (Mode::SyncChanged, Some(v)) => Some(v),
        (Mode::SyncChanged, None) => {
            return Err(Error::env("a sync-changed run without the changed-sector view").into())
        }
        _ => None,
    };
    let cfg = FtlConfig {
        kind: job.ftl,
        log_blocks: dev.log_blocks,
    };
    let replay = Replay::new(dev.geometry, cfg, dev.timing)?;
    let made = nvram(input, &job, &dev)?;
    let slots = made.as_ref().map_or(0, |(_, s)| *s);
    let vol = match job.mode {
        Mode::Sync | Mode::SyncChanged => None,
        Mode::Async | Mode::VfatAsync => Some(volatile_model(&dev)?),
    };
    let need_fat = job.check_admission || (job.mode == Mode::Async && job.nvram_bytes == 0);
    let fat = if need_fat {
        Some(FatTracker::new(input.image.clone())?)
    } else {
        None
    };
    let mut r = Run {
        job,
        dev,
        flash: Flash {
            replay,
            geo: dev.geometry,
            timing: dev.timing,
            free_at_ns: 0,
        },
        nv: made.map(|(n, _)| n),
        vol,
        fat,
        check: AdmissionCheck::default(),
        destaged: Vec::new(),
        data_start: super::fatcount::Layout::parse(&input.image, input.header.blocks)?.data_start,
        page: job
            .mode
            .synchronous()
            .then(|| vec![false; input.header.blocks as usize]),
        pc: PageCache::default(),
        now: 0,
        out: empty_outcome(job, slots),
    };
    let mut writes = 0usize;
    for ev in &input.events {
        r.now += ev.gap_ns;
        r.out.host_ns += ev.gap_ns;
        let before = r.now;
        if ev.op == DeviceOp::Write {
            r.write_request(input, ev, view.map(|v| v.runs(writes)))?;
            writes += 1;
        } else {
            r.other(ev)?;
        }
        r.out.foreground_device_ns += r.now - before;
    }
    Ok(r.finish()?)
}

/// The simulator's volatile write-back model (the asynchronous runs' page cache).
fn volatile_model(dev: &Device) -> Result<Cache> {
    let mut c = Cache::new(&CacheConfig {
        model: Model::Volatile,
        policy: nvstack_policy::PolicyKind::Lru,
        volatile_blocks: dev.volatile_blocks,
        nvram_blocks: 0,
        delayed_writeback_ns: Some(dev.delayed_writeback_ns),
        seed: 0,
    })?;
    c.log_writebacks()?;
    Ok(c)
}

fn empty_outcome(job: Job, slots: u32) -> Outcome {
    Outcome {
        job,
        slots,
        exec_ns: 0,
        host_ns: 0,
        foreground_device_ns: 0,
        nvram_sector_writes: 0,
        nvram_sector_reads: 0,
        destaged: 0,
        destaged_data_area: 0,
        bypassed: 0,
        volatile_writebacks: 0,
        held_in_nvram_at_end: 0,
        flash: Replay::new(
            Geometry::SMALL_BLOCK,
            FtlConfig {
                kind: FtlKind::LogBlock,
                log_blocks: 64,
            },
            Timing::SMALL_BLOCK,
        )
        .expect("the default geometry is valid")
        .report(),
        admission: None,
        fat_walk_checks: 0,
        page_cache: None,
        kinds: None,
        blocks_erased: 0,
        logical_writes: Vec::new(),
        page_programs: Vec::new(),
    }
}

impl Run {
    /// A write request of the trace: whole, or in the changed-sector view its changed runs
    /// alone (none: no device time; the host time before it was spent already).
    fn write_request(
        &mut self,
        input: &Input,
        ev: &Ev,
        runs: Option<&[super::changed::SectorRun]>,
    ) -> Result<()> {
        let at = ev.data_off as usize;
        let bytes = &input.data[at..at + (ev.blocks * SECTOR_BYTES) as usize];
        let Some(runs) = runs else {
            return self.write(ev.lba, bytes);
        };
        let s = SECTOR_BYTES as usize;
        for run in runs {
            let (from, to) = (run.offset as usize, (run.offset + run.sectors) as usize);
            self.write(ev.lba + u64::from(run.offset), &bytes[from * s..to * s])?;
        }
        Ok(())
    }

    /// A read, flush or discard.
    fn other(&mut self, ev: &Ev) -> Result<()> {
        match ev.op {
            DeviceOp::Read => self.read(ev.lba, ev.blocks)?,
            DeviceOp::Flush => {
                if let Some(n) = &self.nv {
                    n.wc.flush_blocks()?;
                }
            }
            DeviceOp::Discard => {
                if let Some(n) = &self.nv {
                    n.wc.discard_blocks(ev.lba, ev.blocks)?;
                }
            }
            DeviceOp::Write => return Err(Error::env("a write outside write_request")),
        }
        Ok(())
    }

    /// A write request: per sector, metadata (or all, by the admission) the application waits
    /// for, the rest through the volatile model when the run is asynchronous.
    fn write(&mut self, lba: u64, bytes: &[u8]) -> Result<()> {
        assert!(
            !bytes.is_empty() && (bytes.len() as u64).is_multiple_of(SECTOR_BYTES),
            "a write of whole sectors"
        );
        let n = bytes.len() as u64 / SECTOR_BYTES;
        if let Some(p) = self.page.as_mut() {
            p[lba as usize..(lba + n) as usize].fill(true);
        }
        let taken: Vec<bool> = match &self.nv {
            Some(nv) => (lba..lba + n).map(|l| nv.wc.takes(l)).collect(),
            None => vec![false; n as usize],
        };
        let truth = match self.fat.as_mut() {
            Some(f) => f.write(lba, bytes),
            None => Vec::new(),
        };
        assert!(truth.is_empty() || truth.len() == n as usize);
        if self.job.check_admission {
            for (i, &m) in truth.iter().enumerate() {
                self.check.metadata_writes += u64::from(m);
                self.check.caught += u64::from(m && taken[i]);
                self.check.admitted_data += u64::from(!m && taken[i]);
            }
        }
        let sync_of = |i: usize| match self.job.mode {
            Mode::Sync | Mode::SyncChanged => true,
            Mode::VfatAsync => false,
            Mode::Async if self.nv.is_some() => taken[i],
            Mode::Async => truth[i],
        };
        let sync: Vec<bool> = (0..n as usize).map(sync_of).collect();
        if self.nv.is_some() && self.job.mode != Mode::VfatAsync {
            self.cache_write(lba, bytes, &taken, &sync)?;
        } else {
            for (i, &s) in sync.iter().enumerate() {
                if s {
                    self.now = self.flash.foreground(self.now, true, lba + i as u64)?;
                }
            }
        }
        for (i, &s) in sync.iter().enumerate() {
            if s {
                continue;
            }
            if let Some(nv) = &self.nv {
                let at = i * SECTOR_BYTES as usize;
                // Not cached (not taken): the volume's sector itself.
                let sector = &bytes[at..at + SECTOR_BYTES as usize];
                nv.backing
                    .write_at((lba + i as u64) * SECTOR_BYTES, sector)?;
            }
            self.volatile(lba + i as u64, Op::Write)?;
        }
        Ok(())
    }

    /// The write cache's part of a write: the whole request in a synchronous run (bypassed
    /// sectors go to the flash), the admitted sectors alone in an asynchronous one. The
    /// sectors the cache destaged reach the flash in the order it wrote them back.
    fn cache_write(&mut self, lba: u64, bytes: &[u8], taken: &[bool], sync: &[bool]) -> Result<()> {
        let sectors = bytes.len() / SECTOR_BYTES as usize;
        assert_eq!((taken.len(), sync.len()), (sectors, sectors));
        let nv = self.nv.as_mut().expect("a write cache");
        let (written_before, bypassed_before) = (self.out.nvram_sector_writes, self.out.bypassed);
        let s = SECTOR_BYTES as usize;
        let mut i = 0;
        while i < sync.len() {
            if !sync[i] {
                i += 1;
                continue;
            }
            let j = (i..sync.len()).find(|&k| !sync[k]).unwrap_or(sync.len());
            nv.wc.write_blocks(lba + i as u64, &bytes[i * s..j * s])?;
            i = j;
        }
        let mut destaged = std::mem::take(&mut self.destaged);
        nv.wc.take_destaged(&mut destaged);
        // What the cache holds now: the request's sectors and the destaged ones (a sector
        // destaged by one unit of the request may be cached again by a later one).
        for l in destaged.iter().copied().chain(lba..lba + sync.len() as u64) {
            nv.cached[l as usize] = nv.wc.is_cached(l);
        }
        self.out.destaged += destaged.len() as u64;
        let data_start = self.data_start;
        self.out.destaged_data_area += destaged.iter().filter(|&&l| l >= data_start).count() as u64;
        for &l in &destaged {
            self.now = self.flash.foreground(self.now, true, l)?;
        }
        destaged.clear();
        self.destaged = destaged;
        for (k, &t) in taken.iter().enumerate() {
            if !sync[k] {
                continue;
            }
            if t {
                self.out.nvram_sector_writes += 1;
                self.now += self.dev.nvram_sector_ns;
            } else {
                self.out.bypassed += 1;
                self.now = self.flash.foreground(self.now, true, lba + k as u64)?;
            }
        }
        // Every sector the application waited for went to the NVRAM or past it, once.
        let waited = sync.iter().filter(|&&w| w).count() as u64;
        let went =
            (self.out.nvram_sector_writes - written_before) + (self.out.bypassed - bypassed_before);
        assert_eq!(went, waited, "sectors of a request lost or counted twice");
        Ok(())
    }

    /// A block access of the volatile model (asynchronous runs): whether it was a hit.
    fn volatile(&mut self, lba: u64, op: Op) -> Result<bool> {
        let Some(v) = self.vol.as_mut() else {
            return Ok(false);
        };
        let misses = |c: &Cache| c.stats().read_misses;
        let m0 = misses(v);
        v.access(
            &BlockAccess {
                time_ns: self.now,
                key: lba,
                op,
                sync: false,
                last_of_request: true,
            },
            nvstack_policy::NEVER,
        );
        let hit = misses(v) == m0;
        // Write-backs made during the access are queued at once.
        let wbs = v.take_writebacks();
        for l in wbs {
            self.out.volatile_writebacks += 1;
            self.flash.background(self.now, l)?;
        }
        Ok(hit)
    }

    fn read(&mut self, lba: u64, n: u64) -> Result<()> {
        if let Some(nv) = &self.nv {
            // Through the cache's read path, so that LRU and CLOCK see read hits (LRW's order
            // is the writes' alone: a read changes nothing it keeps).
            if self.job.policy != DestagePolicy::Lrw {
                let mut buf = vec![0u8; (n * SECTOR_BYTES) as usize];
                nv.wc.read_blocks(lba, &mut buf)?;
            }
        }
        for l in lba..lba + n {
            if self.vol.is_some() && self.volatile(l, Op::Read)? {
                continue;
            }
            let (before, reads) = (self.now, self.flash.replay.counters().reads);
            let nvram = self.nv.as_ref().is_some_and(|nv| nv.cached[l as usize]);
            if nvram {
                self.out.nvram_sector_reads += 1;
                self.now += self.dev.nvram_sector_ns;
            } else {
                self.now = self.flash.foreground(self.now, false, l)?;
            }
            if let Some(p) = self.page.as_mut() {
                if std::mem::replace(&mut p[l as usize], true) {
                    let c = &mut self.pc;
                    c.hit_sectors += 1;
                    c.device_ns_saved += self.now - before;
                    c.nvram_reads_saved += u64::from(nvram);
                    c.flash_reads_saved += self.flash.replay.counters().reads - reads;
                }
            }
        }
        Ok(())
    }

    fn finish(mut self) -> Result<Outcome> {
        self.out.exec_ns = self.now;
        // The clock moves only by host gaps and the device time the application waited for.
        assert_eq!(
            self.out.host_ns + self.out.foreground_device_ns,
            self.out.exec_ns,
            "execution time is host time plus the device time waited for"
        );
        assert!(self.out.destaged_data_area <= self.out.destaged);
        // An unmount writes the volatile model's dirty blocks back (counted on the flash, not
        // in the execution time, which ends with the last request as PostMark's clock does).
        if let Some(v) = self.vol.as_mut() {
            let dirty = v.dirty_keys();
            for l in dirty {
                self.out.volatile_writebacks += 1;
                self.flash.background(self.now, l)?;
            }
        }
        if let Some(nv) = &self.nv {
            self.out.held_in_nvram_at_end = nv.wc.cached_blocks();
            self.out.fat_walk_checks = nv.wc.fat_cross_checks();
            if let Some(e) = nv.wc.error() {
                return Err(Error::env(format!("the write cache failed: {e}")));
            }
        }
        if self.job.check_admission {
            let c = &mut self.check;
            c.directory_sectors_at_end = self
                .fat
                .as_ref()
                .map_or(0, |f| f.directory_sectors() as u64);
            c.caught_pct = if c.metadata_writes == 0 {
                100.0
            } else {
                100.0 * c.caught as f64 / c.metadata_writes as f64
            };
            self.out.admission = Some(*c);
            self.out.kinds = self.fat.as_ref().map(|f| f.kinds);
        }
        self.out.flash = self.flash.replay.report();
        self.out.blocks_erased = (self.flash.replay.counters().block_erases.iter())
            .filter(|&&e| e > 0)
            .count() as u64;
        if self.page.is_some() {
            let c = self.flash.replay.counters();
            let pc = &mut self.pc;
            assert!(pc.device_ns_saved <= self.out.exec_ns && pc.flash_reads_saved <= c.reads);
            pc.exec_ns = self.out.exec_ns - pc.device_ns_saved;
            pc.energy_j = self.flash.timing.energy_j(
                &self.flash.geo,
                c.reads - pc.flash_reads_saved,
                c.programs,
                c.erases,
            );
            self.out.page_cache = Some(*pc);
        }
        if self.job.keep_pages {
            self.out.logical_writes = self.flash.replay.logical_writes.clone();
            self.out.page_programs = self.flash.replay.counters().page_programs.clone();
        }
        Ok(self.out)
    }
}
