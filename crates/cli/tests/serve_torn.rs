//! Torn block writes (issue 42): a block write that completed through the loop device is never
//! lost, whatever the daemon's death, for every backend.
//!
//! The danger: the kernel's FUSE client cuts a direct write longer than `max_write` bytes (or
//! spanning more than `max_pages` page slots) into several FUSE writes, and when the daemon
//! dies between two of them the loop device completes the block request as a success with
//! only its first piece written. `nvstack up` caps the loop device's requests so that each is
//! one FUSE write (crates/export/src/loopdev.rs); these tests attach the loop device the same
//! way and prove two things with the real kernel:
//!
//! 1. At the worst memory alignment the block layer lets through, a request of the limit is
//!    one FUSE write, and one block more is two (the bound is exact, not merely safe).
//! 2. Writers that log completions (O_DIRECT, 64 KiB to 1 MiB, half of them from buffers
//!    skewed 512 bytes into their pages, 8 at once), the daemon SIGKILLed at a random instant,
//!    the device read back after a restart: 0 completed writes lost (UBJ: 0 lost among those
//!    a completed flush covered), for nvramdisk, UBJ and the write cache with 512 B and
//!    4 KiB sectors. With `NVSTACK_TORN_NO_LIMIT=1` the loop device keeps the kernel's
//!    default limit, and the same test fails (the closing note of issue 42 shows it).
//!
//! Every sector a writer writes carries a header (magic, writer, write number, sector
//! address) and a fill derived from it, so each 512-byte sector read back names the write it
//! came from, or is found torn inside itself.

#[path = "common/stack.rs"]
mod stack;

use stack::*;
use std::fs::{File, OpenOptions};
use std::io::{IoSlice, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SECTOR_BYTES: u64 = 512;
const PAGE_BYTES: usize = 4096;
const MAGIC: u64 = u64::from_le_bytes(*b"nvsTORN1");
const WRITERS: u64 = 8;
const WRITE_BYTES_MIN: u64 = 64 << 10;
const WRITE_BYTES_MAX: u64 = 1 << 20;
/// A writer flushes (UBJ's commit) after this many of its writes.
const FLUSH_EVERY: usize = 4;

/// A page-aligned buffer of `len` bytes (the backing file's own O_DIRECT buffer).
struct Aligned {
    v: Vec<u8>,
    at: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let (v, at) = nvstack_nvcache::common::backing::aligned_buffer(len);
        Aligned { v, at, len }
    }
    fn get(&self) -> &[u8] {
        &self.v[self.at..self.at + self.len]
    }
    fn get_mut(&mut self) -> &mut [u8] {
        &mut self.v[self.at..self.at + self.len]
    }
}

fn open_direct(dev: &str, write: bool) -> File {
    OpenOptions::new()
        .read(!write)
        .write(write)
        .custom_flags(libc::O_DIRECT)
        .open(dev)
        .unwrap_or_else(|e| panic!("{dev}: cannot open with O_DIRECT: {e}"))
}

/// The write requests the loop device completed (/sys/block/loopN/stat, field 5).
fn loop_writes(dev: &str) -> u64 {
    let p = format!("/sys/block/{}/stat", dev.trim_start_matches("/dev/"));
    let s = std::fs::read_to_string(&p).unwrap();
    s.split_whitespace().nth(4).unwrap().parse().unwrap()
}

/// One write of `blocks` blocks of `lbs` bytes, each block alone in a stretch of two pages,
/// starting 512 bytes into its first: the most page slots the block layer lets a request of
/// that length take. Returns (FUSE writes, loop write requests) it took.
fn worst_write(st: &Stack, dev: &str, blocks: usize, lbs: usize) -> (u64, u64) {
    let stride = 2 * PAGE_BYTES;
    let mut buf = Aligned::new(blocks * stride);
    buf.get_mut().fill(0x5a);
    let b = buf.get();
    let iov: Vec<IoSlice> = (0..blocks)
        .map(|i| IoSlice::new(&b[i * stride + 512..i * stride + 512 + lbs]))
        .collect();
    let mut f = open_direct(dev, true);
    f.seek(SeekFrom::Start(1 << 20)).unwrap();
    let (fuse0, loop0) = (settled_acks(st), loop_writes(dev));
    let n = f.write_vectored(&iov).unwrap();
    assert_eq!(n, blocks * lbs, "a short O_DIRECT write");
    (settled_acks(st) - fuse0, loop_writes(dev) - loop0)
}

