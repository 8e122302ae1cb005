//! The ideal memory (`Config::ideal_memory`): the engine's bound with no controller. A
//! hand-worked timeline, and what it must keep of a real run: the final memory.

use nvstack_mcsim::kernels::{Kernel, KernelConfig, KernelWorkload};
use nvstack_mcsim::{run, Config, Log, Mode, Op, VecWorkload};

const BASE: u64 = 0x10000;

#[test]
fn ideal_timeline_of_a_flushed_store_and_its_commit() {
    // 1000 MHz, so a nanosecond is a cycle. Cycle 0: the bind, the store, the flush and the
    // commit are fetched. The store misses everywhere: its read is back at 0 + 55 + 5 = 60,
    // with no queue, unit or bus to wait for. The flush finds the line dirty: its write is
    // accepted at 0 and lands at 0 + 5 + 150 = 155. The bind takes no ROB entry. The store
    // and the flush retire at 60; the commit, head from then, goes to the controller in the
    // next cycle (61, as in timelines.rs's empty sub-queue), is done at once and retires.
    // Every mode gives this one timeline: with no controller, a commit has nothing to wait for.
    for mode in Mode::ALL {
        let cfg = Config {
            mode,
            cores: 1,
            clock_mhz: 1000,
            log_events: true,
            ideal_memory: true,
            ..Config::default()
        };
        let ops = vec![
            Op::Bind {
                addr: BASE,
                len: 0x1000,
            },
            Op::Store(BASE),
            Op::Flush(BASE),
            Op::Commit {
                addr: BASE,
                len: 0x1000,
            },
        ];
        let out = run(&cfg, &mut VecWorkload::new(vec![ops])).expect("runs");
        assert_eq!(
            out.log,
            vec![
                Log::ReadIssued { line: 1024, t: 0 },
                Log::WriteAccepted { id: 1, q: 0, t: 0 },
                Log::WriteDone { id: 1, t: 155 },
            ],
            "{mode:?}"
        );
        assert_eq!(out.report.cycles, 61, "{mode:?}");
        assert_eq!(out.report.instructions, 3, "the bind is no instruction");
        assert_eq!(
            (out.report.mc.syncs, out.report.commit_cycles_mean),
            (0, 0.0)
        );
        assert_eq!(out.memory.get(&1024), Some(&((1 << 40) | 1)));
    }
}

#[test]
fn ideal_memory_keeps_the_final_memory_and_takes_less_time() {
    let (mut real_cycles, mut ideal_cycles) = (0, 0);
    for kernel in Kernel::ALL {
        let kc = KernelConfig {
            kernel,
            threads: 4,
            updates_per_thread: 400,
            ..KernelConfig::default()
        };
        let real = Config {
            cores: 4,
            ..Config::default()
        };
        let ideal = Config {
            ideal_memory: true,
            ..real.clone()
        };
        let a = run(&real, &mut KernelWorkload::new(&kc).unwrap()).unwrap();
        let b = run(&ideal, &mut KernelWorkload::new(&kc).unwrap()).unwrap();
        assert_eq!(a.memory, b.memory, "{kernel:?}: the same final memory");
        assert!(
            b.report.mc.reads > 0 && b.report.mc.writes > 0,
            "{kernel:?}"
        );
        let mc = &b.report.mc;
        assert_eq!(
            (
                mc.syncs,
                mc.writes_waited,
                mc.credit_queries,
                mc.commit_queries
            ),
            (0, 0, 0, 0),
            "{kernel:?}: no controller work"
        );
        real_cycles += a.report.cycles;
        ideal_cycles += b.report.cycles;
    }
    // Every request costs the ideal memory no more than its unloaded latency, and the real
    // controller adds queues, credits and commits that wait: the bound must be well below.
    assert!(
        ideal_cycles * 2 < real_cycles,
        "ideal {ideal_cycles} cycles against fine's {real_cycles}"
    );
}
