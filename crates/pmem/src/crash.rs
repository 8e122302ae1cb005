//! A simulated persistent-memory region for crash checking.
//!
//! `SimRegion` implements [`Region`] over plain memory and, while recording, logs every 8-byte
//! store (cached or non-temporal), every line flush and every fence. [`CrashState`] replays
//! that log up to any crash point and knows, per word and per line, what may or may not have
//! reached media; [`ImageSpace`] turns that into the set of possible post-crash images under a
//! fault model. Images are copy-on-write overlays on a shared base, never full copies.
//!
//! Fault models (docs/crashtest.md):
//! - **M0** x86 strict: the cached stores to one line reach media in program order (any
//!   prefix); lines are independent; a flush + fence makes a line durable; non-temporal stores
//!   are independent per word.
//! - **M1** relaxed: every word not yet flushed-and-fenced holds its last durable value or any
//!   value written to it since, with no ordering at all.
//! - **M2** write disturbance: M1, plus any subset of the eight words of a line whose flush was
//!   issued and not yet fenced may be garbage, words never written included.
//!
//! A simulated region may also hold a **disk** (the backing device of a cache) in words of its
//! own, written only by [`SimRegion::disk_write`] in whole 512-byte sectors and made durable
//! only by [`SimRegion::disk_flush`]. Under every model, each sector written since the last
//! disk flush holds at a crash its old contents or its newest ones, whole, independently of
//! every other sector (any subset of the pending sectors reached the platter). A crash inside a
//! sector's write is no crash point ([`SimEvent::is_crash_point_after`]).
//!
//! Garbage is a set of values tried in turn: 0, all ones, the old and the new value with one
//! bit flipped, a copy of another pending word of the same line, and a seeded random value.

use super::{FlushKind, Region, LINE_BYTES};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

pub const WORDS_PER_PAGE: usize = 512;
const WORDS_PER_LINE: u64 = LINE_BYTES / 8;
/// Bytes and words of a disk sector: the unit a disk writes whole (or not at all) at a crash.
pub const SECTOR_BYTES: u64 = 512;
pub const SECTOR_WORDS: u64 = SECTOR_BYTES / 8;

/// Words of a region: a shared base plus private copies of the 4 KiB pages written since.
#[derive(Clone)]
pub struct CowMem {
    base: Arc<Vec<u64>>,
    pages: Vec<Option<Box<[u64]>>>,
}

impl CowMem {
    pub fn new(base: Arc<Vec<u64>>) -> CowMem {
        assert!(
            base.len().is_multiple_of(WORDS_PER_PAGE),
            "region must be whole 4 KiB pages"
        );
        let n = base.len() / WORDS_PER_PAGE;
        CowMem {
            base,
            pages: vec![None; n],
        }
    }
    #[inline]
    pub fn get(&self, w: usize) -> u64 {
        debug_assert!(w < self.base.len(), "word {w} past the region");
        match &self.pages[w / WORDS_PER_PAGE] {
            Some(p) => p[w % WORDS_PER_PAGE],
            None => self.base[w],
        }
    }
    #[inline]
    pub fn set(&mut self, w: usize, v: u64) {
        debug_assert!(w < self.base.len(), "word {w} past the region");
        let pi = w / WORDS_PER_PAGE;
        let page = self.pages[pi].get_or_insert_with(|| {
            self.base[pi * WORDS_PER_PAGE..(pi + 1) * WORDS_PER_PAGE]
                .to_vec()
                .into_boxed_slice()
        });
        page[w % WORDS_PER_PAGE] = v;
    }
    pub fn words(&self) -> usize {
        self.base.len()
    }
    /// Materialise the current contents as a new shared base.
    pub fn flatten(&self) -> Arc<Vec<u64>> {
        let mut v = (*self.base).clone();
        for (pi, p) in self.pages.iter().enumerate() {
            if let Some(p) = p {
                debug_assert_eq!(p.len(), WORDS_PER_PAGE, "a private copy is one whole page");
                v[pi * WORDS_PER_PAGE..(pi + 1) * WORDS_PER_PAGE].copy_from_slice(p);
            }
        }
        debug_assert_eq!(
            v.len(),
            self.base.len(),
            "flattening keeps the region's size"
        );
        Arc::new(v)
    }
}

/// One recorded persistence event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimEvent {
    /// An 8-byte store of `value` to word `word` (byte offset / 8).
    Store {
        word: u64,
        value: u64,
        nt: bool,
    },
    /// A line flush (line = byte offset / 64).
    Flush {
        line: u64,
    },
    Fence,
    /// An 8-byte word of a disk sector, written by `disk_write` (pending until a disk flush).
    DiskStore {
        word: u64,
        value: u64,
    },
    /// A disk flush (fdatasync): every disk sector written before it is durable.
    DiskFlush,
}

impl SimEvent {
    /// Whether a crash may fall right after this event: everywhere but inside the words of
    /// one sector's write (a disk writes a sector whole or not at all).
    pub fn is_crash_point_after(&self) -> bool {
        !matches!(self, SimEvent::DiskStore { word, .. } if word % SECTOR_WORDS != SECTOR_WORDS - 1)
    }
}

