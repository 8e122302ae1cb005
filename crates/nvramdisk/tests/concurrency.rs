//! Concurrency tests of the nvramdisk.
//!
//! a) Stress: four threads write (single blocks, contiguous and scattered atomic multi-block
//!    writes), discard and read the same 16 blocks. Every block carries (lba, writer, op id,
//!    checksum) and is otherwise a deterministic function of those, so a torn, mixed or
//!    misdirected block is caught. Freshness is checked against the real-time order of the
//!    operations (see `Shared`): a read may never return a value that was already overwritten
//!    by an operation acknowledged before the read started, nor go back behind a value the same
//!    reader already saw.
//! b) Deterministic interleaving of a reader and page recycling: a hook pauses the reader
//!    between its map lookup and its page copy while the main thread overwrites the block and
//!    gets the old page reused for another block. With read protection the reader retries and
//!    returns the new contents; without it, it returns the other block's contents.

use nvstack_core::blockdev::BlockDevice;
use nvstack_nvramdisk::entry::Entry;
use nvstack_nvramdisk::{
    format_region, Action, Event, FormatOptions, Geometry, Hook, NvramDisk, OpenOptions, Protocol,
    Step, ATOMIC_BLOCKS_MAX,
};
use nvstack_pmem::ordering::policy_by_name;
use nvstack_pmem::{MmapRegion, Region};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};

type Dev = NvramDisk<MmapRegion>;

/// Header of a test block: lba, writer, op id, checksum (u64 each).
const HEADER: usize = 32;

fn word(block: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(block[i * 8..i * 8 + 8].try_into().unwrap())
}

/// A hash of every word of the block except the checksum word (word 3).
fn block_checksum(block: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for (i, w) in block.chunks_exact(8).enumerate() {
        if i == 3 {
            continue;
        }
        h = (h ^ u64::from_le_bytes(w.try_into().unwrap())).wrapping_mul(0x0000_0100_0000_01b3);
        h ^= h >> 29;
    }
    h
}

/// The one block that (lba, writer, id) stands for.
fn make_block(out: &mut [u8], lba: u64, writer: u64, id: u64) {
    out[0..8].copy_from_slice(&lba.to_le_bytes());
    out[8..16].copy_from_slice(&writer.to_le_bytes());
    out[16..24].copy_from_slice(&id.to_le_bytes());
    let mut s = lba.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ id.rotate_left(32) ^ writer;
    for w in out[HEADER..].chunks_exact_mut(8) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        w.copy_from_slice(&s.to_le_bytes());
    }
    let c = block_checksum(out);
    out[24..32].copy_from_slice(&c.to_le_bytes());
}

fn block_of(lba: u64, writer: u64, id: u64, b: usize) -> Vec<u8> {
    let mut v = vec![0u8; b];
    make_block(&mut v, lba, writer, id);
    v
}

/// Some((writer, id)) when `block` is a complete, intact test block of `lba`.
fn parse_block(block: &[u8], lba: u64) -> Result<(u64, u64), String> {
    let (l, writer, id, sum) = (
        word(block, 0),
        word(block, 1),
        word(block, 2),
        word(block, 3),
    );
    if sum != block_checksum(block) {
        return Err(format!(
            "bad checksum (header lba {l} writer {writer} id {id}): torn or foreign block"
        ));
    }
    if l != lba {
        return Err(format!(
            "block of LBA {l} (writer {writer}, id {id}) returned for LBA {lba}"
        ));
    }
    let mut want = vec![0u8; block.len()];
    make_block(&mut want, l, writer, id);
    if want != block {
        return Err(format!(
            "block of LBA {l} writer {writer} id {id} has a wrong body"
        ));
    }
    Ok((writer, id))
}

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// The smallest region that gives at least `target` blocks.
fn region_len(block_bytes: u32, lanes: u32, target: u64) -> u64 {
    Geometry::region_bytes_for(target, block_bytes, lanes).expect("valid geometry")
}

