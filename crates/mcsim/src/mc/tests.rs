//! The controller's bookkeeping against the plain forms it replaced, kept here as the
//! reference: the read queue as one FIFO scanned in arrival order, and `next_free` as a
//! walk over every unit with something queued. Random reads, writes, commits, passes and
//! completions on small machines (one of them with units spread over two words and a
//! channel count that is not a power of two) must pick the same reads and ask for the same
//! passes, step by step.

use super::Mc;
use crate::config::{Config, Mode};
use crate::event::{Ev, Events, Log};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;

fn machine(mode: Mode, channels: u32, units_per_channel: u32) -> Config {
    Config {
        mode,
        channels,
        units_per_channel,
        read_queue_entries: 8,
        sub_queues: 4,
        sub_queue_entries: 4,
        credits: 3,
        log_events: true,
        ..Config::default()
    }
}

/// The read queue as it was: (seq, line) in arrival order, and the reads beyond its size.
#[derive(Default)]
struct OneFifo {
    queue: VecDeque<(u64, u64)>,
    backlog: VecDeque<(u64, u64)>,
}

impl OneFifo {
    fn arrive(&mut self, seq: u64, line: u64, size: usize) {
        if self.queue.len() < size {
            self.queue.push_back((seq, line));
        } else {
            self.backlog.push_back((seq, line));
        }
    }

    /// The old pick: the first read whose channel is `ch` and whose unit is free at `now`.
    fn issue(&mut self, mc: &Mc, now: u64, ch: usize) -> Option<u64> {
        let free = |line: u64| mc.channel(line) == ch && mc.units[mc.unit(line)] <= now;
        let i = self.queue.iter().position(|&(_, line)| free(line))?;
        let (_, line) = self.queue.remove(i).expect("picked");
        if let Some(b) = self.backlog.pop_front() {
            self.queue.push_back(b);
        }
        Some(line)
    }
}

/// Reads only (distinct lines, so the log names the one issued), with the units kept busy
/// by the issues themselves: every pick, backlog refill included, is the old scan's.
#[test]
fn read_pick_is_the_old_scans() {
    for (channels, upc) in [(2, 4), (3, 30)] {
        let cfg = machine(Mode::Fine, channels, upc);
        let mut mc = Mc::new(&cfg);
        let mut ev = Events::default();
        let mut old = OneFifo::default();
        let mut rng = SmallRng::seed_from_u64(11);
        let mut now = 0;
        for seq in 0..30_000u64 {
            if rng.gen_bool(0.55) {
                let line = seq * 1024 + rng.gen_range(0..1024);
                mc.read(now, 0, seq, line);
                old.arrive(seq, line, cfg.read_queue_entries as usize);
                continue;
            }
            now += rng.gen_range(0..120);
            mc.refresh_busy(now);
            for ch in 0..channels as usize {
                let want = old.issue(&mc, now, ch);
                let issued = mc.issue_read(now, ch, &mut ev);
                assert_eq!(
                    issued,
                    want.is_some(),
                    "a read issues when the scan finds one"
                );
                let last = mc.log.as_ref().and_then(|l| l.last().copied());
                if let (Some(line), Some(Log::ReadIssued { line: got, .. })) = (want, last) {
                    assert_eq!(got, line, "the same read at {now} on channel {ch}");
                }
            }
            assert_eq!(mc.reads_len, old.queue.len(), "the same reads queued");
        }
    }
}

/// `next_free` as it was: per unit with something queued, the later of its unit's and its
/// channel's free times, and every bus while a sub-queue is locked or starved.
fn old_next_free(mc: &Mc, now: u64) -> u64 {
    let mut next = u64::MAX;
    let channels = mc.bus.len();
    for u in 0..mc.units.len() {
        if mc.reads_on.count[u] + mc.writes_on.count[u] > 0 {
            let t = mc.bus[u % channels].max(mc.units[u]);
            if t > now {
                next = next.min(t);
            }
        }
    }
    let querying = mc
        .queues
        .iter()
        .any(|s| s.lock.is_some() || (s.credits == 0 && !s.entries.is_empty()));
    if querying {
        for &b in mc.bus.iter().filter(|&&b| b > now) {
            next = next.min(b);
        }
    }
    next
}

/// One random step of a driver that keeps the engine's rules the controller relies on:
/// time never goes back, and an arrival comes no later than the next event.
fn step(mc: &mut Mc, ev: &mut Events, rng: &mut SmallRng, now: &mut u64, seq: u64) {
    if rng.gen_bool(0.4) {
        *now = (*now + rng.gen_range(0..40)).min(ev.horizon());
        let line = rng.gen_range(0..256);
        match rng.gen_range(0..10) {
            0..=4 => mc.read(*now, 0, seq, line),
            5..=8 => {
                mc.write(*now, line, seq, None);
            }
            _ => {
                mc.commit(*now, 0, seq, line * 64, 64 * rng.gen_range(1..4));
            }
        }
        return mc.pass_if_asked(*now, ev);
    }
    let Some((t, e)) = ev.pop() else { return };
    *now = t;
    match e {
        Ev::Tick => mc.schedule(t, ev),
        Ev::WriteDone {
            q,
            id,
            line,
            version,
        } => mc.write_done(t, q, id, line, version),
        Ev::QueryDone { q, answer } => mc.query_done(t, q, answer, ev),
        _ => {}
    }
    // As the engine does after every event.
    mc.pass_if_due(t, ev);
}

/// After every pass (and every step), the pass it asked for is the old formula's, and the
/// per-unit read FIFOs hold what the counts say.
#[test]
fn next_free_is_the_old_formula() {
    for mode in [Mode::Fine, Mode::Global] {
        for (channels, upc) in [(2, 4), (3, 30)] {
            let cfg = machine(mode, channels, upc);
            let mut mc = Mc::new(&cfg);
            mc.bind(0, 64 * 64);
            mc.bind(64 * 128, 64 * 64);
            let mut ev = Events::default();
            let mut rng = SmallRng::seed_from_u64(5);
            let mut now = 0;
            for seq in 0..40_000u64 {
                step(&mut mc, &mut ev, &mut rng, &mut now, seq);
                mc.refresh_busy(now);
                assert_eq!(mc.next_free(now), old_next_free(&mc, now), "at {now}");
                let queued: usize = mc.reads.iter().map(VecDeque::len).sum();
                assert_eq!(queued, mc.reads_len, "the FIFOs hold the queued reads");
            }
            let log = mc.log.as_deref().unwrap_or_default();
            let issued = |f: fn(&Log) -> bool| log.iter().filter(|e| f(e)).count();
            let counts = [
                issued(|e| matches!(e, Log::ReadIssued { .. })),
                issued(|e| matches!(e, Log::WriteIssued { .. })),
                issued(|e| matches!(e, Log::Query { .. })),
                issued(|e| matches!(e, Log::CommitDone { .. })),
            ];
            assert!(
                counts.iter().all(|&n| n > 100) && mc.stats.writes_waited > 0,
                "the driver reaches every kind of issue ({counts:?})"
            );
        }
    }
}
