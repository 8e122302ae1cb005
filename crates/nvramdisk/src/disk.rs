//! The transactional block device: lanes, the two write protocols, seqlock reads, discard,
//! and recovery. The protocols and their recovery rules are specified in docs/format.md; the
//! step names here match that document and [`Step`].

use super::bugs::SeededBug;
use super::entry::Entry;
use super::hooks::{Action, Event, Hook, Phase, Step};
use super::layout::{
    Geometry, Protocol, Superblock, ATOMIC_BLOCKS_MAX, SB_PAGE_BYTES, SB_USED_BYTES, SLOT_BYTES,
};
use nvstack_core::blockdev::{BlockDevice, Caps, Durability};
use nvstack_core::error::{Error, Result};
use nvstack_pmem::cpu::prefetch as prefetch_cpu;
use nvstack_pmem::latency::LatencyInjection;
use nvstack_pmem::ordering::{self, OrderingPolicy};
use nvstack_pmem::{CommitDomain, DomainStats, Region};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use super::bitmap::BitmapAllocator;

/// NULL in the paper protocol's LBA replicas (LBA 0 is a valid block).
pub const LBA_NULL: u64 = u64::MAX;
/// Stripe locks serialise writers of the same map line (8 entries), never readers.
const STRIPES: usize = 1024;
/// Paper protocol slot layout (offsets inside a lane's slot).
pub const PAPER_VPN: u64 = 0;
pub const PAPER_L1: u64 = 8;
pub const PAPER_L2: u64 = 16;
pub const PAPER_INTENT_COMMIT: u64 = 64;
pub const PAPER_INTENT: u64 = 128;
/// Fast protocol record: seq u64, count u32, crc u32, then (lba, old, new) per block.
/// A retired record has its first 16 bytes (seq, count and crc) zeroed.
const RECORD_RETIRED: [u8; 16] = [0; 16];
/// The record is written twice, at the slot's start and at this offset, before one fence: a
/// crash tears both copies alike (neither validates, nothing was applied), while a media fault
/// in one copy leaves the other to repair from.
pub const FAST_RECORD_REPLICA: u64 = 2048;
pub const FAST_RECORD_HEADER: usize = 16;
pub const FAST_RECORD_ENTRY: usize = 24;
const FAST_RECORD_MAX: usize = FAST_RECORD_HEADER + FAST_RECORD_ENTRY * ATOMIC_BLOCKS_MAX;
const PAPER_INTENT_MAX: usize = 8 + 16 * ATOMIC_BLOCKS_MAX;
const _: () = assert!(PAPER_INTENT as usize + PAPER_INTENT_MAX <= SLOT_BYTES as usize);
const _: () = assert!(FAST_RECORD_MAX <= SLOT_BYTES as usize);
const _: () = assert!(FAST_RECORD_MAX as u64 <= FAST_RECORD_REPLICA);
const _: () = assert!(FAST_RECORD_REPLICA as usize + FAST_RECORD_MAX <= SLOT_BYTES as usize);

#[derive(Clone)]
pub struct FormatOptions {
    pub block_bytes: u32,
    pub lanes: u32,
    pub protocol: Protocol,
    pub ordering: OrderingPolicy,
}

impl Default for FormatOptions {
    fn default() -> Self {
        FormatOptions {
            block_bytes: super::layout::BLOCK_BYTES_DEFAULT,
            lanes: super::layout::LANES_DEFAULT,
            protocol: Protocol::Fast,
            ordering: ordering::policy_by_id(4).expect("p4 exists"),
        }
    }
}

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
    freed_n: usize,
    /// Scratch for one update, allocated once per lane: the entries being changed, and the
    /// fast record's bytes. Why not stack arrays: zeroing and moving 3.4 KiB per update
    /// measured as a fifth of a 16-block write's time beyond its stores. Taken out of the
    /// lane for the length of an update (None only while one is being prepared).
    prepared: Option<Box<Prepared>>,
    record: Box<[u8; FAST_RECORD_MAX]>,
}

pub struct NvramDisk<R: Region> {
    region: Arc<R>,
    sb: Superblock,
    geo: Geometry,
    ordering: OrderingPolicy,
    lanes: Box<[Padded<Lock<Lane>>]>,
    /// The free pages, one pool for all lanes. A leaf lock: nothing else is ever acquired
    /// while it is held. (Per-lane lists with stealing starved or deadlocked a lane whose
    /// writer was short while the pages sat in a lane that was always busy.)
    free: Lock<Vec<u32>>,
    /// Set by OpenOptions::page_bitmap: pages come from here instead of `free`.
    bitmap: Option<BitmapAllocator>,
    stripes: Box<[Padded<Lock<()>>]>,
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

/// The write path's locks: taken with a compare-and-swap, released with a plain store.
///
/// Why not `std::sync::Mutex`: its release is a locked instruction (an exchange, to learn
/// whether a waiter needs waking), and a locked instruction right after the protocol's final
/// fence waits for every non-temporal store of the write to drain from the write-combining
/// buffers: measured here, that wait costs as much as the whole commit step. A plain release
/// store does not wait; the fence already orders the write before anything stored later.
/// Every lock below is held for one write's worth of work and never across a sleep, so
/// waiting by yielding is enough (FUSE runs more threads than this machine has cores).
type Lock<T> = spin::mutex::SpinMutex<T, spin::relax::Yield>;
type Guard<'a, T> = spin::mutex::SpinMutexGuard<'a, T>;

fn lock<T>(m: &Lock<T>) -> Guard<'_, T> {
    m.lock()
}

/// A lock on its own pair of cache lines. Why: 1 024 one-byte stripe locks packed 64 to a line
/// made two writers of unrelated blocks bounce one line between cores on a sixteenth of their
/// writes, and a lane's lock shared a line with the end of the previous lane's state. Two
/// lines, not one: the adjacent-line prefetcher moves lines in pairs.
#[repr(align(128))]
struct Padded<T>(T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// A counter readers bump without sharing a cache line: one padded slot per thread hint.
#[derive(Default)]
struct StripedCounter([PaddedU64; 16]);

#[derive(Default)]
#[repr(align(64))]
struct PaddedU64(AtomicU64);

impl StripedCounter {
    fn add(&self, n: u64) {
        self.0[lane_hint() % 16].0.fetch_add(n, Ordering::Relaxed);
    }
    fn sum(&self) -> u64 {
        self.0.iter().map(|c| c.0.load(Ordering::Relaxed)).sum()
    }
}

/// Map entries read and checked, and their new values, before they are stored.
struct Prepared {
    /// Entries that change (a discard of an unmapped block changes nothing).
    k: usize,
    lbas: [u64; ATOMIC_BLOCKS_MAX],
    olds: [u64; ATOMIC_BLOCKS_MAX],
    news: [u64; ATOMIC_BLOCKS_MAX],
    /// Pages the entries pointed at, free once the new entries are durable.
    freed: [u32; ATOMIC_BLOCKS_MAX],
    freed_n: usize,
}

impl Prepared {
    const EMPTY: Prepared = Prepared {
        k: 0,
        lbas: [0; ATOMIC_BLOCKS_MAX],
        olds: [0; ATOMIC_BLOCKS_MAX],
        news: [0; ATOMIC_BLOCKS_MAX],
        freed: [0; ATOMIC_BLOCKS_MAX],
        freed_n: 0,
    };
}

type StripeGuards<'a> = [Option<Guard<'a, ()>>; ATOMIC_BLOCKS_MAX];

thread_local! {
    static LANE_HINT: Cell<usize> = const { Cell::new(usize::MAX) };
}
static NEXT_LANE_HINT: AtomicUsize = AtomicUsize::new(0);

