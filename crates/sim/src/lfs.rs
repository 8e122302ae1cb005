//! The LFS write buffer of seed 002 section 3 (Baker et al., "Using NVRAM as a File System Write
//! Buffer", Tables 3 and 4): a Sprite-LFS segment writer driven by a trace's block writes, run
//! without and with an NVRAM write buffer over the same accesses, counting disk write accesses,
//! full and partial segments, and the disk space partial segments spend on metadata.
//!
//! ## The segment writer (numbers from the paper)
//! - A segment is `segment_bytes` on disk (Sprite: "one-half megabyte"). Every segment written,
//!   full or partial, carries metadata and a summary block: "To each full or partial segment, LFS
//!   appends at least one four-kilobyte block of metadata. In addition, LFS places a 512-byte
//!   summary block at the end of the segment." The paper is silent on when there is more than
//!   one metadata block; the rule here: a metadata block of `metadata_bytes` holds one
//!   [`POINTER_BYTES`]-byte disk address per data block (Sprite LFS's inode and indirect blocks
//!   hold 4-byte addresses), so a segment with `d` data blocks carries
//!   `max(1, ceil(d / (metadata_bytes / 4)))` metadata blocks. With the defaults (4 KiB blocks,
//!   4 KiB metadata: 1024 addresses, at most 126 data blocks) that is always exactly one.
//! - A full segment holds the most data blocks `d` with
//!   `metadata_blocks(d) * metadata_bytes + summary_bytes + d * block_bytes <= segment_bytes`:
//!   126 blocks of 4 KiB for the defaults (516,096 data bytes; the remaining 3,584 bytes of the
//!   512 KiB are slack no whole block fits in). A segment write transfers its data, metadata
//!   and summary blocks and counts as one disk write access; slack is neither written nor counted.
//!
//! ## Pending data
//! The trace's writes, in blocks of `--block-size`, become pending (dirty in the server's cache,
//! not yet on disk). A block written again while pending is absorbed: LFS writes only its latest
//! version. As soon as a full segment's worth of distinct blocks is pending, a full segment is
//! written. Every write of the log tail (full, sync, timeout or final) takes *all* pending data:
//! a log appends at one place, and once the disk arm is there, leaving younger blocks behind
//! would only cost another partial segment later. So pending data never exceeds one segment and
//! memory is proportional to it (one hash entry per distinct pending block), never to the trace.
//! Reads do not touch the writer (they are served from the cache or the disk).
//!
//! ## Syncs
//! A sync point follows a write request that is flagged synchronous in the trace
//! (`BlockAccess::sync`, taking effect after its last block, `last_of_request`) or that is the
//! N-th, 2N-th, ... write request of the trace with `--fsync-every N` (size-0 requests touch no
//! block and are not counted). The two sources combine; a request that is both is one sync
//! point. Without a buffer a sync with pending data forces a partial segment ("fsyncs require
//! that LFS immediately write out whatever dirty data is present").
//!
//! ## The NVRAM write buffer
//! Pending blocks enter the NVRAM in the order they become pending, until it holds `nvram`
//! bytes; pending blocks beyond that live in volatile memory (an overwrite updates a block
//! where it is). Data in the NVRAM is durable. At a sync, if all pending blocks are in the NVRAM
//! (pending <= NVRAM blocks) nothing is written: the sync is held. Otherwise a partial segment
//! of *all* pending data is written (the tail rule above), emptying the buffer. A full segment
//! is still written as soon as one segment's data is pending ("the writes would remain in the
//! NVRAM buffer until a whole segment accumulated"), so an NVRAM of at least one segment's data
//! blocks (in particular one of `segment_bytes`) never sees a sync-forced or timeout partial.
//! With `--nvram 0` the "with buffer" run is the "without buffer" run.
//!
//! ## The 30-second timeout
//! Sprite writes dirty data older than 30 seconds every 5 seconds. Cleaner ticks fall at
//! `t0 + k * 5 s` (k >= 1, t0 the trace's first access, virtual time from the trace); at a tick,
//! if some pending data that is *not* durable became pending more than `timeout` before the tick
//! (strictly, as in `cache.rs`), all pending data is written as a timeout partial. Data in the
//! NVRAM is durable, so the timeout never forces a write of it: with a buffer, only the blocks
//! beyond the NVRAM age (from the time the first of them became pending). Ticks due at or before
//! an access run before it; none run after the last access.
//!
//! ## The end of the trace
//! Whatever is pending when the trace ends is written as one final partial segment, counted as
//! `partial_final`, so every block write ends as absorbed or written exactly once and the totals
//! balance. Table 3's percentages here include the final segment (at most one per run).
//!
//! ## Invariants the tests check
//! Every written block's last version reaches the disk in both runs, each version at most once;
//! `full + partial = disk writes`; `block writes = absorbed + data blocks written`; disk write
//! accesses never increase with the NVRAM size. Why: by induction, the k-th segment write with
//! a smaller buffer comes no later in the access stream than the k-th with a larger one. Its
//! (k-1)-th came no later, so its pending data is a superset; a sync or timeout that forces the
//! larger buffer's write forces the smaller's too, and pending data from an earlier start
//! reaches a full segment no later.

use crate::cache::CLEANER_PERIOD_NS;
use crate::csv::CsvRecord;
use crate::field::{Field, Invalid};
use crate::trace::{BlockAccess, Op};
use nvstack_core::error::{Error, Result};
use rustc_hash::FxHashMap;

/// Sprite LFS's segment ("one-half megabyte").
pub const SEGMENT_BYTES_DEFAULT: u64 = 512 << 10;
/// "at least one four-kilobyte block of metadata".
pub const METADATA_BYTES_DEFAULT: u64 = 4 << 10;
/// "a 512-byte summary block at the end of the segment".
pub const SUMMARY_BYTES_DEFAULT: u64 = 512;
/// The paper's buffer: "a one-half megabyte non-volatile write buffer".
pub const NVRAM_BYTES_DEFAULT: u64 = 512 << 10;
/// Sprite's delayed write: dirty data older than 30 s is written.
pub const TIMEOUT_DEFAULT_S: u64 = 30;
/// A week: longer than any trace here; a larger timeout is a typo, not a setting.
pub const TIMEOUT_MAX_S: u64 = 7 * 24 * 3600;
/// One disk address in a metadata block (Sprite LFS: 32-bit block addresses).
pub const POINTER_BYTES: u64 = 4;
/// The largest segment: pending data is at most one segment, kept as one hash entry per block
/// (at 512-byte blocks, 2^21 entries).
pub const SEGMENT_BYTES_MAX: u64 = 1 << 30;
/// The largest NVRAM buffer (1 TiB). It costs no memory (only a count is kept); anything larger
/// is a typo, refused rather than clamped.
pub const NVRAM_BYTES_MAX: u64 = 1 << 40;

const NS_PER_S: u64 = 1_000_000_000;
/// Sprite's cleaner runs every 5 s (the same period as the client caches' cleaner).
pub const CLEANER_PERIOD_S: u64 = CLEANER_PERIOD_NS / NS_PER_S;

