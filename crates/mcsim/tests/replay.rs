//! The controller alone replaying a run's inputs (`replay`, what the bench times beside the
//! peer simulators) is that run's controller: the same event log, counters and final memory,
//! on every kernel and mode and on one core and many. Bad inputs are refused with an error.

use nvstack_mcsim::kernels::{Kernel, KernelConfig, KernelWorkload};
use nvstack_mcsim::{replay, run_recording, Config, Input, Mode};

fn recorded(cfg: &Config, kernel: Kernel, updates: u64) -> (nvstack_mcsim::Outcome, Vec<Input>) {
    let kc = KernelConfig {
        kernel,
        threads: cfg.cores,
        updates_per_thread: updates,
        ..KernelConfig::default()
    };
    run_recording(cfg, &mut KernelWorkload::new(&kc).unwrap()).unwrap()
}

#[test]
fn a_replay_is_the_recorded_runs_controller() {
    for cores in [1, 4, 16] {
        for mode in Mode::ALL {
            for kernel in Kernel::ALL {
                let cfg = Config {
                    mode,
                    cores,
                    log_events: true,
                    ..Config::default()
                };
                let (run, inputs) = recorded(&cfg, kernel, 300 / u64::from(cores) + 20);
                let r = replay(&cfg, &inputs).unwrap();
                let what = format!("{cores} cores, {mode:?}, {kernel:?}");
                assert!(!run.log.is_empty() && run.report.mc.commits > 0, "{what}");
                assert_eq!(r.log, run.log, "{what}: the event log");
                // Under ADR and eADR the engine resolves a commit in the ROB and only counts
                // it: it never reaches the controller, and the replay has none to count.
                let mut counted = run.report.mc.clone();
                if matches!(mode, Mode::Adr | Mode::Eadr) {
                    counted.commits = 0;
                }
                assert_eq!(
                    format!("{:?}", r.stats),
                    format!("{counted:?}"),
                    "{what}: the counters"
                );
                // The run's memory adds what its caches still held dirty at its end: a line
                // the replay wrote has that version or a later store's.
                assert!(!r.memory.is_empty(), "{what}");
                for (line, version) in &r.memory {
                    let ran = run.memory.get(line).copied().unwrap_or(0);
                    assert!(ran >= *version, "{what}: line {line:#x}");
                }
            }
        }
    }
}

#[test]
fn a_replay_refuses_bad_inputs() {
    let cfg = Config {
        cores: 2,
        ..Config::default()
    };
    let read = |t| Input::Read { t, line: 7 };
    let commit = |t, token| Input::Commit {
        t,
        token,
        addr: 0,
        len: 64,
    };
    let refused = |inputs: &[Input], words: &str| {
        let e = replay(&cfg, inputs).err().expect("refused").to_string();
        assert!(e.contains(words), "{e}");
    };
    refused(&[read(10), read(9)], "input 1 at cycle 9 comes before");
    refused(
        &[read(1), read(u64::MAX)],
        "input 1 at cycle 18446744073709551615: after",
    );
    let bind = |addr, len| Input::Bind { t: 5, addr, len };
    refused(
        &[read(1), bind(0x1000, 0)],
        "input 1: a range of 0 bytes at 0x1000",
    );
    refused(
        &[bind(u64::MAX, 2)],
        "input 0: a range of 2 bytes at 0xffffffffffffffff",
    );
    let empty = Input::Commit {
        t: 9,
        token: 1,
        addr: 64,
        len: 0,
    };
    refused(&[empty], "input 0: a range of 0 bytes at 0x40");
    refused(
        &[commit(1, 5), commit(2, 6), commit(3, 7)],
        "input 2: a commit while 2 are at the controller",
    );
    let bad = Config {
        cores: 0,
        ..cfg.clone()
    };
    assert!(replay(&bad, &[read(1)]).is_err());
    // Well formed inputs replay; a commit may come once the last one of its core is done.
    let r = replay(&cfg, &[read(1), commit(2, 5), read(3)]).unwrap();
    assert_eq!((r.stats.reads, r.stats.commits), (2, 1));
    let later = replay(&cfg, &[commit(1, 5), commit(100_000, 5)]).unwrap();
    assert_eq!(later.stats.commits, 2);
    assert!(replay(&cfg, &[]).unwrap().memory.is_empty());
}
