//! Properties that hold for every input (issue 24 item 4), over random multi-core traces on
//! small machines (small caches and queues, so evictions, full sub-queues and credit
//! shortages are common): what a commit waits for, that no commit finishes before its writes,
//! and that every mode leaves the same memory.

use nvstack_mcsim::{run, CacheLevel, Config, Log, Mode, Op, VecWorkload};
use proptest::prelude::*;
use std::collections::{HashMap, HashSet};

/// Thread t's lines are its own (disjoint regions), as in the race-free programs the model is for.
fn thread_ops(t: u64, raw: &[(u8, u8)]) -> Vec<Op> {
    let base = (t + 1) << 24;
    let mut ops = vec![Op::Bind {
        addr: base,
        len: 1 << 12,
    }];
    for &(kind, x) in raw {
        // Half the lines in the bound range, half just above it (unregistered).
        let addr = base + u64::from(x) * 64;
        ops.push(match kind % 8 {
            0 => Op::Gap(u32::from(x) % 7 + 1),
            1 | 2 => Op::Load(addr),
            3 | 4 => Op::Store(addr),
            5 => Op::Flush(addr),
            6 => Op::Fence,
            _ => Op::Commit {
                addr: base,
                len: 1 << (12 + (x % 2)),
            },
        });
    }
    ops.push(Op::Commit {
        addr: base,
        len: 1 << 13,
    });
    ops
}

fn small(mode: Mode, cores: u32, entries: u32, credits: u32) -> Config {
    let tiny = |bytes, hit_cycles| CacheLevel {
        bytes,
        ways: 2,
        hit_cycles,
    };
    Config {
        mode,
        cores,
        l1: tiny(512, 2),
        l2: tiny(1024, 5),
        l3_per_core: tiny(1024, 9),
        sub_queues: 4,
        sub_queue_entries: entries,
        credits,
        range_registers: 1,
        log_events: true,
        ..Config::default()
    }
}

fn trace() -> impl Strategy<Value = Vec<Vec<(u8, u8)>>> {
    prop::collection::vec(
        prop::collection::vec((any::<u8>(), any::<u8>()), 1..120),
        1..5,
    )
}

/// For every commit: the writes accepted into its sub-queues before it started are finished
/// before it is done; its parts are exactly its sub-queues (fine), each completed by a query.
fn check_commits(log: &[Log], fine: bool) -> Result<(), TestCaseError> {
    let mut queue_of = HashMap::new();
    let mut done = HashSet::new();
    let mut started: HashMap<u64, (u32, Vec<u64>)> = HashMap::new();
    let mut parts: HashMap<u64, u32> = HashMap::new();
    for &entry in log {
        match entry {
            Log::WriteAccepted { id, q, .. } => {
                queue_of.insert(id, q);
            }
            Log::WriteDone { id, .. } => {
                done.insert(id);
            }
            Log::CommitStart { commit, queues, .. } => {
                let mine = queue_of
                    .iter()
                    .filter(|(id, q)| queues & (1 << *q) != 0 && !done.contains(*id));
                started.insert(commit, (queues, mine.map(|(id, _)| *id).collect()));
            }
            Log::CommitPart { commit, q, .. } => {
                let (queues, _) = &started[&commit];
                prop_assert!(
                    queues & (1 << q) != 0,
                    "commit {commit} completed by sub-queue {q}, not its own"
                );
                *parts.entry(commit).or_default() |= 1 << q;
            }
            Log::CommitDone { commit, .. } => {
                let (queues, writes) = &started[&commit];
                for id in writes {
                    prop_assert!(
                        done.contains(id),
                        "commit {commit} done while its write {id} is not"
                    );
                }
                if fine {
                    prop_assert_eq!(parts.get(&commit).copied().unwrap_or(0), *queues);
                }
            }
            _ => {}
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn commits_wait_for_their_writes_and_modes_agree(raw in trace(), entries in 1u32..4, credits in 1u32..4) {
        let cores = raw.len() as u32;
        prop_assume!(cores.is_power_of_two());
        let ops: Vec<Vec<Op>> = raw.iter().enumerate().map(|(t, r)| thread_ops(t as u64, r)).collect();
        let mut memories = Vec::new();
        for mode in Mode::ALL {
            let out = run(&small(mode, cores, entries, credits), &mut VecWorkload::new(ops.clone())).expect("runs");
            check_commits(&out.log, mode == Mode::Fine)?;
            let commits = ops.iter().flatten().filter(|o| matches!(o, Op::Commit { .. })).count() as u64;
            prop_assert_eq!(out.report.mc.commits, commits);
            memories.push((mode, out.memory));
        }
        for (mode, memory) in &memories[1..] {
            prop_assert!(*memory == memories[0].1, "{mode:?} left other memory contents than global");
        }
    }
}

/// A fine-grained commit does not wait on another sub-queue's writes: core 1 streams writes to
/// its own range while core 0 commits an empty one; core 0's commit is done while writes of
/// core 1 accepted before it started are still unfinished. Under global it must wait for them.
#[test]
fn a_fine_commit_ignores_other_sub_queues() {
    let writer: Vec<Op> = (0..64u64)
        .flat_map(|i| [Op::Store((2 << 24) + i * 64), Op::Flush((2 << 24) + i * 64)])
        .chain([Op::Fence])
        .collect();
    let committer = vec![
        Op::Bind {
            addr: 1 << 24,
            len: 4096,
        },
        Op::Gap(400),
        Op::Commit {
            addr: 1 << 24,
            len: 4096,
        },
    ];
    let overtaken = |mode| {
        let cfg = Config {
            mode,
            cores: 2,
            log_events: true,
            ..Config::default()
        };
        let writer = [
            vec![Op::Bind {
                addr: 2 << 24,
                len: 4096,
            }],
            writer.clone(),
        ]
        .concat();
        let out = run(&cfg, &mut VecWorkload::new(vec![committer.clone(), writer])).expect("runs");
        let mut accepted = HashSet::new();
        let mut done = HashSet::new();
        let mut before_start = HashSet::new();
        for entry in &out.log {
            match *entry {
                Log::WriteAccepted { id, .. } => drop(accepted.insert(id)),
                Log::WriteDone { id, .. } => drop(done.insert(id)),
                Log::CommitStart { .. } => {
                    before_start = accepted.difference(&done).copied().collect()
                }
                Log::CommitDone { .. } => return before_start.difference(&done).count(),
                _ => {}
            }
        }
        unreachable!("the commit finishes")
    };
    assert!(
        overtaken(Mode::Fine) > 0,
        "the fine commit finished before other sub-queues' older writes"
    );
    assert_eq!(
        overtaken(Mode::Global),
        0,
        "a global commit waits for every older write"
    );
}
