//! The transactional block device: lanes, the two write protocols, seqlock reads, discard,
//! and recovery. The protocols and their recovery rules are specified in docs/format.md; the
//! step names here match that document and [`Step`].

mod recover;
mod seeded;

pub use recover::{scan_map, MapScan, FINDINGS_MAX};

use crate::bitmap::BitmapAllocator;
use crate::bugs::SeededBug;
use crate::entry::Entry;
use crate::format::SuperblockCopies;
use crate::hooks::{Action, Event, Hook, Phase, Step};
use crate::journal::{
    encode_fast_record, encode_paper_intent, paper_commit_word, retire_record, FAST_RECORD_MAX,
    FAST_RECORD_REPLICA, LBA_NULL, PAPER_INTENT, PAPER_INTENT_COMMIT, PAPER_INTENT_MAX, PAPER_L1,
    PAPER_L2, PAPER_VPN,
};
use crate::layout::{Geometry, Protocol, Superblock, ATOMIC_BLOCKS_MAX, SLOT_BYTES};
use crate::sync::{lane_hint, lock, CachePadded, Guard, Lock, StripedCounter};
use nvstack_core::blockdev::{BlockDevice, Caps, Durability};
use nvstack_core::error::{Error, Result};
use nvstack_pmem::cpu::prefetch as prefetch_cpu;
use nvstack_pmem::latency::LatencyInjection;
use nvstack_pmem::ordering::{self, OrderingPolicy};
use nvstack_pmem::{CommitDomain, DomainStats, Region};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Stripe locks serialise writers of the same map line (8 entries), never readers.
const STRIPES: usize = 1024;
/// Map entries per stripe: one cache line of 8-byte words.
const ENTRIES_PER_STRIPE: u64 = 8;
const _: () = assert!(
    STRIPES <= u16::MAX as usize + 1,
    "stripe indices are sorted as u16"
);
/// Optimistic copies of one block a reader makes while writers keep changing its entry,
/// before it takes the block's stripe lock (which bounds the read). A writer holds the stripe
/// for one update, microseconds: 64 changes in a row means the block is being overwritten
/// back to back, and waiting once for the lock is then cheaper than copying again.
const READ_RETRIES_MAX: u32 = 64;

#[derive(Clone)]
pub struct OpenOptions {
    /// Use this ordering instead of the one stored at format time (benchmarks, crash tests).
    pub ordering: Option<OrderingPolicy>,
    pub latency: LatencyInjection,
    pub hook: Option<Hook>,
    /// The seqlock check on reads. Only the interleaving test switches it off, to show that
    /// it is what keeps readers from seeing recycled pages.
    pub read_protection: bool,
    /// Open even when the map is damaged, recording the damage in the recovery report
    /// (`nvstack check` only; the device must not be written then).
    pub allow_damaged: bool,
    /// A deliberate protocol mistake, set only by the crash checker (bugs.rs).
    pub seeded_bug: Option<SeededBug>,
    /// Benchmarks only (seed 000 Fig. 16): take shadow pages from a persistent bitmap
    /// allocator in this region (bitmap.rs) instead of the static pool.
    pub page_bitmap: Option<Arc<dyn Region>>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            ordering: None,
            latency: LatencyInjection::default(),
            hook: None,
            read_protection: true,
            allow_damaged: false,
            seeded_bug: None,
            page_bitmap: None,
        }
    }
}

/// What recovery found and did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RecoveryReport {
    /// One line per lane that needed anything.
    pub actions: Vec<String>,
    pub redone: u64,
    pub undone: u64,
    pub mapped_blocks: u64,
    pub free_pages: u64,
    /// Damage found in the journal or the map (only ever non-empty when opened with
    /// `allow_damaged`; otherwise the open fails).
    pub damage: Vec<String>,
}

impl RecoveryReport {
    pub fn was_clean(&self) -> bool {
        self.redone == 0 && self.undone == 0
    }
}

#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct DiskStats {
    pub writes: u64,
    pub blocks_written: u64,
    pub reads: u64,
    pub read_retries: u64,
    pub discards: u64,
    pub persist: DomainStats,
}

struct Lane {
    id: u32,
    // Counters live in the lane (already locked): no shared cache line on the write path.
    writes: u64,
    blocks_written: u64,
    discards: u64,
    domain: CommitDomain,
    seq: u64,
    /// Pages this lane's last update unmapped, handed to the free pool when the lane next
    /// takes pages (under the one pool lock it takes anyway) instead of right after the
    /// update's final fence, where taking the pool lock would wait for the write-combining
    /// buffers to drain. At most ATOMIC_BLOCKS_MAX (see `take_pages`).
    freed: [u32; ATOMIC_BLOCKS_MAX],
    freed_count: usize,
    /// Scratch for one update, allocated once per lane: the entries being changed, and the
    /// fast record's bytes. Why not stack arrays: zeroing and moving 3.4 KiB per update
    /// measured as a fifth of a 16-block write's time beyond its stores. Taken out of the
    /// lane for the length of an update (None only while one is being prepared).
    prepared: Option<Box<Prepared>>,
    record: Box<[u8; FAST_RECORD_MAX]>,
}

impl Lane {
    fn new(id: u32, geo: &Geometry, latency: LatencyInjection) -> Lane {
        // The domain may be asked to persist stores to the lane's slot, the map and the data
        // pages; a store anywhere else is a bug (it panics).
        let ranges = [
            (geo.slot_off(id), SLOT_BYTES),
            (geo.map_off, geo.map_bytes()),
            (geo.data_off, geo.pages * geo.block_bytes as u64),
        ];
        Lane {
            id,
            writes: 0,
            blocks_written: 0,
            discards: 0,
            domain: CommitDomain::new(id, &ranges, latency),
            seq: 0,
            freed: [0; ATOMIC_BLOCKS_MAX],
            freed_count: 0,
            prepared: Some(Box::new(Prepared::EMPTY)),
            record: Box::new([0; FAST_RECORD_MAX]),
        }
    }
}