/// The daemon's acknowledged FUSE writes once the count stops moving (it counts a write
/// just after replying, so a write can return before its count).
fn settled_acks(st: &Stack) -> u64 {
    let mut last = stats_words(&st.stats)[W_ACKED];
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(50));
        let now = stats_words(&st.stats)[W_ACKED];
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("the daemon's write count never settled");
}

fn exact_limit(st: &mut Stack, lbs: u64, direct_io: bool, what: &str) {
    st.serve(&[]);
    let dev = st.attach_with(lbs, true, direct_io);
    let limits = st.fuse_limits();
    let limit = nvstack_export::loopdev::request_bytes_max(lbs, limits).unwrap();
    let blocks = (limit / lbs) as usize;
    // With the limit: one request, one FUSE write.
    assert_eq!(
        worst_write(st, &dev, blocks, lbs as usize),
        (1, 1),
        "{what}: a request of the limit ({limit} bytes, {limits:?}) at the worst alignment"
    );
    // One block more in one request (the limit raised by hand to let it through): the FUSE
    // client cuts it in two, the torn-write hazard the limit closes.
    let kb = (limit + lbs).div_ceil(1024).max(limit / 1024 + 1);
    nvstack_export::loopdev::set_max_sectors_kb(&dev, kb).unwrap();
    assert_eq!(
        worst_write(st, &dev, blocks + 1, lbs as usize),
        (2, 1),
        "{what}: one block past the limit in one request ({limits:?})"
    );
    st.detach();
    st.stop();
}

#[test]
fn a_request_of_the_limit_is_one_fuse_write_and_one_block_more_is_two() {
    require_environment();
    let _g = serial();
    // The loop device's buffered mode (what `up` uses) and its direct-I/O mode cut alike.
    let mut st = Stack::new("none", "64MiB");
    exact_limit(&mut st, 4096, false, "nvramdisk, 4 KiB loop sectors");
    exact_limit(
        &mut st,
        4096,
        true,
        "nvramdisk, 4 KiB loop sectors, direct I/O",
    );
    let mut st = Stack::new_write_cache("none", "8MiB", "32MiB", &["--sector", "512"]);
    exact_limit(&mut st, 512, false, "a write cache, 512 B loop sectors");
    exact_limit(
        &mut st,
        4096,
        false,
        "a write cache of 512 B sectors, 4 KiB loop sectors",
    );
}

/// A completed (or in-flight) write: its number, where, how long.
#[derive(Clone, Copy, Debug)]
struct W {
    seq: u64,
    off: u64,
    len: u64,
}

impl W {
    fn sectors(&self) -> std::ops::Range<u64> {
        self.off / SECTOR_BYTES..(self.off + self.len) / SECTOR_BYTES
    }
}

/// What one writer did before the daemon died.
#[derive(Default)]
struct Log {
    done: Vec<W>,
    /// The write that was issued and did not complete.
    inflight: Option<W>,
    /// `done[..flushed]` were completed before a flush that completed.
    flushed: usize,
}

/// The fill of a sector's bytes after its 32-byte header.
fn fill(seq: u64, sector: u64, out: &mut [u8]) {
    let mut x = seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ sector ^ 1;
    for c in out.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes()[..c.len()]);
    }
}

