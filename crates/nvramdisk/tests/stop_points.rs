//! Stop-point tests: every write, atomic write and discard of the nvramdisk is all-old-or-all-new
//! when it is interrupted at ANY of its stop points (the store and the persist of every protocol
//! step, see `Step`), for both protocols and for the orderings p4 and p6 with the best flush instruction the CPU has (clwb, clflushopt or clflush).
//!
//! Mechanism: a hook installed with `OpenOptions::hook` sees every event. For stop point k the
//! hook returns `Action::Stop` at the k-th event of the operation under test (the write then
//! returns `Error::Stopped` and the device refuses further I/O), optionally after writing garbage
//! into that event's bytes. An `MmapRegion` makes every store visible at once, so "stopped after
//! the store" and "stopped after the persist" leave the same bytes; the garbage stands for a field
//! whose store was torn by the power failure (Table 2's X). The device is then dropped and the
//! same region reopened, which runs recovery; the state reached is classified from the raw
//! region BEFORE recovery, and the blocks are verified after it.
//!
//! Fault model for the garbage: the paper protocol is designed for a torn value in any of its
//! fields (Table 2), and the record paths (paper intent, fast record) for torn records and torn
//! map words, so they get garbage at every stop point. The fast protocol's single-block word
//! path relies, by design, on its one aligned 8-byte non-temporal map store being a single word
//! (`Method::word_atomic`, docs/format.md 6.3): a torn map word is outside its fault model and
//! is not injected there (its plain stop points are all visited).
//!
//! States (printed for every stop point, visible with --nocapture): Table 2's S0..S11 for the
//! paper single-block path, I0..I7 for the paper intent, F0..F4 for the fast word path (F0..F2
//! also for the data step of the record path), R1..R5 for the fast record path.

use nvstack_core::Error;
use nvstack_nvramdisk::entry::Entry;
use nvstack_nvramdisk::journal::{
    read_fast_record, read_paper_intent, LBA_NULL, PAPER_INTENT, PAPER_INTENT_COMMIT, PAPER_L1,
    PAPER_L2, PAPER_VPN,
};
use nvstack_nvramdisk::slot::{paper_intent_state, IntentState};
use nvstack_nvramdisk::{
    format_region, Action, Event, FormatOptions, Geometry, Hook, NvramDisk, OpenOptions, Phase,
    Protocol, Step,
};
use nvstack_pmem::ordering::{policy_by_name, OrderingPolicy};
use nvstack_pmem::{MmapRegion, Region};
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

const REGION_BYTES: u64 = 2 << 20;
const BLOCK: usize = 4096;
static ZEROS: [u8; BLOCK] = [0; BLOCK];
const MAGIC: u64 = 0x4e49_4f50_504f_5453; // "STOPPOIN"
/// Versions: set up before the test, the first of two neighbouring writes, the write under
/// test, and the write issued after recovery.
const V_OLD: u64 = 1;
const V_FIRST: u64 = 5;
const V_NEW: u64 = 7;
const V_AFTER: u64 = 9;
/// Stop points of one scenario beyond which the sweep samples (first, last and every
/// step/phase boundary are always included).
const MAX_POINTS: usize = 160;

// ---------------------------------------------------------------------------------------------
// Block contents: magic, LBA, version, a pattern derived from both, a checksum, a trailer.

fn block(lba: u64, ver: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK];
    b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
    b[8..16].copy_from_slice(&lba.to_le_bytes());
    b[16..24].copy_from_slice(&ver.to_le_bytes());
    let mut x =
        (lba.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ver.wrapping_mul(0xd1b5_4a32_d192_ed03)) | 1;
    for c in b[24..BLOCK - 8].chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes());
    }
    let crc = crc32c::crc32c(&b[..BLOCK - 8]);
    b[BLOCK - 8..BLOCK - 4].copy_from_slice(&crc.to_le_bytes());
    b[BLOCK - 4..].copy_from_slice(&(ver as u32 ^ 0xa5a5_a5a5).to_le_bytes());
    b
}

fn blocks(lbas: &[u64], ver: u64) -> Vec<u8> {
    lbas.iter().flat_map(|&l| block(l, ver)).collect()
}

/// None: all zeros (never written or discarded); Some(version): an intact block of `lba`.
fn decode(buf: &[u8], lba: u64) -> Result<Option<u64>, String> {
    if buf == &ZEROS[..] {
        return Ok(None);
    }
    let w = |o: usize| u64::from_le_bytes(buf[o..o + 8].try_into().unwrap());
    let crc = u32::from_le_bytes(buf[BLOCK - 8..BLOCK - 4].try_into().unwrap());
    if w(0) != MAGIC || crc != crc32c::crc32c(&buf[..BLOCK - 8]) {
        return Err(format!(
            "torn or foreign block (magic {:#x}, crc {crc:#x}, computed {:#x})",
            w(0),
            crc32c::crc32c(&buf[..BLOCK - 8])
        ));
    }
    if w(8) != lba {
        return Err(format!("holds the block of LBA {}", w(8)));
    }
    let v = w(16);
    if buf != block(lba, v).as_slice() {
        return Err(format!("version {v} header but torn contents"));
    }
    Ok(Some(v))
}

// ---------------------------------------------------------------------------------------------
// Operations and scenarios.

#[derive(Clone, Debug)]
enum Op {
    Write(Vec<u64>, u64),
    Discard(u64, u64),
}

impl Op {
    fn lbas(&self) -> Vec<u64> {
        match self {
            Op::Write(l, _) => l.clone(),
            Op::Discard(lba, n) => (*lba..lba + n).collect(),
        }
    }
    fn apply(&self, dev: &NvramDisk<MmapRegion>) -> nvstack_core::Result<()> {
        match self {
            Op::Write(l, v) => dev.write_atomic(l, &blocks(l, *v)),
            Op::Discard(lba, n) => dev.discard_blocks(*lba, *n),
        }
    }
    fn update(&self, model: &mut BTreeMap<u64, u64>) {
        match self {
            Op::Write(l, v) => {
                for &x in l {
                    model.insert(x, *v);
                }
            }
            Op::Discard(lba, n) => {
                for x in *lba..lba + n {
                    model.remove(&x);
                }
            }
        }
    }
    fn is_write(&self) -> bool {
        matches!(self, Op::Write(..))
    }
}

struct Scenario {
    name: &'static str,
    lanes: u32,
    /// Blocks written (one by one, version V_OLD unless stated) before the device under test
    /// is opened: the old versions and the unrelated blocks.
    setup: Vec<(u64, u64)>,
    /// Operations on the device under test before the hook is armed.
    pre: Vec<Op>,
    /// The operation under test.
    op: Op,
}

#[derive(Clone, Copy)]
struct Cfg {
    protocol: Protocol,
    ordering: OrderingPolicy,
}