struct SimState {
    mem: CowMem,
    recording: bool,
    events: Vec<SimEvent>,
    /// When tracking, a bitmap of the words loaded (lazy image enumeration).
    reads: Option<Vec<u64>>,
}

impl SimState {
    #[inline]
    fn note_read(&mut self, w: usize, n: usize) {
        debug_assert!(
            w + n <= self.mem.words(),
            "read of words [{w}, +{n}) past the region"
        );
        if let Some(bm) = &mut self.reads {
            for x in w..w + n {
                bm[x / 64] |= 1 << (x % 64);
            }
        }
    }
}

/// A simulated region. Single-threaded use is the norm (crash checking); a mutex makes it
/// `Sync` so that several lanes in several threads can still share it deterministically.
pub struct SimRegion {
    len: u64,
    st: Mutex<SimState>,
}

impl SimRegion {
    /// A zeroed region of `len` bytes (a multiple of 4096).
    pub fn zeroed(len: u64) -> SimRegion {
        assert!(
            len > 0 && len.is_multiple_of(4096),
            "sim region length {len} not whole pages"
        );
        SimRegion::from_base(Arc::new(vec![0u64; (len / 8) as usize]))
    }

    /// A region whose contents are `base` (shared, copied on write).
    pub fn from_base(base: Arc<Vec<u64>>) -> SimRegion {
        let len = base.len() as u64 * 8;
        SimRegion {
            len,
            st: Mutex::new(SimState {
                mem: CowMem::new(base),
                recording: false,
                events: Vec::new(),
                reads: None,
            }),
        }
    }

    /// The state, taken back from a poisoned lock too: sound because every critical section
    /// checks its arguments before it takes the lock and then only sets words and appends
    /// events, which cannot stop half-way. A thread that panicked while storing (the device
    /// under test, say) so leaves memory and log whole, and the checker may still read them.
    fn st(&self) -> MutexGuard<'_, SimState> {
        self.st.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current contents (what loads see) as a shared base.
    pub fn snapshot(&self) -> Arc<Vec<u64>> {
        self.st().mem.flatten()
    }

    /// Start logging events (clearing any earlier log).
    pub fn start_recording(&self) {
        let mut s = self.st();
        s.recording = true;
        s.events.clear();
    }

    /// Stop logging and return the log.
    pub fn take_events(&self) -> Vec<SimEvent> {
        let mut s = self.st();
        s.recording = false;
        std::mem::take(&mut s.events)
    }

    /// Events logged so far (without stopping).
    pub fn event_count(&self) -> usize {
        self.st().events.len()
    }

    /// Run `f` on the log so far while holding the region's lock, so that no thread can store,
    /// flush or fence until `f` returns: the instant of a power cut. `f` normally never returns
    /// (it writes the crash image and ends the process).
    pub fn with_frozen_events<T>(&self, f: impl FnOnce(&[SimEvent]) -> T) -> T {
        let s = self.st();
        f(&s.events)
    }

    /// Start noting every word loaded (reads, 8-byte loads).
    pub fn track_reads(&self) {
        let mut s = self.st();
        debug_assert!(s.reads.is_none(), "reads are tracked once per image");
        let n = s.mem.words().div_ceil(64);
        s.reads = Some(vec![0u64; n]);
    }

    /// The words loaded since `track_reads`, as a bitmap (bit w % 64 of entry w / 64); empty
    /// when reads are not tracked.
    pub fn read_bitmap(&self) -> Vec<u64> {
        self.st().reads.clone().unwrap_or_default()
    }

    /// The words loaded since `track_reads`, ascending.
    pub fn words_read(&self) -> Vec<u64> {
        let s = self.st();
        let Some(bm) = &s.reads else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, &b) in bm.iter().enumerate() {
            let mut b = b;
            while b != 0 {
                let t = b.trailing_zeros() as u64;
                out.push(i as u64 * 64 + t);
                b &= b - 1;
            }
        }
        out
    }

    /// Set a word directly, outside the persistence model (image construction, fault
    /// injection).
    pub fn poke(&self, word: u64, v: u64) {
        self.st().mem.set(word as usize, v);
    }

    pub fn peek(&self, word: u64) -> u64 {
        self.st().mem.get(word as usize)
    }

    /// Write whole sectors of the disk part of the region: stored at once (reads see them),
    /// durable only after the next `disk_flush` (see the module's fault model).
    pub fn disk_write(&self, off: u64, src: &[u8]) {
        assert!(
            off.is_multiple_of(SECTOR_BYTES) && (src.len() as u64).is_multiple_of(SECTOR_BYTES),
            "disk writes are whole sectors: {off} +{}",
            src.len()
        );
        self.check(off, src.len() as u64);
        let mut s = self.st();
        for (i, c) in src.chunks_exact(8).enumerate() {
            let w = off / 8 + i as u64;
            let v = u64::from_le_bytes(c.try_into().unwrap());
            s.mem.set(w as usize, v);
            if s.recording {
                s.events.push(SimEvent::DiskStore { word: w, value: v });
            }
        }
    }

    /// A disk flush: every sector written so far is durable.
    pub fn disk_flush(&self) {
        let mut s = self.st();
        if s.recording {
            s.events.push(SimEvent::DiskFlush);
        }
    }

    fn check(&self, off: u64, len: u64) {
        assert!(
            off.checked_add(len).is_some_and(|e| e <= self.len),
            "sim access [{off}, +{len}) past end {}",
            self.len
        );
    }

    fn store_words(&self, off: u64, src: &[u8], nt: bool) {
        assert!(
            off.is_multiple_of(8) && src.len().is_multiple_of(8),
            "sim stores must be 8-byte aligned: {off} +{}",
            src.len()
        );
        self.check(off, src.len() as u64);
        let mut s = self.st();
        for (i, c) in src.chunks_exact(8).enumerate() {
            let w = off / 8 + i as u64;
            let v = u64::from_le_bytes(c.try_into().unwrap());
            s.mem.set(w as usize, v);
            if s.recording {
                s.events.push(SimEvent::Store {
                    word: w,
                    value: v,
                    nt,
                });
            }
        }
    }
}