fn stamp(buf: &mut [u8], w: &W, writer: u64) {
    for (i, s) in buf.chunks_mut(SECTOR_BYTES as usize).enumerate() {
        let sector = w.off / SECTOR_BYTES + i as u64;
        for (k, v) in [MAGIC, writer, w.seq, sector].iter().enumerate() {
            s[k * 8..k * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        fill(w.seq, sector, &mut s[32..]);
    }
}

/// The write number a sector read back names: 0 for never written, None when it is no
/// writer's whole sector (torn inside the sector, or foreign).
fn decode(s: &[u8], writer: u64, sector: u64) -> Option<u64> {
    if s.iter().all(|&b| b == 0) {
        return Some(0);
    }
    let w = |k: usize| u64::from_le_bytes(s[k * 8..k * 8 + 8].try_into().unwrap());
    if w(0) != MAGIC || w(1) != writer || w(3) != sector {
        return None;
    }
    let mut want = vec![0u8; s.len() - 32];
    fill(w(2), sector, &mut want);
    (want == s[32..]).then_some(w(2))
}

struct Plan {
    dev: String,
    writer: u64,
    region: (u64, u64),
    seq0: u64,
    seed: u64,
    flush: bool,
}

/// Writes until the device fails (the daemon died) or `stop`; logs every completion.
fn writer(p: Plan, stop: Arc<AtomicBool>) -> Log {
    let mut f = open_direct(&p.dev, true);
    let mut rng = Rng(p.seed | 1);
    let mut log = Log::default();
    let mut buf = Aligned::new(BUFFER_BYTES);
    let (start, len) = p.region;
    for n in 1.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let blocks = rng.range(WRITE_BYTES_MIN / 4096, WRITE_BYTES_MAX / 4096 + 1);
        let w = W {
            seq: p.seq0 + n,
            off: start + rng.range(0, (len - blocks * 4096) / 4096 + 1) * 4096,
            len: blocks * 4096,
        };
        let skewed = rng.next() % 2 == 1;
        log.inflight = Some(w);
        if write_one(&mut f, &mut buf, &w, p.writer, skewed).is_err() {
            break;
        }
        log.done.push(w);
        log.inflight = None;
        if p.flush && log.done.len() % FLUSH_EVERY == 0 {
            let covered = log.done.len();
            if f.sync_data().is_err() {
                break;
            }
            log.flushed = covered;
        }
    }
    log
}

/// Bytes of a writer's buffer: one write's bytes, then room for its 4 KiB pieces spread one
/// to a pair of pages.
const BUFFER_BYTES: usize = WRITE_BYTES_MAX as usize * 3 + 2 * PAGE_BYTES;

/// One O_DIRECT write of `w`: from one aligned buffer, or (`skewed`) 4 KiB pieces each 512
/// bytes into its own pair of pages (two page slots a block: the most the block layer allows).
fn write_one(
    f: &mut File,
    buf: &mut Aligned,
    w: &W,
    writer: u64,
    skewed: bool,
) -> std::io::Result<()> {
    let len = w.len as usize;
    let (src, dst) = buf.get_mut().split_at_mut(WRITE_BYTES_MAX as usize);
    stamp(&mut src[..len], w, writer);
    f.seek(SeekFrom::Start(w.off))?;
    let at = |i: usize| i * 2 * PAGE_BYTES + 512;
    let n = if skewed {
        for i in 0..len / 4096 {
            dst[at(i)..at(i) + 4096].copy_from_slice(&src[i * 4096..i * 4096 + 4096]);
        }
        let iov: Vec<IoSlice> = (0..len / 4096)
            .map(|i| IoSlice::new(&dst[at(i)..at(i) + 4096]))
            .collect();
        f.write_vectored(&iov)?
    } else {
        f.write(&src[..len])?
    };
    if n == len {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("short write: {n} of {len}")))
    }
}

/// How a configuration's device is made and checked.
struct Config {
    what: &'static str,
    make: fn() -> Stack,
    /// The loop device's sector size (the device's block size, as `up` attaches it).
    lbs: u64,
    /// Durable at a flush only (UBJ): the writers flush, and only flushed writes must stay.
    flush: bool,
}

/// The device's bytes, one writer's region each (whole MiB).
fn regions(size_bytes: u64) -> Vec<(u64, u64)> {
    let each = size_bytes / WRITERS / (1 << 20) * (1 << 20);
    assert!(
        each >= 2 * WRITE_BYTES_MAX,
        "device too small: {size_bytes}"
    );
    (0..WRITERS).map(|i| (i * each, each)).collect()
}

