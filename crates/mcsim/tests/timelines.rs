//! Hand-worked timelines (issue 24 item 4): a few requests on one core, every time asserted.
//! The machine runs at 1000 MHz so a nanosecond is a cycle: a read holds its unit 55 + 5
//! cycles, a write 5 + 150, every command holds its channel's bus 5.

use nvstack_mcsim::{run, Config, Log, Mode, Op, Outcome, VecWorkload};

fn machine(mode: Mode) -> Config {
    Config {
        mode,
        cores: 1,
        clock_mhz: 1000,
        log_events: true,
        ..Config::default()
    }
}

fn go(cfg: &Config, ops: Vec<Op>) -> Outcome {
    run(cfg, &mut VecWorkload::new(vec![ops])).expect("runs")
}

/// A range bound to sub-queue 0 (the first bind takes the first bindable sub-queue).
const BASE: u64 = 0x10000;
const BIND: Op = Op::Bind {
    addr: BASE,
    len: 0x1000,
};
const COMMIT: Op = Op::Commit {
    addr: BASE,
    len: 0x1000,
};

#[test]
fn one_write() {
    // Cycle 0: the store misses everywhere, its line is read (issued at once: unit free until
    // 60); the flush finds the line dirty and its write enters sub-queue 7 (unregistered) at
    // once; the fence stops fetch. The write waits for its unit (the read's) until 60 and
    // finishes at 60 + 5 + 150 = 215. The store retires at 60 with the flush, the fence at 61.
    let out = go(
        &machine(Mode::Fine),
        vec![Op::Store(0), Op::Flush(0), Op::Fence],
    );
    assert_eq!(
        out.log,
        vec![
            Log::ReadIssued { line: 0, t: 0 },
            Log::WriteAccepted { id: 1, q: 7, t: 0 },
            Log::WriteIssued { id: 1, q: 7, t: 60 },
            Log::WriteDone { id: 1, t: 215 },
        ]
    );
    assert_eq!(out.report.cycles, 61);
    assert_eq!(out.report.instructions, 3);
    assert_eq!(
        out.memory.get(&0),
        Some(&((1 << 40) | 1)),
        "the line holds core 0's first store"
    );
}