/// One run's parameters, in bytes and nanoseconds.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LfsConfig {
    pub block_bytes: u32,
    pub segment_bytes: u64,
    pub metadata_bytes: u64,
    pub summary_bytes: u64,
    /// The "with buffer" run's NVRAM (0 = none; the "without" run always has none).
    pub nvram_bytes: u64,
    /// Pending data older than this is written at a cleaner tick; None = no timeout.
    pub timeout_ns: Option<u64>,
    /// A sync point after every N-th write request, besides the trace's own sync flags.
    pub fsync_every: Option<u64>,
}

impl LfsConfig {
    /// The defaults of the paper, with `block_bytes`.
    pub fn paper(block_bytes: u32) -> LfsConfig {
        LfsConfig {
            block_bytes,
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            metadata_bytes: METADATA_BYTES_DEFAULT,
            summary_bytes: SUMMARY_BYTES_DEFAULT,
            nvram_bytes: NVRAM_BYTES_DEFAULT,
            timeout_ns: Some(TIMEOUT_DEFAULT_S * NS_PER_S),
            fsync_every: None,
        }
    }

    /// The rules every configuration keeps, as errors naming the field at fault.
    pub fn validate(&self) -> std::result::Result<(), Invalid> {
        let b = u64::from(self.block_bytes);
        if !self.block_bytes.is_power_of_two() || !(512..=1 << 20).contains(&self.block_bytes) {
            return Err(Invalid::new(Field::BlockBytes)
                .text(format!(" {b}: must be a power of two from 512 to 1048576")));
        }
        if self.segment_bytes == 0 || self.segment_bytes > SEGMENT_BYTES_MAX {
            return Err(Invalid::new(Field::SegmentBytes).text(format!(
                " {}: must be from 1 block to {SEGMENT_BYTES_MAX} bytes",
                self.segment_bytes
            )));
        }
        if !self.segment_bytes.is_multiple_of(b) {
            return Err(Invalid::new(Field::SegmentBytes).text(format!(
                " {}: not a multiple of the block size ({b} bytes)",
                self.segment_bytes
            )));
        }
        if self.metadata_bytes < POINTER_BYTES {
            return Err(Invalid::new(Field::MetadataBytes).text(format!(
                " {}: every segment carries at least one metadata block, which must hold a {POINTER_BYTES}-byte block address",
                self.metadata_bytes
            )));
        }
        // Checked one at a time so that the sum below cannot overflow.
        if self.metadata_bytes > self.segment_bytes {
            return Err(Invalid::new(Field::MetadataBytes).text(format!(
                " {}: larger than the segment ({} bytes)",
                self.metadata_bytes, self.segment_bytes
            )));
        }
        if self.summary_bytes > self.segment_bytes {
            return Err(Invalid::new(Field::SummaryBytes).text(format!(
                " {}: larger than the segment ({} bytes)",
                self.summary_bytes, self.segment_bytes
            )));
        }
        let least = self.metadata_bytes + self.summary_bytes + b;
        if least > self.segment_bytes {
            return Err(Invalid::new(Field::SegmentBytes).text(format!(
                " {}: must hold one metadata block, the summary and at least one data block ({} + {} + {b} = {least} bytes)",
                self.segment_bytes, self.metadata_bytes, self.summary_bytes
            )));
        }
        if self.nvram_bytes > NVRAM_BYTES_MAX {
            return Err(Invalid::new(Field::NvramBytes).text(format!(
                " {}: more than the simulator's limit of {NVRAM_BYTES_MAX} bytes",
                self.nvram_bytes
            )));
        }
        if !self.nvram_bytes.is_multiple_of(b) {
            return Err(Invalid::new(Field::NvramBytes).text(format!(
                " {}: not a multiple of the block size ({b} bytes)",
                self.nvram_bytes
            )));
        }
        if self.fsync_every == Some(0) {
            return Err(Invalid::new(Field::FsyncEvery)
                .text(" 0: must be at least 1 (a sync after every N-th write request)"));
        }
        if self
            .timeout_ns
            .is_some_and(|t| t > TIMEOUT_MAX_S * NS_PER_S)
        {
            return Err(
                Invalid::new(Field::TimeoutNs).text(format!(": at most {TIMEOUT_MAX_S} seconds"))
            );
        }
        Ok(())
    }

    /// The segment geometry; the config must be valid.
    pub fn geometry(&self) -> Geometry {
        Geometry::new(self)
    }

    pub fn nvram_blocks(&self) -> u64 {
        self.nvram_bytes / u64::from(self.block_bytes)
    }
}

/// A timeout as text, `SECONDS|off`: whole seconds (0 to [`TIMEOUT_MAX_S`]) or `off` (None),
/// in ns; anything else is refused naming [`Field::TimeoutNs`].
pub fn parse_timeout(text: &str) -> std::result::Result<Option<u64>, Invalid> {
    if text == "off" {
        return Ok(None);
    }
    match text.parse::<u64>() {
        Ok(s) if s <= TIMEOUT_MAX_S => Ok(Some(s * NS_PER_S)),
        _ => Err(Invalid::new(Field::TimeoutNs).text(format!(
            " '{text}': expected whole seconds (0 to {TIMEOUT_MAX_S}) or 'off'"
        ))),
    }
}

/// What a segment holds, derived once from a valid config.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Geometry {
    pub block_bytes: u64,
    pub metadata_bytes: u64,
    pub summary_bytes: u64,
    /// Data blocks one metadata block describes.
    pub pointers_per_metadata: u64,
    /// Data blocks in a full segment.
    pub segment_data_blocks: u64,
}

impl Geometry {
    fn new(cfg: &LfsConfig) -> Geometry {
        let mut g = Geometry {
            block_bytes: u64::from(cfg.block_bytes),
            metadata_bytes: cfg.metadata_bytes,
            summary_bytes: cfg.summary_bytes,
            pointers_per_metadata: cfg.metadata_bytes / POINTER_BYTES,
            segment_data_blocks: 0,
        };
        assert!(
            g.pointers_per_metadata >= 1,
            "validate() requires one pointer"
        );
        // The bytes a segment of d blocks needs grow with d: binary search for the largest d
        // that fits. validate() guarantees d = 1 fits; d = segment/block never fits with
        // metadata on top.
        let fits = |d: u64| g.segment_bytes(d) <= cfg.segment_bytes;
        let (mut lo, mut hi) = (1u64, cfg.segment_bytes / g.block_bytes);
        assert!(fits(lo), "validate() guarantees one data block fits");
        assert!(!fits(hi));
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if fits(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        g.segment_data_blocks = lo;
        g
    }

    /// Metadata blocks of a segment with `data_blocks` data blocks: at least one.
    pub fn metadata_blocks(&self, data_blocks: u64) -> u64 {
        data_blocks.div_ceil(self.pointers_per_metadata).max(1)
    }

    /// Bytes written for a segment of `data_blocks` data blocks.
    pub fn segment_bytes(&self, data_blocks: u64) -> u64 {
        self.metadata_blocks(data_blocks) * self.metadata_bytes
            + self.summary_bytes
            + data_blocks * self.block_bytes
    }
}

/// Why a segment was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// A full segment's worth of data was pending.
    Full,
    /// A sync found pending data the NVRAM could not hold.
    Sync,
    /// The cleaner found non-durable data older than the timeout.
    Timeout,
    /// The trace ended.
    Final,
}