impl Cfg {
    /// The tests name p4 and `best_flush_policy()`, which every x86-64 CPU runs (SSE2
    /// non-temporal stores; clflush at worst): a policy that does not resolve is a failure,
    /// never a skip that would count as passed.
    fn new(protocol: Protocol, ordering: &str) -> Cfg {
        let ordering = policy_by_name(ordering)
            .unwrap_or_else(|e| panic!("{}/{ordering}: {e}", protocol.name()));
        Cfg { protocol, ordering }
    }
    fn name(&self) -> String {
        format!("{}/{}", self.protocol.name(), self.ordering.name)
    }
}

fn with_old(lbas: &[u64]) -> Vec<(u64, u64)> {
    lbas.iter().map(|&l| (l, V_OLD)).collect()
}

// ---------------------------------------------------------------------------------------------
// The hook.

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Garbage {
    None,
    Zero,
    Ones,
    BitFlip,
    Random,
}

const GARBAGE: [Garbage; 5] = [
    Garbage::None,
    Garbage::Zero,
    Garbage::Ones,
    Garbage::BitFlip,
    Garbage::Random,
];

#[derive(Clone, Copy, Debug)]
struct Logged {
    step: Step,
    phase: Phase,
    off: u64,
    len: u64,
    lba: u64,
    /// The first 8 bytes at `off` when the event fired (before any garbage): the legitimate
    /// value of an 8-byte step.
    word: u64,
}

struct Probe {
    region: Arc<MmapRegion>,
    armed: AtomicBool,
    stop: Option<(usize, Garbage, u64)>,
    log: Mutex<Vec<Logged>>,
    injected: Mutex<Option<Vec<u8>>>,
}

fn make_garbage(cur: &[u8], g: Garbage, seed: u64) -> Vec<u8> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let len = cur.len();
    match g {
        Garbage::None => cur.to_vec(),
        Garbage::Zero => vec![0; len],
        Garbage::Ones => vec![0xff; len],
        Garbage::BitFlip => {
            let mut v = cur.to_vec();
            let bit = rng.gen_range(0..len * 8);
            v[bit / 8] ^= 1 << (bit % 8);
            v
        }
        Garbage::Random => {
            let mut v = vec![0; len];
            rng.fill_bytes(&mut v);
            v
        }
    }
}

impl Probe {
    fn on_event(&self, ev: &Event) -> Action {
        if ev.step == Step::ReadLookup || !self.armed.load(Ordering::Acquire) {
            return Action::Continue;
        }
        let r = &*self.region;
        let word = if ev.len >= 8 { r.load_u64(ev.off) } else { 0 };
        let mut log = self.log.lock().unwrap();
        log.push(Logged {
            step: ev.step,
            phase: ev.phase,
            off: ev.off,
            len: ev.len,
            lba: ev.lba,
            word,
        });
        match self.stop {
            Some((k, g, seed)) if k + 1 == log.len() => {
                if g != Garbage::None {
                    let mut cur = vec![0u8; ev.len as usize];
                    r.read(ev.off, &mut cur);
                    let bytes = make_garbage(&cur, g, seed);
                    if ev.len == 8 {
                        r.store_u64(ev.off, u64::from_le_bytes(bytes[..8].try_into().unwrap()));
                    } else {
                        r.write(ev.off, &bytes);
                    }
                    *self.injected.lock().unwrap() = Some(bytes);
                }
                self.armed.store(false, Ordering::Release);
                Action::Stop
            }
            _ => Action::Continue,
        }
    }
}

fn seed_for(parts: &[&str], k: usize, g: Garbage) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    (h ^ ((k as u64) << 8) ^ (g as u64)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

// ---------------------------------------------------------------------------------------------
// Paths, states and expectations.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    PaperSingle,
    PaperIntent,
    FastWord,
    FastRecord,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    Old,
    New,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Old,
    New,
    /// Old and new contents are the same (a never-written block inside a discarded range).
    Both,
}

/// What the counting run learnt about a scenario.
struct Known {
    path: Path,
    n: usize,
    /// The lane slot the operation uses.
    slot: u64,
    /// The LBAs whose map entry the operation changes, in order.
    changed: Vec<u64>,
    /// Index of the last Persisted event: a stop at or after it is an acknowledged write.
    last_persist: usize,
    steps: Vec<(Step, Phase)>,
    log: Vec<Logged>,
}

const PAPER_STATES: [&str; 12] = [
    "S0", "S1", "S2", "S3", "S4", "S5", "S6", "S7", "S8", "S9", "S10", "S11",
];
const FAST_WORD_STATES: [&str; 5] = ["F0", "F1", "F2", "F3", "F4"];
const INTENT_STATES: [&str; 8] = ["I0", "I1", "I2", "I3", "I4", "I5", "I6", "I7"];
const FAST_RECORD_STATES: [&str; 5] = ["R1", "R2", "R3", "R4", "R5"];

fn describe(state: &str) -> &'static str {
    match state {
        "S0" => "<phi, null, null, old>",
        "S1" => "<X, null, null, old>",
        "S2" => "<new, null, null, old>",
        "S3" => "<new, X, null, old>",
        "S4" => "<new, lba, null, old>",
        "S5" => "<new, lba, X, old>",
        "S6" => "<new, lba, lba, old>",
        "S7" => "<new, lba, lba, X>",
        "S8" => "<new, lba, lba, new>",
        "S9" => "<new, X, lba, new>",
        "S10" => "<new, null, lba, new>",
        "S11" => "<new, null, X, new>",
        "S0'" => "<new, null, null, new> (done)",
        "F0" => "idle: map old, shadow pages hold none of the new data",
        "F1" => "data being written",
        "F2" => "data persisted",
        "F3" => "map entry stored, not persisted",
        "F4" => "map persisted (done)",
        "R1" => "record being written",
        "R2" => "record persisted",
        "R3" => "map entries partly stored",
        "R4" => "map persisted, record still valid",
        "R5" => "record cleared",
        "I0" => "data only, intent not written",
        "I1" => "intent being written",
        "I2" => "intent persisted, not committed",
        "I3" => "commit word stored, not persisted",
        "I4" => "commit word persisted",
        "I5" => "map entries partly stored",
        "I6" => "map persisted, intent still committed",
        "I7" => "commit word being cleared",
        "I0'" => "commit word cleared (done)",
        _ => "?",
    }
}

