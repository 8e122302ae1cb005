//! The floor (`floor`): the functional pass counts what a timed run's caches and controller
//! count. On one core the access order is the program's in both, so the counts are equal.

use nvstack_mcsim::kernels::{Kernel, KernelConfig, KernelWorkload};
use nvstack_mcsim::{floor, run, Config, Mode};

#[test]
fn one_core_floor_counts_the_runs_requests() {
    for kernel in Kernel::ALL {
        for mode in [Mode::Fine, Mode::Eadr] {
            let cfg = Config {
                mode,
                cores: 1,
                ..Config::default()
            };
            let kc = KernelConfig {
                kernel,
                threads: 1,
                updates_per_thread: 3_000,
                // A region larger than L3, so misses and dirty victims both happen.
                region_bytes: 16 << 20,
                ..KernelConfig::default()
            };
            let timed = run(&cfg, &mut KernelWorkload::new(&kc).unwrap()).unwrap();
            let f = floor(&cfg, &mut KernelWorkload::new(&kc).unwrap()).unwrap();
            let r = &timed.report;
            assert_eq!(f.served, r.served, "{kernel:?} {mode:?}");
            assert_eq!((f.reads, f.writes), (r.mc.reads, r.mc.writes), "{kernel:?}");
            assert!(f.reads > 0 && f.writes > 0 && f.ops > f.requests());
        }
    }
}

#[test]
fn floor_refuses_a_thread_count_unlike_the_cores() {
    let kc = KernelConfig {
        threads: 2,
        updates_per_thread: 10,
        ..KernelConfig::default()
    };
    let e = floor(&Config::default(), &mut KernelWorkload::new(&kc).unwrap()).unwrap_err();
    assert!(e.to_string().contains("one thread per core"), "{e}");
}