/// What one run (one NVRAM size) counted. Byte counts are bytes; "data" is file data only.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LfsStats {
    pub nvram_bytes: u64,
    /// Segment writes of any kind: one disk write access each.
    pub disk_writes: u64,
    pub full_segments: u64,
    /// Sync + timeout + final.
    pub partial_segments: u64,
    pub partial_sync: u64,
    pub partial_timeout: u64,
    pub partial_final: u64,
    /// Sync points seen (the same in every run).
    pub syncs: u64,
    /// ... with nothing pending.
    pub syncs_empty: u64,
    /// ... whose pending data the NVRAM held: no disk write.
    pub syncs_held: u64,
    /// Block writes seen (the same in every run).
    pub block_writes: u64,
    /// Block writes to a block already pending: that earlier version never reaches the disk.
    pub overwrites_absorbed: u64,
    pub data_blocks_written: u64,
    pub data_bytes: u64,
    pub full_data_bytes: u64,
    pub partial_data_bytes: u64,
    pub partial_sync_data_bytes: u64,
    pub partial_timeout_data_bytes: u64,
    pub partial_final_data_bytes: u64,
    pub metadata_bytes: u64,
    pub summary_bytes: u64,
    /// Metadata + summary bytes of every segment.
    pub overhead_bytes: u64,
    /// ... of partial segments only.
    pub partial_overhead_bytes: u64,
    /// Data + overhead: everything written to the disk.
    pub bytes_written: u64,
    /// Table 3: partial segments as % of all segment writes.
    pub pct_partial: f64,
    /// Table 3: sync-forced partial segments as % of all segment writes.
    pub pct_partial_sync: f64,
    /// Timeout partial segments as % of all segment writes.
    pub pct_partial_timeout: f64,
    /// Table 4: KiB of file data per partial segment (None: no partial segment, the paper's NA).
    pub kib_per_partial: Option<f64>,
    /// Table 4: KiB of file data per sync-forced partial segment.
    pub kib_per_sync_partial: Option<f64>,
    /// All metadata and summary bytes as % of bytes written.
    pub pct_overhead: f64,
    /// The space lost to partial segments' metadata and summaries, as % of bytes written.
    pub pct_partial_overhead: f64,
    /// Metadata and summary as % of a partial segment's bytes (the paper's "one third of the
    /// segment" on /user6); None without partial segments.
    pub pct_overhead_per_partial: Option<f64>,
}

impl LfsStats {
    fn finish(&mut self) {
        self.partial_segments = self.partial_sync + self.partial_timeout + self.partial_final;
        self.partial_data_bytes = self.partial_sync_data_bytes
            + self.partial_timeout_data_bytes
            + self.partial_final_data_bytes;
        self.overhead_bytes = self.metadata_bytes + self.summary_bytes;
        self.bytes_written = self.data_bytes + self.overhead_bytes;
        let pct = |a: u64, b: u64| {
            if b == 0 {
                0.0
            } else {
                100.0 * a as f64 / b as f64
            }
        };
        let per = |a: u64, b: u64| (b != 0).then(|| a as f64 / b as f64);
        self.pct_partial = pct(self.partial_segments, self.disk_writes);
        self.pct_partial_sync = pct(self.partial_sync, self.disk_writes);
        self.pct_partial_timeout = pct(self.partial_timeout, self.disk_writes);
        self.kib_per_partial =
            per(self.partial_data_bytes, self.partial_segments).map(|x| x / 1024.0);
        self.kib_per_sync_partial =
            per(self.partial_sync_data_bytes, self.partial_sync).map(|x| x / 1024.0);
        self.pct_overhead = pct(self.overhead_bytes, self.bytes_written);
        self.pct_partial_overhead = pct(self.partial_overhead_bytes, self.bytes_written);
        self.pct_overhead_per_partial = per(
            self.partial_overhead_bytes,
            self.partial_data_bytes + self.partial_overhead_bytes,
        )
        .map(|x| 100.0 * x);
        // Pair assertions: every segment write is full or partial; every block write is
        // absorbed or written exactly once (nothing is pending after the final flush); every
        // sync is empty, held or forced a partial; data bytes add up by cause.
        assert_eq!(self.full_segments + self.partial_segments, self.disk_writes);
        assert_eq!(
            self.block_writes,
            self.overwrites_absorbed + self.data_blocks_written,
            "a block write was lost or written twice"
        );
        assert_eq!(
            self.syncs,
            self.syncs_empty + self.syncs_held + self.partial_sync
        );
        assert_eq!(
            self.data_bytes,
            self.full_data_bytes + self.partial_data_bytes
        );
        assert!(self.partial_final <= 1);
    }
}

/// The segment writer of one run: the pending blocks and the counters.
#[derive(Debug)]
pub struct LfsWriter {
    geometry: Geometry,
    nvram_blocks: u64,
    timeout_ns: Option<u64>,
    /// The first access's time: cleaner ticks fall at `origin + k * period`.
    origin_ns: Option<u64>,
    /// Pending block -> the sequence number of its latest write (1-based over the run).
    pending: FxHashMap<u64, u64>,
    /// When the first pending block beyond the NVRAM became pending: the oldest non-durable
    /// data, which is what the timeout ages. None when all pending data is durable.
    volatile_since_ns: Option<u64>,
    stats: LfsStats,
    /// Every (block, write sequence) written to the disk, in order (tests only).
    #[cfg(test)]
    pub(crate) written: Vec<(u64, u64)>,
}

impl LfsWriter {
    /// A writer with `nvram_blocks` of NVRAM; `cfg` must be valid.
    pub fn new(cfg: &LfsConfig, nvram_blocks: u64) -> LfsWriter {
        LfsWriter {
            geometry: cfg.geometry(),
            nvram_blocks,
            timeout_ns: cfg.timeout_ns,
            origin_ns: None,
            pending: FxHashMap::default(),
            volatile_since_ns: None,
            stats: LfsStats {
                nvram_bytes: nvram_blocks * u64::from(cfg.block_bytes),
                ..LfsStats::default()
            },
            #[cfg(test)]
            written: Vec::new(),
        }
    }