/// Table 2 from the four raw fields (X = neither the legitimate old nor the new value).
fn classify_paper_single(
    f: [u64; 4],
    lba: u64,
    old_vpn: u64,
    old_m: u64,
    new: Option<u64>,
) -> Option<&'static str> {
    let [vpn, l1, l2, m] = f;
    let is_new = |v: u64| Some(v) == new;
    let fv = if is_new(vpn) {
        'N'
    } else if vpn == old_vpn {
        'O'
    } else {
        'X'
    };
    let fl = |v: u64| {
        if v == LBA_NULL {
            'n'
        } else if v == lba {
            'L'
        } else {
            'X'
        }
    };
    let fm = if m == old_m {
        'O'
    } else if is_new(m) {
        'N'
    } else {
        'X'
    };
    Some(match (fv, fl(l1), fl(l2), fm) {
        ('O', 'n', 'n', 'O') => "S0",
        ('X', 'n', 'n', 'O') => "S1",
        ('N', 'n', 'n', 'O') => "S2",
        ('N', 'X', 'n', 'O') => "S3",
        ('N', 'L', 'n', 'O') => "S4",
        ('N', 'L', 'X', 'O') => "S5",
        ('N', 'L', 'L', 'O') => "S6",
        ('N', 'L', 'L', 'X') => "S7",
        ('N', 'L', 'L', 'N') => "S8",
        ('N', 'X', 'L', 'N') => "S9",
        ('N', 'n', 'L', 'N') => "S10",
        ('N', 'n', 'X', 'N') => "S11",
        ('N', 'n', 'n', 'N') => "S0'",
        _ => return None,
    })
}

/// Whether the paper intent area holds a complete intent (count and checksum), whatever the
/// commit word says (`read_paper_intent` only reads one its commit word matches).
fn intent_complete(r: &MmapRegion, slot: u64) -> bool {
    let base = slot + PAPER_INTENT;
    let mut head = [0u8; 8];
    r.read(base, &mut head);
    let n = u32::from_le_bytes(head[0..4].try_into().unwrap()) as usize;
    if n == 0 || n > 64 {
        return false;
    }
    let mut body = vec![0u8; n * 16];
    r.read(base + 8, &mut body);
    let crc = u32::from_le_bytes(head[4..8].try_into().unwrap());
    crc32c::crc32c_append(crc32c::crc32c(&head[0..4]), &body) == crc
}

/// How much of the new data the shadow pages written so far hold: 0 none, 1 some, 2 all.
/// "None" (garbage over the only page stored so far) is F0: the map is old, there is no
/// journal, and free pages' contents do not matter, so the media is the idle state's.
fn data_progress(r: &MmapRegion, log: &[Logged], ver: u64) -> u8 {
    let mut full = 0;
    let mut some = 0;
    let mut total = 0;
    let mut page = vec![0u8; BLOCK];
    for e in log
        .iter()
        .filter(|e| e.step == Step::Data && e.phase == Phase::Stored)
    {
        total += 1;
        r.read(e.off, &mut page);
        let want = block(e.lba, ver);
        let same = page
            .chunks_exact(8)
            .zip(want.chunks_exact(8))
            .filter(|(a, b)| a == b)
            .count();
        if same == BLOCK / 8 {
            full += 1;
        } else if same * 2 > BLOCK / 8 {
            some += 1;
        }
    }
    if full == 0 && some == 0 {
        0
    } else if full == total {
        2
    } else {
        1
    }
}

struct Snapshot<'a> {
    r: &'a MmapRegion,
    geo: Geometry,
    known: &'a Known,
    log: &'a [Logged],
    k: usize,
    garbage: Garbage,
    injected: Option<&'a [u8]>,
    pre_map: &'a [u64],
    pre_slot: [u64; 3],
    new_ver: u64,
    ctx: &'a str,
}