pub struct NvramDisk<R: Region> {
    region: Arc<R>,
    sb: Superblock,
    geo: Geometry,
    ordering: OrderingPolicy,
    lanes: Box<[CachePadded<Lock<Lane>>]>,
    /// The free pages, one pool for all lanes. A leaf lock: nothing else is ever acquired
    /// while it is held. (Per-lane lists with stealing starved or deadlocked a lane whose
    /// writer was short while the pages sat in a lane that was always busy.)
    free: Lock<Vec<u32>>,
    /// Set by OpenOptions::page_bitmap: pages come from here instead of `free`.
    bitmap: Option<BitmapAllocator>,
    stripes: Box<[CachePadded<Lock<()>>]>,
    /// The map in DRAM: one word per LBA, equal to its map entry on media whenever no write
    /// of that LBA is in flight (the writer stores the media word, commits it, then this).
    /// Built from the media map at open, after recovery. Why: a map entry loaded from the
    /// region before its word is stored with a non-temporal store pulls the line into the
    /// cache, and the store must then evict it (measured: 80 ns of a 4 KiB write, 14 % over
    /// the two-fence floor); on real NVRAM a DRAM load is also the faster one. Readers and
    /// writers look entries up here; the media map is only written, and read at open.
    /// 8 bytes of DRAM per block.
    mirror: Box<[AtomicU64]>,
    hook: Option<Hook>,
    read_protection: bool,
    allow_damaged: bool,
    /// The seeded bug selected (bugs.rs); None in every real use. Each deviation below is
    /// marked `// Seeded bug NAME:` and costs one branch on this when it is None.
    bug: Option<SeededBug>,
    crashed: AtomicBool,
    recovery: RecoveryReport,

    reads: StripedCounter,
    read_retries: StripedCounter,
}

/// Map entries read and checked, and their new values, before they are stored.
struct Prepared {
    /// Entries that change (a discard of an unmapped block changes nothing).
    changed: usize,
    lbas: [u64; ATOMIC_BLOCKS_MAX],
    olds: [u64; ATOMIC_BLOCKS_MAX],
    news: [u64; ATOMIC_BLOCKS_MAX],
    /// Pages the entries pointed at, free once the new entries are durable.
    freed: [u32; ATOMIC_BLOCKS_MAX],
    freed_count: usize,
}

impl Prepared {
    const EMPTY: Prepared = Prepared {
        changed: 0,
        lbas: [0; ATOMIC_BLOCKS_MAX],
        olds: [0; ATOMIC_BLOCKS_MAX],
        news: [0; ATOMIC_BLOCKS_MAX],
        freed: [0; ATOMIC_BLOCKS_MAX],
        freed_count: 0,
    };
}

type StripeGuards<'a> = [Option<Guard<'a, ()>>; ATOMIC_BLOCKS_MAX];

/// The stripe whose lock serialises writers of `lba`'s map line.
fn stripe_of(lba: u64) -> usize {
    (lba / ENTRIES_PER_STRIPE) as usize % STRIPES
}

fn corrupt_entry(lba: u64, raw: u64) -> Error {
    Error::finding(format!(
        "map entry of LBA {lba} is corrupt ({raw:#018x} fails its check bits): run `nvstack check`"
    ))
}

/// Index ranges of `v` in which each element is the previous one + 1, in order; every element a
/// range of its own when `one_each` (stop points: a stop after element k's event must find
/// exactly elements 0..=k stored).
fn consecutive_runs<T: Copy + Into<u64>>(
    v: &[T],
    one_each: bool,
) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        if i == v.len() {
            return None;
        }
        let start = i;
        i += 1;
        while !one_each && i < v.len() && v[i].into() == v[i - 1].into() + 1 {
            i += 1;
        }
        Some(start..i)
    })
}

impl<R: Region> NvramDisk<R> {
    /// Open a formatted region and recover it (redo or undo whatever was in flight).
    pub fn open(region: Arc<R>, options: OpenOptions) -> Result<NvramDisk<R>> {
        let sb = SuperblockCopies::read_region(&*region).agreed()?;
        let geo = sb.geometry;
        let ordering = match options.ordering {
            Some(ordering) => ordering,
            None => ordering::policy_by_id(sb.ordering_id).expect("validated at decode"),
        };
        ordering::check_available_on(&ordering, &*region)?;
        let lanes = (0..geo.lanes)
            .map(|id| CachePadded::new(Lock::new(Lane::new(id, &geo, options.latency))))
            .collect();
        let stripes = (0..STRIPES)
            .map(|_| CachePadded::new(Lock::new(())))
            .collect();
        let mut disk = NvramDisk {
            region,
            sb,
            geo,
            ordering,
            lanes,
            free: Lock::new(Vec::new()),
            bitmap: None,
            stripes,
            mirror: Box::new([]),
            hook: options.hook,
            read_protection: options.read_protection,
            allow_damaged: options.allow_damaged,
            bug: options.seeded_bug,
            crashed: AtomicBool::new(false),
            recovery: RecoveryReport::default(),
            reads: StripedCounter::default(),
            read_retries: StripedCounter::default(),
        };
        disk.recovery = disk.recover()?;
        // After recovery, which repairs the media map: the mirror starts equal to it.
        disk.mirror = disk.mirror_media_map();
        if let Some(bitmap_region) = options.page_bitmap {
            let mut free = vec![false; geo.pages as usize];
            for &page in lock(&disk.free).iter() {
                free[page as usize] = true;
            }
            let is_free = |page: u32| free[page as usize];
            disk.bitmap = Some(BitmapAllocator::new(bitmap_region, geo.pages, is_free)?);
        }
        debug_assert_eq!(disk.mirror.len() as u64, geo.blocks);
        Ok(disk)
    }