/// A freshly formatted device, or None when this CPU lacks the ordering's flush instruction.
fn make_device(
    protocol: Protocol,
    ordering: &str,
    lanes: u32,
    block_bytes: u32,
    target_blocks: u64,
) -> (Arc<MmapRegion>, Geometry) {
    // The tests name p4 and `best_flush_policy()`, which every x86-64 CPU runs: a policy that
    // does not resolve is a failure, never a skip that would count as passed.
    let ordering =
        policy_by_name(ordering).unwrap_or_else(|e| panic!("{protocol:?}/{ordering}: {e}"));
    let len = region_len(block_bytes, lanes, target_blocks);
    let region = Arc::new(MmapRegion::anonymous(len).expect("anonymous region"));
    let sb = format_region(
        &*region,
        &FormatOptions {
            block_bytes,
            lanes,
            protocol,
            ordering,
        },
    )
    .expect("format");
    (region, sb.geometry)
}

// ---------------------------------------------------------------------------------------------
// a) stress

const THREADS: u64 = 4;
/// The blocks every thread works on.
const HOT: u64 = 16;
const OPS_PER_THREAD: u64 = 50_000;

/// Shared bookkeeping of the stress test. `clock` hands out stamps: every write or discard
/// takes one before it is issued (its id, stored in the blocks it writes) and one after it
/// returned (its ack stamp, recorded in `ack_of[id]`). Then, per LBA, `max_acked_start` is
/// raised to the op's id. A read loads `max_acked_start` (M) before it is issued: every op
/// counted in M returned before the read began. The read may return the value of op X only if
/// X was not overwritten before the read began, i.e. unless X's ack stamp < M (X returned
/// before an op that itself returned before the read began had even started). An unrecorded
/// ack (X still in flight, or just returned) is always fine.
///
/// This is the sound form of "a read that starts after seq s was acknowledged returns seq >= s":
/// two writers of one LBA may reach the device in the opposite order of their ids, so a plain
/// id comparison would flag correct executions.
///
/// Zeros (a discarded or never-written block) are legal only if some discard of the LBA was
/// not overwritten before the read began: one still in flight, or one whose ack stamp is > M;
/// or if nothing at all was acknowledged for the LBA yet (the initial zeros).
///
/// Each reader also keeps its own floor per LBA: once it saw op X, a later read must not
/// return a value overwritten before X started (no going back in time).
struct Shared {
    clock: AtomicU64,
    ack_of: Vec<AtomicU64>,
    max_acked_start: Vec<AtomicU64>,
    discards_in_flight: Vec<AtomicU64>,
    max_discard_ack: Vec<AtomicU64>,
    failed: AtomicBool,
    failures: Mutex<Vec<String>>,
}

impl Shared {
    fn new(ops: u64) -> Shared {
        let atomics = |n: u64| (0..n).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
        Shared {
            clock: AtomicU64::new(1),
            ack_of: atomics(2 * ops + 2),
            max_acked_start: atomics(HOT),
            discards_in_flight: atomics(HOT),
            max_discard_ack: atomics(HOT),
            failed: AtomicBool::new(false),
            failures: Mutex::new(Vec::new()),
        }
    }

    fn fail(&self, msg: String) {
        self.failed.store(true, SeqCst);
        let mut f = self.failures.lock().unwrap();
        if f.len() < 20 {
            f.push(msg);
        }
    }