/// Read every sector of `region` back: the write number each names (None: torn or foreign).
fn read_region(dev: &str, writer: u64, region: (u64, u64)) -> Vec<Option<u64>> {
    let mut f = open_direct(dev, false);
    let mut buf = Aligned::new(1 << 20);
    let mut out = Vec::with_capacity((region.1 / SECTOR_BYTES) as usize);
    f.seek(SeekFrom::Start(region.0)).unwrap();
    for chunk in 0..region.1 / (1 << 20) {
        f.read_exact(buf.get_mut()).unwrap();
        for (i, s) in buf.get().chunks(SECTOR_BYTES as usize).enumerate() {
            let sector = (region.0 + chunk * (1 << 20)) / SECTOR_BYTES + i as u64;
            out.push(decode(s, writer, sector));
        }
    }
    out
}

/// The completed writes lost in one region: each sector must read as the last write that
/// must have reached it (the last completed one; with `flush`, the last a flush covered), or
/// as a write that may have (issued after that one), and be whole. One line per write lost:
/// where it is torn.
fn lost_writes(
    base: &[Option<u64>],
    log: &Log,
    read: &[Option<u64>],
    region: (u64, u64),
    flush: bool,
) -> Vec<String> {
    let first = region.0 / SECTOR_BYTES;
    let must_upto = if flush { log.flushed } else { log.done.len() };
    let mut must: Vec<Option<u64>> = base.to_vec();
    let mut may: Vec<Vec<u64>> = vec![Vec::new(); base.len()];
    for (k, w) in log.done.iter().chain(log.inflight.iter()).enumerate() {
        for s in w.sectors() {
            let i = (s - first) as usize;
            if k < must_upto {
                must[i] = Some(w.seq);
                may[i].clear();
            } else {
                may[i].push(w.seq);
            }
        }
    }
    // Sectors that fail, grouped by the write that must be there.
    let mut bad: std::collections::BTreeMap<u64, Vec<(u64, Option<u64>)>> = Default::default();
    for (i, got) in read.iter().enumerate() {
        let ok = *got == must[i] || got.is_some_and(|g| may[i].contains(&g));
        if !ok {
            let sector = first + i as u64;
            bad.entry(must[i].unwrap_or(0))
                .or_default()
                .push((sector, *got));
        }
    }
    bad.into_iter()
        .map(|(seq, sectors)| {
            let w = log.done.iter().find(|w| w.seq == seq);
            let at = w.map_or(0, |w| sectors[0].0 * SECTOR_BYTES - w.off);
            format!(
                "write {seq} ({w:?}): {} of its sectors old or torn, the first at byte {at} \
                 (read {:?})",
                sectors.len(),
                sectors[0].1
            )
        })
        .collect()
}

/// One life of the daemon: serve, attach, write, SIGKILL, restart, read back and judge.
/// Returns the new contents and the completed writes lost (their sectors).
fn one_life(
    st: &mut Stack,
    c: &Config,
    limit: bool,
    base: &[Vec<Option<u64>>],
    cycle: u64,
    rng: &mut Rng,
) -> (Vec<Vec<Option<u64>>>, Vec<String>, usize) {
    st.serve(&[]);
    let dev = st.attach_sectors(c.lbs, limit);
    let size = std::fs::metadata(st.fuse.join("disk")).unwrap().len();
    let regions = regions(size);
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    for (i, &region) in regions.iter().enumerate() {
        let plan = Plan {
            dev: dev.clone(),
            writer: i as u64 + 1,
            region,
            seq0: cycle << 32,
            seed: rng.next(),
            flush: c.flush,
        };
        let (tx, stop) = (tx.clone(), stop.clone());
        std::thread::spawn(move || tx.send((i, writer(plan, stop))).unwrap());
    }
    std::thread::sleep(Duration::from_millis(rng.range(800, 2000)));
    let pid = st.daemon_pid().expect("the daemon runs");
    ok(10, &["kill", "-KILL", &pid.to_string()]);
    stop.store(true, Ordering::Relaxed);
    let mut logs: Vec<Option<Log>> = (0..regions.len()).map(|_| None).collect();
    let t = Instant::now();
    for _ in 0..regions.len() {
        let (i, log) = rx
            .recv_timeout(Duration::from_secs(60).saturating_sub(t.elapsed()))
            .expect("a writer hung after the daemon died");
        logs[i] = Some(log);
    }
    wait_gone(pid);
    st.clean_after_death();
    st.serve(&[]);
    let dev = st.attach_sectors(c.lbs, limit);
    let (mut now, mut lost, mut done) = (Vec::new(), Vec::new(), 0);
    for (i, &region) in regions.iter().enumerate() {
        let log = logs[i].take().unwrap();
        let read = read_region(&dev, i as u64 + 1, region);
        lost.extend(lost_writes(&base[i], &log, &read, region, c.flush));
        done += log.done.len();
        now.push(read);
    }
    st.detach();
    st.stop();
    (now, lost, done)
}

