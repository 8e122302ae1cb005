//! Trends over many seeds (issue 24 item 4): not per run, since queues that are not blocked
//! can legitimately compete for units, but on average: eADR at least as fast as fine-grained
//! committing, fine-grained at least as fast as global; fine commits shorter; more credit
//! synchronisations for fine; the gap closing as commits become rarer.

use nvstack_mcsim::kernels::{Kernel, KernelConfig, KernelWorkload};
use nvstack_mcsim::{run, Config, Mode, Report};

fn mean_over_seeds(
    mode: Mode,
    kernel: Kernel,
    commit_every: u64,
    seeds: u64,
) -> (f64, Vec<Report>) {
    let cfg = Config {
        mode,
        cores: 4,
        ..Config::default()
    };
    let reports: Vec<Report> = (0..seeds)
        .map(|seed| {
            let kc = KernelConfig {
                kernel,
                threads: 4,
                updates_per_thread: 150,
                commit_every,
                seed,
                ..KernelConfig::default()
            };
            run(&cfg, &mut KernelWorkload::new(&kc).expect("valid"))
                .expect("runs")
                .report
        })
        .collect();
    let ipc = reports.iter().map(|r| r.ipc).sum::<f64>() / seeds as f64;
    (ipc, reports)
}

#[test]
fn eadr_fine_global_in_that_order_on_average() {
    for kernel in Kernel::ALL {
        let (global, g) = mean_over_seeds(Mode::Global, kernel, 1, 6);
        let (fine, f) = mean_over_seeds(Mode::Fine, kernel, 1, 6);
        let (adr, _) = mean_over_seeds(Mode::Adr, kernel, 1, 6);
        let (eadr, _) = mean_over_seeds(Mode::Eadr, kernel, 1, 6);
        assert!(
            eadr >= adr && adr >= fine && fine >= global,
            "{kernel:?}: eadr {eadr} adr {adr} fine {fine} global {global}"
        );
        let commit = |rs: &[Report]| rs.iter().map(|r| r.commit_cycles_mean).sum::<f64>();
        assert!(
            commit(&f) < commit(&g),
            "{kernel:?}: a fine commit is shorter than a global one"
        );
        let syncs = |rs: &[Report]| rs.iter().map(|r| r.mc.syncs).sum::<u64>();
        assert!(
            syncs(&f) > syncs(&g),
            "{kernel:?}: fine synchronises credits more often"
        );
    }
}

#[test]
fn the_gap_closes_as_commits_become_rarer() {
    let gain = |every| {
        let (global, _) = mean_over_seeds(Mode::Global, Kernel::Hashmap, every, 4);
        let (fine, _) = mean_over_seeds(Mode::Fine, Kernel::Hashmap, every, 4);
        fine / global
    };
    let (g1, g10, g100) = (gain(1), gain(10), gain(100));
    assert!(
        g1 > g10 && g10 > g100 && g100 >= 1.0,
        "fine/global IPC: every 1: {g1}, 10: {g10}, 100: {g100}"
    );
}