impl Region for SimRegion {
    fn len(&self) -> u64 {
        self.len
    }

    fn read(&self, off: u64, dst: &mut [u8]) {
        self.check(off, dst.len() as u64);
        let mut s = self.st();
        let first = (off / 8) as usize;
        let last = ((off + dst.len() as u64).div_ceil(8)) as usize;
        s.note_read(first, last - first);
        if off.is_multiple_of(8) && dst.len().is_multiple_of(8) {
            for (i, c) in dst.chunks_exact_mut(8).enumerate() {
                c.copy_from_slice(&s.mem.get((off / 8) as usize + i).to_le_bytes());
            }
            return;
        }
        for (i, b) in dst.iter_mut().enumerate() {
            let a = off + i as u64;
            *b = s.mem.get((a / 8) as usize).to_le_bytes()[(a % 8) as usize];
        }
    }

    fn load_u64(&self, off: u64) -> u64 {
        assert!(off.is_multiple_of(8), "unaligned load at {off}");
        self.check(off, 8);
        let mut s = self.st();
        s.note_read((off / 8) as usize, 1);
        s.mem.get((off / 8) as usize)
    }

    fn write(&self, off: u64, src: &[u8]) {
        self.store_words(off, src, false)
    }

    fn store_u64(&self, off: u64, v: u64) {
        self.store_words(off, &v.to_le_bytes(), false)
    }

    fn write_nt(&self, off: u64, src: &[u8]) {
        self.store_words(off, src, true)
    }

    fn store_u64_nt(&self, off: u64, v: u64) {
        self.store_words(off, &v.to_le_bytes(), true)
    }

    fn flush(&self, off: u64, len: u64, _kind: FlushKind) {
        if len == 0 {
            return;
        }
        self.check(off, len);
        let mut s = self.st();
        if s.recording {
            let first = off / LINE_BYTES;
            let last = (off + len - 1) / LINE_BYTES;
            for line in first..=last {
                s.events.push(SimEvent::Flush { line });
            }
        }
    }

    fn fence(&self) {
        let mut s = self.st();
        if s.recording {
            s.events.push(SimEvent::Fence);
        }
    }

    /// Every flush kind is modelled (the crash checker runs every policy on any CPU).
    fn has_flush(&self, _kind: FlushKind) -> bool {
        true
    }
}

/// The fault model a crash image is drawn from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum FaultModel {
    M0,
    M1,
    M2,
    /// M2 for every dirty line plus media faults (random runs only; see the checker).
    M3,
}

impl FaultModel {
    pub fn parse(s: &str) -> Option<FaultModel> {
        match s {
            "M0" | "m0" => Some(FaultModel::M0),
            "M1" | "m1" => Some(FaultModel::M1),
            "M2" | "m2" => Some(FaultModel::M2),
            "M3" | "m3" => Some(FaultModel::M3),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            FaultModel::M0 => "M0",
            FaultModel::M1 => "M1",
            FaultModel::M2 => "M2",
            FaultModel::M3 => "M3",
        }
    }
}

#[derive(Clone, Debug, Default)]
struct LineState {
    /// Cached stores since the line was last durable, in program order.
    stores: Vec<(u64, u64)>,
    /// Number of `stores` covered by a flush issued since the last fence.
    flushed_upto: Option<usize>,
}

/// What may have reached media at one crash point: a replay of the event log.
#[derive(Clone)]
pub struct CrashState {
    /// Words made durable since the log started whose value differs from the base.
    durable: BTreeMap<u64, u64>,
    base: Arc<Vec<u64>>,
    /// Per word: the values written since it was last durable, in order, and whether by
    /// non-temporal stores.
    pending: BTreeMap<u64, (Vec<u64>, bool)>,
    lines: BTreeMap<u64, LineState>,
    /// Disk words written since the last disk flush, with their newest values.
    disk: BTreeMap<u64, u64>,
    /// Events applied so far.
    pub applied: usize,
    /// Bumped whenever a word becomes durable (so callers can reuse a durable image).
    pub durable_gen: u64,
}