/// Lives of `c`'s device; returns the completed writes and the lost ones (one line each).
fn never_torn(c: &Config, lives: u64, seed: u64, limit: bool) -> (usize, Vec<String>) {
    let mut st = (c.make)();
    let mut rng = Rng(seed);
    let mut base: Vec<Vec<Option<u64>>> = Vec::new();
    let (mut lost, mut done) = (Vec::new(), 0);
    for cycle in 1..=lives {
        if base.is_empty() {
            // The first life's base: the device as made (all zero), learned from its size.
            st.serve(&[]);
            let size = std::fs::metadata(st.fuse.join("disk")).unwrap().len();
            base = regions(size)
                .iter()
                .map(|r| vec![Some(0); (r.1 / SECTOR_BYTES) as usize])
                .collect();
            st.stop();
        }
        let (now, l, d) = one_life(&mut st, c, limit, &base, cycle, &mut rng);
        base = now;
        done += d;
        lost.extend(l.into_iter().map(|s| format!("life {cycle}: {s}")));
    }
    eprintln!(
        "{}: {lives} SIGKILLs, {done} completed writes, {} of them lost{}",
        c.what,
        lost.len(),
        if limit { "" } else { " (loop limit removed)" }
    );
    for l in lost.iter().take(3) {
        eprintln!("  {l}");
    }
    (done, lost)
}

#[test]
fn no_completed_write_is_lost_when_the_daemon_dies_on_any_backend() {
    require_environment();
    let _g = serial();
    let configs = [
        Config {
            what: "nvramdisk",
            make: || Stack::new("none", "64MiB"),
            lbs: 4096,
            flush: false,
        },
        Config {
            what: "UBJ",
            make: || Stack::new_cache("none", "16MiB", "64MiB", &[]),
            lbs: 4096,
            flush: true,
        },
        Config {
            what: "write cache, 4 KiB sectors",
            make: || Stack::new_write_cache("none", "16MiB", "64MiB", &["--sector", "4096"]),
            lbs: 4096,
            flush: false,
        },
        Config {
            what: "write cache, 512 B sectors",
            make: || Stack::new_write_cache("none", "16MiB", "64MiB", &["--sector", "512"]),
            lbs: 512,
            flush: false,
        },
    ];
    // NVSTACK_TORN_LIVES and NVSTACK_TORN_ONLY (a substring of a configuration's name): to
    // run more lives, or one configuration, by hand.
    let lives = std::env::var("NVSTACK_TORN_LIVES").map_or(4, |v| v.parse().unwrap());
    let only = std::env::var("NVSTACK_TORN_ONLY").unwrap_or_default();
    let limit = std::env::var_os("NVSTACK_TORN_NO_LIMIT").is_none();
    let mut failed = Vec::new();
    for (i, c) in configs.iter().enumerate() {
        if c.what.contains(&only) {
            let (done, lost) = never_torn(c, lives, 0x7042 + i as u64, limit);
            if done == 0 || !lost.is_empty() {
                failed.push(format!("{}: {done} completed, {} lost", c.what, lost.len()));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "completed writes lost (or none made): {failed:#?}"
    );
}