    /// Check one block a read returned; `floor` is max(M, the reader's own floor).
    fn check_read(&self, block: &[u8], lba: u64, floor: u64) -> Result<Option<u64>, String> {
        let l = lba as usize;
        if block.iter().all(|&x| x == 0) {
            // In-flight count first: a discard that finished after this load has its ack
            // recorded before its count went down.
            let in_flight = self.discards_in_flight[l].load(SeqCst);
            let dack = self.max_discard_ack[l].load(SeqCst);
            if floor == 0 || in_flight > 0 || dack > floor {
                return Ok(None);
            }
            return Err(format!(
                "LBA {lba} read as zeros, but every discard of it (latest ack stamp {dack}) was \
                 overwritten before the read (floor stamp {floor})"
            ));
        }
        let (writer, id) = parse_block(block, lba)?;
        let issued = self.clock.load(SeqCst);
        if writer >= THREADS || id == 0 || id >= issued {
            return Err(format!(
                "LBA {lba}: writer {writer} id {id} was never issued"
            ));
        }
        let ack = self.ack_of[id as usize].load(SeqCst);
        if ack != 0 && ack < floor {
            return Err(format!(
                "LBA {lba}: stale read of op {id} (writer {writer}, acked at stamp {ack}): it was \
                 overwritten by an op started at stamp {floor} and acknowledged before the read \
                 began (or already seen by this reader)"
            ));
        }
        Ok(Some(id))
    }
}

fn worker(dev: &Dev, sh: &Shared, t: u64, seed: u64) {
    let b = dev.block_bytes() as usize;
    let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut floor = [0u64; HOT as usize];
    let mut buf = vec![0u8; 4 * b];
    for op in 0..OPS_PER_THREAD {
        if sh.failed.load(SeqCst) {
            return;
        }
        let r = xorshift(&mut rng) % 100;
        let n = (xorshift(&mut rng) % 4 + 1) as usize;
        if r < 40 {
            // A write: contiguous through write() (1..=4 blocks, atomic), or scattered
            // through write_atomic (2..=4 distinct LBAs, in random order).
            let scattered = r >= 25;
            let mut lbas = Vec::with_capacity(4);
            if scattered {
                let n = n.max(2);
                while lbas.len() < n {
                    let l = xorshift(&mut rng) % HOT;
                    if !lbas.contains(&l) {
                        lbas.push(l);
                    }
                }
            } else {
                let start = xorshift(&mut rng) % (HOT - n as u64 + 1);
                lbas.extend(start..start + n as u64);
            }
            let id = sh.clock.fetch_add(1, SeqCst);
            let data = &mut buf[..lbas.len() * b];
            for (i, &l) in lbas.iter().enumerate() {
                make_block(&mut data[i * b..(i + 1) * b], l, t, id);
            }
            let res = if scattered {
                dev.write_atomic(&lbas, data)
            } else {
                dev.write(lbas[0], data)
            };
            if let Err(e) = res {
                sh.fail(format!("thread {t} op {op}: write of {lbas:?} failed: {e}"));
                return;
            }
            let ack = sh.clock.fetch_add(1, SeqCst);
            sh.ack_of[id as usize].store(ack, SeqCst);
            for &l in &lbas {
                sh.max_acked_start[l as usize].fetch_max(id, SeqCst);
            }
        } else if r < 48 {
            let n = n.min(3) as u64;
            let start = xorshift(&mut rng) % (HOT - n + 1);
            for l in start..start + n {
                sh.discards_in_flight[l as usize].fetch_add(1, SeqCst);
            }
            let id = sh.clock.fetch_add(1, SeqCst);
            if let Err(e) = dev.discard(start, n) {
                sh.fail(format!(
                    "thread {t} op {op}: discard of {start}+{n} failed: {e}"
                ));
                return;
            }
            let ack = sh.clock.fetch_add(1, SeqCst);
            for l in start..start + n {
                sh.max_discard_ack[l as usize].fetch_max(ack, SeqCst);
                sh.max_acked_start[l as usize].fetch_max(id, SeqCst);
                sh.discards_in_flight[l as usize].fetch_sub(1, SeqCst);
            }
        } else {
            let start = xorshift(&mut rng) % (HOT - n as u64 + 1);
            let mut m = [0u64; 4];
            for (i, m) in m[..n].iter_mut().enumerate() {
                *m = sh.max_acked_start[start as usize + i].load(SeqCst);
            }
            let data = &mut buf[..n * b];
            if let Err(e) = dev.read(start, data) {
                sh.fail(format!(
                    "thread {t} op {op}: read of {start}+{n} failed: {e}"
                ));
                return;
            }
            // One read call is not atomic across blocks: check each block on its own.
            for i in 0..n {
                let l = start + i as u64;
                let f = m[i].max(floor[l as usize]);
                match sh.check_read(&data[i * b..(i + 1) * b], l, f) {
                    Ok(Some(id)) => floor[l as usize] = floor[l as usize].max(id),
                    Ok(None) => {}
                    Err(e) => {
                        sh.fail(format!("thread {t} op {op}: read of {start}+{n}: {e}"));
                        return;
                    }
                }
            }
        }
    }
}