fn lane_hint() -> usize {
    LANE_HINT.with(|c| {
        if c.get() == usize::MAX {
            c.set(NEXT_LANE_HINT.fetch_add(1, Ordering::Relaxed));
        }
        c.get()
    })
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

/// Read both superblock copies out of raw bytes and insist they agree.
pub fn validate_superblocks(c1: &[u8], c2: &[u8], file_bytes: u64) -> Result<Superblock> {
    let s1 = Superblock::decode(c1, file_bytes);
    let s2 = Superblock::decode(c2, file_bytes);
    let off2 = file_bytes.saturating_sub(SB_PAGE_BYTES);
    match (s1, s2) {
        (Ok(a), Ok(b)) if a == b => Ok(a),
        (Ok(_), Ok(_)) => Err(Error::bad(
            "the two superblock copies are valid but disagree: run `nvstack check` to see them",
        )),
        (Err(e1), Err(e2)) => Err(Error::bad(if e1 == e2 {
            e1
        } else {
            format!("superblock copy 1 (offset 0): {e1}; copy 2 (offset {off2}): {e2}")
        })),
        (Err(e), Ok(_)) => Err(Error::bad(format!(
            "superblock copy 1 (offset 0) is damaged: {e}; copy 2 is intact, so `nvstack recover \
             IMAGE` can repair it"
        ))),
        (Ok(_), Err(e)) => Err(Error::bad(format!(
            "superblock copy 2 (offset {off2}) is damaged: {e}; copy 1 is intact, so `nvstack \
             recover IMAGE` can repair it"
        ))),
    }
}

pub fn read_superblocks_from<R: Region + ?Sized>(r: &R) -> (Vec<u8>, Vec<u8>) {
    let mut c1 = vec![0u8; SB_USED_BYTES];
    let mut c2 = vec![0u8; SB_USED_BYTES];
    r.read(0, &mut c1);
    r.read(r.len() - SB_PAGE_BYTES, &mut c2);
    (c1, c2)
}

fn random_uuid() -> [u8; 16] {
    let mut u = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        if f.read_exact(&mut u).is_ok() {
            return u;
        }
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    u[..16].copy_from_slice(&t.as_nanos().to_le_bytes());
    u
}

/// Write a fresh, empty image onto `region` (every block reads as zeros).
pub fn format_region<R: Region + ?Sized>(r: &R, fo: &FormatOptions) -> Result<Superblock> {
    ordering::check_available_on(&fo.ordering, r)?;
    let g = Geometry::compute(r.len(), fo.block_bytes, fo.lanes)?;
    // Journal slots read as zeros ("no record"); every map entry says "never written".
    let zeros = vec![0u8; 1 << 20];
    let mut off = g.journal_off;
    while off < g.map_off {
        let n = (g.map_off - off).min(zeros.len() as u64);
        r.write_nt(off, &zeros[..n as usize]);
        off += n;
    }
    let mut chunk = vec![0u8; 1 << 20];
    let mut lba = 0u64;
    while lba < g.blocks {
        let n = (g.blocks - lba).min(chunk.len() as u64 / 8);
        for (i, w) in chunk[..n as usize * 8].chunks_exact_mut(8).enumerate() {
            w.copy_from_slice(&Entry::NEVER_WRITTEN.encode(lba + i as u64).to_le_bytes());
        }
        r.write_nt(g.map_entry_off(lba), &chunk[..n as usize * 8]);
        lba += n;
    }
    if fo.protocol == Protocol::Paper {
        // The paper's initial state S0: both LBA replicas NULL (LBA 0 is a real block).
        for lane in 0..g.lanes {
            let slot = g.slot_off(lane);
            r.store_u64_nt(slot + PAPER_L1, LBA_NULL);
            r.store_u64_nt(slot + PAPER_L2, LBA_NULL);
        }
    }
    let sb = Superblock {
        geometry: g,
        protocol: fo.protocol,
        ordering_id: fo.ordering.id,
        uuid: random_uuid(),
        created_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    };
    let bytes = sb.encode();
    // Metadata first, then copy 2, then copy 1: copy 1 is the format's commit point.
    r.fence();
    r.write_nt(g.sb2_off, &bytes);
    r.fence();
    r.write_nt(0, &bytes);
    r.fence();
    // Pair assertion: what was written reads back as the same valid image.
    let (c1, c2) = read_superblocks_from(r);
    let back =
        validate_superblocks(&c1, &c2, r.len()).expect("freshly formatted image must validate");
    assert_eq!(
        back, sb,
        "superblock read back differs from the one written"
    );
    Ok(sb)
}

fn encode_fast_record(
    seq: u64,
    lbas: &[u64],
    olds: &[u64],
    news: &[u64],
    out: &mut [u8; FAST_RECORD_MAX],
) -> usize {
    let n = lbas.len();
    let len = FAST_RECORD_HEADER + n * FAST_RECORD_ENTRY;
    out[0..8].copy_from_slice(&seq.to_le_bytes());
    out[8..12].copy_from_slice(&(n as u32).to_le_bytes());
    for i in 0..n {
        let at = FAST_RECORD_HEADER + i * FAST_RECORD_ENTRY;
        out[at..at + 8].copy_from_slice(&lbas[i].to_le_bytes());
        out[at + 8..at + 16].copy_from_slice(&olds[i].to_le_bytes());
        out[at + 16..at + 24].copy_from_slice(&news[i].to_le_bytes());
    }
    let crc = fast_record_crc(&out[..len]);
    out[12..16].copy_from_slice(&crc.to_le_bytes());
    len
}

/// crc32c over the record with its crc field taken as zero.
fn fast_record_crc(rec: &[u8]) -> u32 {
    let c = crc32c::crc32c(&rec[..12]);
    let c = crc32c::crc32c_append(c, &[0u8; 4]);
    crc32c::crc32c_append(c, &rec[16..])
}

/// The paper protocol's redo rule: redo exactly when L1 = L2 = a valid LBA and the VPN field
/// holds a valid journaled entry for it (generation >= 1, page in range). Shared by recovery
/// and `check`.
pub fn paper_redo_target(g: &Geometry, vpn: u64, l1: u64, l2: u64) -> Option<u64> {
    (l1 == l2 && journaled_entry_ok(g, l1, vpn)).then_some(l1)
}

/// A value a journal may legitimately hold for `lba`'s map entry: the LBA is in range and the
/// word decodes as an entry of it with generation >= 1 (every update moves the generation
/// past 0, "never written") and a page in range.
pub fn journaled_entry_ok(g: &Geometry, lba: u64, raw: u64) -> bool {
    lba < g.blocks
        && Entry::decode(lba, raw)
            .is_ok_and(|e| e.gen != 0 && e.vpn.is_none_or(|v| (v as u64) < g.pages))
}

/// A fast record's entries: (lba, old entry, new entry).
pub type RecordEntries = Vec<(u64, u64, u64)>;

/// A decoded fast-protocol record (seq, entries), if either copy in the slot is complete.
pub fn read_fast_record<R: Region + ?Sized>(r: &R, slot: u64) -> Option<(u64, RecordEntries)> {
    read_fast_record_with(r, slot, true)
        .or_else(|| read_fast_record_with(r, slot + FAST_RECORD_REPLICA, true))
}

/// Store the retirement of both copies of a slot's fast record (zeroed seq, count and CRC);
/// durable at the caller's next commit.
fn retire_record<R: Region + ?Sized>(
    d: &mut CommitDomain,
    r: &R,
    m: nvstack_pmem::Method,
    slot: u64,
) {
    d.store(r, m, slot, &RECORD_RETIRED);
    d.store(r, m, slot + FAST_RECORD_REPLICA, &RECORD_RETIRED);
}

/// True when either copy of the slot's record has a non-zero sequence word.
pub fn fast_slot_busy<R: Region + ?Sized>(r: &R, slot: u64) -> bool {
    r.load_u64(slot) != 0 || r.load_u64(slot + FAST_RECORD_REPLICA) != 0
}

/// Seeded bug fast-record-crc-unchecked: a record is taken when its seq is non-zero and its
/// count in range, whatever its checksum says.
fn read_fast_record_unchecked<R: Region + ?Sized>(
    r: &R,
    slot: u64,
) -> Option<(u64, RecordEntries)> {
    read_fast_record_with(r, slot, false)
}

fn read_fast_record_with<R: Region + ?Sized>(
    r: &R,
    slot: u64,
    check_crc: bool,
) -> Option<(u64, RecordEntries)> {
    let seq = r.load_u64(slot);
    if seq == 0 {
        return None;
    }
    let mut head = [0u8; FAST_RECORD_HEADER];
    r.read(slot, &mut head);
    let n = u32::from_le_bytes(head[8..12].try_into().unwrap()) as usize;
    if n == 0 || n > ATOMIC_BLOCKS_MAX {
        return None;
    }
    let len = FAST_RECORD_HEADER + n * FAST_RECORD_ENTRY;
    let mut rec = vec![0u8; len];
    r.read(slot, &mut rec);
    let crc = u32::from_le_bytes(rec[12..16].try_into().unwrap());
    if check_crc && crc != fast_record_crc(&rec) {
        return None;
    }
    let entries = (0..n)
        .map(|i| {
            let at = FAST_RECORD_HEADER + i * FAST_RECORD_ENTRY;
            let w = |o: usize| u64::from_le_bytes(rec[at + o..at + o + 8].try_into().unwrap());
            (w(0), w(8), w(16))
        })
        .collect();
    Some((seq, entries))
}

/// The paper intent's commit word for sequence number `seq` and the intent's CRC32C `crc`:
/// the sequence number's low 32 bits (1 if they are 0, so the word is never 0) in the high
/// half, the CRC in the low half. The CRC binds the word to the one intent it commits.
pub fn paper_commit_word(seq: u64, crc: u32) -> u64 {
    (u64::from((seq as u32).max(1)) << 32) | u64::from(crc)
}

/// The intent area of a paper slot (slot + 128), whatever the commit word says: (CRC,
/// entries) if its count is 1 to 64 and its CRC32C holds.
pub fn read_paper_intent_body<R: Region + ?Sized>(
    r: &R,
    slot: u64,
) -> Option<(u32, Vec<(u64, u64)>)> {
    let mut head = [0u8; 8];
    r.read(slot + PAPER_INTENT, &mut head);
    let n = u32::from_le_bytes(head[0..4].try_into().unwrap()) as usize;
    let crc = u32::from_le_bytes(head[4..8].try_into().unwrap());
    if n == 0 || n > ATOMIC_BLOCKS_MAX {
        return None;
    }
    let mut body = vec![0u8; n * 16];
    r.read(slot + PAPER_INTENT + 8, &mut body);
    if crc32c::crc32c_append(crc32c::crc32c(&head[0..4]), &body) != crc {
        return None;
    }
    let entries = body
        .chunks_exact(16)
        .map(|c| {
            (
                u64::from_le_bytes(c[0..8].try_into().unwrap()),
                u64::from_le_bytes(c[8..16].try_into().unwrap()),
            )
        })
        .collect();
    Some((crc, entries))
}

/// A committed paper intent (commit word, entries): the commit word is non-zero, the intent
/// is valid (count 1 to 64, CRC holds) and the commit word's low half equals the intent's
/// CRC. Anything else commits nothing: in particular a stale intent left behind by an earlier
/// update never matches a commit word that was not written for it.
pub fn read_paper_intent<R: Region + ?Sized>(r: &R, slot: u64) -> Option<(u64, Vec<(u64, u64)>)> {
    let commit = r.load_u64(slot + PAPER_INTENT_COMMIT);
    if commit == 0 {
        return None;
    }
    let (crc, entries) = read_paper_intent_body(r, slot)?;
    (commit as u32 == crc).then_some((commit, entries))
}

/// What a paper slot's commit word and intent call for, judged alike by recovery and
/// `nvstack check` (docs/format.md 6.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IntentState {
    /// Commit word 0: no multi-block update in flight.
    Idle,
    /// The commit word matches a valid intent whose entries are all valid journaled entries:
    /// recovery redoes it (I4 to I7).
    Redo {
        commit: u64,
        entries: Vec<(u64, u64)>,
    },
    /// The commit word matches a valid intent, but an entry is impossible: damage.
    BadEntries { commit: u64 },
    /// The commit word is non-zero but matches no valid intent, and nothing of the intent in
    /// the slot can have been applied in part: the commit word's line torn by a write-back
    /// (I3: the map holds none of the intent; I7: all of it) or a flipped bit in a clear
    /// commit word. Recovery cancels: commit word := 0, map untouched. `applied` of `n`
    /// entries of the slot's intent are in the map (0 or n; n = 0 when no intent was ever
    /// written in the slot).
    Cancel {
        commit: u64,
        applied: usize,
        n: usize,
    },
    /// The commit word matches no valid intent, yet the map holds some but not all of the
    /// entries of the intent in the slot: a committed update whose commit word was damaged
    /// midway, or a flipped commit word over a stale intent partly superseded. No crash
    /// produces it: damage.
    PartlyApplied {
        commit: u64,
        applied: usize,
        n: usize,
    },
    /// The commit word is non-zero and the intent fails its count or CRC (an intent was
    /// written in this slot, so a crash never leaves this): damage.
    BadIntent { commit: u64 },
}