    /// Run the cleaner ticks due at or before `now_ns`. Times must not decrease (the caller
    /// checks).
    pub fn advance(&mut self, now_ns: u64) {
        let origin = *self.origin_ns.get_or_insert(now_ns);
        let (Some(timeout), Some(since)) = (self.timeout_ns, self.volatile_since_ns) else {
            return;
        };
        assert!(since >= origin && since <= now_ns);
        // The first tick strictly more than `timeout` after the oldest non-durable data
        // became pending. After it fires nothing is pending, so one check per access suffices
        // however many ticks a gap in the trace spans.
        // A tick beyond 2^64 ns never comes (saturating would fire it at u64::MAX).
        let Some(after) = since.checked_add(timeout) else {
            return;
        };
        let periods = (after - origin) / CLEANER_PERIOD_NS + 1;
        let Some(tick) = periods
            .checked_mul(CLEANER_PERIOD_NS)
            .and_then(|d| origin.checked_add(d))
        else {
            return;
        };
        if tick <= now_ns {
            self.write_segment(Cause::Timeout);
        }
    }

    /// One block write at `now_ns` (after [`LfsWriter::advance`] to it).
    pub fn write(&mut self, key: u64, now_ns: u64) {
        self.stats.block_writes += 1;
        let seq = self.stats.block_writes;
        if let Some(v) = self.pending.get_mut(&key) {
            *v = seq;
            self.stats.overwrites_absorbed += 1;
            return;
        }
        self.pending.insert(key, seq);
        let pending = self.pending.len() as u64;
        if pending == self.nvram_blocks + 1 {
            assert!(self.volatile_since_ns.is_none());
            self.volatile_since_ns = Some(now_ns);
        }
        if pending == self.geometry.segment_data_blocks {
            self.write_segment(Cause::Full);
        }
        assert!((self.pending.len() as u64) < self.geometry.segment_data_blocks);
    }

    /// A sync point: pending data must be durable when it returns.
    pub fn sync(&mut self) {
        self.stats.syncs += 1;
        let pending = self.pending.len() as u64;
        if pending == 0 {
            self.stats.syncs_empty += 1;
        } else if pending <= self.nvram_blocks {
            assert!(self.volatile_since_ns.is_none());
            self.stats.syncs_held += 1;
        } else {
            self.write_segment(Cause::Sync);
        }
    }

    /// The trace ended: write what is pending and return the counts.
    pub fn finish(mut self) -> LfsStats {
        if !self.pending.is_empty() {
            self.write_segment(Cause::Final);
        }
        self.stats.finish();
        self.stats
    }

    /// [`LfsWriter::finish`], with every (block, version) it wrote (tests only).
    #[cfg(test)]
    pub(crate) fn finish_logged(mut self) -> (LfsStats, Vec<(u64, u64)>) {
        let log = {
            if !self.pending.is_empty() {
                self.write_segment(Cause::Final);
            }
            std::mem::take(&mut self.written)
        };
        (self.finish(), log)
    }

    /// Distinct blocks pending now.
    pub fn pending_blocks(&self) -> u64 {
        self.pending.len() as u64
    }

    /// Write all pending data as one segment: one disk write access.
    fn write_segment(&mut self, cause: Cause) {
        let blocks = self.pending.len() as u64;
        let g = self.geometry;
        assert!(blocks >= 1, "a segment is never written empty");
        // Full segments are written the moment they fill, so anything else is partial.
        assert_eq!(cause == Cause::Full, blocks == g.segment_data_blocks);
        let data = blocks * g.block_bytes;
        let overhead = g.metadata_blocks(blocks) * g.metadata_bytes + g.summary_bytes;
        let s = &mut self.stats;
        s.disk_writes += 1;
        s.data_blocks_written += blocks;
        s.data_bytes += data;
        s.metadata_bytes += g.metadata_blocks(blocks) * g.metadata_bytes;
        s.summary_bytes += g.summary_bytes;
        match cause {
            Cause::Full => {
                s.full_segments += 1;
                s.full_data_bytes += data;
            }
            Cause::Sync => {
                s.partial_sync += 1;
                s.partial_sync_data_bytes += data;
            }
            Cause::Timeout => {
                s.partial_timeout += 1;
                s.partial_timeout_data_bytes += data;
            }
            Cause::Final => {
                s.partial_final += 1;
                s.partial_final_data_bytes += data;
            }
        }
        if cause != Cause::Full {
            s.partial_overhead_bytes += overhead;
        }
        #[cfg(test)]
        self.written
            .extend(self.pending.iter().map(|(&k, &v)| (k, v)));
        // clear() keeps the table's capacity: at most one segment of entries.
        self.pending.clear();
        self.volatile_since_ns = None;
    }
}

/// The trace-wide counts every run shares.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TraceCounts {
    pub block_accesses: u64,
    pub block_reads: u64,
    pub block_writes: u64,
    /// Write requests that touched at least one block.
    pub write_requests: u64,
    /// Write requests the trace flags synchronous.
    pub sync_requests_flagged: u64,
    /// Sync points (flagged or `--fsync-every`; a request that is both counts once).
    pub syncs: u64,
}

/// Several segment writers, one per NVRAM size, driven by one pass over the accesses.
#[derive(Debug)]
pub struct Lfs {
    fsync_every: Option<u64>,
    last_ns: Option<u64>,
    pub counts: TraceCounts,
    pub writers: Vec<LfsWriter>,
}

impl Lfs {
    /// Writers for each of `nvram_blocks`; `cfg` must be valid.
    pub fn new(cfg: &LfsConfig, nvram_blocks: &[u64]) -> Lfs {
        Lfs {
            fsync_every: cfg.fsync_every,
            last_ns: None,
            counts: TraceCounts::default(),
            writers: nvram_blocks
                .iter()
                .map(|&n| LfsWriter::new(cfg, n))
                .collect(),
        }
    }

    pub fn access(&mut self, a: &BlockAccess) -> Result<()> {
        if let Some(last) = self.last_ns {
            if a.time_ns < last {
                return Err(Error::bad(format!(
                    "block access at {} ns is earlier than the previous one at {last} ns: virtual time must not run backwards",
                    a.time_ns
                )));
            }
        }
        self.last_ns = Some(a.time_ns);
        let c = &mut self.counts;
        c.block_accesses += 1;
        for w in &mut self.writers {
            w.advance(a.time_ns);
        }
        if a.op == Op::Read {
            c.block_reads += 1;
            return Ok(());
        }
        c.block_writes += 1;
        for w in &mut self.writers {
            w.write(a.key, a.time_ns);
        }
        if !a.last_of_request {
            return Ok(());
        }
        c.write_requests += 1;
        c.sync_requests_flagged += u64::from(a.sync);
        let every = self
            .fsync_every
            .is_some_and(|n| c.write_requests.is_multiple_of(n));
        if a.sync || every {
            c.syncs += 1;
            for w in &mut self.writers {
                w.sync();
            }
        }
        Ok(())
    }

    /// The trace ended: every writer's final flush and counts, in the order of `new`.
    pub fn finish(self) -> (TraceCounts, Vec<LfsStats>) {
        let stats: Vec<LfsStats> = self.writers.into_iter().map(LfsWriter::finish).collect();
        for s in &stats {
            assert_eq!(s.block_writes, self.counts.block_writes);
            assert_eq!(s.syncs, self.counts.syncs);
        }
        (self.counts, stats)
    }
}