fn stress(protocol: Protocol, ordering: &str, lanes: u32, block_bytes: u32) {
    let (region, _) = make_device(protocol, ordering, lanes, block_bytes, 64);
    let dev = NvramDisk::open(region.clone(), OpenOptions::default()).expect("open");
    let b = block_bytes as usize;
    let sh = Shared::new(THREADS * OPS_PER_THREAD);
    let seed = ((protocol.id() as u64) << 40) | ((lanes as u64) << 32) | block_bytes as u64;
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (dev, sh) = (&dev, &sh);
            s.spawn(move || worker(dev, sh, t, seed ^ ((t + 1) * 0x1234_5678_9abc)));
        }
    });
    let failures = sh.failures.lock().unwrap().clone();
    assert!(
        failures.is_empty(),
        "{protocol:?}/{ordering}, {lanes} lanes, {block_bytes}-byte blocks:\n{}",
        failures.join("\n")
    );
    let stats = dev.stats();
    eprintln!(
        "stress {protocol:?}/{ordering} lanes {lanes} block {block_bytes}: {:?}, {} writes, {} reads, \
         {} read retries, {} discards",
        started.elapsed(),
        stats.writes,
        stats.reads,
        stats.read_retries,
        stats.discards
    );

    // Quiescent now: every op is acknowledged. Each hot block must hold a value that nothing
    // acknowledged overwrote.
    let blocks = dev.blocks();
    let mut before = vec![0u8; blocks as usize * b];
    dev.read(0, &mut before).expect("final read");
    for l in 0..blocks {
        let block = &before[l as usize * b..(l as usize + 1) * b];
        if l >= HOT {
            assert!(
                block.iter().all(|&x| x == 0),
                "LBA {l} was never written but is not zeros"
            );
            continue;
        }
        let m = sh.max_acked_start[l as usize].load(SeqCst);
        if let Err(e) = sh.check_read(block, l, m) {
            panic!("after the run: {e}");
        }
    }
    let nonzero = before
        .chunks_exact(b)
        .filter(|c| c.iter().any(|&x| x != 0))
        .count() as u64;
    drop(dev);

    // A clean reopen changes nothing.
    let dev = NvramDisk::open(region, OpenOptions::default()).expect("reopen");
    let rep = dev.recovery_report();
    assert!(
        rep.was_clean(),
        "recovery after a clean close did work: {rep:?}"
    );
    // Every test block has a non-zero header, so mapped blocks are exactly the non-zero ones.
    assert_eq!(rep.mapped_blocks, nonzero, "mapped blocks after reopen");
    let mut after = vec![0u8; blocks as usize * b];
    dev.read(0, &mut after).expect("read after reopen");
    for l in 0..blocks as usize {
        assert!(
            before[l * b..(l + 1) * b] == after[l * b..(l + 1) * b],
            "LBA {l} changed across a clean close and reopen"
        );
    }
}

#[test]
fn stress_fast_p4_2_lanes_4k() {
    stress(Protocol::Fast, "p4", 2, 4096);
}

#[test]
fn stress_fast_p4_4_lanes_512() {
    stress(Protocol::Fast, "p4", 4, 512);
}

#[test]
fn stress_paper_p4_2_lanes_512() {
    stress(Protocol::Paper, "p4", 2, 512);
}

#[test]
fn stress_paper_p4_4_lanes_4k() {
    stress(Protocol::Paper, "p4", 4, 4096);
}

