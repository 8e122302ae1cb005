//! `nvstack crashtest`: the crash checker's command line.

use crate::{print_json, say};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use nvstack_core::error::{Error, Result};
use nvstack_crashtest::exhaustive;
use nvstack_crashtest::random::{self, RandomJob, CHAIN_CYCLES};
use nvstack_crashtest::{Counters, Violation};
use nvstack_nvramdisk::bugs::{self, BugInfo};
use nvstack_nvramdisk::Protocol;
use nvstack_pmem::crash::FaultModel;
use nvstack_pmem::ordering::{self, OrderingPolicy};
use rayon::prelude::*;
use std::sync::atomic::Ordering;
use std::time::Instant;

#[derive(Args)]
pub struct CrashArgs {
    /// Fault model: M0 (x86 strict), M1 (relaxed), M2 (write disturbance), M3 (M2 on every
    /// dirty line plus media faults; random runs only). Default: M0, M1 and M2 for the
    /// exhaustive tier, M2 for random runs.
    #[arg(long, value_parser = fault_arg)]
    fault: Option<FaultModel>,
    /// Protocol to check (default: both).
    #[arg(long)]
    protocol: Option<String>,
    /// Ordering policy, or `all` to sweep every one (default: p4, the default ordering).
    #[arg(long, default_value = ordering::DEFAULT_POLICY)]
    ordering: String,
    /// Crash every scenario at every store, flush and fence (the default tier).
    #[arg(long)]
    exhaustive: bool,
    /// Randomized crash-recover-verify cycles.
    #[arg(long)]
    random_cycles: Option<u64>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Switch on a deliberate protocol mistake (`list` prints them); the run must catch it.
    #[arg(long)]
    seeded_bug: Option<String>,
    /// Reproduce one randomized-tier violation: SEED:CYCLE.
    #[arg(long)]
    replay: Option<String>,
    /// Only this scenario of the exhaustive tier (write-1, atomic-2, atomic-64, discard,
    /// discard-3, overwrite-just-written, two-lanes, neighbours, record-reuse).
    #[arg(long)]
    scenario: Option<String>,
    /// Worker threads (default: every core).
    #[arg(long)]
    threads: Option<usize>,
    #[arg(long)]
    json: bool,
}

fn fault_arg(s: &str) -> std::result::Result<FaultModel, String> {
    FaultModel::parse(s)
        .ok_or_else(|| format!("unknown fault model '{s}': expected M0, M1, M2 or M3"))
}

#[derive(serde::Serialize)]
struct Row {
    protocol: &'static str,
    ordering: &'static str,
    fault: &'static str,
    tier: &'static str,
    crash_points: u64,
    images_checked: u64,
    cycles: u64,
    violations: u64,
}

#[derive(serde::Serialize)]
struct BugResult {
    name: &'static str,
    what: &'static str,
    protocol: &'static str,
    ordering: &'static str,
    expected_weakest: &'static str,
    caught: bool,
    caught_under: Option<&'static str>,
    seconds_to_first: Option<f64>,
    crash_points_to_first: Option<u64>,
    images_to_first: Option<u64>,
}

#[derive(serde::Serialize)]
struct Report {
    crash_points: u64,
    images_checked: u64,
    /// Recoveries actually run (images shared by M0, M1 and M2 run once).
    images_run: u64,
    images_possible: String,
    depth2_images: u64,
    cycles: u64,
    points_exhaustive: u64,
    points_sampled: u64,
    fraction_covered_at_sampled_points: f64,
    violations: u64,
    violation_details: Vec<Violation>,
    states_covered: Vec<String>,
    images_per_sec: f64,
    threads: usize,
    seed: u64,
    seconds: f64,
    rows: Vec<Row>,
    seeded_bug: Option<BugResult>,
    /// M3 only: media faults injected and how nvstack handled them.
    media_faults: u64,
    media_detected_at_open: u64,
    media_detected_on_read: u64,
    media_no_effect: u64,
}

pub fn run(a: CrashArgs) -> Result<i32> {
    if a.seeded_bug.as_deref() == Some("list") {
        return list_bugs(a.json);
    }
    let threads = a.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    if threads == 0 || threads > 256 {
        return Err(Error::bad(format!(
            "--threads {threads}: expected 1 to 256"
        )));
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| Error::env(format!("cannot start {threads} threads: {e}")))?;
    pool.install(|| run_in_pool(a, threads))
}