    /// The mirror of the media map. An entry that fails its check (only an open with
    /// allow_damaged gets this far with one) is mirrored as the zero word, which never
    /// decodes: the write path then skips the check bits of mirror words
    /// (Entry::decode_checked_before).
    fn mirror_media_map(&self) -> Box<[AtomicU64]> {
        let (region, geo) = (&*self.region, &self.geo);
        (0..geo.blocks)
            .map(|lba| {
                let raw = region.load_u64(geo.map_entry_off(lba));
                let valid = Entry::decode(lba, raw).is_ok();
                AtomicU64::new(if valid { raw } else { 0 })
            })
            .collect()
    }

    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }
    pub fn protocol(&self) -> Protocol {
        self.sb.protocol
    }
    pub fn ordering(&self) -> OrderingPolicy {
        self.ordering
    }
    pub fn region(&self) -> &Arc<R> {
        &self.region
    }
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
    }

    pub fn stats(&self) -> DiskStats {
        let mut persist = DomainStats::default();
        let (mut writes, mut blocks_written, mut discards) = (0, 0, 0);
        for l in self.lanes.iter() {
            let l = lock(l);
            writes += l.writes;
            blocks_written += l.blocks_written;
            discards += l.discards;
            let s = l.domain.stats();
            persist.stores += s.stores;
            persist.nt_lines += s.nt_lines;
            persist.lines_flushed += s.lines_flushed;
            persist.fences += s.fences;
            persist.global_commits += s.global_commits;
        }
        DiskStats {
            writes,
            blocks_written,
            reads: self.reads.sum(),
            read_retries: self.read_retries.sum(),
            discards,
            persist,
        }
    }

    /// True when seeded bug `b` is selected.
    #[inline(always)]
    fn seeded(&self, b: SeededBug) -> bool {
        self.bug == Some(b)
    }

    fn alive(&self) -> Result<()> {
        if self.crashed.load(Ordering::Acquire) {
            return Err(Error::env(
                "device stopped at an injected stop point: reopen it to recover",
            ));
        }
        Ok(())
    }

    #[inline]
    fn signal(&self, step: Step, phase: Phase, off: u64, len: u64, lba: u64) -> Result<()> {
        if let Some(h) = &self.hook {
            // A stop is a power failure: it ends every thread's operation at its next step,
            // not only the one that hit it, so nothing is acknowledged after the "crash".
            if self.crashed.load(Ordering::Acquire) {
                return Err(Error::Stopped(0));
            }
            if h(&Event {
                step,
                phase,
                off,
                len,
                lba,
            }) == Action::Stop
            {
                self.crashed.store(true, Ordering::Release);
                return Err(Error::Stopped(0));
            }
        }
        Ok(())
    }

    /// A lane: the thread's own first (lanes spread without coordination), else the first
    /// free one after it, else wait for the thread's own.
    fn acquire_lane(&self) -> Guard<'_, Lane> {
        let lanes = self.lanes.len();
        let first = lane_hint() % lanes;
        for i in 0..lanes {
            if let Some(guard) = self.lanes[(first + i) % lanes].try_lock() {
                return guard;
            }
        }
        lock(&self.lanes[first])
    }

    /// Return the pages `lane` freed last time, then take `count` free pages, ascending.
    /// Enough always exist, without waiting: pages = blocks + lanes x ATOMIC_BLOCKS_MAX, at
    /// most `blocks` are mapped, and each of the other lanes holds at most ATOMIC_BLOCKS_MAX
    /// pages that are neither mapped nor in the pool (taken for its write in flight, or freed
    /// by its last update and not yet returned: a lane returns the second before it takes the
    /// first), so at least ATOMIC_BLOCKS_MAX >= count are free whenever a writer asks.
    fn take_pages(&self, lane: &mut Lane, count: usize, out: &mut [u32; ATOMIC_BLOCKS_MAX]) {
        assert!(
            (1..=ATOMIC_BLOCKS_MAX).contains(&count),
            "{count} pages wanted"
        );
        debug_assert!(lane.freed_count <= ATOMIC_BLOCKS_MAX);
        if let Some(bitmap) = &self.bitmap {
            bitmap.take(&mut out[..count]);
        } else if lane.freed_count >= count {
            // The paper's rule: the pages a lane's last write freed are its next shadow pages.
            // No pool lock, so no locked instruction waits here for the last write's stores.
            let at = lane.freed_count - count;
            out[..count].copy_from_slice(&lane.freed[at..lane.freed_count]);
            lane.freed_count = at;
        } else {
            let mut free = lock(&self.free);
            free.extend_from_slice(&lane.freed[..lane.freed_count]);
            lane.freed_count = 0;
            assert!(
                free.len() >= count,
                "free pages exhausted ({} free, {count} wanted): shadow pool invariant broken",
                free.len()
            );
            let at = free.len() - count;
            out[..count].copy_from_slice(&free[at..]);
            free.truncate(at);
        }
        // Ascending pages: a multi-block write's data step then streams through memory in
        // address order, which on a run of adjacent pages is one sequential copy (measured:
        // 64 scattered 4 KiB non-temporal copies take 2.4 times one 256 KiB copy; ascending
        // adjacent pages take the same time, descending 1.2 times). The pages a write frees
        // are kept in LBA order, so a run handed to adjacent LBAs comes back as a run.
        out[..count].sort_unstable();
        debug_assert!(
            out[..count]
                .iter()
                .all(|&page| (page as u64) < self.geo.pages),
            "free page out of range"
        );
    }

    /// Lock the stripes of `lbas` in ascending order (no deadlock between multi-block
    /// writers). A fixed array: no allocation on the data path.
    fn lock_stripes(&self, lbas: &[u64]) -> StripeGuards<'_> {
        debug_assert!(lbas.len() <= ATOMIC_BLOCKS_MAX);
        let mut stripes: [u16; ATOMIC_BLOCKS_MAX] = [0; ATOMIC_BLOCKS_MAX];
        for (i, &lba) in lbas.iter().enumerate() {
            stripes[i] = stripe_of(lba) as u16;
        }
        let stripes = &mut stripes[..lbas.len()];
        stripes.sort_unstable();
        let mut guards: StripeGuards<'_> = std::array::from_fn(|_| None);
        let mut last = None;
        for (guard, &stripe) in guards.iter_mut().zip(stripes.iter()) {
            if last != Some(stripe) {
                *guard = Some(lock(&self.stripes[stripe as usize]));
                last = Some(stripe);
            }
        }
        guards
    }

    /// The entry of `lba` from the mirror, with its raw word: Err when it does not decode or
    /// names a page past the end (the message shows the media word).
    fn look_up(&self, lba: u64) -> Result<(u64, Entry)> {
        debug_assert!(lba < self.geo.blocks, "LBA {lba} validated by the caller");
        let raw = self.mirror[lba as usize].load(Ordering::Acquire);
        match Entry::decode_checked_before(lba, raw) {
            Ok(entry) if entry.vpn.is_none_or(|page| (page as u64) < self.geo.pages) => {
                Ok((raw, entry))
            }
            _ => {
                let media = self.region.load_u64(self.geo.map_entry_off(lba));
                Err(corrupt_entry(lba, media))
            }
        }
    }

    /// The pair assertion of a writer's lookup (its stripe is held, so nothing is in flight):
    /// the mirror word is the media word, or the zero word of an entry damaged at open.
    fn mirror_is_media(&self, lba: u64, raw: u64) -> bool {
        raw == 0 || self.region.load_u64(self.geo.map_entry_off(lba)) == raw
    }

    /// 1 to ATOMIC_BLOCKS_MAX LBAs, each in range, none twice.
    fn validate_lbas(&self, lbas: &[u64]) -> Result<()> {
        if lbas.is_empty() || lbas.len() > ATOMIC_BLOCKS_MAX {
            return Err(Error::bad(format!(
                "an atomic write covers 1 to {ATOMIC_BLOCKS_MAX} blocks, not {}",
                lbas.len()
            )));
        }
        if let Some(&lba) = lbas.iter().find(|&&lba| lba >= self.geo.blocks) {
            return Err(Error::bad(format!(
                "LBA {lba} out of range: the device has {} blocks (0 to {})",
                self.geo.blocks,
                self.geo.blocks - 1
            )));
        }
        // Duplicates: none in a consecutive run (every contiguous write); otherwise sort a
        // copy and compare neighbours. (Comparing each LBA with all before it was 2 016
        // comparisons for 64 blocks, a tenth of a 256 KiB write's time.)
        if lbas
            .iter()
            .enumerate()
            .all(|(i, &lba)| lba == lbas[0] + i as u64)
        {
            return Ok(());
        }
        let mut sorted = [0u64; ATOMIC_BLOCKS_MAX];
        let sorted = &mut sorted[..lbas.len()];
        sorted.copy_from_slice(lbas);
        sorted.sort_unstable();
        if let Some(pair) = sorted.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(Error::bad(format!(
                "LBA {} appears twice in one atomic write",
                pair[0]
            )));
        }
        Ok(())
    }

    /// Write `lbas.len()` blocks (contiguous or scattered, at most 64) all or nothing: after a
    /// crash at any instant every block reads all old or all new, together.
    pub fn write_atomic(&self, lbas: &[u64], data: &[u8]) -> Result<()> {
        self.alive()?;
        self.validate_lbas(lbas)?;
        let (count, block_bytes) = (lbas.len(), self.geo.block_bytes as usize);
        if data.len() != count * block_bytes {
            return Err(Error::bad(format!(
                "write of {} bytes to {count} blocks: expected {} bytes",
                data.len(),
                count * block_bytes
            )));
        }
        debug_assert!((1..=ATOMIC_BLOCKS_MAX).contains(&count), "validated above");
        if count == 1
            && self.bug.is_none()
            && (self.sb.protocol == Protocol::Paper || self.ordering.map.word_atomic())
        {
            return self.write_one(lbas[0], data);
        }
        let mut lane = self.acquire_lane();
        // Lock order: lane, then stripes (sorted). Taken before the data step so that no
        // locked instruction, which would wait for the data's write-combining buffers to
        // drain, sits between the protocol's fences.
        let _stripes = self.lock_stripes(lbas);
        let mut pages = [0u32; ATOMIC_BLOCKS_MAX];
        self.take_pages(&mut lane, count, &mut pages);
        // The entries are looked up after the data step, their lines prefetched now: the
        // misses overlap the copy instead of stalling it (see write_one).
        for &lba in lbas {
            prefetch_cpu(self.mirror[lba as usize].as_ptr() as *const u8);
        }
        let pages = &mut pages[..count];
        if self.bug.is_none() || !self.seeded_data_step(&mut lane, lbas, data, pages)? {
            self.store_data(&mut lane, lbas, data, pages)?;
        }
        self.commit_entries(&mut lane, lbas, Some(pages))?;
        lane.writes += 1;
        lane.blocks_written += count as u64;
        debug_assert!(lane.freed_count <= ATOMIC_BLOCKS_MAX);
        Ok(())
    }

    /// Step Data: the new contents go to shadow pages nobody references, persisted.
    fn store_data(&self, lane: &mut Lane, lbas: &[u64], data: &[u8], pages: &[u32]) -> Result<()> {
        let (region, block_bytes) = (&*self.region, self.geo.block_bytes as usize);
        debug_assert_eq!(data.len(), pages.len() * block_bytes);
        debug_assert_eq!(lbas.len(), pages.len());
        // Adjacent pages (take_pages sorts them, and a run freed together comes back
        // together) are one store: one copy streams through memory instead of one per block.
        for run in consecutive_runs(pages, self.hook.is_some()) {
            let offset = self.geo.page_off(pages[run.start]);
            let bytes = &data[run.start * block_bytes..run.end * block_bytes];
            lane.domain.store(region, self.ordering.data, offset, bytes);
            for i in run {
                let offset = self.geo.page_off(pages[i]);
                self.signal(
                    Step::Data,
                    Phase::Stored,
                    offset,
                    block_bytes as u64,
                    lbas[i],
                )?;
            }
        }
        lane.domain.commit(region);
        let offset = self.geo.page_off(pages[0]);
        self.signal(
            Step::Data,
            Phase::Persisted,
            offset,
            block_bytes as u64,
            lbas[0],
        )
    }

    /// A single-block write on its common path (no seeded bug; for the fast protocol, a
    /// word-atomic map store): the same steps and events as the general path, in straight-line
    /// code with one stripe and no arrays to set up. (The general path's setup stores measured
    /// 20 % of a 4 KiB write.)
    fn write_one(&self, lba: u64, data: &[u8]) -> Result<()> {
        let region = &*self.region;
        let block_bytes = self.geo.block_bytes as u64;
        let entry_offset = self.geo.map_entry_off(lba);
        let mirrored = &self.mirror[lba as usize];
        // The entry is loaded after the data step, not before: a load that misses would hold
        // the whole copy behind it (measured: 60 to 90 ns of a 4 KiB write); the prefetch's
        // miss overlaps the copy instead. The stripe lock keeps the entry unchanged meanwhile.
        prefetch_cpu(mirrored.as_ptr() as *const u8);
        let mut lane = self.acquire_lane();
        let _stripe = lock(&self.stripes[stripe_of(lba)]);
        let mut pages = [0u32; ATOMIC_BLOCKS_MAX];
        self.take_pages(&mut lane, 1, &mut pages);
        let page_offset = self.geo.page_off(pages[0]);
        lane.domain
            .store(region, self.ordering.data, page_offset, data);
        self.signal(Step::Data, Phase::Stored, page_offset, block_bytes, lba)?;
        lane.domain.commit(region);
        self.signal(Step::Data, Phase::Persisted, page_offset, block_bytes, lba)?;
        let (raw, entry) = self.look_up(lba).inspect_err(|_| {
            // The shadow page holds the new data, but nothing names it: it goes back.
            self.give_back(&[lba], &pages[..1]);
        })?;
        debug_assert!(self.mirror_is_media(lba, raw), "mirror of LBA {lba}");
        let new = entry.next(Some(pages[0])).encode(lba);
        match self.sb.protocol {
            Protocol::Fast => {
                lane.domain
                    .store_u64(region, self.ordering.map, entry_offset, new);
                self.signal(Step::Map, Phase::Stored, entry_offset, 8, lba)?;
                lane.domain.commit(region);
                debug_assert_eq!(
                    region.load_u64(entry_offset),
                    new,
                    "LBA {lba} after persist"
                );
            }
            Protocol::Paper => self.paper_commit(&mut lane, &[lba], &[new])?,
        }
        // Readers see the new page from here on. The old page is recycled only by this
        // lane's next write, which takes the lane's lock (a locked instruction) first: its
        // data stores cannot pass this store, so a reader that copied the old page and then
        // finds the mirror unchanged copied it before anyone overwrote it.
        mirrored.store(new, Ordering::Release);
        if self.sb.protocol == Protocol::Fast {
            // (The paper's steps signalled their own events, resets included.)
            self.signal(Step::Map, Phase::Persisted, entry_offset, 8, lba)?;
        }
        if let Some(old) = entry.vpn {
            self.keep_freed(&mut lane, &[old]);
        }
        lane.writes += 1;
        lane.blocks_written += 1;
        Ok(())
    }

    /// The pages an update unmapped, free now that its entries are durable: they wait in the
    /// lane until it next takes pages (no lock after the final fence), or go to the bitmap. A
    /// write emptied the lane's list when it took its pages; a discard may find it full, and
    /// then returns the older pages now (discards are not the path this saves time on).
    fn keep_freed(&self, lane: &mut Lane, freed: &[u32]) {
        debug_assert!(freed.len() <= ATOMIC_BLOCKS_MAX);
        if let Some(bitmap) = &self.bitmap {
            bitmap.free(freed);
            return;
        }
        if lane.freed_count + freed.len() > ATOMIC_BLOCKS_MAX {
            lock(&self.free).extend_from_slice(&lane.freed[..lane.freed_count]);
            lane.freed_count = 0;
        }
        let at = lane.freed_count;
        lane.freed[at..at + freed.len()].copy_from_slice(freed);
        lane.freed_count += freed.len();
        debug_assert!(
            lane.freed_count <= ATOMIC_BLOCKS_MAX,
            "a lane holds one update's pages"
        );
    }

    /// Return the shadow pages of a write that failed before its metadata step.
    #[cold]
    #[inline(never)]
    fn give_back(&self, lbas: &[u64], pages: &[u32]) {
        debug_assert!(lbas.len() >= pages.len());
        if let Some(bitmap) = &self.bitmap {
            bitmap.free(pages);
            return;
        }
        if self.bug.is_some() {
            return self.give_back_seeded(lbas, pages);
        }
        lock(&self.free).extend_from_slice(pages);
    }

    /// Point `lbas` at `pages` (or unmap them when `pages` is None) with the image's protocol,
    /// then hand the pages they used to point at to the free pool. The caller holds
    /// the lane and the stripes of `lbas`.
    fn commit_entries(&self, lane: &mut Lane, lbas: &[u64], pages: Option<&[u32]>) -> Result<()> {
        debug_assert!(pages.is_none_or(|pages| pages.len() == lbas.len()));
        let mut prepared = lane
            .prepared
            .take()
            .unwrap_or_else(|| Box::new(Prepared::EMPTY));
        let result = self
            .prepare_entries(lbas, pages, &mut prepared)
            .and_then(|()| self.apply_entries(lane, &prepared, pages.is_none()));
        lane.prepared = Some(prepared);
        result
    }

    /// Read and check the map entries of `lbas` and compute their new values (pointing at
    /// `pages`, or unmapped). Nothing is stored. The caller holds the stripes of `lbas`, so
    /// the entries cannot change before [`Self::apply_entries`]; a write calls this after its
    /// data step, having prefetched the entries' lines before it. On a corrupt entry the pages
    /// go back to the pool.
    fn prepare_entries(
        &self,
        lbas: &[u64],
        pages: Option<&[u32]>,
        prepared: &mut Prepared,
    ) -> Result<()> {
        prepared.changed = 0;
        prepared.freed_count = 0;
        for (i, &lba) in lbas.iter().enumerate() {
            let (raw, entry) = self.look_up(lba).inspect_err(|_| {
                if let Some(pages) = pages {
                    self.give_back(lbas, pages);
                }
            })?;
            debug_assert!(self.mirror_is_media(lba, raw), "mirror of LBA {lba}");
            let page = pages.map(|pages| pages[i]);
            if page.is_none() && entry.vpn.is_none() {
                continue; // discarding a block that holds no page changes nothing
            }
            if let Some(old) = entry.vpn {
                // Seeded bug fast-write-in-place: the page written in place stays mapped.
                if self.bug.is_none() || page != Some(old) {
                    prepared.freed[prepared.freed_count] = old;
                    prepared.freed_count += 1;
                }
            }
            let at = prepared.changed;
            prepared.lbas[at] = lba;
            prepared.olds[at] = raw;
            prepared.news[at] = entry.next(page).encode(lba);
            prepared.changed += 1;
        }
        debug_assert!(prepared.freed_count <= prepared.changed);
        Ok(())
    }

    /// Store the entries [`Self::prepare_entries`] computed with the image's protocol, then
    /// keep the pages they used to point at for the free pool.
    fn apply_entries(&self, lane: &mut Lane, prepared: &Prepared, discard: bool) -> Result<()> {
        let changed = prepared.changed;
        debug_assert!(changed <= ATOMIC_BLOCKS_MAX && prepared.freed_count <= changed);
        let (lbas, news) = (&prepared.lbas[..changed], &prepared.news[..changed]);
        if changed > 0 {
            match self.sb.protocol {
                Protocol::Fast => {
                    let olds = &prepared.olds[..changed];
                    self.fast_commit(lane, lbas, olds, news, discard)?
                }
                Protocol::Paper => self.paper_commit(lane, lbas, news)?,
            }
        }
        // The entries are durable: readers see the new pages from here on (see
        // write_one for why the old pages cannot be recycled under a reader).
        for (&lba, &new) in lbas.iter().zip(news) {
            self.mirror[lba as usize].store(new, Ordering::Release);
        }
        // The old pages are unreferenced on media now (the map is persisted), so they may be
        // reused; readers still copying one will see the map entry changed and retry.
        self.keep_freed(lane, &prepared.freed[..prepared.freed_count]);
        Ok(())
    }

    /// Fast protocol (docs/format.md, "fast"): one 8-byte map store when it is word-atomic
    /// and the write is one block; otherwise a checksummed redo record first.
    fn fast_commit(
        &self,
        lane: &mut Lane,
        lbas: &[u64],
        olds: &[u64],
        news: &[u64],
        discard: bool,
    ) -> Result<()> {
        debug_assert!(lbas.len() == olds.len() && lbas.len() == news.len());
        let (region, ordering) = (&*self.region, self.ordering);
        // Seeded bug fast-word-path-under-flush: the word path even when a map store is not
        // word-atomic (a line write-back may tear it, and no record can repair it).
        let word_path =
            ordering.map.word_atomic() || self.seeded(SeededBug::FastWordPathUnderFlush);
        if lbas.len() > 1 || !word_path {
            return self.fast_commit_record(lane, lbas, olds, news, discard);
        }
        let (lba, new) = (lbas[0], news[0]);
        let offset = self.geo.map_entry_off(lba);
        lane.domain.store_u64(region, ordering.map, offset, new);
        self.signal(Step::Map, Phase::Stored, offset, 8, lba)?;
        if self.bug.is_some()
            && (self.seeded(SeededBug::FastNoMapFence)
                || (discard && self.seeded(SeededBug::DiscardNoFence)))
        {
            // Seeded bugs fast-no-map-fence, discard-no-fence: return with the map store
            // not committed.
            return Ok(());
        }
        lane.domain.commit(region);
        debug_assert_eq!(region.load_u64(offset), new, "LBA {lba} after persist");
        self.signal(Step::Map, Phase::Persisted, offset, 8, lba)
    }

    /// The fast protocol's record path (several blocks, or a map that is not word-atomic).
    /// Out of line: its record buffer would otherwise grow every single-block write's stack
    /// frame past a page (and so past a stack probe).
    #[inline(never)]
    fn fast_commit_record(
        &self,
        lane: &mut Lane,
        lbas: &[u64],
        olds: &[u64],
        news: &[u64],
        discard: bool,
    ) -> Result<()> {
        let (region, journal) = (&*self.region, self.ordering.journal);
        debug_assert!(lbas.len() > 1 || !self.ordering.map.word_atomic() || self.bug.is_some());
        if lbas.len() > 1 && self.seeded(SeededBug::FastNoRecordMulti) {
            // Seeded bug fast-no-record-multi: the map entries with one commit, no record.
            return self.store_map_entries(&mut lane.domain, lbas, news);
        }
        lane.seq += 1;
        let slot = self.geo.slot_off(lane.id);
        // encode_fast_record writes every byte of record[..len]: the lane's buffer needs no
        // clearing between updates.
        let record = &mut *lane.record;
        let len = encode_fast_record(lane.seq, lbas, olds, news, record);
        lane.domain.store(region, journal, slot, &record[..len]);
        lane.domain
            .store(region, journal, slot + FAST_RECORD_REPLICA, &record[..len]);
        self.signal(Step::Record, Phase::Stored, slot, len as u64, lbas[0])?;
        // Seeded bug fast-record-no-fence: no commit between the record and the map stores.
        if !self.seeded(SeededBug::FastRecordNoFence) {
            lane.domain.commit(region);
            self.signal(Step::Record, Phase::Persisted, slot, len as u64, lbas[0])?;
        }
        if discard && self.seeded(SeededBug::DiscardNoFence) {
            // Seeded bug discard-no-fence: the map stores and the record clear are issued,
            // neither committed, and the discard returns.
            self.store_map_words(&mut lane.domain, lbas, news)?;
            retire_record(&mut lane.domain, region, journal, slot);
            return self.signal(Step::RecordClear, Phase::Stored, slot, 16, lbas[0]);
        }
        self.store_map_entries(&mut lane.domain, lbas, news)?;
        // Retire the record, durably, before the write returns: a valid record at recovery
        // is then always one in flight, so recovery may repair torn map words from it. Both
        // the sequence word and the count/CRC word are cleared: the body stays behind, and a
        // later record reusing the sequence number must never revive it if only its first
        // word reaches media.
        retire_record(&mut lane.domain, region, journal, slot);
        self.signal(Step::RecordClear, Phase::Stored, slot, 16, lbas[0])?;
        lane.domain.commit(region);
        self.signal(Step::RecordClear, Phase::Persisted, slot, 16, lbas[0])
    }

    /// The Map step of a multi-entry update: store every entry with the map method, then one
    /// commit. Both protocols' journaled paths use it.
    fn store_map_entries(
        &self,
        domain: &mut CommitDomain,
        lbas: &[u64],
        news: &[u64],
    ) -> Result<()> {
        self.store_map_words(domain, lbas, news)?;
        domain.commit(&*self.region);
        debug_assert!(lbas
            .iter()
            .zip(news)
            .all(|(&lba, &new)| { self.region.load_u64(self.geo.map_entry_off(lba)) == new }));
        let offset = self.geo.map_entry_off(lbas[0]);
        self.signal(Step::Map, Phase::Persisted, offset, 8, lbas[0])
    }

    /// The stores of the Map step, without its commit.
    fn store_map_words(&self, domain: &mut CommitDomain, lbas: &[u64], news: &[u64]) -> Result<()> {
        debug_assert_eq!(lbas.len(), news.len());
        let region = &*self.region;
        // Runs of consecutive LBAs (every contiguous write) are consecutive map words: one
        // call per run, still one 8-byte store per word.
        for run in consecutive_runs(lbas, self.hook.is_some()) {
            let offset = self.geo.map_entry_off(lbas[run.start]);
            domain.store_words(region, self.ordering.map, offset, &news[run.clone()]);
            for &lba in &lbas[run] {
                let offset = self.geo.map_entry_off(lba);
                self.signal(Step::Map, Phase::Stored, offset, 8, lba)?;
            }
        }
        Ok(())
    }

    /// Paper protocol (seed 000, Table 2): VPN; L1; L2; map; reset L1; reset L2, each
    /// persisted. Several blocks go through a checksummed intent with a commit word.
    #[inline(never)]
    fn paper_commit(&self, lane: &mut Lane, lbas: &[u64], news: &[u64]) -> Result<()> {
        debug_assert_eq!(lbas.len(), news.len());
        if lbas.len() > 1 {
            return self.paper_intent(lane, lbas, news);
        }
        let (region, ordering) = (&*self.region, self.ordering);
        let slot = self.geo.slot_off(lane.id);
        let (lba, new) = (lbas[0], news[0]);
        let steps = [
            (Step::JournalVpn, ordering.journal, slot + PAPER_VPN, new),
            (Step::JournalL1, ordering.journal, slot + PAPER_L1, lba),
            (Step::JournalL2, ordering.journal, slot + PAPER_L2, lba),
            (Step::Map, ordering.map, self.geo.map_entry_off(lba), new),
            (Step::ResetL1, ordering.journal, slot + PAPER_L1, LBA_NULL),
            (Step::ResetL2, ordering.journal, slot + PAPER_L2, LBA_NULL),
        ];
        if self.bug.is_some() {
            return self.paper_steps_seeded(&mut lane.domain, lba, &steps);
        }
        for (step, method, offset, value) in steps {
            lane.domain.store_u64(region, method, offset, value);
            self.signal(step, Phase::Stored, offset, 8, lba)?;
            lane.domain.commit(region);
            debug_assert_eq!(region.load_u64(offset), value, "{step:?} after persist");
            self.signal(step, Phase::Persisted, offset, 8, lba)?;
        }
        Ok(())
    }

    /// The paper protocol's multi-block path (6.2): the intent, persisted; its commit word,
    /// persisted; the Map step; the commit word cleared, persisted.
    fn paper_intent(&self, lane: &mut Lane, lbas: &[u64], news: &[u64]) -> Result<()> {
        let (region, ordering) = (&*self.region, self.ordering);
        let slot = self.geo.slot_off(lane.id);
        lane.seq += 1;
        let mut intent = [0u8; PAPER_INTENT_MAX];
        let (len, crc) = encode_paper_intent(lbas, news, &mut intent);
        let domain = &mut lane.domain;
        let intent_offset = slot + PAPER_INTENT;
        domain.store(region, ordering.journal, intent_offset, &intent[..len]);
        self.signal(
            Step::IntentRecord,
            Phase::Stored,
            intent_offset,
            len as u64,
            lbas[0],
        )?;
        domain.commit(region);
        self.signal(
            Step::IntentRecord,
            Phase::Persisted,
            intent_offset,
            len as u64,
            lbas[0],
        )?;
        // The commit word names the intent it commits by its CRC: a commit word never matches
        // a stale intent left in the slot by an earlier update (6.2).
        let commit_offset = slot + PAPER_INTENT_COMMIT;
        let commit = paper_commit_word(lane.seq, crc);
        domain.store_u64(region, ordering.journal, commit_offset, commit);
        self.signal(Step::IntentCommit, Phase::Stored, commit_offset, 8, lbas[0])?;
        if self.seeded(SeededBug::PaperIntentCommitNoFence) {
            // Seeded bug paper-intent-commit-no-fence: no commit between the commit word and
            // the map stores; the Map step's commit persists both.
            return self.paper_intent_finish(domain, commit_offset, lbas, news);
        }
        domain.commit(region);
        self.signal(
            Step::IntentCommit,
            Phase::Persisted,
            commit_offset,
            8,
            lbas[0],
        )?;
        debug_assert_eq!(region.load_u64(commit_offset), commit);
        if self.seeded(SeededBug::PaperIntentClearBeforeMap) {
            // Seeded bug paper-intent-clear-before-map: the commit word is cleared, durably,
            // before the map stores are even issued.
            self.clear_intent(domain, commit_offset, lbas[0])?;
            return self.store_map_entries(domain, lbas, news);
        }
        self.paper_intent_finish(domain, commit_offset, lbas, news)
    }

    /// The end of the paper intent path: the Map step, then IntentClear, each persisted.
    fn paper_intent_finish(
        &self,
        domain: &mut CommitDomain,
        commit_offset: u64,
        lbas: &[u64],
        news: &[u64],
    ) -> Result<()> {
        self.store_map_entries(domain, lbas, news)?;
        self.clear_intent(domain, commit_offset, lbas[0])
    }

    /// Step IntentClear: the commit word := 0, persisted.
    fn clear_intent(&self, domain: &mut CommitDomain, commit_offset: u64, lba: u64) -> Result<()> {
        let region = &*self.region;
        domain.store_u64(region, self.ordering.journal, commit_offset, 0);
        self.signal(Step::IntentClear, Phase::Stored, commit_offset, 8, lba)?;
        domain.commit(region);
        debug_assert_eq!(region.load_u64(commit_offset), 0, "commit word cleared");
        self.signal(Step::IntentClear, Phase::Persisted, commit_offset, 8, lba)
    }

    /// Read whole blocks. A reader never writes anything; it copies the page its map entry
    /// names and re-reads the entry: if the entry changed (its generation moves on every
    /// update), the page may have been recycled during the copy, and the read is retried.
    pub fn read_blocks(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
        self.alive()?;
        let block_bytes = self.geo.block_bytes as usize;
        if buf.is_empty() || !buf.len().is_multiple_of(block_bytes) {
            return Err(Error::bad(format!(
                "read buffer of {} bytes is not a positive multiple of the block size {block_bytes}",
                buf.len()
            )));
        }
        let count = (buf.len() / block_bytes) as u64;
        debug_assert!(count >= 1);
        if lba
            .checked_add(count)
            .is_none_or(|end| end > self.geo.blocks)
        {
            return Err(Error::bad(format!(
                "read of LBA {lba}..{} out of range: the device has {} blocks",
                lba.saturating_add(count),
                self.geo.blocks
            )));
        }
        for (i, block) in buf.chunks_exact_mut(block_bytes).enumerate() {
            self.read_block(lba + i as u64, block)?;
        }
        self.reads.add(1);
        Ok(())
    }

    /// Copy one block, retrying while writers change its entry under the copy: at most
    /// READ_RETRIES_MAX times, then once more under the block's stripe lock, which every
    /// writer of the block holds for its whole update, so that the copy cannot be torn and the
    /// retry loop has a bound however busy the block is.
    fn read_block(&self, lba: u64, block: &mut [u8]) -> Result<()> {
        debug_assert_eq!(block.len(), self.geo.block_bytes as usize);
        let mirrored = &self.mirror[lba as usize];
        for _ in 0..READ_RETRIES_MAX {
            let raw = self.copy_block(lba, block)?;
            if !self.read_protection {
                return Ok(());
            }
            // The copy's loads must complete before the entry is loaded again.
            std::sync::atomic::fence(Ordering::Acquire);
            if mirrored.load(Ordering::Relaxed) == raw {
                return Ok(());
            }
            self.read_retries.add(1);
            std::hint::spin_loop();
        }
        let _stripe = lock(&self.stripes[stripe_of(lba)]);
        let raw = self.copy_block(lba, block)?;
        debug_assert_eq!(
            mirrored.load(Ordering::Relaxed),
            raw,
            "entry changed under its stripe"
        );
        Ok(())
    }

    /// Copy the page `lba`'s entry names (zeros when unmapped); returns the entry's word.
    fn copy_block(&self, lba: u64, block: &mut [u8]) -> Result<u64> {
        debug_assert!(lba < self.geo.blocks && block.len() == self.geo.block_bytes as usize);
        let (raw, entry) = self.look_up(lba)?;
        if self.hook.is_some() {
            let offset = self.geo.map_entry_off(lba);
            self.signal(Step::ReadLookup, Phase::Stored, offset, 8, lba)?;
        }
        match entry.vpn {
            None => block.fill(0),
            Some(page) => self.region.read(self.geo.page_off(page), block),
        }
        Ok(raw)
    }

    /// Discard `count` blocks: each chunk of up to 64 is unmapped atomically; they read as
    /// zeros afterwards and their pages return to the free pool.
    pub fn discard_blocks(&self, lba: u64, count: u64) -> Result<()> {
        self.alive()?;
        if count == 0
            || lba
                .checked_add(count)
                .is_none_or(|end| end > self.geo.blocks)
        {
            return Err(Error::bad(format!(
                "discard of {count} blocks at LBA {lba} out of range: the device has {} blocks",
                self.geo.blocks
            )));
        }
        let end = lba + count;
        let mut lbas = [0u64; ATOMIC_BLOCKS_MAX];
        let mut at = lba;
        while at < end {
            let chunk = (end - at).min(ATOMIC_BLOCKS_MAX as u64) as usize;
            for (i, slot) in lbas[..chunk].iter_mut().enumerate() {
                *slot = at + i as u64;
            }
            let mut lane = self.acquire_lane();
            let _stripes = self.lock_stripes(&lbas[..chunk]);
            self.commit_entries(&mut lane, &lbas[..chunk], None)?;
            at += chunk as u64;
            if at == end {
                lane.discards += 1;
            }
        }
        debug_assert_eq!(at, end);
        Ok(())
    }
}