impl CrashState {
    /// The state before the first event: `base` is the durable image when recording began
    /// (recording must start right after a fence, with nothing pending).
    pub fn new(base: Arc<Vec<u64>>) -> CrashState {
        CrashState {
            durable: BTreeMap::new(),
            base,
            pending: BTreeMap::new(),
            lines: BTreeMap::new(),
            disk: BTreeMap::new(),
            applied: 0,
            durable_gen: 0,
        }
    }

    pub fn durable_word(&self, w: u64) -> u64 {
        self.durable
            .get(&w)
            .copied()
            .unwrap_or(self.base[w as usize])
    }

    fn make_durable(&mut self, w: u64, v: u64) {
        debug_assert!((w as usize) < self.base.len(), "word {w} past the region");
        self.durable_gen += 1;
        if self.base[w as usize] == v {
            self.durable.remove(&w);
        } else {
            self.durable.insert(w, v);
        }
        debug_assert_eq!(self.durable_word(w), v);
    }

    /// Apply the next event of the log.
    pub fn apply(&mut self, ev: &SimEvent) {
        self.applied += 1;
        match *ev {
            SimEvent::Store { word, value, nt } => self.store(word, value, nt),
            SimEvent::Flush { line } => {
                let l = self.lines.entry(line).or_default();
                l.flushed_upto = Some(l.stores.len());
            }
            SimEvent::Fence => self.fence(),
            SimEvent::DiskStore { word, value } => {
                debug_assert!(
                    !self.pending.contains_key(&word),
                    "word {word}: a disk word is never stored to as memory"
                );
                self.disk.insert(word, value);
            }
            SimEvent::DiskFlush => {
                for (w, v) in std::mem::take(&mut self.disk) {
                    self.make_durable(w, v);
                }
            }
        }
    }

    fn store(&mut self, word: u64, value: u64, nt: bool) {
        debug_assert!(
            (word as usize) < self.base.len(),
            "word {word} past the region"
        );
        debug_assert!(
            !self.disk.contains_key(&word),
            "word {word}: a memory store to a disk word"
        );
        let p = self.pending.entry(word).or_insert_with(|| (Vec::new(), nt));
        assert!(
            p.1 == nt || p.0.is_empty(),
            "word {word}: cached and non-temporal stores mixed before a fence"
        );
        p.1 = nt;
        p.0.push(value);
        if !nt {
            self.lines
                .entry(word / WORDS_PER_LINE)
                .or_default()
                .stores
                .push((word, value));
        }
    }

    /// A fence: every non-temporal word becomes durable with its last value, and in every
    /// flushed line the stores the flush covered become durable; later ones stay pending.
    fn fence(&mut self) {
        let nt_words: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.1)
            .map(|(&w, _)| w)
            .collect();
        for w in nt_words {
            let (vals, _) = self.pending.remove(&w).expect("listed");
            self.make_durable(w, *vals.last().expect("a pending word has a value"));
        }
        let flushed: Vec<u64> = self.flushed_lines().collect();
        for line in flushed {
            let l = self.lines.get_mut(&line).expect("listed");
            let k = l.flushed_upto.take().expect("flushed");
            let done: Vec<(u64, u64)> = l.stores.drain(..k).collect();
            if l.stores.is_empty() {
                self.lines.remove(&line);
            }
            for (w, v) in done {
                let p = self.pending.get_mut(&w).expect("a line store is pending");
                let i = p.0.iter().position(|&x| x == v).expect("value pending");
                // A flush covers a prefix of its line's stores, in program order, so a word's
                // covered values are its oldest pending ones.
                debug_assert_eq!(i, 0, "word {w}: a covered store is its oldest pending one");
                p.0.remove(i);
                if p.0.is_empty() {
                    self.pending.remove(&w);
                }
                self.make_durable(w, v);
            }
        }
        debug_assert!(
            self.pending.values().all(|p| !p.1),
            "a fence leaves no non-temporal store pending"
        );
        debug_assert!(
            self.lines.values().all(|l| l.flushed_upto.is_none()),
            "a fence completes every flush"
        );
    }

    /// True when nothing is pending (every store so far is durable).
    pub fn quiescent(&self) -> bool {
        self.pending.is_empty() && self.disk.is_empty()
    }

    /// Words not yet durable: memory words and disk words.
    pub fn pending_words(&self) -> impl Iterator<Item = u64> + '_ {
        self.pending.keys().chain(self.disk.keys()).copied()
    }

    /// Whether `line` holds cached stores not yet durable (M0's prefixes and M2's garbage
    /// involve its words).
    pub fn line_has_cached_stores(&self, line: u64) -> bool {
        self.lines.contains_key(&line)
    }

    /// Disk sectors written since the last disk flush.
    pub fn pending_sectors(&self) -> usize {
        let mut sectors: Vec<u64> = self.disk.keys().map(|w| w / SECTOR_WORDS).collect();
        sectors.dedup();
        sectors.len()
    }

    /// Lines whose flush was issued and not yet fenced (M2 may disturb any of their words).
    pub fn flushed_lines(&self) -> impl Iterator<Item = u64> + '_ {
        self.lines
            .iter()
            .filter(|(_, l)| l.flushed_upto.is_some())
            .map(|(&k, _)| k)
    }

    /// Durable image: the base with every word made durable so far.
    pub fn durable_image(&self) -> Arc<Vec<u64>> {
        if self.durable.is_empty() {
            return self.base.clone();
        }
        let mut v = (*self.base).clone();
        for (&w, &x) in &self.durable {
            // `durable` holds only words that differ from the base (make_durable).
            debug_assert_ne!(v[w as usize], x, "word {w} durable with its base value");
            v[w as usize] = x;
        }
        Arc::new(v)
    }
}