fn protocols(a: &CrashArgs, bug: Option<&BugInfo>) -> Result<Vec<Protocol>> {
    Ok(match (&a.protocol, bug) {
        (Some(p), _) => vec![Protocol::parse(p)?],
        (None, Some(b)) => vec![b.protocol],
        (None, None) => vec![Protocol::Fast, Protocol::Paper],
    })
}

fn orderings(a: &CrashArgs, bug: Option<&BugInfo>) -> Result<Vec<OrderingPolicy>> {
    if let Some(b) = bug {
        if a.ordering == ordering::DEFAULT_POLICY {
            return Ok(vec![ordering::policy_by_name(b.ordering)?]);
        }
    }
    if a.ordering == "all" {
        // Every policy: the simulated region models every flush kind, whatever this CPU has.
        return Ok(ordering::POLICIES.to_vec());
    }
    Ok(vec![ordering::policy_by_name(&a.ordering)?])
}

fn run_in_pool(a: CrashArgs, threads: usize) -> Result<i32> {
    let bug = match a.seeded_bug.as_deref() {
        None => None,
        Some(n) => Some(bugs::by_name(n).ok_or_else(|| {
            Error::bad(format!(
                "unknown seeded bug '{n}': `nvstack crashtest --seeded-bug list` names them"
            ))
        })?),
    };
    if let Some(n) = &a.scenario {
        if !nvstack_crashtest::scenario::SCENARIOS
            .iter()
            .any(|s| s.1 == n)
        {
            return Err(Error::bad(format!("unknown scenario '{n}'")));
        }
    }
    let protocols = protocols(&a, bug.as_ref())?;
    let orderings = orderings(&a, bug.as_ref())?;
    let random_only = a.random_cycles.is_some() && !a.exhaustive;
    if a.fault == Some(FaultModel::M3) && !random_only {
        return Err(Error::bad(
            "fault model M3 is for random runs only: add --random-cycles N",
        ));
    }
    if let Some(r) = &a.replay {
        return replay(&a, r, &protocols, &orderings, bug.as_ref(), threads);
    }
    let started = Instant::now();
    let mut rows = Vec::new();
    let total = Counters::default();
    let mut bug_result = None;
    // Models in order of strength: a seeded bug is reported under the first that catches it.
    let ex_models: Vec<FaultModel> = match a.fault {
        Some(m) => vec![m],
        None => vec![FaultModel::M0, FaultModel::M1, FaultModel::M2],
    };
    let mut combos: Vec<(Protocol, OrderingPolicy, FaultModel)> = Vec::new();
    for &p in &protocols {
        for &o in &orderings {
            for &m in &ex_models {
                combos.push((p, o, m));
            }
        }
    }
    let bar = progress(
        !a.json,
        (if random_only {
            0
        } else {
            combos.len()
                * exhaustive::jobs(
                    &[Protocol::Fast],
                    &orderings[..1],
                    &[FaultModel::M0],
                    None,
                    0,
                    false,
                )
                .len()
        }) as u64,
    );
    // Jobs whose recording holds only non-temporal stores allow the same images under M0,
    // M1 and M2: checked once, counted under each model.
    let mut invariant: std::collections::HashMap<
        (&'static str, &'static str, &'static str),
        Counters,
    > = std::collections::HashMap::new();
    if !random_only {
        for &(p, o, m) in &combos {
            let c = Counters::default();
            let t = Instant::now();
            for job in exhaustive::jobs(&[p], &[o], &[m], bug.map(|b| b.bug), a.seed, bug.is_some())
            {
                if a.scenario.as_deref().is_some_and(|n| n != job.name) {
                    bar.inc(1);
                    continue;
                }
                bar.set_message(format!("{} {} {} {}", p.name(), o.name, m.name(), job.name));
                let key = (p.name(), o.name, job.name);
                if let Some(done) = invariant.get(&key) {
                    merge(&c, done);
                    // Counted under this model too, but not run again.
                    c.images_run
                        .fetch_sub(done.images_run.load(Ordering::Relaxed), Ordering::Relaxed);
                    bar.inc(1);
                    continue;
                }
                let jc = Counters::default();
                let model_invariant = exhaustive::run(&job, &jc).map_err(Error::env)?;
                merge(&c, &jc);
                if model_invariant && jc.violations.load(Ordering::Relaxed) == 0 {
                    invariant.insert(key, jc);
                }
                bar.inc(1);
                if bug.is_some() && c.violations.load(Ordering::Relaxed) > 0 {
                    break;
                }
            }
            rows.push(row(p, o, m, "exhaustive", &c));
            if let Some(b) = &bug {
                if bug_result.is_none() && c.violations.load(Ordering::Relaxed) > 0 {
                    bug_result = Some(caught(b, m, &total, &c, t.elapsed().as_secs_f64(), started));
                }
            }
            merge(&total, &c);
            if bug_result.is_some() {
                break;
            }
        }
    }
    if let Some(n) = a.random_cycles {
        let model = a.fault.unwrap_or(FaultModel::M2);
        for &p in &protocols {
            for &o in &orderings {
                let c = Counters::default();
                let t = Instant::now();
                let job = RandomJob {
                    protocol: p,
                    ordering: o,
                    model,
                    bug: bug.map(|b| b.bug),
                    seed: a.seed,
                };
                let chains = n.div_ceil(CHAIN_CYCLES);
                let rbar = progress(!a.json, n);
                rbar.set_message(format!("random {} {} {}", p.name(), o.name, model.name()));
                (0..chains).into_par_iter().for_each(|ch| {
                    let cycles = (n - ch * CHAIN_CYCLES).min(CHAIN_CYCLES);
                    if bug.is_some() && c.violations.load(Ordering::Relaxed) > 0 {
                        return;
                    }
                    let before = c.cycles.load(Ordering::Relaxed);
                    if let Err(v) = random::run_chain(&job, ch, cycles, &c) {
                        c.violation(v);
                    }
                    rbar.inc(
                        c.cycles
                            .load(Ordering::Relaxed)
                            .saturating_sub(before)
                            .min(cycles),
                    );
                });
                rbar.finish_and_clear();
                rows.push(row(p, o, model, "random", &c));
                if let Some(b) = &bug {
                    if bug_result.is_none() && c.violations.load(Ordering::Relaxed) > 0 {
                        bug_result = Some(caught(
                            b,
                            model,
                            &total,
                            &c,
                            t.elapsed().as_secs_f64(),
                            started,
                        ));
                    }
                }
                merge(&total, &c);
            }
        }
    }
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    if let (Some(b), None) = (&bug, &bug_result) {
        bug_result = Some(BugResult {
            name: b.name,
            what: b.what,
            protocol: b.protocol.name(),
            ordering: b.ordering,
            expected_weakest: b.weakest.name(),
            caught: false,
            caught_under: None,
            seconds_to_first: None,
            crash_points_to_first: None,
            images_to_first: None,
        });
    }
    let images = total.images_checked.load(Ordering::Relaxed);
    let images_run = total.images_run.load(Ordering::Relaxed);
    let report = Report {
        crash_points: total.crash_points.load(Ordering::Relaxed),
        images_checked: images,
        images_run,
        images_possible: format!("{}", *total.images_possible.lock().unwrap()),
        depth2_images: total.depth2_images.load(Ordering::Relaxed),
        cycles: total.cycles.load(Ordering::Relaxed),
        points_exhaustive: total.points_exhaustive.load(Ordering::Relaxed),
        points_sampled: total.points_sampled.load(Ordering::Relaxed),
        fraction_covered_at_sampled_points: total.sampled_fraction(),
        violations: total.violations.load(Ordering::Relaxed),
        violation_details: total.kept(),
        states_covered: total
            .states()
            .into_iter()
            .map(|(p, s)| format!("{p}:{s}"))
            .collect(),
        images_per_sec: images_run as f64 / seconds / threads as f64,
        threads,
        seed: a.seed,
        seconds,
        rows,
        seeded_bug: bug_result,
        media_faults: total.media_faults.load(Ordering::Relaxed),
        media_detected_at_open: total.media_detected_at_open.load(Ordering::Relaxed),
        media_detected_on_read: total.media_detected_on_read.load(Ordering::Relaxed),
        media_no_effect: total.media_no_effect.load(Ordering::Relaxed),
    };
    if a.json {
        print_json(&report)?;
    } else {
        print_report(&report)?;
    }
    Ok(if report.violations > 0 { 1 } else { 0 })
}

fn progress(show: bool, len: u64) -> ProgressBar {
    if !show || len == 0 {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(len);
    b.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    b
}

fn row(p: Protocol, o: OrderingPolicy, m: FaultModel, tier: &'static str, c: &Counters) -> Row {
    Row {
        protocol: p.name(),
        ordering: o.name,
        fault: m.name(),
        tier,
        crash_points: c.crash_points.load(Ordering::Relaxed),
        images_checked: c.images_checked.load(Ordering::Relaxed),
        cycles: c.cycles.load(Ordering::Relaxed),
        violations: c.violations.load(Ordering::Relaxed),
    }
}

fn merge(total: &Counters, c: &Counters) {
    for (t, x) in [
        (&total.crash_points, &c.crash_points),
        (&total.images_checked, &c.images_checked),
        (&total.images_run, &c.images_run),
        (&total.depth2_images, &c.depth2_images),
        (&total.cycles, &c.cycles),
        (&total.points_exhaustive, &c.points_exhaustive),
        (&total.media_faults, &c.media_faults),
        (&total.media_detected_at_open, &c.media_detected_at_open),
        (&total.media_detected_on_read, &c.media_detected_on_read),
        (&total.media_no_effect, &c.media_no_effect),
    ] {
        t.fetch_add(x.load(Ordering::Relaxed), Ordering::Relaxed);
    }
    // Sampled points carry their covered fraction.
    let sampled = c.points_sampled.load(Ordering::Relaxed);
    if sampled > 0 {
        total.points_sampled.fetch_add(sampled, Ordering::Relaxed);
        total.add_sampled_fraction(c.sampled_fraction() * sampled as f64);
    }
    if let Some(at) = *c.first_violation_at.lock().unwrap() {
        let mut t = total.first_violation_at.lock().unwrap();
        if t.is_none_or(|x| at < x) {
            *t = Some(at);
        }
    }
    {
        let add = *c.images_possible.lock().unwrap();
        let mut g = total.images_possible.lock().unwrap();
        *g = g.saturating_add(add);
    }
    for v in c.kept() {
        total.violation(v);
    }
    let extra = c
        .violations
        .load(Ordering::Relaxed)
        .saturating_sub(c.kept().len() as u64);
    total.violations.fetch_add(extra, Ordering::Relaxed);
    for (p, s) in c.states() {
        total.state(Protocol::parse(&p).expect("protocol names round-trip"), &s);
    }
}

fn caught(
    b: &BugInfo,
    m: FaultModel,
    total: &Counters,
    c: &Counters,
    _secs: f64,
    started: Instant,
) -> BugResult {
    let at = c
        .first_violation_at
        .lock()
        .unwrap()
        .unwrap_or_else(Instant::now);
    BugResult {
        name: b.name,
        what: b.what,
        protocol: b.protocol.name(),
        ordering: b.ordering,
        expected_weakest: b.weakest.name(),
        caught: true,
        caught_under: Some(m.name()),
        seconds_to_first: Some(at.duration_since(started).as_secs_f64()),
        crash_points_to_first: Some(
            total.crash_points.load(Ordering::Relaxed)
                + c.first_violation_points.load(Ordering::Relaxed),
        ),
        images_to_first: Some(
            total.images_checked.load(Ordering::Relaxed)
                + c.first_violation_images.load(Ordering::Relaxed),
        ),
    }
}

fn print_report(r: &Report) -> Result<()> {
    say!(
        "{:<7} {:<14} {:<5} {:<10} {:>12} {:>14} {:>9} {:>10}",
        "proto",
        "ordering",
        "fault",
        "tier",
        "crash pts",
        "images",
        "cycles",
        "violations"
    )?;
    for x in &r.rows {
        say!(
            "{:<7} {:<14} {:<5} {:<10} {:>12} {:>14} {:>9} {:>10}",
            x.protocol,
            x.ordering,
            x.fault,
            x.tier,
            x.crash_points,
            x.images_checked,
            x.cycles,
            x.violations
        )?;
    }
    say!("")?;
    say!(
        "crash points {} ({} enumerated in full, {} sampled: {:.2e} of their images on average); images checked {} ({} recoveries run; {} at depth 2); cycles {}",
        r.crash_points,
        r.points_exhaustive,
        r.points_sampled,
        r.fraction_covered_at_sampled_points,
        r.images_checked,
        r.images_run,
        r.depth2_images,
        r.cycles
    )?;
    say!("states covered: {}", r.states_covered.join(" "))?;
    say!(
        "{:.0} images recovered and verified per second per core on {} threads, {:.1} s, seed {}",
        r.images_per_sec,
        r.threads,
        r.seconds,
        r.seed
    )?;
    for v in &r.violation_details {
        say!(
            "VIOLATION {} {} {} {} step {} depth {} lba {:?}: {} [image: {}]",
            v.fault.name(),
            v.protocol.name(),
            v.ordering,
            v.scenario,
            v.step,
            v.depth,
            v.lba,
            v.what,
            v.image
        )?;
    }
    if let Some(b) = &r.seeded_bug {
        if b.caught {
            say!(
                "seeded bug {} CAUGHT under {} (expected {}) after {:.2} s, {} crash points, {} images",
                b.name,
                b.caught_under.unwrap_or("?"),
                b.expected_weakest,
                b.seconds_to_first.unwrap_or(0.0),
                b.crash_points_to_first.unwrap_or(0),
                b.images_to_first.unwrap_or(0)
            )?;
        } else {
            say!("seeded bug {} NOT CAUGHT", b.name)?;
        }
    }
    if r.media_faults > 0 {
        say!(
            "media faults (M3): {} injected: {} detected at open, {} detected on read, {} without effect on any read",
            r.media_faults, r.media_detected_at_open, r.media_detected_on_read, r.media_no_effect
        )?;
    }
    say!("violations: {}", r.violations)?;
    Ok(())
}

fn list_bugs(json: bool) -> Result<i32> {
    if json {
        print_json(&bugs::BUGS.to_vec())?;
        return Ok(0);
    }
    say!(
        "{:<30} {:<6} {:<9} {:<6} what",
        "name",
        "proto",
        "ordering",
        "model"
    )?;
    for b in bugs::BUGS.iter() {
        say!(
            "{:<30} {:<6} {:<9} {:<6} {}",
            b.name,
            b.protocol.name(),
            b.ordering,
            b.weakest.name(),
            b.what
        )?;
    }
    Ok(0)
}

fn replay(
    a: &CrashArgs,
    spec: &str,
    protocols: &[Protocol],
    orderings: &[OrderingPolicy],
    bug: Option<&BugInfo>,
    _threads: usize,
) -> Result<i32> {
    let (s, c) = spec
        .split_once(':')
        .ok_or_else(|| Error::bad(format!("--replay '{spec}': expected SEED:CYCLE")))?;
    let seed: u64 = s
        .parse()
        .map_err(|_| Error::bad(format!("--replay '{spec}': bad seed '{s}'")))?;
    let cycle: u64 = c
        .parse()
        .map_err(|_| Error::bad(format!("--replay '{spec}': bad cycle '{c}'")))?;
    let model = a.fault.unwrap_or(FaultModel::M2);
    let mut violations = 0;
    for &p in protocols {
        for &o in orderings {
            let job = RandomJob {
                protocol: p,
                ordering: o,
                model,
                bug: bug.map(|b| b.bug),
                seed,
            };
            let counters = Counters::default();
            let chain = cycle / CHAIN_CYCLES;
            match random::run_chain(&job, chain, cycle % CHAIN_CYCLES + 1, &counters) {
                Ok(()) => say!(
                    "{} {} {}: cycle {cycle} of seed {seed} passes",
                    p.name(),
                    o.name,
                    model.name()
                )?,
                Err(v) => {
                    violations += 1;
                    say!(
                        "{} {} {}: VIOLATION at cycle {}: lba {:?}: {} [image: {}]",
                        p.name(),
                        o.name,
                        model.name(),
                        v.step,
                        v.lba,
                        v.what,
                        v.image
                    )?;
                }
            }
        }
    }
    Ok(if violations > 0 { 1 } else { 0 })
}