#[test]
fn stress_fast_p6_best_flush_4_lanes_4k() {
    stress(
        Protocol::Fast,
        nvstack_pmem::ordering::best_flush_policy(),
        4,
        4096,
    );
}

#[test]
fn stress_paper_p6_best_flush_2_lanes_4k() {
    stress(
        Protocol::Paper,
        nvstack_pmem::ordering::best_flush_policy(),
        2,
        4096,
    );
}

// ---------------------------------------------------------------------------------------------
// b) deterministic interleaving of a reader with page recycling

const READER: &str = "paused-reader";
/// The block the reader reads.
const A: u64 = 3;

enum Msg {
    /// The reader is paused after its map lookup of `lba` (entry at `off`).
    Paused { off: u64, lba: u64 },
    /// The reader's read returned.
    Done(Result<Vec<u8>, String>),
}

struct Outcome {
    /// What the reader's read returned.
    returned: Vec<u8>,
    /// A's contents written while the reader was paused.
    new_a: Vec<u8>,
    /// What the page the reader looked up held when it was released.
    recycled: Vec<u8>,
    read_retries: u64,
    lookups: u64,
}

/// Pause a reader of A between its map lookup and its copy; meanwhile overwrite A and write
/// other blocks until the page the reader looked up holds another block; release the reader.
fn recycled_page_read(
    protocol: Protocol,
    ordering: &str,
    block_bytes: u32,
    read_protection: bool,
) -> Outcome {
    let (region, geo) = make_device(protocol, ordering, 1, block_bytes, 64);
    let b = block_bytes as usize;
    let (tx, rx) = mpsc::channel::<Msg>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = Mutex::new(release_rx);
    let armed = AtomicBool::new(true);
    let lookups = Arc::new(AtomicU64::new(0));
    let hook_tx = tx.clone();
    let hook_lookups = lookups.clone();
    let hook: Hook = Arc::new(move |ev: &Event| {
        if ev.step == Step::ReadLookup && std::thread::current().name() == Some(READER) {
            hook_lookups.fetch_add(1, SeqCst);
            if armed.swap(false, SeqCst) {
                hook_tx
                    .send(Msg::Paused {
                        off: ev.off,
                        lba: ev.lba,
                    })
                    .unwrap();
                // Returns on release, or when the main thread gave up (sender dropped).
                let _ = release_rx.lock().unwrap().recv();
            }
        }
        Action::Continue
    });
    let dev = NvramDisk::open(
        region.clone(),
        OpenOptions {
            hook: Some(hook),
            read_protection,
            ..OpenOptions::default()
        },
    )
    .expect("open");
    let mut id = 0;
    let mut next_id = || {
        id += 1;
        id
    };
    for l in 0..16 {
        dev.write(l, &block_of(l, 0, next_id(), b))
            .expect("initial write");
    }
    let old_a = block_of(A, 0, 1000, b);
    dev.write(A, &old_a).expect("write A");

    let (returned, new_a, recycled) = std::thread::scope(|s| {
        // Owned by this closure: if an assertion below fails, unwinding drops it, which
        // releases a paused reader (the scope joins it before the panic goes on).
        let release_tx = release_tx;
        let dev = &dev;
        let reader = std::thread::Builder::new()
            .name(READER.into())
            .spawn_scoped(s, move || {
                // Always report back, even if the read panics: the main thread waits for it.
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let mut buf = vec![0u8; b];
                    dev.read(A, &mut buf)
                        .map(|_| buf)
                        .map_err(|e| e.to_string())
                }))
                .unwrap_or_else(|_| Err("the read panicked".to_string()));
                let _ = tx.send(Msg::Done(r));
            })
            .expect("spawn reader");
        let (off, lba) = match rx.recv().expect("reader channel") {
            Msg::Paused { off, lba } => (off, lba),
            Msg::Done(r) => panic!("the reader finished without pausing at ReadLookup: {r:?}"),
        };
        assert_eq!(
            (lba, off),
            (A, geo.map_entry_off(A)),
            "the pause is at A's lookup"
        );
        // The entry the reader just decoded (nothing has written since it loaded it).
        let raw = region.load_u64(off);
        let vpn = Entry::decode(A, raw)
            .expect("A's entry")
            .vpn
            .expect("A is mapped");
        let page_off = geo.page_off(vpn);
        let mut page = vec![0u8; b];
        region.read(page_off, &mut page);
        assert_eq!(page, old_a, "the looked-up page holds A's current contents");

        // Overwrite A (its old page is freed), then write other blocks until that page was
        // reused for one of them. With one lane the very next write takes it.
        let new_a = block_of(A, 0, 2000, b);
        dev.write(A, &new_a).expect("overwrite A");
        let others: Vec<u64> = (0..16).filter(|&l| l != A).collect();
        let mut reused = false;
        for i in 0..4 * geo.pages as usize {
            let l = others[i % others.len()];
            dev.write(l, &block_of(l, 0, next_id(), b))
                .expect("write another block");
            region.read(page_off, &mut page);
            if word(&page, 0) != A && parse_block(&page, word(&page, 0)).is_ok() {
                reused = true;
                break;
            }
        }
        assert!(reused, "page {vpn} was never reused for another block");
        assert_ne!(
            region.load_u64(off),
            raw,
            "A's entry changed under the paused reader"
        );
        release_tx.send(()).expect("release the reader");
        let returned = match rx.recv().expect("reader channel") {
            Msg::Done(r) => r.expect("the paused read failed"),
            Msg::Paused { .. } => panic!("the reader paused twice"),
        };
        reader.join().expect("reader thread");
        (returned, new_a, page)
    });
    let stats = dev.stats();
    Outcome {
        returned,
        new_a,
        recycled,
        read_retries: stats.read_retries,
        lookups: lookups.load(SeqCst),
    }
}