/// One choice point of an image: which assignment a word (or a line, under M0) takes.
#[derive(Clone, Debug)]
pub struct Slot {
    /// Options, each a set of (word, value) assignments; option 0 is "nothing reached media".
    pub options: Vec<Vec<(u64, u64)>>,
    /// A label per option for reports (e.g. "durable", "new", "garbage:ones").
    pub labels: Vec<&'static str>,
}

/// The possible images of one crash point under one model.
pub struct ImageSpace {
    pub slots: Vec<Slot>,
    /// Durable base of the crash point.
    pub base: Arc<Vec<u64>>,
}

/// Limits on enumeration.
pub const EAGER_IMAGES_MAX: u128 = 1 << 16;

fn garbage_values(old: u64, new: u64, line_pending: &[u64], seed: u64) -> Vec<(u64, &'static str)> {
    let bit = 1u64 << (seed % 64);
    let mut r = seed ^ 0x9e37_79b9_7f4a_7c15;
    r ^= r >> 31;
    r = r.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    r ^= r >> 29;
    let mut g = vec![
        (0, "garbage:zero"),
        (!0, "garbage:ones"),
        (old ^ bit, "garbage:old-bitflip"),
        (new ^ bit, "garbage:new-bitflip"),
    ];
    for &p in line_pending {
        g.push((p, "garbage:copy-of-line-word"));
    }
    g.push((r, "garbage:random"));
    g
}

impl ImageSpace {
    /// The images of `cs` under `model`. `seed` picks the garbage bit and random values.
    pub fn new(cs: &CrashState, model: FaultModel, seed: u64) -> ImageSpace {
        ImageSpace::with_base(cs, model, seed, cs.durable_image())
    }

    /// As `new`, with the crash point's durable image supplied (`cs.durable_image()`, reused
    /// by the caller while `cs.durable_gen` is unchanged).
    pub fn with_base(
        cs: &CrashState,
        model: FaultModel,
        seed: u64,
        base: Arc<Vec<u64>>,
    ) -> ImageSpace {
        debug_assert_eq!(
            base.len(),
            cs.base.len(),
            "the durable image of the same region"
        );
        let mut slots = match model {
            FaultModel::M0 => m0_slots(cs),
            FaultModel::M1 | FaultModel::M2 | FaultModel::M3 => {
                word_slots(cs, &disturbed_lines(cs, model), seed, &base)
            }
        };
        slots.extend(sector_slots(cs));
        debug_assert!(
            slots.iter().all(|s| s.options.len() == s.labels.len()
                && s.options.first().is_some_and(|o| o.is_empty())),
            "option 0 of every slot is \"nothing pending reached media\""
        );
        ImageSpace { slots, base }
    }

    /// The sub-space of the slots `keep` (the others stay at "nothing reached media").
    pub fn restrict(&self, keep: &[usize]) -> ImageSpace {
        debug_assert!(
            keep.windows(2).all(|k| k[0] < k[1]),
            "each slot kept once, in order"
        );
        let sub = ImageSpace {
            slots: keep.iter().map(|&i| self.slots[i].clone()).collect(),
            base: self.base.clone(),
        };
        debug_assert!(sub.size() <= self.size(), "a sub-space holds fewer images");
        sub
    }