/// Classify lane slot `slot`'s intent (see [`IntentState`]).
pub fn paper_intent_state<R: Region + ?Sized>(r: &R, g: &Geometry, slot: u64) -> IntentState {
    let commit = r.load_u64(slot + PAPER_INTENT_COMMIT);
    if commit == 0 {
        return IntentState::Idle;
    }
    let Some((crc, entries)) = read_paper_intent_body(r, slot) else {
        // An intent area never written (format zeroes it) holds nothing to apply.
        if r.load_u64(slot + PAPER_INTENT) == 0 {
            return IntentState::Cancel {
                commit,
                applied: 0,
                n: 0,
            };
        }
        return IntentState::BadIntent { commit };
    };
    if commit as u32 == crc {
        return if entries
            .iter()
            .all(|&(lba, new)| journaled_entry_ok(g, lba, new))
        {
            IntentState::Redo { commit, entries }
        } else {
            IntentState::BadEntries { commit }
        };
    }
    let n = entries.len();
    let applied = entries
        .iter()
        .filter(|&&(lba, new)| lba < g.blocks && r.load_u64(g.map_entry_off(lba)) == new)
        .count();
    if applied == 0 || applied == n {
        IntentState::Cancel { commit, applied, n }
    } else {
        IntentState::PartlyApplied { commit, applied, n }
    }
}

