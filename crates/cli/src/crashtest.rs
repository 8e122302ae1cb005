//! `nvstack crashtest`: the CLI front of nvstack_crashtest. Flags become a `Plan`, the
//! library runs it, and the report is printed as a table or JSON.

use crate::progress::{Bars, Look};
use crate::{print_json, say};
use clap::Args;
use nvstack_core::error::{Error, Result};
use nvstack_crashtest::{
    CrashTarget, Layer, NvramTarget, Orderings, Plan, PlanError, Replay, ReplayPlan, Report,
    UbjTarget, WriteTarget,
};
use nvstack_nvramdisk::Protocol;
use nvstack_pmem::crash::FaultModel;
use nvstack_pmem::ordering;

#[derive(Args)]
pub struct CrashArgs {
    /// Check a cache instead of nvramdisk: `ubj`, its NVRAM and its backing device together
    /// (the backing sectors written since its last flush reach the disk in any subset).
    #[arg(long, value_enum)]
    cache: Option<crate::cache::CacheMode>,
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

/// The flags as a plan: today's parsing order and messages for the protocol and ordering.
fn plan(a: &CrashArgs) -> Result<Plan> {
    let protocol = match &a.protocol {
        Some(p) => Some(Protocol::parse(p)?),
        None => None,
    };
    let ordering = if a.ordering == "all" {
        Orderings::All
    } else if a.ordering == ordering::DEFAULT_POLICY {
        // The default flag value: with a seeded bug, the bug's ordering.
        Orderings::Default
    } else {
        Orderings::One(ordering::policy_by_name(&a.ordering)?)
    };
    Ok(Plan {
        layer: match a.cache {
            Some(crate::cache::CacheMode::Ubj) => Layer::Ubj,
            Some(crate::cache::CacheMode::Write) => Layer::Write,
            None => Layer::Nvramdisk,
        },
        protocol,
        ordering,
        fault: a.fault,
        exhaustive: a.exhaustive,
        random_cycles: a.random_cycles,
        seed: a.seed,
        seeded_bug: a.seeded_bug.clone(),
        scenario: a.scenario.clone(),
        threads: a
            .threads
            .unwrap_or_else(nvstack_crashtest::driver::default_threads),
    })
}

/// A plan the library refuses, in the flags' terms.
fn flag_error(e: PlanError) -> Error {
    Error::bad(match e {
        PlanError::Threads(n) => format!(
            "--threads {n}: expected 1 to {}",
            nvstack_crashtest::driver::THREADS_MAX
        ),
        PlanError::SeededBug(n) => {
            format!("unknown seeded bug '{n}': `nvstack crashtest --seeded-bug list` names them")
        }
        PlanError::Scenario(n) => format!("unknown scenario '{n}'"),
        PlanError::NotForCache(f) => {
            format!("--{f} names an nvramdisk configuration; a cache (--cache) has one")
        }
        PlanError::M3NeedsRandomOnly => {
            "fault model M3 is for random runs only: add --random-cycles N".to_string()
        }
    })
}

pub fn run(a: CrashArgs) -> Result<i32> {
    if a.seeded_bug.as_deref() == Some("list") {
        return match a.cache {
            Some(crate::cache::CacheMode::Write) => list_bugs(&WriteTarget::new(), a.json),
            Some(_) => list_bugs(&UbjTarget::new(), a.json),
            None => list_bugs(&NvramTarget::new(), a.json),
        };
    }
    let plan = plan(&a)?;
    plan.check().map_err(flag_error)?;
    if let Some(spec) = &a.replay {
        let (seed, cycle) = replay_arg(spec)?;
        let r = nvstack_crashtest::replay(&ReplayPlan { plan, seed, cycle })?;
        print_replay(&r)?;
        return Ok(if r.violations() > 0 { 1 } else { 0 });
    }
    let report = nvstack_crashtest::run(&plan, &Bars::new(Look::Crashtest, !a.json))?;
    if a.json {
        print_json(&report)?;
    } else {
        print_report(&report)?;
    }
    Ok(if report.violations > 0 { 1 } else { 0 })
}

/// One line per (protocol, ordering, fault, tier) run.
fn print_rows(r: &Report) -> Result<()> {
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
    Ok(())
}

/// What was covered: crash points, images, states, and the rate.
fn print_coverage(r: &Report) -> Result<()> {
    say!("")?;
    say!(
        "crash points {} ({} enumerated in full, {} the same as the point before, {} sampled: {:.2e} of their images on average); images checked {} ({} recoveries run; {} at depth 2); cycles {}",
        r.crash_points,
        r.points_exhaustive,
        r.points_equivalent,
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
    Ok(())
}

/// What was found: each violation, the seeded bug's fate, the media faults' outcomes.
fn print_findings(r: &Report) -> Result<()> {
    for v in &r.violation_details {
        say!(
            "VIOLATION {} {} {} {} step {} depth {} lba {:?}: {} [image: {}]",
            v.fault.name(),
            v.protocol,
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
    Ok(())
}

fn print_report(r: &Report) -> Result<()> {
    print_rows(r)?;
    print_coverage(r)?;
    print_findings(r)?;
    say!("violations: {}", r.violations)?;
    Ok(())
}

fn list_bugs<T: CrashTarget>(target: &T, json: bool) -> Result<i32>
where
    T::Bug: serde::Serialize,
{
    if json {
        print_json(&target.bugs().to_vec())?;
        return Ok(0);
    }
    say!(
        "{:<30} {:<6} {:<9} {:<6} what",
        "name",
        "proto",
        "ordering",
        "model"
    )?;
    for b in target.bugs() {
        say!(
            "{:<30} {:<6} {:<9} {:<6} {}",
            b.name,
            b.protocol,
            b.ordering,
            b.weakest.name(),
            b.what
        )?;
    }
    Ok(0)
}

/// `--replay SEED:CYCLE`.
fn replay_arg(spec: &str) -> Result<(u64, u64)> {
    let (s, c) = spec
        .split_once(':')
        .ok_or_else(|| Error::bad(format!("--replay '{spec}': expected SEED:CYCLE")))?;
    let seed: u64 = s
        .parse()
        .map_err(|_| Error::bad(format!("--replay '{spec}': bad seed '{s}'")))?;
    let cycle: u64 = c
        .parse()
        .map_err(|_| Error::bad(format!("--replay '{spec}': bad cycle '{c}'")))?;
    Ok((seed, cycle))
}

fn print_replay(r: &Replay) -> Result<()> {
    for l in &r.lines {
        let (p, o, m) = (l.protocol, l.ordering, l.fault.name());
        match &l.violation {
            None => say!("{p} {o} {m}: cycle {} of seed {} passes", r.cycle, r.seed)?,
            Some(v) => say!(
                "{p} {o} {m}: VIOLATION at cycle {}: lba {:?}: {} [image: {}]",
                v.step,
                v.lba,
                v.what,
                v.image
            )?,
        }
    }
    Ok(())
}