    /// (word, slot index) for every word the space can change, sorted by word.
    pub fn slot_of_word(&self) -> Vec<(u64, usize)> {
        let mut m: Vec<(u64, usize)> = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            for o in &s.options {
                for &(w, _) in o {
                    m.push((w, i));
                }
            }
        }
        m.sort_unstable();
        m.dedup_by_key(|x| x.0);
        // Each word in one slot only: the checker merges this list with the words read.
        debug_assert!(m.windows(2).all(|p| p[0].0 < p[1].0), "one slot per word");
        m
    }

    /// Number of images (saturating at u128::MAX).
    pub fn size(&self) -> u128 {
        self.slots
            .iter()
            .fold(1u128, |a, s| a.saturating_mul(s.options.len() as u128))
    }

    /// The image choices to check: all of them when there are at most `EAGER_IMAGES_MAX`;
    /// otherwise the two extremes (nothing / everything latest), every single-slot deviation
    /// from each extreme, and `samples` seeded random choices. Returns (choices, exhaustive).
    pub fn choices(&self, samples: usize, seed: u64) -> (Vec<Vec<u16>>, bool) {
        self.choices_upto(EAGER_IMAGES_MAX, samples, seed)
    }

    /// As `choices`, enumerating every image up to `eager_max` of them.
    pub fn choices_upto(
        &self,
        eager_max: u128,
        samples: usize,
        seed: u64,
    ) -> (Vec<Vec<u16>>, bool) {
        let size = self.size();
        let (out, exhaustive) = if size <= eager_max {
            (self.every_choice(size), true)
        } else {
            (self.sampled_choices(samples, seed), false)
        };
        debug_assert!(
            out.iter().all(|c| self.is_choice(c)),
            "every choice takes one option of every slot"
        );
        debug_assert!(!exhaustive || out.len() as u128 == size);
        (out, exhaustive)
    }

    /// Whether `c` names one option of every slot.
    fn is_choice(&self, c: &[u16]) -> bool {
        c.len() == self.slots.len()
            && c.iter()
                .zip(&self.slots)
                .all(|(&o, s)| (o as usize) < s.options.len())
    }

    /// Every choice, counting up in mixed radix (slot i has as many digits as options).
    fn every_choice(&self, size: u128) -> Vec<Vec<u16>> {
        let mut out = Vec::with_capacity(size as usize);
        let mut c = vec![0u16; self.slots.len()];
        for _ in 0..size {
            out.push(c.clone());
            for (digit, slot) in c.iter_mut().zip(&self.slots) {
                *digit += 1;
                if (*digit as usize) < slot.options.len() {
                    break;
                }
                *digit = 0;
            }
        }
        // `size` steps of the count bring every digit round to zero again.
        debug_assert!(c.iter().all(|&d| d == 0), "the count ended where it began");
        out
    }

    /// The extremes, every single-slot deviation from each, and `samples` random choices.
    fn sampled_choices(&self, samples: usize, seed: u64) -> Vec<Vec<u16>> {
        let none = vec![0u16; self.slots.len()];
        let latest: Vec<u16> = self
            .slots
            .iter()
            .map(|s| (s.options.len() - 1) as u16)
            .collect();
        let mut out = vec![none.clone(), latest.clone()];
        for (i, s) in self.slots.iter().enumerate() {
            for o in 0..s.options.len() as u16 {
                if o != 0 {
                    let mut c = none.clone();
                    c[i] = o;
                    out.push(c);
                }
                if o != latest[i] {
                    let mut c = latest.clone();
                    c[i] = o;
                    out.push(c);
                }
            }
        }
        let mut x = seed | 1;
        for _ in 0..samples {
            let c: Vec<u16> = self
                .slots
                .iter()
                .map(|s| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % s.options.len() as u64) as u16
                })
                .collect();
            out.push(c);
        }
        // Each slot of n options deviates n - 1 ways from each extreme.
        let deviations: usize = self.slots.iter().map(|s| 2 * (s.options.len() - 1)).sum();
        debug_assert_eq!(out.len(), 2 + deviations + samples);
        out
    }

    /// One choice drawn at random (seeded): a single power cut's image.
    pub fn random_choice(&self, seed: u64) -> Vec<u16> {
        let mut x = seed | 1;
        self.slots
            .iter()
            .map(|s| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % s.options.len() as u64) as u16
            })
            .collect()
    }

    /// Build the image for `choice`: a copy-on-write region over the crash point's base.
    pub fn image(&self, choice: &[u16]) -> SimRegion {
        debug_assert_eq!(choice.len(), self.slots.len(), "one option per slot");
        let r = SimRegion::from_base(self.base.clone());
        {
            let mut s = r.st();
            for (slot, &o) in self.slots.iter().zip(choice) {
                for &(w, v) in &slot.options[o as usize] {
                    s.mem.set(w as usize, v);
                }
            }
        }
        r
    }

    /// Describe a choice for a violation report: the non-durable options taken.
    pub fn describe(&self, choice: &[u16]) -> String {
        debug_assert_eq!(choice.len(), self.slots.len(), "one option per slot");
        let mut parts = Vec::new();
        for (slot, &o) in self.slots.iter().zip(choice) {
            if o == 0 {
                continue;
            }
            let words: Vec<String> = slot.options[o as usize]
                .iter()
                .map(|(w, v)| format!("@{:#x}={v:#x}", w * 8))
                .collect();
            parts.push(format!("{} {}", slot.labels[o as usize], words.join(",")));
        }
        const SHOWN: usize = 8;
        match parts.len() {
            0 => "nothing pending reached media".into(),
            n if n <= SHOWN => parts.join("; "),
            n => format!("{}; ... ({} more)", parts[..SHOWN].join("; "), n - SHOWN),
        }
    }
}

