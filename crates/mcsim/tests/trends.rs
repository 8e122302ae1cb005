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

/// The order (eADR >= fine >= global) per kernel, and ADR >= fine. eADR against ADR
/// is not an order the model guarantees, and is asserted only within 1 % over the four
/// kernels together: the two differ only when a sub-queue is full (ADR's flush waits for
/// room, eADR's core goes on and posts more writes), and eADR's extra writes then hold units
/// (a write holds its unit 155 ns, a read 60) that its own later reads wait for, where ADR's
/// stalled core sends those reads after the writes drained. On 4 cores over 6 seeds eADR's
/// mean IPC is 0.25 % below ADR's on the hash map and on the B-tree and equal on the others;
/// a change that made posting writes cost more than 1 % would fail here.
#[test]
fn eadr_fine_global_in_that_order_on_average() {
    let (mut adr_all, mut eadr_all) = (0.0, 0.0);
    for kernel in Kernel::ALL {
        let (global, g) = mean_over_seeds(Mode::Global, kernel, 1, 6);
        let (fine, f) = mean_over_seeds(Mode::Fine, kernel, 1, 6);
        let (adr, _) = mean_over_seeds(Mode::Adr, kernel, 1, 6);
        let (eadr, _) = mean_over_seeds(Mode::Eadr, kernel, 1, 6);
        assert!(
            eadr >= fine && adr >= fine && fine >= global,
            "{kernel:?}: eadr {eadr} adr {adr} fine {fine} global {global}"
        );
        (adr_all, eadr_all) = (adr_all + adr, eadr_all + eadr);
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
    assert!(
        eadr_all >= 0.99 * adr_all,
        "eADR's IPC over the kernels {eadr_all}, ADR's {adr_all}: more than 1 % below"
    );
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