#[test]
fn commit_of_an_empty_sub_queue() {
    // Cycle 0: the bind and the commit are fetched; cycle 1 the commit is at the ROB head and
    // locks sub-queue 0, which is empty: a query read goes out at 1 and returns at 1 + 55 + 5
    // = 61 with all 8 credits, so the commit is done at 61 (60 cycles) with one synchronisation.
    let out = go(&machine(Mode::Fine), vec![BIND, COMMIT]);
    assert_eq!(
        out.log,
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
    assert_eq!(out.report.mc.syncs, 1);
    assert_eq!(out.report.commit_cycles_mean, 60.0);
    assert_eq!(out.report.cycles, 61);
}

const A: u64 = BASE; // line 1024: channel 0, unit 0
const B: u64 = BASE + 128; // line 1026: channel 0, unit 2
const C: u64 = BASE + 256; // line 1028: channel 0, unit 4

#[test]
fn commit_of_a_full_sub_queue() {
    // Sub-queues of 2. Cycle 0: three store misses (reads of A at 0, B at 5, C at 10: one
    // command per bus burst) and the flush of A (accepted at 0); cycle 1 the flush of B fills
    // sub-queue 0 and the flush of C waits outside. Writes go when their units free (the
    // reads': 60, 65, 70); C's enters as A's leaves, at 60. The stores retire at 60, 65, 70,
    // the flushes at 70-71, the fence at 72; the commit reaches the head at 73. Sub-queue 0 is
    // empty, so polling starts when the bus frees (75): credits come back 5, 5, 5 while the
    // writes finish (215, 220, 225), then all 8 from the query sent at 255: done at 315.
    let cfg = Config {
        sub_queue_entries: 2,
        ..machine(Mode::Fine)
    };
    let out = go(&cfg, out_ops());
    let expected = vec![
        Log::ReadIssued { line: 1024, t: 0 },
        Log::WriteAccepted { id: 1, q: 0, t: 0 },
        Log::WriteAccepted { id: 2, q: 0, t: 1 },
        Log::ReadIssued { line: 1026, t: 5 },
        Log::ReadIssued { line: 1028, t: 10 },
        Log::WriteIssued { id: 1, q: 0, t: 60 },
        Log::WriteAccepted { id: 3, q: 0, t: 60 },
        Log::WriteIssued { id: 2, q: 0, t: 65 },
        Log::WriteIssued { id: 3, q: 0, t: 70 },
        Log::CommitStart {
            commit: 0,
            queues: 1,
            t: 73,
        },
        Log::Query { q: 0, t: 75 },
        Log::Query { q: 0, t: 135 },
        Log::Query { q: 0, t: 195 },
        Log::WriteDone { id: 1, t: 215 },
        Log::WriteDone { id: 2, t: 220 },
        Log::WriteDone { id: 3, t: 225 },
        Log::Query { q: 0, t: 255 },
        Log::CommitPart {
            commit: 0,
            q: 0,
            t: 315,
        },
        Log::CommitDone { commit: 0, t: 315 },
    ];
    assert_eq!(out.log, expected);
    assert_eq!((out.report.mc.writes_waited, out.report.mc.syncs), (1, 4));
    assert_eq!(out.report.commit_cycles_mean, 242.0);

    // The same under global: one synchronisation, sent once everything finished (225).
    let out = go(
        &Config {
            mode: Mode::Global,
            ..cfg
        },
        out_ops(),
    );
    let tail: Vec<Log> = out
        .log
        .iter()
        .copied()
        .filter(|l| matches!(l, Log::Query { .. } | Log::CommitDone { .. }))
        .collect();
    assert_eq!(
        tail,
        vec![
            Log::Query {
                q: u32::MAX,
                t: 225
            },
            Log::CommitDone { commit: 0, t: 285 }
        ]
    );
    assert_eq!(out.report.mc.syncs, 1);
}

fn out_ops() -> Vec<Op> {
    let ops = vec![BIND, Op::Store(A), Op::Store(B), Op::Store(C)];
    [
        ops,
        vec![Op::Flush(A), Op::Flush(B), Op::Flush(C), Op::Fence, COMMIT],
    ]
    .concat()
}

#[test]
fn a_credit_runs_out_and_is_queried() {
    // One credit. Both writes enter sub-queue 0 at cycle 0. A's goes at 60 (its unit frees)
    // and takes the credit; B's unit frees at 65 but no credit is left: a query goes out at
    // 65. The NVM side has none free while A's write is in flight (until 215), so queries at
    // 65, 125 and 185 bring back 0; the one at 245 brings back 1 at 305, when B's write goes.
    let cfg = Config {
        credits: 1,
        ..machine(Mode::Fine)
    };
    let ops = vec![
        BIND,
        Op::Store(A),
        Op::Store(B),
        Op::Flush(A),
        Op::Flush(B),
        Op::Fence,
    ];
    let out = go(&cfg, ops);
    let expected = vec![
        Log::ReadIssued { line: 1024, t: 0 },
        Log::WriteAccepted { id: 1, q: 0, t: 0 },
        Log::WriteAccepted { id: 2, q: 0, t: 0 },
        Log::ReadIssued { line: 1026, t: 5 },
        Log::WriteIssued { id: 1, q: 0, t: 60 },
        Log::Query { q: 0, t: 65 },
        Log::Query { q: 0, t: 125 },
        Log::Query { q: 0, t: 185 },
        Log::WriteDone { id: 1, t: 215 },
        Log::Query { q: 0, t: 245 },
        Log::WriteIssued {
            id: 2,
            q: 0,
            t: 305,
        },
        Log::WriteDone { id: 2, t: 460 },
    ];
    assert_eq!(out.log, expected);
    assert_eq!((out.report.mc.credit_queries, out.report.mc.syncs), (4, 4));
    // The core does not wait for credits: its flushes were accepted at cycle 0.
    assert_eq!(out.report.cycles, 66);
}