impl Snapshot<'_> {
    fn map(&self, lba: u64) -> u64 {
        self.r.load_u64(self.geo.map_entry_off(lba))
    }
    fn pre(&self, lba: u64) -> u64 {
        let i = self
            .known
            .changed
            .iter()
            .position(|&l| l == lba)
            .expect("changed lba");
        self.pre_map[i]
    }
    fn injected_word(&self) -> Option<u64> {
        self.injected
            .filter(|b| b.len() == 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
    }
    fn stop(&self) -> Logged {
        self.log[self.k]
    }
    fn map_unchanged(&self) {
        for &l in &self.known.changed {
            assert_eq!(
                self.map(l),
                self.pre(l),
                "{}: map entry of LBA {l} changed too early",
                self.ctx
            );
        }
    }

    /// Every 8-byte word stored so far holds the value stored (or the garbage, for the stop
    /// event's word), and the map entries nobody stored to hold their old values.
    fn check_words(&self) {
        let mut want: BTreeMap<u64, u64> = BTreeMap::new();
        for &l in &self.known.changed {
            want.insert(self.geo.map_entry_off(l), self.pre(l));
        }
        for e in &self.log[..=self.k] {
            if e.len == 8 && e.phase == Phase::Stored {
                want.insert(e.off, e.word);
            }
        }
        if let Some(w) = self.injected_word() {
            want.insert(self.stop().off, w);
        }
        for (&off, &v) in &want {
            let got = self.r.load_u64(off);
            assert_eq!(
                got, v,
                "{}: word at {off:#x} is {got:#x}, expected {v:#x}",
                self.ctx
            );
        }
    }

    fn data_state(&self) -> (&'static str, Expect) {
        self.map_unchanged();
        let st = match (
            data_progress(self.r, self.log, self.new_ver),
            self.stop().phase,
        ) {
            (0, _) => "F0",
            (2, Phase::Persisted) => "F2",
            _ => "F1",
        };
        (st, Expect::Old)
    }

    fn classify(&self) -> (&'static str, Expect) {
        self.check_words();
        let stop = self.stop();
        let slot = self.known.slot;
        let r = self.r;
        match self.known.path {
            Path::PaperSingle => {
                let lba = self.known.changed[0];
                assert_eq!(
                    [self.pre_slot[1], self.pre_slot[2]],
                    [LBA_NULL, LBA_NULL],
                    "{}: journal replicas not NULL before the write",
                    self.ctx
                );
                let new = self
                    .log
                    .iter()
                    .find(|e| e.step == Step::JournalVpn && e.phase == Phase::Stored)
                    .map(|e| e.word);
                for e in self.log.iter().filter(|e| e.phase == Phase::Stored) {
                    let (want, what) = match e.step {
                        Step::JournalVpn => (slot + PAPER_VPN, "VPN"),
                        Step::JournalL1 | Step::ResetL1 => (slot + PAPER_L1, "L1"),
                        Step::JournalL2 | Step::ResetL2 => (slot + PAPER_L2, "L2"),
                        Step::Map => (self.geo.map_entry_off(lba), "map entry"),
                        _ => continue,
                    };
                    assert_eq!(
                        e.off, want,
                        "{}: {:?} stored {what} at the wrong place",
                        self.ctx, e.step
                    );
                    let v = match e.step {
                        Step::JournalL1 | Step::JournalL2 => lba,
                        Step::ResetL1 | Step::ResetL2 => LBA_NULL,
                        _ => new.unwrap(),
                    };
                    assert_eq!(e.word, v, "{}: {:?} stored {:#x}", self.ctx, e.step, e.word);
                }
                if let Some(n) = new {
                    let e = Entry::decode(lba, n).expect("journalled entry decodes");
                    let o = Entry::decode(lba, self.pre(lba)).expect("old entry decodes");
                    assert_eq!(e.gen, o.gen + 1, "{}: new entry generation", self.ctx);
                }
                let f = [
                    r.load_u64(slot + PAPER_VPN),
                    r.load_u64(slot + PAPER_L1),
                    r.load_u64(slot + PAPER_L2),
                    self.map(lba),
                ];
                let st = classify_paper_single(f, lba, self.pre_slot[0], self.pre(lba), new)
                    .unwrap_or_else(|| {
                        panic!("{}: fields {f:x?} are none of Table 2's states", self.ctx)
                    });
                // Table 2: recovery undoes S0..S5 and redoes S6..S11.
                let undo = ["S0", "S1", "S2", "S3", "S4", "S5"].contains(&st);
                (st, if undo { Expect::Old } else { Expect::New })
            }
            Path::PaperIntent => {
                let commit = r.load_u64(slot + PAPER_INTENT_COMMIT);
                // Committed: the commit word matches the intent (its low half is the intent's
                // CRC); None for 0 or any other value.
                let intent = read_paper_intent(r, slot);
                let intent_state = || paper_intent_state(r, &self.geo, slot);
                let intent_ok = |what: &str| {
                    let (_, entries) = intent.clone().unwrap_or_else(|| {
                        panic!("{}: intent unreadable in state {what}", self.ctx)
                    });
                    let lbas: Vec<u64> = entries.iter().map(|e| e.0).collect();
                    assert_eq!(lbas, self.known.changed, "{}: intent LBAs", self.ctx);
                    for &(lba, new) in &entries {
                        let e = Entry::decode(lba, new).expect("intent entry decodes");
                        let o = Entry::decode(lba, self.pre(lba)).expect("old entry decodes");
                        assert_eq!(e.gen, o.gen + 1, "{}: intent entry generation", self.ctx);
                    }
                };
                let torn = self.garbage != Garbage::None;
                let stored = stop.phase == Phase::Stored;
                match stop.step {
                    Step::Data => {
                        assert_eq!(
                            commit, 0,
                            "{}: commit word set during the data step",
                            self.ctx
                        );
                        self.map_unchanged();
                        ("I0", Expect::Old)
                    }
                    Step::IntentRecord => {
                        assert_eq!(commit, 0, "{}: commit word set with the intent", self.ctx);
                        self.map_unchanged();
                        if stored || !intent_complete(r, slot) {
                            ("I1", Expect::Old)
                        } else {
                            ("I2", Expect::Old)
                        }
                    }
                    Step::IntentCommit => {
                        assert!(
                            intent_complete(r, slot),
                            "{}: intent not complete at its commit",
                            self.ctx
                        );
                        assert!(
                            torn || intent.is_some(),
                            "{}: the commit word {commit:#x} stored does not match its intent",
                            self.ctx
                        );
                        if intent.is_some() {
                            intent_ok("I3/I4");
                        } else if commit != 0 {
                            // Torn to a value that matches no intent: the intent in the slot
                            // is this write's, none of it applied, and recovery cancels it.
                            assert_eq!(
                                intent_state(),
                                IntentState::Cancel {
                                    commit,
                                    applied: 0,
                                    n: self.known.changed.len()
                                },
                                "{}: torn commit word",
                                self.ctx
                            );
                        }
                        self.map_unchanged();
                        // Only a commit word that matches the intent (its low half is the
                        // intent's CRC) commits it: torn to 0 or to any other value, the
                        // write is cancelled.
                        let expect = if intent.is_some() {
                            Expect::New
                        } else {
                            Expect::Old
                        };
                        (if stored || torn { "I3" } else { "I4" }, expect)
                    }
                    Step::Map => {
                        assert_ne!(
                            commit, 0,
                            "{}: map checkpoint without a commit word",
                            self.ctx
                        );
                        intent_ok("I5/I6");
                        (if stored || torn { "I5" } else { "I6" }, Expect::New)
                    }
                    Step::IntentClear => {
                        for (i, &l) in self.known.changed.iter().enumerate() {
                            let new = intent.as_ref().map(|x| x.1[i].1);
                            let want = self.log.iter().find(|e| e.step == Step::Map && e.lba == l);
                            assert_eq!(
                                Some(self.map(l)),
                                want.map(|e| e.word),
                                "{}: map of LBA {l} not new at the clear",
                                self.ctx
                            );
                            if intent.is_some() {
                                assert_eq!(new, Some(self.map(l)), "{}: intent entry", self.ctx);
                            }
                        }
                        if intent.is_some() {
                            intent_ok("I7");
                            ("I7", Expect::New)
                        } else if commit != 0 {
                            // The clear torn to a value that matches no intent: the map
                            // already holds all of it, and recovery cancels (resets the word).
                            assert_eq!(
                                intent_state(),
                                IntentState::Cancel {
                                    commit,
                                    applied: self.known.changed.len(),
                                    n: self.known.changed.len()
                                },
                                "{}: torn clear",
                                self.ctx
                            );
                            ("I7", Expect::New)
                        } else if stored {
                            ("I7", Expect::New)
                        } else {
                            ("I0'", Expect::New)
                        }
                    }
                    s => panic!("{}: unexpected step {s:?} in the intent path", self.ctx),
                }
            }
            Path::FastWord => {
                for lane in 0..self.geo.lanes {
                    let rec = read_fast_record(r, self.geo.slot_off(lane));
                    assert!(rec.is_none(), "{}: a record in the word path", self.ctx);
                }
                match stop.step {
                    Step::Data => self.data_state(),
                    Step::Map => {
                        let lba = self.known.changed[0];
                        assert_ne!(
                            self.map(lba),
                            self.pre(lba),
                            "{}: map entry not stored",
                            self.ctx
                        );
                        if stop.phase == Phase::Stored {
                            ("F3", Expect::New)
                        } else {
                            ("F4", Expect::New)
                        }
                    }
                    s => panic!("{}: unexpected step {s:?} in the word path", self.ctx),
                }
            }
            Path::FastRecord => {
                let rec = read_fast_record(r, slot);
                let rec_ok = |what: &str| {
                    let (seq, entries) = rec
                        .clone()
                        .unwrap_or_else(|| panic!("{}: record invalid in state {what}", self.ctx));
                    let first = self
                        .log
                        .iter()
                        .find(|e| e.step == Step::Record)
                        .expect("record event");
                    assert_eq!(seq, first.word, "{}: record sequence", self.ctx);
                    assert_ne!(seq, 0, "{}: record sequence 0", self.ctx);
                    let lbas: Vec<u64> = entries.iter().map(|e| e.0).collect();
                    assert_eq!(lbas, self.known.changed, "{}: record LBAs", self.ctx);
                    for &(lba, old, new) in &entries {
                        assert_eq!(
                            old,
                            self.pre(lba),
                            "{}: record old value of LBA {lba}",
                            self.ctx
                        );
                        let e = Entry::decode(lba, new).expect("record entry decodes");
                        let o = Entry::decode(lba, old).expect("old entry decodes");
                        assert_eq!(e.gen, o.gen + 1, "{}: record entry generation", self.ctx);
                    }
                    entries
                };
                match (stop.step, stop.phase) {
                    (Step::Data, _) => {
                        assert!(
                            rec.is_none(),
                            "{}: a valid record during the data step",
                            self.ctx
                        );
                        self.data_state()
                    }
                    (Step::Record, phase) => {
                        self.map_unchanged();
                        if rec.is_none() {
                            // A torn record: as if still being written.
                            ("R1", Expect::Old)
                        } else {
                            rec_ok("R1/R2");
                            if phase == Phase::Stored {
                                ("R1", Expect::New)
                            } else {
                                ("R2", Expect::New)
                            }
                        }
                    }
                    (Step::Map, Phase::Stored) => {
                        rec_ok("R3");
                        ("R3", Expect::New)
                    }
                    (Step::Map, Phase::Persisted) => {
                        for (lba, _, new) in rec_ok("R4") {
                            if self.garbage == Garbage::None || lba != stop.lba {
                                assert_eq!(
                                    self.map(lba),
                                    new,
                                    "{}: map not all new in R4",
                                    self.ctx
                                );
                            }
                        }
                        // A map word torn after all were stored is R3 again.
                        (
                            if self.garbage == Garbage::None {
                                "R4"
                            } else {
                                "R3"
                            },
                            Expect::New,
                        )
                    }
                    (Step::RecordClear, _) if rec.is_none() => ("R5", Expect::New),
                    (Step::RecordClear, _) => {
                        // The garbage put the old sequence number back: the clear is lost, the
                        // (applied) record is still valid.
                        rec_ok("R4");
                        ("R4", Expect::New)
                    }
                    (s, p) => panic!(
                        "{}: unexpected event {s:?}/{p:?} in the record path",
                        self.ctx
                    ),
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// One run.

struct Outcome {
    log: Vec<Logged>,
    state: &'static str,
    side: Side,
}

fn read_all(dev: &NvramDisk<MmapRegion>, ctx: &str) -> Vec<u8> {
    let mut buf = vec![0u8; dev.geometry().blocks as usize * BLOCK];
    dev.read_blocks(0, &mut buf)
        .unwrap_or_else(|e| panic!("{ctx}: read of the device failed: {e}"));
    buf
}

/// Check every block of the device: the involved ones are all old or all new (together),
/// every other one is as the model says. Returns the side taken.
fn verify(
    buf: &[u8],
    involved: &[u64],
    old: &BTreeMap<u64, u64>,
    new: &BTreeMap<u64, u64>,
    ctx: &str,
) -> Side {
    let mut side = Side::Both;
    for (lba, b) in buf.chunks_exact(BLOCK).enumerate() {
        let lba = lba as u64;
        let got = decode(b, lba).unwrap_or_else(|e| panic!("{ctx}: LBA {lba}: {e}"));
        let (o, n) = (old.get(&lba).copied(), new.get(&lba).copied());
        if !involved.contains(&lba) {
            assert_eq!(
                got, o,
                "{ctx}: unrelated LBA {lba} reads version {got:?}, expected {o:?}"
            );
            continue;
        }
        let s = if got == o && got == n {
            Side::Both
        } else if got == o {
            Side::Old
        } else if got == n {
            Side::New
        } else {
            panic!("{ctx}: LBA {lba} reads version {got:?}: neither old {o:?} nor new {n:?}")
        };
        side = match (side, s) {
            (Side::Both, s) | (s, Side::Both) => s,
            (a, b) if a == b => a,
            _ => {
                panic!("{ctx}: LBA {lba} is {s:?} while an earlier block of the write is {side:?}")
            }
        };
    }
    side
}

fn fresh(sc: &Scenario, cfg: Cfg) -> (Arc<MmapRegion>, BTreeMap<u64, u64>) {
    let region = Arc::new(MmapRegion::anonymous(REGION_BYTES).expect("anonymous region"));
    let fo = FormatOptions {
        block_bytes: BLOCK as u32,
        lanes: sc.lanes,
        protocol: cfg.protocol,
        ordering: cfg.ordering,
    };
    format_region(&*region, &fo).expect("format");
    let dev = NvramDisk::open(region.clone(), OpenOptions::default()).expect("open after format");
    let mut model = BTreeMap::new();
    for &(lba, v) in &sc.setup {
        dev.write_atomic(&[lba], &block(lba, v))
            .expect("setup write");
        model.insert(lba, v);
    }
    (region, model)
}

fn run(sc: &Scenario, cfg: Cfg, stop: Option<(usize, Garbage)>, known: Option<&Known>) -> Outcome {
    let ctx = match stop {
        Some((k, g)) => format!("{} {} stop {k} {g:?}", cfg.name(), sc.name),
        None => format!("{} {} (no stop)", cfg.name(), sc.name),
    };
    let (region, mut model) = fresh(sc, cfg);
    let probe = Arc::new(Probe {
        region: region.clone(),
        armed: AtomicBool::new(false),
        stop: stop.map(|(k, g)| (k, g, seed_for(&[&cfg.name(), sc.name], k, g))),
        log: Mutex::new(Vec::new()),
        injected: Mutex::new(None),
    });
    let hook: Hook = {
        let p = probe.clone();
        Arc::new(move |ev: &Event| -> Action { p.on_event(ev) })
    };
    let dev = NvramDisk::open(
        region.clone(),
        OpenOptions {
            hook: Some(hook),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{ctx}: open: {e}"));
    assert!(
        dev.recovery_report().was_clean(),
        "{ctx}: recovery after a clean close did something"
    );
    let geo = *dev.geometry();
    for op in &sc.pre {
        op.apply(&dev)
            .unwrap_or_else(|e| panic!("{ctx}: first write: {e}"));
        op.update(&mut model);
    }
    let involved = sc.op.lbas();
    assert!(
        involved.iter().all(|&l| l < geo.blocks),
        "{ctx}: LBA past the device"
    );
    let old_model = model.clone();
    let mut new_model = model.clone();
    sc.op.update(&mut new_model);

    // Raw values before the operation (the legitimate old values of Table 2's fields).
    let slot_words = |lane: u32| {
        let s = geo.slot_off(lane);
        [
            region.load_u64(s + PAPER_VPN),
            region.load_u64(s + PAPER_L1),
            region.load_u64(s + PAPER_L2),
        ]
    };
    let pre_slots: Vec<[u64; 3]> = (0..geo.lanes).map(slot_words).collect();
    let changed_pre: Vec<u64> = match known {
        Some(kn) => kn
            .changed
            .iter()
            .map(|&l| region.load_u64(geo.map_entry_off(l)))
            .collect(),
        None => vec![],
    };

    probe.armed.store(true, Ordering::Release);
    let res = sc.op.apply(&dev);
    probe.armed.store(false, Ordering::Release);
    let log = probe.log.lock().unwrap().clone();
    match stop {
        None => res.unwrap_or_else(|e| panic!("{ctx}: {e}")),
        Some((k, _)) => {
            assert!(
                matches!(res, Err(Error::Stopped(_))),
                "{ctx}: expected Stopped, got {res:?}"
            );
            assert_eq!(log.len(), k + 1, "{ctx}: events after the stop");
            let mut one = vec![0u8; BLOCK];
            assert!(
                dev.read_blocks(0, &mut one).is_err(),
                "{ctx}: read after the stop accepted"
            );
            let l = involved[0];
            assert!(
                dev.write_atomic(&[l], &block(l, 99)).is_err(),
                "{ctx}: write after stop accepted"
            );
            assert!(
                dev.discard_blocks(l, 1).is_err(),
                "{ctx}: discard after stop accepted"
            );
        }
    }
    drop(dev);

    // Classify the state reached, from the raw region before recovery.
    let (state, expect) = match known {
        None => ("-", Expect::New),
        Some(kn) => {
            let (k, garbage) = stop.unwrap_or((log.len() - 1, Garbage::None));
            assert_eq!(
                (log[k].step, log[k].phase),
                kn.steps[k],
                "{ctx}: the run is not deterministic (event {k} differs from the counting run)"
            );
            let injected = probe.injected.lock().unwrap().clone();
            let lane = ((kn.slot - geo.journal_off) / 4096) as u32;
            let snap = Snapshot {
                r: &region,
                geo,
                known: kn,
                log: &log,
                k,
                garbage,
                injected: injected.as_deref(),
                pre_map: &changed_pre,
                pre_slot: pre_slots[lane as usize],
                new_ver: V_NEW,
                ctx: &ctx,
            };
            let (state, expect) = snap.classify();
            if log[k].step == Step::Data {
                assert_eq!(
                    expect,
                    Expect::Old,
                    "{ctx}: {state}: the data step must recover old"
                );
            }
            if k >= kn.last_persist {
                // Stopped after the final persist: the write was effectively acknowledged.
                assert_eq!(
                    expect,
                    Expect::New,
                    "{ctx}: {state}: an acknowledged write must be new"
                );
            }
            (state, expect)
        }
    };

    // Recover and verify.
    let dev = NvramDisk::open(region.clone(), OpenOptions::default())
        .unwrap_or_else(|e| panic!("{ctx} [{state}]: reopen (recovery) failed: {e}"));
    let reads = read_all(&dev, &ctx);
    let side = verify(
        &reads,
        &involved,
        &old_model,
        &new_model,
        &format!("{ctx} [{state}]"),
    );
    match (expect, side) {
        (_, Side::Both) | (Expect::Old, Side::Old) | (Expect::New, Side::New) => {}
        _ => panic!("{ctx}: state {state} must recover to {expect:?}, but reads {side:?}"),
    }
    let result = if side == Side::New {
        new_model
    } else {
        old_model
    };
    let mapped = result.len() as u64;
    assert_eq!(
        dev.recovery_report().mapped_blocks,
        mapped,
        "{ctx}: mapped blocks after recovery"
    );
    drop(dev);

    // Recovery is idempotent.
    let dev = NvramDisk::open(region.clone(), OpenOptions::default())
        .unwrap_or_else(|e| panic!("{ctx}: second reopen failed: {e}"));
    let rep = dev.recovery_report();
    assert!(
        rep.was_clean(),
        "{ctx}: second recovery did something: {:?}",
        rep.actions
    );
    assert_eq!(
        rep.mapped_blocks, mapped,
        "{ctx}: mapped blocks after the second recovery"
    );
    assert!(
        read_all(&dev, &ctx) == reads,
        "{ctx}: second recovery changed what reads return"
    );

    // The blocks can be written again.
    let after = Op::Write(involved.clone(), V_AFTER);
    after
        .apply(&dev)
        .unwrap_or_else(|e| panic!("{ctx}: write after recovery failed: {e}"));
    let mut final_model = result.clone();
    after.update(&mut final_model);
    let reads = read_all(&dev, &ctx);
    assert_eq!(
        verify(&reads, &involved, &result, &final_model, &ctx),
        Side::New,
        "{ctx}: rewrite"
    );
    drop(dev);
    let dev = NvramDisk::open(region.clone(), OpenOptions::default())
        .unwrap_or_else(|e| panic!("{ctx}: reopen after the rewrite failed: {e}"));
    assert!(
        dev.recovery_report().was_clean(),
        "{ctx}: unclean after the rewrite"
    );
    assert!(
        read_all(&dev, &ctx) == reads,
        "{ctx}: the rewrite did not survive a reopen"
    );
    Outcome { log, state, side }
}

// ---------------------------------------------------------------------------------------------
// Sweeps.

struct Sweep {
    states: BTreeSet<&'static str>,
}

/// Stop points to visit: all of them up to MAX_POINTS; beyond, the first and last, the first
/// and last event of every step/phase, and an even sample of the rest.
fn stop_points(steps: &[(Step, Phase)]) -> Vec<usize> {
    let n = steps.len();
    if n <= MAX_POINTS {
        return (0..n).collect();
    }
    let mut set: BTreeSet<usize> = [0, n - 1].into();
    for (i, s) in steps.iter().enumerate() {
        if i == 0 || steps[i - 1] != *s || i + 1 == n || steps[i + 1] != *s {
            set.insert(i);
        }
    }
    let stride = n.div_ceil(MAX_POINTS - set.len().min(MAX_POINTS - 1));
    set.extend((0..n).step_by(stride.max(1)));
    for s in steps {
        assert!(set.iter().any(|&i| steps[i] == *s), "sampling misses {s:?}");
    }
    set.into_iter().collect()
}

/// Whether garbage in this event's bytes is a crash the protocol must survive.
fn garbage_allowed(known: &Known, e: &Logged) -> bool {
    // The fast single-block word path relies on its one 8-byte non-temporal map store being
    // word-atomic (`Method::word_atomic`): a torn map word is outside its fault model.
    !(known.path == Path::FastWord && e.step == Step::Map)
}

/// The counting run: how many events the operation emits, and which protocol path it takes.
fn learn(sc: &Scenario, cfg: Cfg) -> Known {
    let counted = run(sc, cfg, None, None);
    let log = &counted.log;
    let n = log.len();
    assert!(n > 0, "{} {}: no events", cfg.name(), sc.name);
    assert_eq!(
        counted.side,
        Side::New,
        "{} {}: completed op is not new",
        cfg.name(),
        sc.name
    );
    let steps: Vec<(Step, Phase)> = log.iter().map(|e| (e.step, e.phase)).collect();
    let has = |s: Step| steps.iter().any(|e| e.0 == s);
    let path = if has(Step::JournalVpn) {
        Path::PaperSingle
    } else if has(Step::IntentRecord) {
        Path::PaperIntent
    } else if has(Step::Record) {
        Path::FastRecord
    } else {
        Path::FastWord
    };
    // The map entries the operation changes: the written blocks, or the discarded blocks that
    // held data (discarding an empty block changes nothing).
    let mut before = BTreeMap::new();
    for &(l, v) in &sc.setup {
        before.insert(l, v);
    }
    for op in &sc.pre {
        op.update(&mut before);
    }
    let changed: Vec<u64> = match &sc.op {
        Op::Write(l, _) => l.clone(),
        Op::Discard(..) => sc
            .op
            .lbas()
            .into_iter()
            .filter(|l| before.contains_key(l))
            .collect(),
    };
    let m = changed.len();
    let want_path = match cfg.protocol {
        Protocol::Paper if m == 1 => Path::PaperSingle,
        Protocol::Paper => Path::PaperIntent,
        Protocol::Fast if m == 1 && cfg.ordering.map.word_atomic() => Path::FastWord,
        Protocol::Fast => Path::FastRecord,
    };
    assert_eq!(path, want_path, "{} {}: protocol path", cfg.name(), sc.name);
    // Every store and every persist of every step reports an event: the count is exact.
    let data = if sc.op.is_write() { m + 1 } else { 0 };
    let want_n = data
        + match path {
            Path::PaperSingle => 12,
            Path::PaperIntent => 2 + 2 + m + 1 + 2,
            Path::FastWord => 2,
            Path::FastRecord => 2 + m + 1 + 2,
        };
    assert_eq!(
        n,
        want_n,
        "{} {}: number of events {steps:?}",
        cfg.name(),
        sc.name
    );
    let map_lbas: Vec<u64> = log
        .iter()
        .filter(|e| e.step == Step::Map && e.phase == Phase::Stored)
        .map(|e| e.lba)
        .collect();
    assert_eq!(map_lbas, changed, "{} {}: map stores", cfg.name(), sc.name);
    let slot = log
        .iter()
        .find_map(|e| match e.step {
            Step::JournalVpn | Step::Record => Some(e.off),
            Step::IntentRecord => Some(e.off - PAPER_INTENT),
            _ => None,
        })
        .unwrap_or_else(|| {
            // The word path uses no slot: lane 0's stands in.
            Geometry::compute(REGION_BYTES, BLOCK as u32, sc.lanes)
                .unwrap()
                .slot_off(0)
        });
    let last_persist = steps
        .iter()
        .rposition(|e| e.1 == Phase::Persisted)
        .expect("a persist");
    Known {
        path,
        n,
        slot,
        changed,
        last_persist,
        steps,
        log: counted.log,
    }
}

fn sweep(sc: &Scenario, cfg: Cfg) -> Sweep {
    let known = learn(sc, cfg);
    let (n, log) = (known.n, &known.log);
    // The completed run, classified.
    let done = run(sc, cfg, None, Some(&known));
    let mut states = BTreeSet::new();
    let points = stop_points(&known.steps);
    let mut runs = 0;
    for &k in &points {
        for g in GARBAGE {
            if g != Garbage::None && !garbage_allowed(&known, &log[k]) {
                continue;
            }
            let o = run(sc, cfg, Some((k, g)), Some(&known));
            runs += 1;
            println!(
                "{} {} stop {k:>3}/{n} {:?}/{:?} {g:?}: {} {} -> {:?}",
                cfg.name(),
                sc.name,
                log[k].step,
                log[k].phase,
                o.state,
                describe(o.state),
                o.side
            );
            states.insert(o.state);
        }
    }
    println!(
        "== {} {}: {n} stop points ({} visited, {runs} runs), completed: {}, states reached: {:?}",
        cfg.name(),
        sc.name,
        points.len(),
        done.state,
        states
    );
    Sweep { states }
}

fn assert_reached(what: &str, got: &BTreeSet<&'static str>, want: &[&str]) {
    let missing: Vec<&&str> = want.iter().filter(|s| !got.contains(**s)).collect();
    assert!(
        missing.is_empty(),
        "{what}: states never reached: {missing:?} (reached {got:?})"
    );
}

// ---------------------------------------------------------------------------------------------
// Scenarios.

/// 1: overwrite of a block holding an old version, and a first write of a never-written block.
fn single_block(protocol: Protocol, ordering: &str) {
    let cfg = Cfg::new(protocol, ordering);
    let t = Instant::now();
    let overwrite = Scenario {
        name: "overwrite",
        lanes: 1,
        setup: with_old(&[12, 13, 14, 200]),
        pre: vec![],
        op: Op::Write(vec![13], V_NEW),
    };
    let first = Scenario {
        name: "first-write",
        lanes: 1,
        setup: with_old(&[12, 14, 200]),
        pre: vec![],
        op: Op::Write(vec![13], V_NEW),
    };
    let mut states = BTreeSet::new();
    for sc in [&overwrite, &first] {
        states.extend(sweep(sc, cfg).states);
    }
    match (protocol, cfg.ordering.map.word_atomic()) {
        (Protocol::Paper, _) => assert_reached(&cfg.name(), &states, &PAPER_STATES),
        (Protocol::Fast, true) => assert_reached(&cfg.name(), &states, &FAST_WORD_STATES),
        (Protocol::Fast, false) => assert_reached(&cfg.name(), &states, &FAST_RECORD_STATES),
    }
    println!("{} single-block: {:.2?}", cfg.name(), t.elapsed());
}

/// 2: atomic writes of 2 and 64 blocks, scattered and contiguous, mixing blocks that hold an
/// old version and never-written ones.
fn atomic(protocol: Protocol, ordering: &str, big: bool) {
    let cfg = Cfg::new(protocol, ordering);
    let t = Instant::now();
    let scenarios = if big {
        let contiguous: Vec<u64> = (100..164).collect();
        let scattered: Vec<u64> = (0..64u64).map(|i| 5 + ((i * 37) % 64) * 5).collect();
        vec![
            Scenario {
                name: "64-contiguous",
                lanes: 2,
                setup: with_old(
                    &contiguous
                        .iter()
                        .copied()
                        .filter(|l| l % 3 == 0)
                        .chain([99, 164])
                        .collect::<Vec<_>>(),
                ),
                pre: vec![],
                op: Op::Write(contiguous, V_NEW),
            },
            Scenario {
                name: "64-scattered",
                lanes: 1,
                setup: with_old(
                    &scattered
                        .iter()
                        .copied()
                        .filter(|l| l % 2 == 1)
                        .chain([6, 21])
                        .collect::<Vec<_>>(),
                ),
                pre: vec![],
                op: Op::Write(scattered, V_NEW),
            },
        ]
    } else {
        vec![
            Scenario {
                name: "2-scattered",
                lanes: 2,
                setup: with_old(&[40, 41, 42, 334]),
                pre: vec![],
                op: Op::Write(vec![333, 41], V_NEW),
            },
            Scenario {
                name: "2-contiguous",
                lanes: 1,
                setup: with_old(&[59, 60, 61, 62]),
                pre: vec![],
                op: Op::Write(vec![60, 61], V_NEW),
            },
        ]
    };
    let mut states = BTreeSet::new();
    for sc in &scenarios {
        states.extend(sweep(sc, cfg).states);
    }
    match protocol {
        Protocol::Paper => assert_reached(&cfg.name(), &states, &INTENT_STATES),
        Protocol::Fast => assert_reached(&cfg.name(), &states, &FAST_RECORD_STATES),
    }
    println!("{} atomic (big={big}): {:.2?}", cfg.name(), t.elapsed());
}

/// 3: discard of a written block (reads old contents or zeros), and a 3-block discard whose
/// middle block was never written.
fn discard(protocol: Protocol, ordering: &str) {
    let cfg = Cfg::new(protocol, ordering);
    let t = Instant::now();
    let one = Scenario {
        name: "discard-1",
        lanes: 1,
        setup: with_old(&[299, 300, 301]),
        pre: vec![],
        op: Op::Discard(300, 1),
    };
    let three = Scenario {
        name: "discard-3",
        lanes: 2,
        setup: with_old(&[319, 320, 322, 323]),
        pre: vec![],
        op: Op::Discard(320, 3),
    };
    let s1 = sweep(&one, cfg);
    if protocol == Protocol::Paper {
        // A discard has no data step, so S0 is never the state at a stop point.
        assert_reached(&cfg.name(), &s1.states, &PAPER_STATES[1..]);
    }
    sweep(&three, cfg);
    println!("{} discard: {:.2?}", cfg.name(), t.elapsed());
}

/// 4: two neighbouring LBAs of one map line written one after the other, stopped in the second:
/// the first stays intact.
fn neighbours(protocol: Protocol, ordering: &str) {
    let cfg = Cfg::new(protocol, ordering);
    let t = Instant::now();
    let g = nvstack_nvramdisk::Geometry::compute(REGION_BYTES, BLOCK as u32, 1).unwrap();
    assert_eq!(
        g.map_entry_off(16) / 64,
        g.map_entry_off(17) / 64,
        "16 and 17 share a map line"
    );
    let sc = Scenario {
        name: "neighbours",
        lanes: 1,
        setup: with_old(&[15, 16, 17, 18]),
        pre: vec![Op::Write(vec![16], V_FIRST)],
        op: Op::Write(vec![17], V_NEW),
    };
    sweep(&sc, cfg);
    let fresh_pair = Scenario {
        name: "neighbours-fresh",
        lanes: 1,
        setup: with_old(&[15, 18]),
        pre: vec![Op::Write(vec![16], V_FIRST)],
        op: Op::Write(vec![17], V_NEW),
    };
    sweep(&fresh_pair, cfg);
    println!("{} neighbours: {:.2?}", cfg.name(), t.elapsed());
}

#[test]
fn paper_p4_single_block() {
    single_block(Protocol::Paper, "p4");
}
#[test]
fn paper_p6_best_flush_single_block() {
    single_block(Protocol::Paper, nvstack_pmem::ordering::best_flush_policy());
}
#[test]
fn fast_p4_single_block() {
    single_block(Protocol::Fast, "p4");
}
#[test]
fn fast_p6_best_flush_single_block() {
    single_block(Protocol::Fast, nvstack_pmem::ordering::best_flush_policy());
}

#[test]
fn paper_p4_atomic_2() {
    atomic(Protocol::Paper, "p4", false);
}
#[test]
fn paper_p6_best_flush_atomic_2() {
    atomic(
        Protocol::Paper,
        nvstack_pmem::ordering::best_flush_policy(),
        false,
    );
}
#[test]
fn fast_p4_atomic_2() {
    atomic(Protocol::Fast, "p4", false);
}
#[test]
fn fast_p6_best_flush_atomic_2() {
    atomic(
        Protocol::Fast,
        nvstack_pmem::ordering::best_flush_policy(),
        false,
    );
}

#[test]
fn paper_p4_atomic_64() {
    atomic(Protocol::Paper, "p4", true);
}
#[test]
fn paper_p6_best_flush_atomic_64() {
    atomic(
        Protocol::Paper,
        nvstack_pmem::ordering::best_flush_policy(),
        true,
    );
}
#[test]
fn fast_p4_atomic_64() {
    atomic(Protocol::Fast, "p4", true);
}
#[test]
fn fast_p6_best_flush_atomic_64() {
    atomic(
        Protocol::Fast,
        nvstack_pmem::ordering::best_flush_policy(),
        true,
    );
}

#[test]
fn paper_p4_discard() {
    discard(Protocol::Paper, "p4");
}
#[test]
fn paper_p6_best_flush_discard() {
    discard(Protocol::Paper, nvstack_pmem::ordering::best_flush_policy());
}
#[test]
fn fast_p4_discard() {
    discard(Protocol::Fast, "p4");
}
#[test]
fn fast_p6_best_flush_discard() {
    discard(Protocol::Fast, nvstack_pmem::ordering::best_flush_policy());
}

#[test]
fn paper_p4_neighbours() {
    neighbours(Protocol::Paper, "p4");
}
#[test]
fn paper_p6_best_flush_neighbours() {
    neighbours(Protocol::Paper, nvstack_pmem::ordering::best_flush_policy());
}
#[test]
fn fast_p4_neighbours() {
    neighbours(Protocol::Fast, "p4");
}
#[test]
fn fast_p6_best_flush_neighbours() {
    neighbours(Protocol::Fast, nvstack_pmem::ordering::best_flush_policy());
}