/// Stands for `best_flush_policy()` (p6 with clwb, clflushopt or clflush) in the table below.
const BEST_FLUSH: &str = "p6-best-flush";

fn resolve(ordering: &str) -> &str {
    if ordering == BEST_FLUSH {
        nvstack_pmem::ordering::best_flush_policy()
    } else {
        ordering
    }
}

const INTERLEAVING_CONFIGS: [(Protocol, &str, u32); 8] = [
    (Protocol::Fast, "p4", 512),
    (Protocol::Fast, "p4", 4096),
    (Protocol::Paper, "p4", 512),
    (Protocol::Paper, "p4", 4096),
    (Protocol::Fast, BEST_FLUSH, 512),
    (Protocol::Fast, BEST_FLUSH, 4096),
    (Protocol::Paper, BEST_FLUSH, 512),
    (Protocol::Paper, BEST_FLUSH, 4096),
];

#[test]
fn read_protection_retries_past_a_recycled_page() {
    for (protocol, ordering, bb) in INTERLEAVING_CONFIGS {
        let o = recycled_page_read(protocol, resolve(ordering), bb, true);
        let what = format!("{protocol:?}/{ordering}/{bb}");
        assert!(
            parse_block(&o.returned, A).is_ok(),
            "{what}: the protected read returned a bad block"
        );
        assert!(
            o.returned == o.new_a,
            "{what}: the protected read did not return A's new contents (got lba {} id {})",
            word(&o.returned, 0),
            word(&o.returned, 2)
        );
        assert!(o.read_retries >= 1, "{what}: the read did not retry");
        assert_eq!(o.lookups, 2, "{what}: one lookup, one retry");
    }
}

#[test]
fn without_read_protection_a_reader_gets_another_blocks_data() {
    for (protocol, ordering, bb) in INTERLEAVING_CONFIGS {
        let o = recycled_page_read(protocol, resolve(ordering), bb, false);
        let what = format!("{protocol:?}/{ordering}/{bb}");
        let other = word(&o.recycled, 0);
        assert_ne!(
            other, A,
            "{what}: the recycled page must hold another block"
        );
        assert!(
            o.returned == o.recycled,
            "{what}: the unprotected read should have copied the recycled page (LBA {other})"
        );
        assert!(
            parse_block(&o.returned, A).is_err(),
            "{what}: wrong data must not pass as A's"
        );
        assert_eq!(
            word(&o.returned, 0),
            other,
            "{what}: it holds the other block's LBA"
        );
        assert_eq!(o.read_retries, 0, "{what}: no retries without protection");
        assert_eq!(o.lookups, 1, "{what}: one lookup");
    }
}