/// One comparison as `nvstack sim lfs --json` prints it and the Python package's
/// `nvstack.sim.lfs` returns it: the settings, the trace's counts and both runs.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LfsReport {
    pub trace: String,
    pub format: crate::trace::TraceFormat,
    #[serde(flatten)]
    pub config: LfsConfig,
    pub cleaner_period_s: u64,
    pub requests: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub skipped_lines: u64,
    #[serde(flatten)]
    pub run: LfsRun,
}

impl LfsReport {
    /// The report of `run`, read from `src` (its counts are taken after the run).
    pub fn new(
        trace: &std::path::Path,
        format: crate::trace::TraceFormat,
        config: LfsConfig,
        src: &crate::trace::BlockAccesses,
        run: LfsRun,
    ) -> LfsReport {
        LfsReport {
            trace: trace.display().to_string(),
            format,
            config,
            cleaner_period_s: CLEANER_PERIOD_S,
            requests: src.requests,
            read_bytes: src.read_bytes,
            write_bytes: src.write_bytes,
            skipped_lines: src.skipped_lines(),
            run,
        }
    }
}

/// Both runs of the comparison, from one pass over the trace.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LfsRun {
    pub geometry: Geometry,
    #[serde(flatten)]
    pub counts: TraceCounts,
    pub without_buffer: LfsStats,
    pub with_buffer: LfsStats,
    /// (without - with) / without disk write accesses, %; 0 when nothing was written.
    pub disk_write_reduction_pct: f64,
}

impl LfsRun {
    /// Append this comparison to a row of the sweep's CSV: the JSON object's fields in its
    /// order, a nested object's fields named `object_field` (`geometry_block_bytes`,
    /// `without_buffer_disk_writes`, `with_buffer_pct_partial`).
    pub fn csv_push(&self, r: &mut CsvRecord) {
        let g = &self.geometry;
        let c = &self.counts;
        r.push("geometry_block_bytes", g.block_bytes)
            .push("geometry_metadata_bytes", g.metadata_bytes)
            .push("geometry_summary_bytes", g.summary_bytes)
            .push("geometry_pointers_per_metadata", g.pointers_per_metadata)
            .push("geometry_segment_data_blocks", g.segment_data_blocks)
            .push("block_accesses", c.block_accesses)
            .push("block_reads", c.block_reads)
            .push("block_writes", c.block_writes)
            .push("write_requests", c.write_requests)
            .push("sync_requests_flagged", c.sync_requests_flagged)
            .push("syncs", c.syncs);
        self.without_buffer.csv_push("without_buffer", r);
        self.with_buffer.csv_push("with_buffer", r);
        r.real("disk_write_reduction_pct", self.disk_write_reduction_pct);
    }
}

impl LfsStats {
    /// Append these counts to a CSV row, each column named `{prefix}_{field}`.
    pub fn csv_push(&self, prefix: &str, r: &mut CsvRecord) {
        let n = |f: &str| format!("{prefix}_{f}");
        r.push(&n("nvram_bytes"), self.nvram_bytes)
            .push(&n("disk_writes"), self.disk_writes)
            .push(&n("full_segments"), self.full_segments)
            .push(&n("partial_segments"), self.partial_segments)
            .push(&n("partial_sync"), self.partial_sync)
            .push(&n("partial_timeout"), self.partial_timeout)
            .push(&n("partial_final"), self.partial_final)
            .push(&n("syncs"), self.syncs)
            .push(&n("syncs_empty"), self.syncs_empty)
            .push(&n("syncs_held"), self.syncs_held)
            .push(&n("block_writes"), self.block_writes)
            .push(&n("overwrites_absorbed"), self.overwrites_absorbed)
            .push(&n("data_blocks_written"), self.data_blocks_written)
            .push(&n("data_bytes"), self.data_bytes)
            .push(&n("full_data_bytes"), self.full_data_bytes)
            .push(&n("partial_data_bytes"), self.partial_data_bytes)
            .push(&n("partial_sync_data_bytes"), self.partial_sync_data_bytes)
            .push(
                &n("partial_timeout_data_bytes"),
                self.partial_timeout_data_bytes,
            )
            .push(
                &n("partial_final_data_bytes"),
                self.partial_final_data_bytes,
            )
            .push(&n("metadata_bytes"), self.metadata_bytes)
            .push(&n("summary_bytes"), self.summary_bytes)
            .push(&n("overhead_bytes"), self.overhead_bytes)
            .push(&n("partial_overhead_bytes"), self.partial_overhead_bytes)
            .push(&n("bytes_written"), self.bytes_written)
            .real(&n("pct_partial"), self.pct_partial)
            .real(&n("pct_partial_sync"), self.pct_partial_sync)
            .real(&n("pct_partial_timeout"), self.pct_partial_timeout)
            .real_or_na(&n("kib_per_partial"), self.kib_per_partial)
            .real_or_na(&n("kib_per_sync_partial"), self.kib_per_sync_partial)
            .real(&n("pct_overhead"), self.pct_overhead)
            .real(&n("pct_partial_overhead"), self.pct_partial_overhead)
            .real_or_na(
                &n("pct_overhead_per_partial"),
                self.pct_overhead_per_partial,
            );
    }
}

