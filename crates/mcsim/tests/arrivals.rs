//! The inputs the bench replays on the peers and on our controller alone (`run_recording`):
//! recording changes nothing in the run, and the stream is every request and commit the
//! controller counted, in time order.

use nvstack_mcsim::kernels::{Kernel, KernelConfig, KernelWorkload};
use nvstack_mcsim::{run, run_recording, Config, Input, Mode};

#[test]
fn recording_is_the_same_run_and_every_request() {
    for mode in Mode::ALL {
        for kernel in Kernel::ALL {
            let cfg = Config {
                mode,
                cores: 4,
                ..Config::default()
            };
            let kc = KernelConfig {
                kernel,
                threads: 4,
                updates_per_thread: 200,
                ..KernelConfig::default()
            };
            let plain = run(&cfg, &mut KernelWorkload::new(&kc).unwrap()).unwrap();
            let (rec, inputs) =
                run_recording(&cfg, &mut KernelWorkload::new(&kc).unwrap()).unwrap();
            let arrivals: Vec<_> = inputs.iter().filter_map(|i| i.arrival()).collect();
            let (a, b) = (&plain.report, &rec.report);
            assert_eq!(
                (a.cycles, a.instructions, a.served, a.mc.syncs, a.mc.reads),
                (b.cycles, b.instructions, b.served, b.mc.syncs, b.mc.reads),
                "{mode:?} {kernel:?}"
            );
            assert_eq!(plain.memory, rec.memory);
            let writes = arrivals.iter().filter(|r| r.write).count() as u64;
            assert_eq!(writes, b.mc.writes);
            assert_eq!(arrivals.len() as u64 - writes, b.mc.reads);
            assert!(b.mc.reads > 0 && writes > 0, "{mode:?} {kernel:?}");
            assert!(
                inputs.windows(2).all(|w| w[0].t() <= w[1].t()),
                "inputs reach the controller in time order"
            );
            // Under ADR and eADR a commit is done at its arrival: the engine resolves it in
            // the ROB and only counts it, and it never reaches the controller.
            let commits = inputs.iter().filter(|i| matches!(i, Input::Commit { .. }));
            let at_controller = match mode {
                Mode::Global | Mode::Fine => b.mc.commits,
                Mode::Adr | Mode::Eadr => 0,
            };
            assert!(b.mc.commits > 0, "{mode:?} {kernel:?}");
            assert_eq!(commits.count() as u64, at_controller, "{mode:?} {kernel:?}");
        }
    }
}