impl<R: Region> NvramDisk<R> {
    /// Open a formatted region and recover it (redo or undo whatever was in flight).
    pub fn open(region: Arc<R>, oo: OpenOptions) -> Result<NvramDisk<R>> {
        let (c1, c2) = read_superblocks_from(&*region);
        let sb = validate_superblocks(&c1, &c2, region.len())?;
        let geo = sb.geometry;
        let ordering = match oo.ordering {
            Some(o) => o,
            None => ordering::policy_by_id(sb.ordering_id).expect("validated at decode"),
        };
        ordering::check_available_on(&ordering, &*region)?;
        let lanes = (0..geo.lanes)
            .map(|i| {
                let ranges = [
                    (geo.slot_off(i), SLOT_BYTES),
                    (geo.map_off, geo.map_bytes()),
                    (geo.data_off, geo.pages * geo.block_bytes as u64),
                ];
                Padded(Lock::new(Lane {
                    id: i,
                    writes: 0,
                    blocks_written: 0,
                    discards: 0,
                    domain: CommitDomain::new(i, &ranges, oo.latency),
                    seq: 0,
                    freed: [0; ATOMIC_BLOCKS_MAX],
                    freed_n: 0,
                    prepared: Some(Box::new(Prepared::EMPTY)),
                    record: Box::new([0; FAST_RECORD_MAX]),
                }))
            })
            .collect();
        let stripes = (0..STRIPES).map(|_| Padded(Lock::new(()))).collect();
        let mut d = NvramDisk {
            region,
            sb,
            geo,
            ordering,
            lanes,
            free: Lock::new(Vec::new()),
            bitmap: None,
            stripes,
            mirror: Box::new([]),
            hook: oo.hook,
            read_protection: oo.read_protection,
            allow_damaged: oo.allow_damaged,
            bug: oo.seeded_bug,
            crashed: AtomicBool::new(false),
            recovery: RecoveryReport::default(),

            reads: StripedCounter::default(),
            read_retries: StripedCounter::default(),
        };
        d.recovery = d.recover()?;
        // After recovery, which repairs the media map: the mirror starts equal to it.
        let (r, g) = (&*d.region, d.geo);
        // An entry that fails its check (only an open with allow_damaged gets this far with
        // one) is mirrored as the zero word, which never decodes: the write path then skips
        // the check bits of mirror words (Entry::decode_checked_before).
        d.mirror = (0..g.blocks)
            .map(|lba| {
                let raw = r.load_u64(g.map_entry_off(lba));
                AtomicU64::new(if Entry::decode(lba, raw).is_ok() {
                    raw
                } else {
                    0
                })
            })
            .collect();
        if let Some(region) = oo.page_bitmap {
            let mut free = vec![false; geo.pages as usize];
            for &p in lock(&d.free).iter() {
                free[p as usize] = true;
            }
            d.bitmap = Some(BitmapAllocator::new(region, geo.pages, |p| {
                free[p as usize]
            })?);
        }
        Ok(d)
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

    /// Per-lane persist counters (each lane commits through its own domain).
    pub fn lane_stats(&self) -> Vec<DomainStats> {
        self.lanes.iter().map(|l| lock(l).domain.stats()).collect()
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
    fn ev(&self, step: Step, phase: Phase, off: u64, len: u64, lba: u64) -> Result<()> {
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

    fn acquire_lane(&self) -> Guard<'_, Lane> {
        let n = self.lanes.len();
        let h = lane_hint() % n;
        for i in 0..n {
            if let Some(g) = self.lanes[(h + i) % n].try_lock() {
                return g;
            }
        }
        lock(&self.lanes[h])
    }

    /// Return the pages `lane` freed last time, then take `n` free pages. Enough always
    /// exist, without waiting: pages = blocks + lanes x ATOMIC_BLOCKS_MAX, at most `blocks`
    /// are mapped, and each of the other lanes holds at most ATOMIC_BLOCKS_MAX pages that are
    /// neither mapped nor in the pool (taken for its write in flight, or freed by its last
    /// update and not yet returned: a lane returns the second before it takes the first), so
    /// at least ATOMIC_BLOCKS_MAX >= n are free whenever a writer asks.
    fn take_pages(&self, lane: &mut Lane, n: usize, out: &mut [u32; ATOMIC_BLOCKS_MAX]) {
        assert!(n <= ATOMIC_BLOCKS_MAX);
        if let Some(bm) = &self.bitmap {
            bm.take(&mut out[..n]);
            return;
        }
        if lane.freed_n >= n {
            // The paper's rule: the pages a lane's last write freed are its next shadow pages.
            // No pool lock, so no locked instruction waits here for the last write's stores.
            let at = lane.freed_n - n;
            out[..n].copy_from_slice(&lane.freed[at..lane.freed_n]);
            lane.freed_n = at;
            out[..n].sort_unstable();
            debug_assert!(
                out[..n].iter().all(|&p| (p as u64) < self.geo.pages),
                "free page out of range"
            );
            return;
        }
        let mut free = lock(&self.free);
        free.extend_from_slice(&lane.freed[..lane.freed_n]);
        lane.freed_n = 0;
        assert!(
            free.len() >= n,
            "free pages exhausted ({} free, {n} wanted): shadow pool invariant broken",
            free.len()
        );
        let at = free.len() - n;
        out[..n].copy_from_slice(&free[at..]);
        free.truncate(at);
        drop(free);
        // Ascending pages: a multi-block write's data step then streams through memory in
        // address order, which on a run of adjacent pages is one sequential copy (measured:
        // 64 scattered 4 KiB non-temporal copies take 2.4 times one 256 KiB copy; ascending
        // adjacent pages take the same time, descending 1.2 times). The pages a write frees
        // are kept in LBA order, so a run handed to adjacent LBAs comes back as a run.
        out[..n].sort_unstable();
        debug_assert!(
            out[..n].iter().all(|&p| (p as u64) < self.geo.pages),
            "free page out of range"
        );
    }

    /// Lock the stripes of `lbas` in ascending order (no deadlock between multi-block
    /// writers). A fixed array: no allocation on the data path.
    fn lock_stripes(&self, lbas: &[u64]) -> StripeGuards<'_> {
        let mut idx: [u16; ATOMIC_BLOCKS_MAX] = [0; ATOMIC_BLOCKS_MAX];
        for (i, &l) in lbas.iter().enumerate() {
            idx[i] = ((l / 8) as usize % STRIPES) as u16;
        }
        let idx = &mut idx[..lbas.len()];
        idx.sort_unstable();
        let mut guards: StripeGuards<'_> = std::array::from_fn(|_| None);
        let mut last = None;
        for (slot, &s) in guards.iter_mut().zip(idx.iter()) {
            if last != Some(s) {
                *slot = Some(lock(&self.stripes[s as usize]));
                last = Some(s);
            }
        }
        guards
    }

    /// The entry of `lba` from the mirror, with its raw word: Err when it does not decode or
    /// names a page past the end (the message shows the media word).
    fn look_up(&self, lba: u64) -> Result<(u64, Entry)> {
        let raw = self.mirror[lba as usize].load(Ordering::Acquire);
        match Entry::decode_checked_before(lba, raw) {
            Ok(e) if e.vpn.is_none_or(|v| (v as u64) < self.geo.pages) => Ok((raw, e)),
            _ => Err(corrupt_entry(
                lba,
                self.region.load_u64(self.geo.map_entry_off(lba)),
            )),
        }
    }

    /// The pair assertion of a writer's lookup (its stripe is held, so nothing is in flight):
    /// the mirror word is the media word, or the zero word of an entry damaged at open.
    fn mirror_is_media(&self, lba: u64, raw: u64) -> bool {
        raw == 0 || self.region.load_u64(self.geo.map_entry_off(lba)) == raw
    }

    fn validate_lbas(&self, lbas: &[u64]) -> Result<()> {
        if lbas.is_empty() || lbas.len() > ATOMIC_BLOCKS_MAX {
            return Err(Error::bad(format!(
                "an atomic write covers 1 to {ATOMIC_BLOCKS_MAX} blocks, not {}",
                lbas.len()
            )));
        }
        for &l in lbas {
            if l >= self.geo.blocks {
                return Err(Error::bad(format!(
                    "LBA {l} out of range: the device has {} blocks (0 to {})",
                    self.geo.blocks,
                    self.geo.blocks - 1
                )));
            }
        }
        // Duplicates: none in a consecutive run (every contiguous write); otherwise sort a
        // copy and compare neighbours. (Comparing each LBA with all before it was 2 016
        // comparisons for 64 blocks, a tenth of a 256 KiB write's time.)
        if lbas
            .iter()
            .enumerate()
            .all(|(i, &l)| l == lbas[0] + i as u64)
        {
            return Ok(());
        }
        let mut sorted = [0u64; ATOMIC_BLOCKS_MAX];
        let sorted = &mut sorted[..lbas.len()];
        sorted.copy_from_slice(lbas);
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::bad(format!(
                "LBA {} appears twice in one atomic write",
                w[0]
            )));
        }
        Ok(())
    }

    /// Write `lbas.len()` blocks (contiguous or scattered, at most 64) all or nothing: after a
    /// crash at any instant every block reads all old or all new, together.
    pub fn write_atomic(&self, lbas: &[u64], data: &[u8]) -> Result<()> {
        self.alive()?;
        self.validate_lbas(lbas)?;
        let b = self.geo.block_bytes as usize;
        if data.len() != lbas.len() * b {
            return Err(Error::bad(format!(
                "write of {} bytes to {} blocks: expected {} bytes",
                data.len(),
                lbas.len(),
                lbas.len() * b
            )));
        }
        let n = lbas.len();
        if n == 1
            && self.bug.is_none()
            && (self.sb.protocol == Protocol::Paper || self.ordering.map.word_atomic())
        {
            return self.write_one(lbas[0], data);
        }
        let r = &*self.region;
        let mut lane = self.acquire_lane();
        // Lock order: lane, then stripes (sorted). Taken before the data step so that no
        // locked instruction, which would wait for the data's write-combining buffers to
        // drain, sits between the protocol's fences.
        let _stripes = self.lock_stripes(lbas);
        let mut pages = [0u32; ATOMIC_BLOCKS_MAX];
        self.take_pages(&mut lane, n, &mut pages);
        // The entries are looked up after the data step, their lines prefetched now: the
        // misses overlap the copy instead of stalling it (see write_one).
        for &lba in lbas {
            prefetch_cpu(self.mirror[lba as usize].as_ptr() as *const u8);
        }
        // Step Data: the new contents go to shadow pages nobody references.
        if self.bug.is_none() || !self.seeded_data_step(&mut lane, lbas, data, &mut pages[..n])? {
            // Adjacent pages (take_pages sorts them, and a run freed together comes back
            // together) are one store: one copy streams through memory instead of n calls.
            for run in consecutive_runs(&pages[..n], self.hook.is_some()) {
                let off = self.geo.page_off(pages[run.start]);
                lane.domain.store(
                    r,
                    self.ordering.data,
                    off,
                    &data[run.start * b..run.end * b],
                );
                for k in run {
                    let off = self.geo.page_off(pages[k]);
                    self.ev(Step::Data, Phase::Stored, off, b as u64, lbas[k])?;
                }
            }
            lane.domain.commit(r);
            self.ev(
                Step::Data,
                Phase::Persisted,
                self.geo.page_off(pages[0]),
                b as u64,
                lbas[0],
            )?;
        }
        self.commit_entries(&mut lane, lbas, Some(&pages[..n]))?;
        lane.writes += 1;
        lane.blocks_written += n as u64;
        Ok(())
    }

    /// A single-block write on its common path (no seeded bug; for the fast protocol, a
    /// word-atomic map store): the same steps and events as the general path, in straight-line
    /// code with one stripe and no arrays to set up. (The general path's setup stores measured
    /// 20 % of a 4 KiB write.)
    fn write_one(&self, lba: u64, data: &[u8]) -> Result<()> {
        let r = &*self.region;
        let entry_off = self.geo.map_entry_off(lba);
        let mirrored = &self.mirror[lba as usize];
        // The entry is loaded after the data step, not before: a load that misses would hold
        // the whole copy behind it (measured: 60 to 90 ns of a 4 KiB write); the prefetch's
        // miss overlaps the copy instead. The stripe lock keeps the entry unchanged meanwhile.
        prefetch_cpu(mirrored.as_ptr() as *const u8);
        let mut lane = self.acquire_lane();
        let _stripe = lock(&self.stripes[(lba / 8) as usize % STRIPES]);
        let mut pages = [0u32; ATOMIC_BLOCKS_MAX];
        self.take_pages(&mut lane, 1, &mut pages);
        let page = pages[0];
        let page_off = self.geo.page_off(page);
        let b = self.geo.block_bytes as u64;
        lane.domain.store(r, self.ordering.data, page_off, data);
        self.ev(Step::Data, Phase::Stored, page_off, b, lba)?;
        lane.domain.commit(r);
        self.ev(Step::Data, Phase::Persisted, page_off, b, lba)?;
        let (raw, e) = match self.look_up(lba) {
            Ok(x) => x,
            Err(err) => {
                // The shadow page holds the new data, but nothing names it: it goes back.
                self.give_back(&[lba], &pages[..1]);
                return Err(err);
            }
        };
        debug_assert!(self.mirror_is_media(lba, raw), "mirror of LBA {lba}");
        let new = e.next(Some(page)).encode(lba);
        match self.sb.protocol {
            Protocol::Fast => {
                lane.domain.store_u64(r, self.ordering.map, entry_off, new);
                self.ev(Step::Map, Phase::Stored, entry_off, 8, lba)?;
                lane.domain.commit(r);
                debug_assert_eq!(
                    r.load_u64(entry_off),
                    new,
                    "map entry of LBA {lba} after persist"
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
            self.ev(Step::Map, Phase::Persisted, entry_off, 8, lba)?;
        }
        if let (Some(old), Some(bm)) = (e.vpn, &self.bitmap) {
            bm.free(&[old]);
        } else if let Some(old) = e.vpn {
            let k = lane.freed_n;
            assert!(
                k < ATOMIC_BLOCKS_MAX,
                "a lane holds at most one write's pages"
            );
            lane.freed[k] = old;
            lane.freed_n = k + 1;
        }
        lane.writes += 1;
        lane.blocks_written += 1;
        Ok(())
    }

    /// The Data step of the seeded bugs that change it. Ok(true): done here, without the
    /// step's commit (so without its Persisted event); Ok(false): the normal step runs (on
    /// `pages`, which a bug may have changed).
    #[cold]
    #[inline(never)]
    fn seeded_data_step(
        &self,
        lane: &mut Lane,
        lbas: &[u64],
        data: &[u8],
        pages: &mut [u32],
    ) -> Result<bool> {
        let r = &*self.region;
        let b = self.geo.block_bytes as usize;
        let fast = self.sb.protocol == Protocol::Fast;
        if self.seeded(SeededBug::FastWriteInPlace) && fast {
            // Seeded bug fast-write-in-place: a mapped block gets its current page as its
            // "shadow" page (the one taken for it goes back to the free list unused), so the
            // Data step overwrites the only copy of the old contents; the map entry is still
            // updated (generation + 1, same page). Unmapped blocks keep their shadow page.
            for (p, &lba) in pages.iter_mut().zip(lbas) {
                let raw = r.load_u64(self.geo.map_entry_off(lba));
                if let Ok(Entry { vpn: Some(v), .. }) = Entry::decode(lba, raw) {
                    if (v as u64) < self.geo.pages {
                        lock(&self.free).push(*p);
                        *p = v;
                    }
                }
            }
            return Ok(false);
        }
        let unflushed = match self.bug {
            Some(SeededBug::FastNoDataFence) if fast => false,
            Some(SeededBug::PaperNoDataFence) if !fast => true,
            _ => return Ok(false),
        };
        for (i, &lba) in lbas.iter().enumerate() {
            let off = self.geo.page_off(pages[i]);
            let src = &data[i * b..(i + 1) * b];
            if unflushed {
                // Seeded bug paper-no-data-fence: plain cached stores that the lane's domain
                // never hears of, so no commit ever flushes them: the shadow page is not
                // persisted before the journal (nor after). Dropping only the data commit
                // would be harmless: the VPN step's commit, which comes before anything
                // names the page, would persist the data.
                r.write(off, src);
            } else {
                // Seeded bug fast-no-data-fence: stored as usual but not committed, so the
                // data is still pending when the map store is issued.
                lane.domain.store(r, self.ordering.data, off, src);
            }
            self.ev(Step::Data, Phase::Stored, off, b as u64, lba)?;
        }
        Ok(true)
    }

    /// Return the shadow pages of a write that failed before its metadata step.
    #[cold]
    #[inline(never)]
    fn give_back(&self, lbas: &[u64], pages: &[u32]) {
        if let Some(bm) = &self.bitmap {
            bm.free(pages);
            return;
        }
        if self.bug.is_none() {
            lock(&self.free).extend_from_slice(pages);
            return;
        }
        // Seeded bug fast-write-in-place: a page written in place is still mapped.
        let r = &*self.region;
        for (&p, &lba) in pages.iter().zip(lbas) {
            let mapped = Entry::decode(lba, r.load_u64(self.geo.map_entry_off(lba)))
                .is_ok_and(|e| e.vpn == Some(p));
            if !mapped {
                lock(&self.free).push(p);
            }
        }
    }

    /// Point `lbas` at `pages` (or unmap them when `pages` is None) with the image's protocol,
    /// then hand the pages they used to point at to the free pool. The caller holds
    /// the lane and the stripes of `lbas`.
    fn commit_entries(&self, lane: &mut Lane, lbas: &[u64], pages: Option<&[u32]>) -> Result<()> {
        let mut p = lane
            .prepared
            .take()
            .unwrap_or_else(|| Box::new(Prepared::EMPTY));
        let result = self
            .prepare_entries(lbas, pages, &mut p)
            .and_then(|()| self.apply_entries(lane, &p, pages.is_none()));
        lane.prepared = Some(p);
        result
    }

    /// Read and check the map entries of `lbas` and compute their new values (pointing at
    /// `pages`, or unmapped). Nothing is stored. The caller holds the stripes of `lbas`, so
    /// the entries cannot change before [`Self::apply_entries`]; a write calls this after its
    /// data step, having prefetched the entries' lines before it. On a corrupt entry the pages
    /// go back to the pool.
    fn prepare_entries(&self, lbas: &[u64], pages: Option<&[u32]>, p: &mut Prepared) -> Result<()> {
        p.k = 0;
        p.freed_n = 0;
        for (i, &lba) in lbas.iter().enumerate() {
            let (raw, e) = match self.look_up(lba) {
                Ok(x) => x,
                Err(err) => {
                    if let Some(pg) = pages {
                        self.give_back(lbas, pg);
                    }
                    return Err(err);
                }
            };
            debug_assert!(self.mirror_is_media(lba, raw), "mirror of LBA {lba}");
            let vpn = pages.map(|pg| pg[i]);
            if vpn.is_none() && e.vpn.is_none() {
                continue; // discarding a block that holds no page changes nothing
            }
            if let Some(old) = e.vpn {
                // Seeded bug fast-write-in-place: the page written in place stays mapped.
                if self.bug.is_none() || vpn != Some(old) {
                    p.freed[p.freed_n] = old;
                    p.freed_n += 1;
                }
            }
            p.lbas[p.k] = lba;
            p.olds[p.k] = raw;
            p.news[p.k] = e.next(vpn).encode(lba);
            p.k += 1;
        }
        Ok(())
    }

    /// Store the entries [`Self::prepare_entries`] computed with the image's protocol, then
    /// keep the pages they used to point at for the free pool.
    fn apply_entries(&self, lane: &mut Lane, p: &Prepared, discard: bool) -> Result<()> {
        let k = p.k;
        if k > 0 {
            match self.sb.protocol {
                Protocol::Fast => {
                    self.fast_commit(lane, &p.lbas[..k], &p.olds[..k], &p.news[..k], discard)?
                }
                Protocol::Paper => self.paper_commit(lane, &p.lbas[..k], &p.news[..k])?,
            }
        }
        // The entries are durable: readers see the new pages from here on (see
        // write_one for why the old pages cannot be recycled under a reader).
        for (&lba, &new) in p.lbas[..k].iter().zip(&p.news[..k]) {
            self.mirror[lba as usize].store(new, Ordering::Release);
        }
        // The old pages are unreferenced on media now (the map is persisted), so they may be
        // reused; readers still copying one will see the map entry changed and retry. They
        // wait in the lane until it next takes pages (no lock after the final fence). A write
        // emptied the lane's list when it took its pages; a discard may find it full, and
        // then returns the older pages now (discards are not the path this saves time on).
        let freed_n = p.freed_n;
        if let Some(bm) = &self.bitmap {
            bm.free(&p.freed[..freed_n]);
            return Ok(());
        }
        if lane.freed_n + freed_n > ATOMIC_BLOCKS_MAX {
            lock(&self.free).extend_from_slice(&lane.freed[..lane.freed_n]);
            lane.freed_n = 0;
        }
        lane.freed[lane.freed_n..lane.freed_n + freed_n].copy_from_slice(&p.freed[..freed_n]);
        lane.freed_n += freed_n;
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
        let r = &*self.region;
        let o = self.ordering;
        let n = lbas.len();
        // Seeded bug fast-word-path-under-flush: the word path even when a map store is not
        // word-atomic (a line write-back may tear it, and no record can repair it).
        if n == 1 && (o.map.word_atomic() || self.seeded(SeededBug::FastWordPathUnderFlush)) {
            let off = self.geo.map_entry_off(lbas[0]);
            lane.domain.store_u64(r, o.map, off, news[0]);
            self.ev(Step::Map, Phase::Stored, off, 8, lbas[0])?;
            if self.bug.is_some()
                && (self.seeded(SeededBug::FastNoMapFence)
                    || (discard && self.seeded(SeededBug::DiscardNoFence)))
            {
                // Seeded bugs fast-no-map-fence, discard-no-fence: return with the map store
                // not committed.
                return Ok(());
            }
            lane.domain.commit(r);
            debug_assert_eq!(
                r.load_u64(off),
                news[0],
                "map entry of LBA {} after persist",
                lbas[0]
            );
            return self.ev(Step::Map, Phase::Persisted, off, 8, lbas[0]);
        }
        self.fast_commit_record(lane, lbas, olds, news, discard)
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
        let r = &*self.region;
        let o = self.ordering;
        let n = lbas.len();
        if n > 1 && self.seeded(SeededBug::FastNoRecordMulti) {
            // Seeded bug fast-no-record-multi: the map entries with one commit, no record.
            return self.store_map_entries(&mut lane.domain, lbas, news);
        }
        lane.seq += 1;
        let slot = self.geo.slot_off(lane.id);
        // encode_fast_record writes every byte of rec[..len]: the lane's buffer needs no
        // clearing between updates.
        let rec = &mut *lane.record;
        let len = encode_fast_record(lane.seq, lbas, olds, news, rec);
        lane.domain.store(r, o.journal, slot, &rec[..len]);
        lane.domain
            .store(r, o.journal, slot + FAST_RECORD_REPLICA, &rec[..len]);
        self.ev(Step::Record, Phase::Stored, slot, len as u64, lbas[0])?;
        // Seeded bug fast-record-no-fence: no commit between the record and the map stores.
        if !self.seeded(SeededBug::FastRecordNoFence) {
            lane.domain.commit(r);
            self.ev(Step::Record, Phase::Persisted, slot, len as u64, lbas[0])?;
        }
        if discard && self.seeded(SeededBug::DiscardNoFence) {
            // Seeded bug discard-no-fence: the map stores and the record clear are issued,
            // neither committed, and the discard returns.
            self.store_map_words(&mut lane.domain, lbas, news)?;
            retire_record(&mut lane.domain, r, o.journal, slot);
            return self.ev(Step::RecordClear, Phase::Stored, slot, 16, lbas[0]);
        }
        self.store_map_entries(&mut lane.domain, lbas, news)?;
        // Retire the record, durably, before the write returns: a valid record at recovery
        // is then always one in flight, so recovery may repair torn map words from it. Both
        // the sequence word and the count/CRC word are cleared: the body stays behind, and a
        // later record reusing the sequence number must never revive it if only its first
        // word reaches media.
        retire_record(&mut lane.domain, r, o.journal, slot);
        self.ev(Step::RecordClear, Phase::Stored, slot, 16, lbas[0])?;
        lane.domain.commit(r);
        self.ev(Step::RecordClear, Phase::Persisted, slot, 16, lbas[0])
    }

    /// The Map step of a multi-entry update: store every entry with the map method, then one
    /// commit. Both protocols' journaled paths use it.
    fn store_map_entries(&self, d: &mut CommitDomain, lbas: &[u64], news: &[u64]) -> Result<()> {
        self.store_map_words(d, lbas, news)?;
        d.commit(&*self.region);
        let off = self.geo.map_entry_off(lbas[0]);
        self.ev(Step::Map, Phase::Persisted, off, 8, lbas[0])
    }

    /// The stores of the Map step, without its commit.
    fn store_map_words(&self, d: &mut CommitDomain, lbas: &[u64], news: &[u64]) -> Result<()> {
        let r = &*self.region;
        // Runs of consecutive LBAs (every contiguous write) are consecutive map words: one
        // call per run, still one 8-byte store per word.
        for run in consecutive_runs(lbas, self.hook.is_some()) {
            let off = self.geo.map_entry_off(lbas[run.start]);
            d.store_words(r, self.ordering.map, off, &news[run.clone()]);
            for k in run {
                let lba = lbas[k];
                self.ev(
                    Step::Map,
                    Phase::Stored,
                    self.geo.map_entry_off(lba),
                    8,
                    lba,
                )?;
            }
        }
        Ok(())
    }

    /// Paper protocol (seed 000, Table 2): VPN; L1; L2; map; reset L1; reset L2, each
    /// persisted. Several blocks go through a checksummed intent with a commit word.
    #[inline(never)]
    fn paper_commit(&self, lane: &mut Lane, lbas: &[u64], news: &[u64]) -> Result<()> {
        let r = &*self.region;
        let o = self.ordering;
        let slot = self.geo.slot_off(lane.id);
        let d = &mut lane.domain;
        if lbas.len() == 1 {
            let lba = lbas[0];
            let map_off = self.geo.map_entry_off(lba);
            let steps = [
                (Step::JournalVpn, o.journal, slot + PAPER_VPN, news[0]),
                (Step::JournalL1, o.journal, slot + PAPER_L1, lba),
                (Step::JournalL2, o.journal, slot + PAPER_L2, lba),
                (Step::Map, o.map, map_off, news[0]),
                (Step::ResetL1, o.journal, slot + PAPER_L1, LBA_NULL),
                (Step::ResetL2, o.journal, slot + PAPER_L2, LBA_NULL),
            ];
            if self.bug.is_some() {
                return self.paper_steps_seeded(d, lba, &steps);
            }
            for (step, method, off, v) in steps {
                d.store_u64(r, method, off, v);
                self.ev(step, Phase::Stored, off, 8, lba)?;
                d.commit(r);
                debug_assert_eq!(r.load_u64(off), v, "{step:?} after persist");
                self.ev(step, Phase::Persisted, off, 8, lba)?;
            }
            return Ok(());
        }
        lane.seq += 1;
        let n = lbas.len();
        let mut intent = [0u8; PAPER_INTENT_MAX];
        intent[0..4].copy_from_slice(&(n as u32).to_le_bytes());
        for i in 0..n {
            intent[8 + i * 16..16 + i * 16].copy_from_slice(&lbas[i].to_le_bytes());
            intent[16 + i * 16..24 + i * 16].copy_from_slice(&news[i].to_le_bytes());
        }
        let len = 8 + n * 16;
        let crc = crc32c::crc32c_append(crc32c::crc32c(&intent[0..4]), &intent[8..len]);
        intent[4..8].copy_from_slice(&crc.to_le_bytes());
        let ioff = slot + PAPER_INTENT;
        d.store(r, o.journal, ioff, &intent[..len]);
        self.ev(Step::IntentRecord, Phase::Stored, ioff, len as u64, lbas[0])?;
        d.commit(r);
        self.ev(
            Step::IntentRecord,
            Phase::Persisted,
            ioff,
            len as u64,
            lbas[0],
        )?;
        // The commit word names the intent it commits by its CRC: a commit word never matches
        // a stale intent left in the slot by an earlier update (6.2).
        let coff = slot + PAPER_INTENT_COMMIT;
        d.store_u64(r, o.journal, coff, paper_commit_word(lane.seq, crc));
        self.ev(Step::IntentCommit, Phase::Stored, coff, 8, lbas[0])?;
        if self.seeded(SeededBug::PaperIntentCommitNoFence) {
            // Seeded bug paper-intent-commit-no-fence: no commit between the commit word and
            // the map stores; the Map step's commit persists both.
            return self.paper_intent_finish(d, coff, lbas, news);
        }
        d.commit(r);
        self.ev(Step::IntentCommit, Phase::Persisted, coff, 8, lbas[0])?;
        if self.seeded(SeededBug::PaperIntentClearBeforeMap) {
            // Seeded bug paper-intent-clear-before-map: the commit word is cleared, durably,
            // before the map stores are even issued.
            d.store_u64(r, o.journal, coff, 0);
            self.ev(Step::IntentClear, Phase::Stored, coff, 8, lbas[0])?;
            d.commit(r);
            self.ev(Step::IntentClear, Phase::Persisted, coff, 8, lbas[0])?;
            return self.store_map_entries(d, lbas, news);
        }
        self.paper_intent_finish(d, coff, lbas, news)
    }

    /// The end of the paper intent path: the Map step, then IntentClear, each persisted.
    fn paper_intent_finish(
        &self,
        d: &mut CommitDomain,
        coff: u64,
        lbas: &[u64],
        news: &[u64],
    ) -> Result<()> {
        let r = &*self.region;
        self.store_map_entries(d, lbas, news)?;
        d.store_u64(r, self.ordering.journal, coff, 0);
        self.ev(Step::IntentClear, Phase::Stored, coff, 8, lbas[0])?;
        d.commit(r);
        self.ev(Step::IntentClear, Phase::Persisted, coff, 8, lbas[0])
    }

    /// The paper single-block steps under a seeded bug: `steps` is the correct sequence
    /// (VPN, L1, L2, Map, ResetL1, ResetL2); the bug reorders it or drops commits. A
    /// Persisted event fires only where a commit ran, named after the step it follows.
    fn paper_steps_seeded(
        &self,
        d: &mut CommitDomain,
        lba: u64,
        steps: &[(Step, nvstack_pmem::Method, u64, u64); 6],
    ) -> Result<()> {
        let r = &*self.region;
        const ALL: [bool; 6] = [true; 6];
        let (order, commit): ([usize; 6], [bool; 6]) = match self.bug {
            // Seeded bug paper-replicas-one-step: L1, L2 and the map entry stored with no
            // commit between them, one commit after all three.
            Some(SeededBug::PaperReplicasOneStep) => {
                ([0, 1, 2, 3, 4, 5], [true, false, false, true, true, true])
            }
            // Seeded bug paper-map-before-journal: the map entry first (persisted), then VPN,
            // L1, L2 (each persisted), then the resets.
            Some(SeededBug::PaperMapBeforeJournal) => ([3, 0, 1, 2, 4, 5], ALL),
            // Seeded bug paper-no-reset-fence: the resets are stored, never committed.
            Some(SeededBug::PaperNoResetFence) => {
                ([0, 1, 2, 3, 4, 5], [true, true, true, true, false, false])
            }
            _ => ([0, 1, 2, 3, 4, 5], ALL),
        };
        for i in order {
            let (step, method, off, v) = steps[i];
            d.store_u64(r, method, off, v);
            self.ev(step, Phase::Stored, off, 8, lba)?;
            if commit[i] {
                d.commit(r);
                self.ev(step, Phase::Persisted, off, 8, lba)?;
            }
        }
        Ok(())
    }

    /// Read whole blocks. A reader never writes anything; it copies the page its map entry
    /// names and re-reads the entry: if the entry changed (its generation moves on every
    /// update), the page may have been recycled during the copy, and the read is retried.
    pub fn read_blocks(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
        self.alive()?;
        let b = self.geo.block_bytes as usize;
        if buf.is_empty() || !buf.len().is_multiple_of(b) {
            return Err(Error::bad(format!(
                "read buffer of {} bytes is not a positive multiple of the block size {b}",
                buf.len()
            )));
        }
        let count = (buf.len() / b) as u64;
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
        let r = &*self.region;
        for i in 0..count {
            let l = lba + i;
            let dst = &mut buf[i as usize * b..(i as usize + 1) * b];
            let off = self.geo.map_entry_off(l);
            let mirrored = &self.mirror[l as usize];
            loop {
                let (raw, e) = self.look_up(l)?;
                if self.hook.is_some() {
                    self.ev(Step::ReadLookup, Phase::Stored, off, 8, l)?;
                }
                match e.vpn {
                    None => dst.fill(0),
                    Some(v) => r.read(self.geo.page_off(v), dst),
                }
                if !self.read_protection {
                    break;
                }
                // The copy's loads must complete before the entry is loaded again.
                std::sync::atomic::fence(Ordering::Acquire);
                if mirrored.load(Ordering::Relaxed) == raw {
                    break;
                }
                self.read_retries.add(1);
                std::hint::spin_loop();
            }
        }
        self.reads.add(1);
        Ok(())
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
        let mut at = lba;
        let end = lba + count;
        let mut lbas = [0u64; ATOMIC_BLOCKS_MAX];
        while at < end {
            let n = (end - at).min(ATOMIC_BLOCKS_MAX as u64) as usize;
            for (i, l) in lbas[..n].iter_mut().enumerate() {
                *l = at + i as u64;
            }
            let mut lane = self.acquire_lane();
            let _stripes = self.lock_stripes(&lbas[..n]);
            self.commit_entries(&mut lane, &lbas[..n], None)?;
            if at + n as u64 >= end {
                lane.discards += 1;
            }
            at += n as u64;
        }
        Ok(())
    }

    /// Global commit across every lane's domain (a drain of everything dirty, one fence).
    pub fn commit_all(&self) {
        let mut guards: Vec<_> = self.lanes.iter().map(|l| lock(l)).collect();
        let mut doms: Vec<&mut CommitDomain> = guards.iter_mut().map(|g| &mut g.domain).collect();
        CommitDomain::commit_global(&mut doms, &*self.region);
    }

    /// Recovery (docs/format.md): finish or cancel each lane's in-flight update, then rebuild
    /// the free pages as the pool minus the mapped pages.
    fn recover(&mut self) -> Result<RecoveryReport> {
        let mut rep = RecoveryReport::default();
        let r = &*self.region;
        let g = self.geo;
        for lane in self.lanes.iter() {
            let mut lane = lock(lane);
            let slot = g.slot_off(lane.id);
            let id = lane.id;
            let d = &mut lane.domain;
            match self.sb.protocol {
                Protocol::Paper => {
                    let vpn = r.load_u64(slot + PAPER_VPN);
                    let l1 = r.load_u64(slot + PAPER_L1);
                    let l2 = r.load_u64(slot + PAPER_L2);
                    let target = if self.seeded(SeededBug::PaperTrustOneReplica) {
                        // Seeded bug paper-trust-one-replica: redo on L1 alone, L2 ignored.
                        journaled_entry_ok(&g, l1, vpn).then_some(l1)
                    } else {
                        paper_redo_target(&g, vpn, l1, l2)
                    };
                    if let Some(lba) = target {
                        // S6-S8 (both replicas intact): map[lba] := VPN, which also repairs
                        // S7's torn entry.
                        let off = g.map_entry_off(lba);
                        d.store_u64(r, self.ordering.map, off, vpn);
                        d.commit(r);
                        rep.redone += 1;
                        rep.actions
                            .push(format!("lane {id}: redo, map[{lba}] := {vpn:#x}"));
                    } else if l1 != LBA_NULL || l2 != LBA_NULL {
                        let applied = [l1, l2]
                            .into_iter()
                            .find(|&l| l < g.blocks && r.load_u64(g.map_entry_off(l)) == vpn);
                        rep.undone += 1;
                        rep.actions.push(match applied {
                            Some(l) => format!(
                                "lane {id}: reset replicas (L1 {l1:#x}, L2 {l2:#x}); map[{l}] already holds the journaled entry (S9-S11)"
                            ),
                            None => format!(
                                "lane {id}: undo (L1 {l1:#x}, L2 {l2:#x}): replicas reset, map left as it was (S1-S5)"
                            ),
                        });
                    }
                    if l1 != LBA_NULL {
                        d.store_u64(r, self.ordering.journal, slot + PAPER_L1, LBA_NULL);
                        d.commit(r);
                    }
                    if l2 != LBA_NULL {
                        d.store_u64(r, self.ordering.journal, slot + PAPER_L2, LBA_NULL);
                        d.commit(r);
                    }
                    let coff = slot + PAPER_INTENT_COMMIT;
                    match paper_intent_state(r, &g, slot) {
                        IntentState::Idle => {}
                        IntentState::Redo { entries, .. } => {
                            for &(lba, new) in &entries {
                                d.store_u64(r, self.ordering.map, g.map_entry_off(lba), new);
                            }
                            d.commit(r);
                            rep.redone += 1;
                            rep.actions.push(format!(
                                "lane {id}: redo intent of {} blocks",
                                entries.len()
                            ));
                            d.store_u64(r, self.ordering.journal, coff, 0);
                            d.commit(r);
                        }
                        // A commit word that matches no valid intent committed nothing that
                        // is not already durable: before it was persisted nothing of its
                        // intent was applied, and once the clear is persisted the map is.
                        IntentState::Cancel { commit, applied, n } => {
                            d.store_u64(r, self.ordering.journal, coff, 0);
                            d.commit(r);
                            rep.undone += 1;
                            rep.actions.push(format!(
                                "lane {id}: intent commit word {commit:#x} matches no valid intent: cancelled (commit word reset), map left as it was{}",
                                match (applied, n) {
                                    (_, 0) => String::new(),
                                    (0, n) => format!(" (none of the {n} entries of the intent in the slot applied)"),
                                    (_, n) => format!(" (it already holds all {n} entries of the intent in the slot)"),
                                }
                            ));
                        }
                        // No crash leaves these: damage, left in place as evidence, nothing
                        // of the intent applied.
                        IntentState::BadEntries { .. } => rep.damage.push(format!(
                            "intent of lane {id}: committed, but an entry names an LBA or page out of range"
                        )),
                        IntentState::PartlyApplied { commit, applied, n } => rep.damage.push(format!(
                            "intent of lane {id}: commit word {commit:#x} matches no valid intent, but the map holds {applied} of the {n} entries of the intent in the slot"
                        )),
                        IntentState::BadIntent { commit } => rep.damage.push(format!(
                            "intent of lane {id}: commit word {commit:#x} set but the intent fails its checksum"
                        )),
                    }
                }
                Protocol::Fast => {
                    if !fast_slot_busy(r, slot) {
                        continue;
                    }
                    let record = if self.seeded(SeededBug::FastRecordCrcUnchecked) {
                        // Seeded bug fast-record-crc-unchecked: the checksum is not checked.
                        read_fast_record_unchecked(r, slot)
                    } else {
                        read_fast_record(r, slot)
                    };
                    let mut cleared = false;
                    match record {
                        Some((seq, entries))
                            if !entries
                                .iter()
                                .all(|&(lba, _, new)| journaled_entry_ok(&g, lba, new)) =>
                        {
                            // A checksum-valid record with an impossible entry is damage (no
                            // crash writes one): applying part of it would break all or
                            // nothing, so nothing is applied and the record stays as evidence.
                            rep.damage.push(format!(
                                "journal record of lane {id} (seq {seq}): checksum holds but an entry names an LBA or page out of range"
                            ));
                            continue;
                        }
                        Some((seq, entries)) => {
                            lane.seq = seq;
                            let d = &mut lane.domain;
                            if self.seeded(SeededBug::RecoveryClearsBeforeMap) {
                                // Seeded bug recovery-clears-before-map: the record is
                                // retired, durably, before its map stores are issued.
                                retire_record(d, r, self.ordering.journal, slot);
                                d.commit(r);
                                cleared = true;
                            }
                            let old_only = self.seeded(SeededBug::FastRecoveryOldOnly);
                            let mut applied = 0;
                            for &(lba, old, new) in &entries {
                                // A valid record is always one in flight (its clear is fenced
                                // before the write returns), so each entry is old, new, or
                                // torn by a line write-back: make every one new.
                                let off = g.map_entry_off(lba);
                                let cur = r.load_u64(off);
                                // Seeded bug fast-recovery-old-only: apply only where the map
                                // still holds `old`, so a torn word stays torn.
                                let apply = if old_only { cur == old } else { cur != new };
                                if apply {
                                    d.store_u64(r, self.ordering.map, off, new);
                                    applied += 1;
                                }
                            }
                            d.commit(r);
                            if applied > 0 {
                                rep.redone += 1;
                                rep.actions.push(format!(
                                    "lane {id}: redo record {seq}, {applied} of {} entries applied",
                                    entries.len()
                                ));
                            }
                        }
                        None => {
                            rep.undone += 1;
                            rep.actions
                                .push(format!("lane {id}: torn record discarded"));
                        }
                    }
                    if !cleared {
                        let d = &mut lane.domain;
                        retire_record(d, r, self.ordering.journal, slot);
                        d.commit(r);
                    }
                }
            }
        }
        // Free pages = pool - mapped pages; damage stops the open (check lists it all).
        let scan = scan_map(r, &g);
        rep.damage.extend(scan.findings);
        if !rep.damage.is_empty() && !self.allow_damaged {
            return Err(Error::finding(format!(
                "image damaged: {}{}: run `nvstack check`",
                rep.damage[..rep.damage.len().min(3)].join("; "),
                if rep.damage.len() > 3 { "; ..." } else { "" }
            )));
        }
        let used = &scan.used;
        let mapped = scan.mapped;
        let mut list: Vec<u32> = Vec::with_capacity(g.pages as usize - mapped as usize);
        let mut free_count = 0;
        for v in 0..g.pages as usize {
            if used[v / 64] & (1 << (v % 64)) == 0 {
                list.push(v as u32);
                free_count += 1;
            }
        }
        // Pop from the end: start with low page numbers (better locality for small images).
        list.reverse();
        *lock(&self.free) = list;
        rep.mapped_blocks = mapped;
        rep.free_pages = free_count;
        assert_eq!(
            mapped + free_count,
            g.pages,
            "pages are either mapped or free"
        );
        Ok(rep)
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

/// A damaged map lists at most this many findings.
pub const FINDINGS_MAX: usize = 100;

/// The result of one pass over the mapping table.
pub struct MapScan {
    /// Bitmap of pages referenced by the map.
    pub used: Vec<u64>,
    pub mapped: u64,
    /// Every entry that fails its check bits, names a page past the end, or names a page
    /// another entry names too.
    pub findings: Vec<String>,
}

pub fn scan_map<R: Region + ?Sized>(r: &R, g: &Geometry) -> MapScan {
    let mut used = vec![0u64; (g.pages as usize).div_ceil(64)];
    let mut mapped = 0u64;
    let mut findings = Vec::new();
    for lba in 0..g.blocks {
        if findings.len() > FINDINGS_MAX {
            findings.truncate(FINDINGS_MAX);
            findings.push(format!(
                "more than {FINDINGS_MAX} findings: stopped listing"
            ));
            break;
        }
        let raw = r.load_u64(g.map_off + lba * 8);
        let Ok(e) = Entry::decode(lba, raw) else {
            findings.push(format!(
                "map entry of LBA {lba} is corrupt ({raw:#018x} fails its check bits)"
            ));
            continue;
        };
        let Some(v) = e.vpn else { continue };
        if v as u64 >= g.pages {
            findings.push(format!(
                "map entry of LBA {lba} names page {v}, past the last page {}",
                g.pages - 1
            ));
            continue;
        }
        let (w, bit) = (v as usize / 64, 1u64 << (v % 64));
        if used[w] & bit != 0 {
            // Damage only: find the earlier owner by scanning again (bounded by FINDINGS_MAX).
            let first = (0..lba).find(|&l| {
                Entry::decode(l, r.load_u64(g.map_off + l * 8)).is_ok_and(|e| e.vpn == Some(v))
            });
            findings.push(match first {
                Some(f) => format!("page {v} is mapped twice: by LBA {f} and LBA {lba}"),
                None => format!("page {v} is mapped twice (LBA {lba} and an earlier one)"),
            });
            continue;
        }
        used[w] |= bit;
        mapped += 1;
    }
    MapScan {
        used,
        mapped,
        findings,
    }
}

/// Offsets of the superblock copies (for tests and `check`).
pub fn superblock_offsets(region_bytes: u64) -> [u64; 2] {
    [0, region_bytes - SB_PAGE_BYTES]
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvstack_pmem::MmapRegion;

    const BS: usize = 512;

    fn paper_region() -> Arc<MmapRegion> {
        let len = Geometry::region_bytes_for(64, BS as u32, 2).expect("geometry");
        let region = Arc::new(MmapRegion::anonymous(len).expect("anonymous region"));
        let fo = FormatOptions {
            block_bytes: BS as u32,
            lanes: 2,
            protocol: Protocol::Paper,
            ..Default::default()
        };
        format_region(&*region, &fo).expect("format");
        region
    }

    /// A 4-block write of `fill` over LBAs 0..4 stopped (a power failure) at the second map
    /// store: the commit word is durable and two of the four map entries are new.
    fn stopped_in_map(region: &Arc<MmapRegion>, fill: u8) {
        let seen = Arc::new(AtomicUsize::new(0));
        let s = seen.clone();
        let hook: Hook = Arc::new(move |e: &Event| {
            if e.step == Step::Map
                && e.phase == Phase::Stored
                && s.fetch_add(1, Ordering::SeqCst) == 1
            {
                Action::Stop
            } else {
                Action::Continue
            }
        });
        let dev = NvramDisk::open(
            region.clone(),
            OpenOptions {
                hook: Some(hook),
                ..Default::default()
            },
        )
        .expect("open");
        let r = dev.write_atomic(&[0, 1, 2, 3], &vec![fill; 4 * BS]);
        assert!(r.is_err(), "the write was not stopped");
    }

    fn contents(region: &Arc<MmapRegion>) -> Vec<u8> {
        let dev = NvramDisk::open(region.clone(), OpenOptions::default()).expect("open");
        let mut buf = vec![0u8; 4 * BS];
        dev.read_blocks(0, &mut buf).expect("read");
        buf
    }

    /// The stop point leaves a committed intent half applied; recovery redoes it. A flipped
    /// bit in its (durable) commit word must not turn that into a cancel that leaves the
    /// write torn: a high bit keeps the CRC half, so the intent is still committed; a low bit
    /// breaks the match, and with the map holding part of the intent that is damage.
    #[test]
    fn flipped_committed_commit_word_is_never_a_torn_write() {
        for bit in [40u32, 3] {
            let region = paper_region();
            {
                let dev = NvramDisk::open(region.clone(), OpenOptions::default()).expect("open");
                dev.write_atomic(&[0, 1, 2, 3], &vec![0x11; 4 * BS])
                    .expect("write");
            }
            stopped_in_map(&region, 0x22);
            let g = Geometry::compute(region.len(), BS as u32, 2).expect("geometry");
            let slot = (0..2)
                .map(|lane| g.slot_off(lane))
                .find(|&s| region.load_u64(s + PAPER_INTENT_COMMIT) != 0)
                .expect("a slot with a set commit word");
            let commit = region.load_u64(slot + PAPER_INTENT_COMMIT);
            let new = |l: u64| region.load_u64(g.map_entry_off(l));
            let entries = read_paper_intent(&*region, slot).expect("committed").1;
            let applied = entries.iter().filter(|&&(l, n)| new(l) == n).count();
            assert_eq!(applied, 2, "two of the four map entries stored");
            region.store_u64(slot + PAPER_INTENT_COMMIT, commit ^ (1 << bit));
            let opened = NvramDisk::open(region.clone(), OpenOptions::default());
            if bit >= 32 {
                let dev = opened.expect("a committed intent is redone");
                assert_eq!(dev.recovery_report().redone, 1);
                drop(dev);
                assert_eq!(contents(&region), vec![0x22; 4 * BS]);
            } else {
                let Err(e) = opened else {
                    panic!("a half-applied intent under a broken commit word was accepted")
                };
                let msg = e.to_string();
                assert!(msg.contains("matches no valid intent"), "{msg}");
                assert!(msg.contains("holds 2 of the 4 entries"), "{msg}");
            }
        }
    }
}