/// Run the writer without and with the NVRAM buffer over `accesses`, in one pass.
pub fn simulate<I>(accesses: I, cfg: &LfsConfig) -> Result<LfsRun>
where
    I: IntoIterator<Item = Result<BlockAccess>>,
{
    cfg.validate()?;
    let mut lfs = Lfs::new(cfg, &[0, cfg.nvram_blocks()]);
    for a in accesses {
        lfs.access(&a?)?;
    }
    let geometry = cfg.geometry();
    let (counts, mut stats) = lfs.finish();
    assert_eq!(stats.len(), 2);
    let with_buffer = stats.pop().expect("two runs");
    let without_buffer = stats.pop().expect("two runs");
    let (w0, w1) = (without_buffer.disk_writes, with_buffer.disk_writes);
    let disk_write_reduction_pct = if w0 == 0 {
        0.0
    } else {
        100.0 * (w0 as f64 - w1 as f64) / w0 as f64
    };
    Ok(LfsRun {
        geometry,
        counts,
        without_buffer,
        with_buffer,
        disk_write_reduction_pct,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{HashMap, HashSet};

    const S: u64 = NS_PER_S;
    const KIB: u64 = 1024;

    /// One request at `t_ns` writing (`w`) or reading (`r`) `keys`, flagged sync if `sync`.
    fn req(t_ns: u64, op: char, keys: &[u64], sync: bool) -> Vec<BlockAccess> {
        let n = keys.len();
        keys.iter()
            .enumerate()
            .map(|(i, &key)| BlockAccess {
                time_ns: t_ns,
                key,
                op: if op == 'w' { Op::Write } else { Op::Read },
                sync,
                last_of_request: i + 1 == n,
            })
            .collect()
    }

    fn w(t_s: u64, keys: &[u64]) -> Vec<BlockAccess> {
        req(t_s * S, 'w', keys, false)
    }

    fn ws(t_s: u64, keys: &[u64]) -> Vec<BlockAccess> {
        req(t_s * S, 'w', keys, true)
    }

    /// 4 KiB blocks and metadata, 512-byte summary, `segment_kib` segments, no timeout.
    fn cfg(segment_kib: u64, nvram_blocks: u64) -> LfsConfig {
        LfsConfig {
            block_bytes: 4096,
            segment_bytes: segment_kib * KIB,
            metadata_bytes: 4 * KIB,
            summary_bytes: 512,
            nvram_bytes: nvram_blocks * 4096,
            timeout_ns: None,
            fsync_every: None,
        }
    }

    fn run(c: &LfsConfig, reqs: &[Vec<BlockAccess>]) -> LfsRun {
        let accesses: Vec<BlockAccess> = reqs.iter().flatten().copied().collect();
        simulate(accesses.into_iter().map(Ok), c).unwrap()
    }

    fn counts(s: &LfsStats) -> [u64; 6] {
        [
            s.disk_writes,
            s.full_segments,
            s.partial_sync,
            s.partial_timeout,
            s.partial_final,
            s.data_blocks_written,
        ]
    }

    #[test]
    fn geometry_of_the_paper_and_small_segments() {
        // 512 KiB - 4 KiB - 512 B = 519,680 bytes: 126 whole 4 KiB blocks (126.875).
        let g = LfsConfig::paper(4096).geometry();
        assert_eq!(g.segment_data_blocks, 126);
        assert_eq!(g.pointers_per_metadata, 1024);
        assert_eq!(g.metadata_blocks(126), 1);
        assert_eq!(g.segment_bytes(126), 4096 + 512 + 126 * 4096);
        // 16 KiB: 16384 - 4608 = 11776 -> 2 blocks; 32 KiB: 28160 -> 6 blocks.
        assert_eq!(cfg(16, 0).geometry().segment_data_blocks, 2);
        assert_eq!(cfg(32, 0).geometry().segment_data_blocks, 6);
        // The smallest legal segment: metadata + summary + one block.
        let mut c = cfg(16, 0);
        c.segment_bytes = 3 * 4096;
        c.summary_bytes = 4096;
        c.validate().unwrap();
        assert_eq!(c.geometry().segment_data_blocks, 1);
        // More metadata blocks: 512-byte blocks, 8 KiB segment, 16-byte metadata (4 addresses),
        // no summary. d = 15: ceil(15/4) = 4 metadata blocks, 64 + 7680 = 7744 <= 8192; d = 16:
        // 64 + 8192 > 8192. So 15 blocks and 4 metadata blocks (64 bytes) per full segment.
        let c = LfsConfig {
            block_bytes: 512,
            segment_bytes: 8192,
            metadata_bytes: 16,
            summary_bytes: 0,
            ..cfg(16, 0)
        };
        c.validate().unwrap();
        let g = c.geometry();
        assert_eq!(g.segment_data_blocks, 15);
        assert_eq!(
            (
                g.metadata_blocks(1),
                g.metadata_blocks(4),
                g.metadata_blocks(5)
            ),
            (1, 1, 2)
        );
        assert_eq!(g.segment_bytes(15), 7744);
    }

    #[test]
    fn syncs_with_and_without_nvram() {
        // 32 KiB segments: 6 data blocks. NVRAM 4 blocks (16 KiB).
        let trace = [
            ws(0, &[0, 1, 2]), // sync, 3 pending
            ws(1, &[0]),       // sync
            ws(2, &[10, 11]),  // sync
            w(3, &[20, 21, 22, 23, 24, 25, 26]),
        ];
        let r = run(&cfg(32, 4), &trace);
        assert_eq!(r.counts.block_writes, 13);
        assert_eq!(r.counts.write_requests, 4);
        assert_eq!((r.counts.syncs, r.counts.sync_requests_flagged), (3, 3));
        // Without: sync partials {0,1,2}, {0}, {10,11}; then 20..=25 fill a full segment and
        // 26 is the final partial. 5 disk writes, 3 + 1 + 2 + 6 + 1 = 13 blocks, none absorbed.
        let s = &r.without_buffer;
        assert_eq!(counts(s), [5, 1, 3, 0, 1, 13]);
        assert_eq!(
            (s.overwrites_absorbed, s.syncs_held, s.syncs_empty),
            (0, 0, 0)
        );
        assert_eq!(s.data_bytes, 13 * 4096);
        assert_eq!((s.metadata_bytes, s.summary_bytes), (5 * 4096, 5 * 512));
        assert_eq!(s.bytes_written, 53_248 + 20_480 + 2_560);
        assert_eq!(s.partial_overhead_bytes, 4 * 4608);
        assert_eq!(s.pct_partial, 80.0);
        assert_eq!(s.pct_partial_sync, 60.0);
        // Partial data: 3 + 1 + 2 + 1 = 7 blocks = 28 KiB over 4 partials; sync: 24 KiB / 3.
        assert_eq!(s.kib_per_partial, Some(7.0));
        assert_eq!(s.kib_per_sync_partial, Some(8.0));
        assert!((s.pct_partial_overhead - 100.0 * 18_432.0 / 76_288.0).abs() < 1e-9);
        // Partial segments: 28 KiB data + 18 KiB overhead; overhead share 18432 / 47104.
        let per = s.pct_overhead_per_partial.unwrap();
        assert!((per - 100.0 * 18_432.0 / 47_104.0).abs() < 1e-9);
        // With 4 blocks of NVRAM: {0,1,2} fit (held); the rewrite of 0 is absorbed, {0,1,2}
        // still fit (held); {0,1,2,10,11} = 5 > 4 forces one sync partial of 5 blocks. Then
        // as before: one full segment and the final {26}. 3 disk writes, 12 blocks.
        let s = &r.with_buffer;
        assert_eq!(counts(s), [3, 1, 1, 0, 1, 12]);
        assert_eq!(
            (s.overwrites_absorbed, s.syncs_held, s.syncs_empty),
            (1, 2, 0)
        );
        assert_eq!(s.kib_per_sync_partial, Some(20.0));
        assert_eq!(r.disk_write_reduction_pct, 40.0);

        // NVRAM of 8 blocks (>= one segment's 6): every sync is held. 0,1,2,10,11,20 fill the
        // first full segment, 21..=26 the second; nothing is left for a final flush.
        let r = run(&cfg(32, 8), &trace);
        let s = &r.with_buffer;
        assert_eq!(counts(s), [2, 2, 0, 0, 0, 12]);
        assert_eq!((s.overwrites_absorbed, s.syncs_held), (1, 3));
        assert_eq!((s.pct_partial, s.kib_per_partial), (0.0, None));
        assert_eq!(s.partial_overhead_bytes, 0);
        assert_eq!(r.disk_write_reduction_pct, 60.0);
        assert_eq!(r.without_buffer, run(&cfg(32, 0), &trace).without_buffer);

        // No NVRAM: the "with" run is the "without" run.
        let r = run(&cfg(32, 0), &trace);
        let mut s = r.with_buffer.clone();
        s.nvram_bytes = 0;
        assert_eq!(s, r.without_buffer);
        assert_eq!(r.disk_write_reduction_pct, 0.0);
    }

    #[test]
    fn overwrites_are_absorbed_and_full_segments_fill() {
        // 16 KiB segments: 2 data blocks. a a a b: two rewrites absorbed, {a,b} full. c: final.
        let r = run(
            &cfg(16, 0),
            &[w(0, &[7]), w(0, &[7]), w(1, &[7, 8]), w(2, &[9])],
        );
        let s = &r.without_buffer;
        assert_eq!(counts(s), [2, 1, 0, 0, 1, 3]);
        assert_eq!((s.block_writes, s.overwrites_absorbed), (5, 2));
        assert_eq!(s.full_data_bytes, 8192);
        assert_eq!(s.partial_final_data_bytes, 4096);
        // A write after a full segment is new pending data, not absorbed: {7,8} then 7 again.
        let r = run(&cfg(16, 0), &[w(0, &[7, 8]), w(0, &[7])]);
        assert_eq!(r.without_buffer.overwrites_absorbed, 0);
        assert_eq!(counts(&r.without_buffer), [2, 1, 0, 0, 1, 3]);
    }

    #[test]
    fn a_sync_after_a_full_segment_finds_nothing() {
        // 16 KiB segments: a 2-block sync request fills a full segment at its last block;
        // the sync then has nothing to force. A sync-flagged read is no sync.
        let trace = [ws(0, &[1, 2]), req(0, 'r', &[1], true)];
        let r = run(&cfg(16, 0), &trace);
        assert_eq!(counts(&r.without_buffer), [1, 1, 0, 0, 0, 2]);
        assert_eq!(r.without_buffer.syncs_empty, 1);
        assert_eq!((r.counts.block_reads, r.counts.syncs), (1, 1));
    }

    #[test]
    fn fsync_every_combines_with_flags() {
        // 32 KiB segments, a sync after every 2nd write request. r1 {1}, r2 {2} -> sync:
        // partial {1,2}; a read; r3 {3}, r4 {4} flagged and 4th -> one sync: partial {3,4};
        // r5 {5} flagged -> partial {5}; r6 {6} 6th -> partial {6}. 4 sync partials, no final.
        let mut c = cfg(32, 0);
        c.fsync_every = Some(2);
        let trace = [
            w(0, &[1]),
            w(0, &[2]),
            req(0, 'r', &[9, 10], false),
            w(0, &[3]),
            ws(0, &[4]),
            ws(0, &[5]),
            w(0, &[6]),
        ];
        let r = run(&c, &trace);
        assert_eq!(
            (
                r.counts.write_requests,
                r.counts.sync_requests_flagged,
                r.counts.syncs
            ),
            (6, 2, 4)
        );
        assert_eq!(counts(&r.without_buffer), [4, 0, 4, 0, 0, 6]);
        assert_eq!(r.without_buffer.pct_partial_sync, 100.0);
        assert_eq!(r.without_buffer.kib_per_sync_partial, Some(6.0));
        // NVRAM of 1 block: the syncs after r2 and r4 find 2 pending > 1: partials {1,2} and
        // {3,4}; after r5, {5} fits: held; after r6, {5,6} = 2 > 1: partial. 3 disk writes.
        c.nvram_bytes = 4096;
        let r = run(&c, &trace);
        assert_eq!(counts(&r.with_buffer), [3, 0, 3, 0, 0, 6]);
        assert_eq!(r.with_buffer.syncs_held, 1);
    }

    #[test]
    fn timeout_writes_old_volatile_data() {
        // 32 KiB segments, 30 s timeout, ticks every 5 s from the first access (t0 = 1000.5 s).
        let mut c = cfg(32, 0);
        c.timeout_ns = Some(30 * S);
        let t0 = 1000 * S + S / 2;
        let trace = [
            req(t0, 'w', &[1], false),              // pending since t0
            req(t0 + 2 * S, 'w', &[2], false),      // pending since t0 + 2
            req(t0 + 35 * S - 1, 'r', &[5], false), // ticks t0+5..t0+30: none strictly > 30 s
            req(t0 + 35 * S, 'w', &[3], false),     // tick t0+35 fires first: partial {1,2}
            req(t0 + 40 * S, 'w', &[4], false),     // {3,4} pending at the end: final
        ];
        let r = run(&c, &trace);
        let s = &r.without_buffer;
        assert_eq!(counts(s), [2, 0, 0, 1, 1, 4]);
        assert_eq!(s.partial_timeout_data_bytes, 8192);
        assert_eq!(s.pct_partial_timeout, 50.0);
        // NVRAM of 1 block: block 1 is durable; block 2 (beyond the NVRAM) ages from t0 + 2:
        // first tick strictly after t0 + 32 is t0 + 35, so {1,2} go out at t0 + 35 as before.
        c.nvram_bytes = 4096;
        let r = run(&c, &trace);
        assert_eq!(counts(&r.with_buffer), [2, 0, 0, 1, 1, 4]);
        // NVRAM of 2 blocks: everything pending is durable, the timeout never fires; {1,2,3,4}
        // are the final flush.
        c.nvram_bytes = 2 * 4096;
        let r = run(&c, &trace);
        assert_eq!(counts(&r.with_buffer), [1, 0, 0, 0, 1, 4]);
        // Timeout off: one final flush of all four without a buffer too.
        c.timeout_ns = None;
        let r = run(&c, &trace);
        assert_eq!(counts(&r.without_buffer), [1, 0, 0, 0, 1, 4]);
        // A long gap spans many ticks: one check, one timeout write. Timeout 0: data pending
        // at a tick (strictly after it became pending) is written at that tick.
        c.timeout_ns = Some(0);
        c.nvram_bytes = 0;
        let trace = [
            req(0, 'w', &[1], false),
            req(u64::MAX / 2, 'w', &[2], false),
            req(u64::MAX / 2, 'w', &[3], false),
        ];
        let r = run(&c, &trace);
        assert_eq!(counts(&r.without_buffer), [2, 0, 0, 1, 1, 3]);
        // Near the end of time a tick past 2^64 ns never comes (no overflow, no early fire).
        let trace = [
            req(u64::MAX - 1, 'w', &[1], false),
            req(u64::MAX, 'w', &[2], false),
        ];
        let r = run(&c, &trace);
        assert_eq!(r.without_buffer.disk_writes, 1);
    }

    #[test]
    fn bad_inputs_are_errors_naming_the_field() {
        let bad = |c: LfsConfig, field: Field| {
            let e = c.validate().unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert!(
                e.to_string().starts_with(field.name()),
                "{e} does not name {field:?}"
            );
            assert_eq!(Error::from(e).exit_code(), 2);
        };
        bad(
            LfsConfig {
                segment_bytes: 16 * KIB + 512,
                ..cfg(16, 0)
            },
            Field::SegmentBytes,
        );
        bad(
            LfsConfig {
                segment_bytes: 8 * KIB,
                ..cfg(16, 0)
            },
            Field::SegmentBytes,
        );
        bad(
            LfsConfig {
                segment_bytes: 0,
                ..cfg(16, 0)
            },
            Field::SegmentBytes,
        );
        bad(
            LfsConfig {
                segment_bytes: 2 << 30,
                ..cfg(16, 0)
            },
            Field::SegmentBytes,
        );
        bad(
            LfsConfig {
                metadata_bytes: 0,
                ..cfg(16, 0)
            },
            Field::MetadataBytes,
        );
        bad(
            LfsConfig {
                metadata_bytes: u64::MAX,
                ..cfg(16, 0)
            },
            Field::MetadataBytes,
        );
        bad(
            LfsConfig {
                summary_bytes: u64::MAX,
                ..cfg(16, 0)
            },
            Field::SummaryBytes,
        );
        bad(
            LfsConfig {
                nvram_bytes: 4097,
                ..cfg(16, 0)
            },
            Field::NvramBytes,
        );
        bad(
            LfsConfig {
                nvram_bytes: u64::MAX,
                ..cfg(16, 0)
            },
            Field::NvramBytes,
        );
        bad(
            LfsConfig {
                fsync_every: Some(0),
                ..cfg(16, 0)
            },
            Field::FsyncEvery,
        );
        bad(
            LfsConfig {
                block_bytes: 1000,
                ..cfg(16, 0)
            },
            Field::BlockBytes,
        );
        bad(
            LfsConfig {
                timeout_ns: Some(u64::MAX),
                ..cfg(16, 0)
            },
            Field::TimeoutNs,
        );
        assert_eq!(parse_timeout("off").unwrap(), None);
        assert_eq!(parse_timeout("30").unwrap(), Some(30 * S));
        assert_eq!(parse_timeout("0").unwrap(), Some(0));
        for t in ["", "-1", "1.5", "30s", "604801", "OFF"] {
            let e = parse_timeout(t).unwrap_err();
            assert_eq!(e.field, Field::TimeoutNs);
            assert!(e.to_string().starts_with("timeout_ns '"), "{e}");
        }
        // Time running backwards and a reader's error stop the run with that error.
        let trace = [w(5, &[1]), w(4, &[2])].concat();
        let e = simulate(trace.into_iter().map(Ok), &cfg(16, 0)).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        let items = vec![Ok(w(0, &[1])[0]), Err(Error::bad("t:3: bad line"))];
        let e = simulate(items, &cfg(16, 0)).unwrap_err();
        assert!(e.to_string().contains("t:3"));
        // An empty trace writes nothing.
        let r = simulate(std::iter::empty(), &cfg(16, 4)).unwrap();
        assert_eq!(r.without_buffer.disk_writes, 0);
        assert_eq!(r.disk_write_reduction_pct, 0.0);
    }

    /// A short random trace: (gap in s, write?, sync flag, first key, blocks).
    fn arb_trace() -> impl Strategy<Value = Vec<BlockAccess>> {
        proptest::collection::vec(
            (0u64..20, any::<bool>(), any::<bool>(), 0u64..12, 1usize..4),
            0..40,
        )
        .prop_map(|reqs| {
            let mut t = 0;
            let mut out = Vec::new();
            for (gap, write, sync, first, n) in reqs {
                t += gap * S;
                let keys: Vec<u64> = (first..first + n as u64).collect();
                out.extend(req(t, if write || sync { 'w' } else { 'r' }, &keys, sync));
            }
            out
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn conservation_and_invariants(
            trace in arb_trace(),
            segment_kib in prop_oneof![Just(16u64), Just(32), Just(48)],
            fsync_every in prop_oneof![Just(None), (1u64..5).prop_map(Some)],
            timeout_s in prop_oneof![Just(None), Just(Some(0u64)), Just(Some(30))],
        ) {
            let c = LfsConfig {
                timeout_ns: timeout_s.map(|t| t * S),
                fsync_every,
                ..cfg(segment_kib, 0)
            };
            c.validate().unwrap();
            let full = c.geometry().segment_data_blocks;
            // NVRAM sizes 0 ..= one segment's data blocks + 1, all driven by one pass.
            let sizes: Vec<u64> = (0..=full + 1).collect();
            let mut lfs = Lfs::new(&c, &sizes);
            for a in &trace {
                lfs.access(a).unwrap();
            }
            // The version (write sequence number) of each block's last write.
            let mut last: HashMap<u64, u64> = HashMap::new();
            let mut seq = 0;
            for a in trace.iter().filter(|a| a.op == Op::Write) {
                seq += 1;
                last.insert(a.key, seq);
            }
            prop_assert_eq!(lfs.counts.block_writes, seq);
            let mut stats: Vec<LfsStats> = Vec::new();
            for w in lfs.writers.drain(..) {
                prop_assert!(w.pending_blocks() < full);
                let (s, log) = w.finish_logged();
                let mut seen: HashMap<u64, u64> = HashMap::new();
                let mut versions = HashSet::new();
                for (k, v) in log {
                    // Each version reaches the disk at most once, a block's versions in order.
                    prop_assert!(versions.insert(v), "version {} written twice", v);
                    let prev = seen.insert(k, v);
                    prop_assert!(prev.is_none_or(|p| p < v));
                }
                // Every written block's last version is on the disk, whatever the NVRAM.
                prop_assert_eq!(&seen, &last);
                stats.push(s);
            }
            for (i, s) in stats.iter().enumerate() {
                prop_assert_eq!(s.full_segments + s.partial_segments, s.disk_writes);
                prop_assert_eq!(s.block_writes, s.overwrites_absorbed + s.data_blocks_written);
                prop_assert_eq!(s.syncs, lfs.counts.syncs);
                prop_assert!(s.partial_final <= 1);
                // A buffer holding a segment's data never forces a partial before the end.
                if sizes[i] >= full {
                    prop_assert_eq!(s.partial_sync + s.partial_timeout, 0);
                }
                // Disk write accesses never increase with the NVRAM size.
                if i > 0 {
                    prop_assert!(
                        s.disk_writes <= stats[i - 1].disk_writes,
                        "{} blocks: {} > {}", sizes[i], s.disk_writes, stats[i - 1].disk_writes
                    );
                }
            }
            // No NVRAM is the same run as the "without buffer" one.
            let r = simulate(trace.iter().copied().map(Ok), &c).unwrap();
            prop_assert_eq!(&r.without_buffer, &stats[0]);
            prop_assert_eq!(&r.with_buffer, &stats[0]);
            prop_assert!(r.disk_write_reduction_pct == 0.0);
        }
    }
}