/// M0's slots: one per line with pending cached stores (any prefix of them, in program
/// order), then one per word with pending non-temporal stores.
fn m0_slots(cs: &CrashState) -> Vec<Slot> {
    let mut slots = Vec::new();
    for l in cs.lines.values() {
        if l.stores.is_empty() {
            continue;
        }
        let mut options = vec![Vec::new()];
        let mut labels = vec!["durable"];
        let mut acc: Vec<(u64, u64)> = Vec::new();
        for &(w, v) in &l.stores {
            acc.retain(|&(x, _)| x != w);
            acc.push((w, v));
            options.push(acc.clone());
            labels.push("prefix");
        }
        debug_assert_eq!(
            options.len(),
            l.stores.len() + 1,
            "none, or a prefix of 1 to n"
        );
        slots.push(Slot { options, labels });
    }
    for (&w, (vals, nt)) in &cs.pending {
        if *nt {
            slots.push(word_slot(w, vals, &[]));
        }
    }
    slots
}

/// Every model's disk slots: one per sector written since the last disk flush, old or new.
fn sector_slots(cs: &CrashState) -> Vec<Slot> {
    let mut slots: Vec<Slot> = Vec::new();
    let mut last_sector = None;
    for (&w, &v) in &cs.disk {
        if last_sector != Some(w / SECTOR_WORDS) {
            last_sector = Some(w / SECTOR_WORDS);
            slots.push(Slot {
                options: vec![Vec::new(), Vec::new()],
                labels: vec!["durable", "sector-new"],
            });
        }
        slots.last_mut().expect("pushed").options[1].push((w, v));
    }
    debug_assert!(slots
        .iter()
        .all(|s| s.options[1].len() as u64 == SECTOR_WORDS));
    slots
}

/// The lines whose words may be garbage: none under M1; under M2 those whose flush is issued
/// and not yet fenced; under M3 every dirty line, flushed or not.
fn disturbed_lines(cs: &CrashState, model: FaultModel) -> BTreeSet<u64> {
    match model {
        FaultModel::M0 | FaultModel::M1 => BTreeSet::new(),
        FaultModel::M2 => cs.flushed_lines().collect(),
        FaultModel::M3 => cs.lines.keys().copied().chain(cs.flushed_lines()).collect(),
    }
}

/// M1-M3's slots: one per pending word, and one per word of a disturbed line, which also
/// takes the garbage values.
fn word_slots(cs: &CrashState, disturbed: &BTreeSet<u64>, seed: u64, base: &[u64]) -> Vec<Slot> {
    let mut words: BTreeSet<u64> = cs.pending.keys().copied().collect();
    for &line in disturbed {
        words.extend(line * WORDS_PER_LINE..(line + 1) * WORDS_PER_LINE);
    }
    let mut slots = Vec::with_capacity(words.len());
    for w in words {
        let vals: &[u64] = cs.pending.get(&w).map(|p| p.0.as_slice()).unwrap_or(&[]);
        let line = w / WORDS_PER_LINE;
        let garbage = if disturbed.contains(&line) {
            let others: Vec<u64> = (line * WORDS_PER_LINE..(line + 1) * WORDS_PER_LINE)
                .filter(|&x| x != w)
                .filter_map(|x| cs.pending.get(&x).and_then(|p| p.0.last().copied()))
                .collect();
            let old = base[w as usize];
            let new = vals.last().copied().unwrap_or(old);
            garbage_values(
                old,
                new,
                &others,
                seed ^ w.wrapping_mul(0x2545_f491_4f6c_dd1d),
            )
        } else {
            Vec::new()
        };
        slots.push(word_slot(w, vals, &garbage));
    }
    slots
}

