//! The request stream the bench replays on DRAMsim3 (`run_recording`): recording changes
//! nothing in the run, and the stream is every request the controller counted, in time order.

use nvstack_mcsim::kernels::{Kernel, KernelConfig, KernelWorkload};
use nvstack_mcsim::{run, run_recording, Config, Mode};

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
            let (rec, arrivals) =
                run_recording(&cfg, &mut KernelWorkload::new(&kc).unwrap()).unwrap();
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
                arrivals.windows(2).all(|w| w[0].t <= w[1].t),
                "requests reach the controller in time order"
            );
        }
    }
}