/// Many writers on few lanes, each write as large as allowed, over a fully mapped device: every
/// writer must get its shadow pages at once (one free pool; per-lane lists with stealing once
/// starved a writer whose lane list was empty while the other lane was never idle).
#[test]
fn shadow_pages_never_run_out_with_more_writers_than_lanes() {
    let (region, g) = make_device(Protocol::Fast, "p4", 2, 512, 256);
    let dev = Arc::new(NvramDisk::open(region, OpenOptions::default()).expect("open"));
    let b = g.block_bytes as usize;
    let full = vec![7u8; b * ATOMIC_BLOCKS_MAX];
    // Map every block first.
    let mut lba = 0;
    while lba < g.blocks {
        let n = (g.blocks - lba).min(ATOMIC_BLOCKS_MAX as u64);
        dev.write(lba, &full[..n as usize * b]).expect("fill");
        lba += n;
    }
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let dev = dev.clone();
            let full = &full;
            s.spawn(move || {
                let mut rng = (t + 1) * 0x9e37_79b9;
                for _ in 0..3_000 {
                    let n = (xorshift(&mut rng) % ATOMIC_BLOCKS_MAX as u64 + 1).min(g.blocks);
                    let start = xorshift(&mut rng) % (g.blocks - n + 1);
                    dev.write(start, &full[..n as usize * b]).expect("write");
                }
            });
        }
    });
    let st = dev.stats();
    assert!(st.writes >= 8 * 3_000, "{st:?}");
}

/// A reader whose block is rewritten under every optimistic copy stops retrying after 64
/// copies (the device's READ_RETRIES_MAX) and copies once more under the block's stripe lock,
/// which every writer of the block holds: the retry loop has a bound however busy the block
/// is, and the block it returns is whole and the latest. The overwrites come from the
/// reader's own hook, between its lookup and its copy, so every optimistic copy fails.
#[test]
fn a_read_under_endless_overwrites_is_bounded() {
    const RETRIES_MAX: u64 = 64;
    let (region, geo) = make_device(Protocol::Fast, "p4", 2, 512, 64);
    let block_bytes = geo.block_bytes as usize;
    let device: Arc<std::sync::OnceLock<Arc<NvramDisk<MmapRegion>>>> = Arc::default();
    let lookups = Arc::new(AtomicU64::new(0));
    let hook: Hook = {
        let (device, lookups) = (device.clone(), lookups.clone());
        Arc::new(move |event: &Event| {
            if event.step == Step::ReadLookup {
                let seen = lookups.fetch_add(1, SeqCst) + 1;
                if seen <= RETRIES_MAX {
                    let fill = vec![seen as u8; block_bytes];
                    device
                        .get()
                        .expect("set")
                        .write(5, &fill)
                        .expect("overwrite");
                }
            }
            Action::Continue
        })
    };
    let options = OpenOptions {
        hook: Some(hook),
        ..Default::default()
    };
    let dev = Arc::new(NvramDisk::open(region, options).expect("open"));
    assert!(device.set(dev.clone()).is_ok());
    dev.write(5, &vec![0xaa; block_bytes]).expect("write");
    let mut block = vec![0u8; block_bytes];
    dev.read(5, &mut block).expect("read");
    assert_eq!(
        lookups.load(SeqCst),
        RETRIES_MAX + 1,
        "64 optimistic copies, one locked"
    );
    assert_eq!(dev.stats().read_retries, RETRIES_MAX);
    assert!(
        block.iter().all(|&byte| byte == RETRIES_MAX as u8),
        "the last overwrite, whole"
    );
}