fn word_slot(w: u64, vals: &[u64], garbage: &[(u64, &'static str)]) -> Slot {
    let mut options = vec![Vec::new()];
    let mut labels = vec!["durable"];
    let mut seen: Vec<u64> = Vec::new();
    for (i, &v) in vals.iter().enumerate() {
        if seen.contains(&v) {
            continue;
        }
        seen.push(v);
        options.push(vec![(w, v)]);
        labels.push(if i + 1 == vals.len() {
            "new"
        } else {
            "intermediate"
        });
    }
    for &(g, label) in garbage {
        if seen.contains(&g) {
            continue;
        }
        seen.push(g);
        options.push(vec![(w, g)]);
        labels.push(label);
    }
    // Keep "latest" (the last written value) as the last option, so choices() can name the
    // all-latest extreme; garbage sits between.
    if !garbage.is_empty() && vals.last().is_some() {
        let latest = vals.last().copied().expect("checked");
        if let Some(i) = options.iter().position(|o| o == &vec![(w, latest)]) {
            let o = options.remove(i);
            let l = labels.remove(i);
            options.push(o);
            labels.push(l);
        }
        debug_assert_eq!(options.last(), Some(&vec![(w, latest)]), "latest is last");
    }
    debug_assert_eq!(options.len(), labels.len(), "a label per option");
    Slot { options, labels }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_sectors_are_old_or_new_whole_until_a_disk_flush() {
        let r = SimRegion::zeroed(8192);
        let base = r.snapshot();
        r.start_recording();
        r.disk_write(4096, &[1u8; 1024]); // sectors 8 and 9
        r.store_u64_nt(0, 7);
        r.fence();
        let events = r.take_events();
        let mid = events.iter().filter(|e| !e.is_crash_point_after()).count();
        assert_eq!(mid, 2 * 63, "no crash inside a sector's write");
        let mut cs = CrashState::new(base.clone());
        for e in &events {
            cs.apply(e);
        }
        assert!(!cs.quiescent(), "a memory fence does not flush the disk");
        assert_eq!(cs.pending_sectors(), 2);
        for model in [FaultModel::M0, FaultModel::M1, FaultModel::M2] {
            let space = ImageSpace::new(&cs, model, 1);
            assert_eq!(space.size(), 4, "{model:?}: any subset of two sectors");
            let (choices, all) = space.choices(8, 1);
            assert!(all && choices.len() == 4);
            let torn: Vec<(u64, u64)> = choices
                .iter()
                .map(|c| {
                    let img = space.image(c);
                    (img.peek(512), img.peek(512 + 63))
                })
                .collect();
            assert!(
                torn.iter().all(|(a, b)| a == b),
                "{model:?}: a sector is whole"
            );
            assert_eq!(
                space.image(&[1, 0]).peek(576),
                0,
                "one sector new, the other old"
            );
        }
        cs.apply(&SimEvent::DiskFlush);
        assert!(cs.quiescent());
        assert_eq!(cs.durable_word(512 + 64), u64::from_le_bytes([1; 8]));
        assert_eq!(ImageSpace::new(&cs, FaultModel::M1, 1).size(), 1);
    }

    fn rec() -> SimRegion {
        let r = SimRegion::zeroed(8192);
        r.start_recording();
        r
    }

    #[test]
    fn fence_makes_nt_durable_and_flush_fence_makes_cached_durable() {
        let r = rec();
        r.store_u64_nt(0, 7);
        r.store_u64(64, 9);
        let ev = r.take_events();
        let mut cs = CrashState::new(Arc::new(vec![0; 1024]));
        for e in &ev {
            cs.apply(e);
        }
        assert_eq!(cs.pending_words().count(), 2);
        cs.apply(&SimEvent::Fence);
        assert_eq!(
            cs.pending_words().collect::<Vec<_>>(),
            vec![8],
            "cached word stays pending without a flush"
        );
        assert_eq!(cs.durable_word(0), 7);
        cs.apply(&SimEvent::Flush { line: 1 });
        cs.apply(&SimEvent::Fence);
        assert!(cs.quiescent());
        assert_eq!(cs.durable_word(8), 9);
    }

    #[test]
    fn store_after_flush_stays_pending() {
        let mut cs = CrashState::new(Arc::new(vec![0; 1024]));
        cs.apply(&SimEvent::Store {
            word: 8,
            value: 1,
            nt: false,
        });
        cs.apply(&SimEvent::Flush { line: 1 });
        cs.apply(&SimEvent::Store {
            word: 9,
            value: 2,
            nt: false,
        });
        cs.apply(&SimEvent::Fence);
        assert_eq!(cs.durable_word(8), 1);
        assert_eq!(cs.durable_word(9), 0);
        assert_eq!(cs.pending_words().collect::<Vec<_>>(), vec![9]);
    }

    #[test]
    fn image_counts_per_model() {
        let mut cs = CrashState::new(Arc::new(vec![0; 1024]));
        // Line 1: two cached stores to different words; one NT word elsewhere.
        cs.apply(&SimEvent::Store {
            word: 8,
            value: 1,
            nt: false,
        });
        cs.apply(&SimEvent::Store {
            word: 9,
            value: 2,
            nt: false,
        });
        cs.apply(&SimEvent::Store {
            word: 40,
            value: 3,
            nt: true,
        });
        // M0: line prefixes (3) x NT word (2) = 6.
        assert_eq!(ImageSpace::new(&cs, FaultModel::M0, 1).size(), 6);
        // M1: each word independent: 2 x 2 x 2 = 8 (M0's order constraint is gone).
        assert_eq!(ImageSpace::new(&cs, FaultModel::M1, 1).size(), 8);
        // No flush issued: M2 adds nothing.
        assert_eq!(ImageSpace::new(&cs, FaultModel::M2, 1).size(), 8);
        cs.apply(&SimEvent::Flush { line: 1 });
        let m2 = ImageSpace::new(&cs, FaultModel::M2, 1);
        assert!(
            m2.size() > 8 * 1000,
            "a flushed line's 8 words may each be garbage"
        );
        let (choices, exhaustive) = m2.choices(100, 3);
        assert!(!exhaustive || m2.size() <= EAGER_IMAGES_MAX);
        assert!(!choices.is_empty());
        // Every enumerated M1 image is distinct.
        let m1 = ImageSpace::new(&cs, FaultModel::M1, 1);
        let (all, ex) = m1.choices(0, 0);
        assert!(ex);
        let mut imgs: Vec<Vec<u64>> = all
            .iter()
            .map(|c| {
                let r = m1.image(c);
                vec![r.peek(8), r.peek(9), r.peek(40)]
            })
            .collect();
        imgs.sort();
        imgs.dedup();
        assert_eq!(imgs.len(), 8);
    }
}
