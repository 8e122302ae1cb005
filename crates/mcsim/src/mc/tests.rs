//! Hand-worked calendars of the controller alone, at 1000 MHz (a nanosecond is a cycle): a
//! read holds its unit 55 + 5, a write 5 + 150, every command its channel's bus 5. Lines
//! interleave over the 2 channels, then over a channel's 16 units: line l is on channel
//! l mod 2, unit (l mod 2) + 2 ((l / 2) mod 16).

use super::{Done, Mc};
use crate::config::{Config, Mode};
use crate::event::Log;

fn controller(mode: Mode) -> Mc {
    Mc::new(&Config {
        mode,
        clock_mhz: 1000,
        log_events: true,
        ..Config::default()
    })
}

/// Step the controller until it has nothing left to do; what it finished for the engine.
fn drain(cal: &mut Mc) -> Vec<Done> {
    let mut out = Vec::new();
    while cal.next_action() != u64::MAX {
        cal.step(&mut out);
    }
    assert!(cal.idle(), "nothing is left once no action is");
    out
}

/// Step the controller through every action up to `t` (an arrival at `t` comes after them).
fn until(cal: &mut Mc, t: u64, out: &mut Vec<Done>) {
    while cal.next_action() <= t {
        cal.step(out);
    }
}

#[test]
fn reads_take_their_slots_at_arrival() {
    let mut cal = controller(Mode::Fine);
    // Line 0 at 0: issued at once. Line 2 (channel 0, another unit) at 0: the bus is taken
    // until 5. Line 1 (channel 1) at 0: its own bus. Line 0 again at 1: its unit is busy
    // until 60. Line 4 at 3: the bus has a gap at 10 (before the read placed at 60).
    assert_eq!(cal.read(0, 0), 60);
    assert_eq!(cal.read(0, 2), 65);
    assert_eq!(cal.read(0, 1), 60);
    assert_eq!(cal.read(1, 0), 120);
    assert_eq!(cal.read(3, 4), 70);
    assert_eq!(cal.next_action(), u64::MAX, "reads leave nothing for later");
    assert_eq!(cal.stats.reads, 5);
}

#[test]
fn a_write_waits_for_the_read_of_its_unit() {
    let mut cal = controller(Mode::Fine);
    assert_eq!(cal.read(0, 0), 60);
    assert!(
        cal.write(0, 0, 7, Some(1)),
        "an empty sub-queue takes the write"
    );
    // A read of another unit arriving at 2 is placed at once, after the bus frees at 5.
    assert_eq!(cal.read(2, 2), 65);
    assert_eq!(cal.next_action(), 60);
    assert!(drain(&mut cal).is_empty(), "the flush was accepted at once");
    assert_eq!(
        cal.log.clone().unwrap(),
        vec![
            Log::ReadIssued { line: 0, t: 0 },
            Log::WriteAccepted { id: 1, q: 7, t: 0 },
            Log::ReadIssued { line: 2, t: 5 },
            Log::WriteIssued { id: 1, q: 7, t: 60 },
            Log::WriteDone { id: 1, t: 215 },
        ]
    );
    assert_eq!(cal.memory().get(&0), Some(&7));
}

#[test]
fn a_commit_of_an_empty_sub_queue_is_one_query() {
    let mut cal = controller(Mode::Fine);
    cal.bind(0, 0x10000, 0x1000);
    assert!(!cal.commit(1, 9, 0x10000, 0x1000), "a fine commit waits");
    // Sub-queue 0 queries on channel 0 at 1; the answer (all 8 credits) is back at 61.
    assert_eq!(drain(&mut cal), vec![Done { token: 9, t: 61 }]);
    assert_eq!(
        cal.log.clone().unwrap(),
        vec![
            Log::CommitStart {
                commit: 0,
                queues: 1,
                t: 1
            },
            Log::Query { q: 0, t: 1 },
            Log::CommitPart {
                commit: 0,
                q: 0,
                t: 61
            },
            Log::CommitDone { commit: 0, t: 61 },
        ]
    );
    assert_eq!((cal.stats.syncs, cal.stats.commit_queries), (1, 1));
}

#[test]
fn credits_run_out_and_queries_refill_them() {
    let mut cal = controller(Mode::Fine);
    // Lines 0x400 to 0x43f: sub-queue 0.
    cal.bind(0, 0x10000, 0x1000);
    // Nine writes at 0, channel 0, units 0, 2, ... 16. The first eight fill sub-queue 0; the
    // ninth (a flush) waits and enters at 0, when the first issues.
    for k in 0..9u64 {
        let waiter = (k == 8).then_some(5);
        assert_eq!(cal.write(0, 0x400 + 2 * k, k + 1, waiter), k < 8);
    }
    let done = drain(&mut cal);
    assert_eq!(done, vec![Done { token: 5, t: 0 }]);
    // Eight writes issue a burst apart, 0 to 35, and take the 8 credits. The ninth is
    // starved: a query at 40 finds all 8 in flight (answer 0, back at 100), so does one at
    // 100 (back at 160); by 160 two writes are done (155, 160), so the query at 160 answers
    // 2, back at 220, when the ninth issues.
    let log = cal.log.clone().unwrap();
    let issued: Vec<u64> = log
        .iter()
        .filter_map(|l| match l {
            Log::WriteIssued { t, .. } => Some(*t),
            _ => None,
        })
        .collect();
    assert_eq!(issued, vec![0, 5, 10, 15, 20, 25, 30, 35, 220]);
    let queries: Vec<u64> = log
        .iter()
        .filter_map(|l| match l {
            Log::Query { q: 0, t } => Some(*t),
            _ => None,
        })
        .collect();
    assert_eq!(queries, vec![40, 100, 160]);
    assert_eq!((cal.stats.credit_queries, cal.stats.syncs), (3, 3));
    assert_eq!(cal.memory().get(&0x410), Some(&9));
}

#[test]
fn a_global_commit_drains_every_sub_queue_then_queries_once() {
    let mut cal = controller(Mode::Global);
    let mut done = Vec::new();
    assert!(cal.write(0, 0, 1, Some(1)));
    until(&mut cal, 0, &mut done); // the write issues at 0, done at 155
    assert!(!cal.commit(0, 2, 0x10000, 64));
    until(&mut cal, 1, &mut done);
    // Every sub-queue is locked: a write arriving now waits until the commit is done.
    assert!(!cal.write(1, 2, 2, Some(3)));
    // Once every sub-queue is drained (155), the one query, back at 215.
    done.extend(drain(&mut cal));
    assert_eq!(
        done,
        vec![Done { token: 2, t: 215 }, Done { token: 3, t: 215 }]
    );
    assert!(cal.log.clone().unwrap().contains(&Log::Query {
        q: u32::MAX,
        t: 155
    }));
    assert_eq!((cal.stats.syncs, cal.stats.commit_cycles_total), (1, 215));
}