impl<R: Region> BlockDevice for NvramDisk<R> {
    fn block_bytes(&self) -> u32 {
        self.geo.block_bytes
    }
    fn blocks(&self) -> u64 {
        self.geo.blocks
    }
    /// Atomic up to [`ATOMIC_BLOCKS_MAX`] blocks, contiguous or scattered; durable on return.
    fn caps(&self) -> Caps {
        Caps {
            atomic_blocks: ATOMIC_BLOCKS_MAX as u32,
            scattered: true,
            durability: Durability::OnReturn,
        }
    }
    fn read(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
        self.read_blocks(lba, buf)
    }
    /// Contiguous blocks, atomic up to 64 blocks; a larger write is refused (use
    /// [`nvstack_core::blockdev::write_chunked`]).
    fn write(&self, lba: u64, data: &[u8]) -> Result<()> {
        let b = self.geo.block_bytes as usize;
        if data.is_empty() || !data.len().is_multiple_of(b) {
            return Err(Error::bad(format!(
                "write of {} bytes is not a positive multiple of the block size {b}",
                data.len()
            )));
        }
        let n = data.len() / b;
        if n > ATOMIC_BLOCKS_MAX {
            return Err(Error::bad(format!(
                "write of {n} blocks exceeds the atomic limit of {ATOMIC_BLOCKS_MAX} blocks"
            )));
        }
        if lba
            .checked_add(n as u64)
            .is_none_or(|end| end > self.geo.blocks)
        {
            return Err(Error::bad(format!(
                "write of LBA {lba}..{} out of range: the device has {} blocks",
                lba.saturating_add(n as u64),
                self.geo.blocks
            )));
        }
        let mut lbas = [0u64; ATOMIC_BLOCKS_MAX];
        for (i, l) in lbas[..n].iter_mut().enumerate() {
            *l = lba + i as u64;
        }
        self.write_atomic(&lbas[..n], data)
    }
    fn write_scattered(&self, lbas: &[u64], data: &[u8]) -> Result<()> {
        self.write_atomic(lbas, data)
    }
    fn discard(&self, lba: u64, count: u64) -> Result<()> {
        self.discard_blocks(lba, count)
    }
    fn flush(&self) -> Result<()> {
        // Every write is durable when it returns.
        self.alive()
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<NvramDisk<nvstack_pmem::MmapRegion>>();
}
