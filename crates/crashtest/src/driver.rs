//! The checker's driver: a [`Plan`] (what to check) in, a [`Report`] (what was found) out.
//! It builds the configuration x fault-model combinations, runs the exhaustive tier's jobs and
//! the randomized tier's chains on a pool of worker threads, shares the results of jobs whose
//! images do not depend on the model, merges the counters, and decides when a seeded bug is
//! caught. It reports progress through `nvstack_core::Progress` and never draws or prints.

use crate::exhaustive;
use crate::random::{self, RandomJob, CHAIN_CYCLES};
use crate::target::cache::{CacheConfig, CacheTarget, SimCache, UbjTarget, WriteTarget};
use crate::target::nvramdisk::{NvramConfig, NvramTarget};
use crate::target::{BugSpec, CrashTarget};
use crate::{lock, Counters, Violation};
use nvstack_core::error::{Error, Result};
use nvstack_core::Progress;
use nvstack_nvramdisk::Protocol;
use nvstack_pmem::crash::FaultModel;
use nvstack_pmem::ordering::{self, OrderingPolicy};
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Most worker threads a plan may ask for.
pub const THREADS_MAX: usize = 256;

/// Which ordering policies a plan checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Orderings {
    /// The default policy (p4), or the seeded bug's policy when a bug is chosen.
    Default,
    /// This policy, even with a seeded bug.
    One(OrderingPolicy),
    /// Every policy: the simulated region models every flush kind, whatever this CPU has.
    All,
}

/// The layer a plan checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    /// nvramdisk, under its protocols and ordering policies.
    Nvramdisk,
    /// nvcache's UBJ cache, its NVRAM and its backing device together.
    Ubj,
    /// nvcache's write cache (seed 004), its NVRAM and its backing device together.
    Write,
}

/// What to check: a layer (nvramdisk's protocols and ordering policies, or a cache), the
/// tiers and fault models.
#[derive(Clone, Debug)]
pub struct Plan {
    pub layer: Layer,
    /// One protocol, or (None) both; with a seeded bug, the bug's.
    pub protocol: Option<Protocol>,
    pub ordering: Orderings,
    /// One fault model, or (None) M0, M1 and M2 for the exhaustive tier and M2 for the
    /// randomized tier. M3 is for the randomized tier alone.
    pub fault: Option<FaultModel>,
    /// Run the exhaustive tier even with `random_cycles` (it runs by default without them).
    pub exhaustive: bool,
    /// Randomized cycles per configuration (None: no randomized tier).
    pub random_cycles: Option<u64>,
    /// Seed of everything random: garbage values, samples, workloads.
    pub seed: u64,
    /// A seeded bug of the catalogue, by name: the run must catch it.
    pub seeded_bug: Option<String>,
    /// Only this scenario of the exhaustive tier, by name.
    pub scenario: Option<String>,
    /// Worker threads, 1 to THREADS_MAX.
    pub threads: usize,
}

impl Default for Plan {
    /// The default run: both protocols, p4, the exhaustive tier under M0, M1 and M2, seed 1,
    /// every core.
    fn default() -> Plan {
        Plan {
            layer: Layer::Nvramdisk,
            protocol: None,
            ordering: Orderings::Default,
            fault: None,
            exhaustive: false,
            random_cycles: None,
            seed: 1,
            seeded_bug: None,
            scenario: None,
            threads: default_threads(),
        }
    }
}

/// Worker threads when none are named: every core.
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// A plan that cannot run, naming the field at fault. Converts to `Error::BadInput`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// `threads` is 0 or above THREADS_MAX.
    #[error("threads {0}: expected 1 to {max}", max = THREADS_MAX)]
    Threads(usize),
    /// `seeded_bug` names no bug of the catalogue.
    #[error("seeded_bug '{0}': not in the seeded-bug catalogue")]
    SeededBug(String),
    /// `scenario` names no scenario of the target.
    #[error("scenario '{0}': no such scenario")]
    Scenario(String),
    /// `protocol` or `ordering` is set for a layer that has none (a cache).
    #[error("{0} names an nvramdisk configuration: a cache has one configuration")]
    NotForCache(&'static str),
    /// `fault` is M3 but the plan runs the exhaustive tier.
    #[error("fault M3 is for the randomized tier only: set random_cycles, not exhaustive")]
    M3NeedsRandomOnly,
}

impl From<PlanError> for Error {
    fn from(e: PlanError) -> Error {
        Error::bad(e)
    }
}

impl Plan {
    /// Check the fields, in the order a command line would meet them.
    pub fn check(&self) -> std::result::Result<(), PlanError> {
        if self.threads == 0 || self.threads > THREADS_MAX {
            return Err(PlanError::Threads(self.threads));
        }
        if self.layer != Layer::Nvramdisk {
            if self.protocol.is_some() {
                return Err(PlanError::NotForCache("protocol"));
            }
            if self.ordering != Orderings::Default {
                return Err(PlanError::NotForCache("ordering"));
            }
        }
        let (bugs, scenarios) = match self.layer {
            Layer::Nvramdisk => names(&NvramTarget::new()),
            Layer::Ubj => names(&UbjTarget::new()),
            Layer::Write => names(&WriteTarget::new()),
        };
        if let Some(n) = &self.seeded_bug {
            if !bugs.contains(&n.as_str()) {
                return Err(PlanError::SeededBug(n.clone()));
            }
        }
        if let Some(n) = &self.scenario {
            if !scenarios.contains(&n.as_str()) {
                return Err(PlanError::Scenario(n.clone()));
            }
        }
        if self.fault == Some(FaultModel::M3) && !self.random_only() {
            return Err(PlanError::M3NeedsRandomOnly);
        }
        Ok(())
    }

    /// Only the randomized tier runs.
    pub fn random_only(&self) -> bool {
        self.random_cycles.is_some() && !self.exhaustive
    }
}

/// A target's seeded bugs and scenarios, by name.
fn names<T: CrashTarget>(t: &T) -> (Vec<&'static str>, &'static [&'static str]) {
    (t.bugs().iter().map(|b| b.name).collect(), t.scenarios())
}

/// A checked plan, in the target's terms.
struct Setup<T: CrashTarget> {
    configs: Vec<T::Config>,
    bug: Option<BugSpec<T::Bug>>,
    /// Exhaustive models in order of strength: a seeded bug is reported under the first that
    /// catches it. Empty when only the randomized tier runs.
    ex_models: Vec<FaultModel>,
    random_cycles: Option<u64>,
    random_model: FaultModel,
    scenario: Option<String>,
    seed: u64,
    threads: usize,
}

/// Resolve `plan` for nvramdisk: its configurations (protocol x ordering) and seeded bug.
fn setup(target: &NvramTarget, plan: &Plan) -> Result<Setup<NvramTarget>> {
    plan.check()?;
    let bug = match &plan.seeded_bug {
        None => None,
        Some(n) => target.bugs().iter().find(|b| b.name == n).copied(),
    };
    let protocols = match (plan.protocol, &bug) {
        (Some(p), _) => vec![p],
        (None, Some(b)) => vec![Protocol::parse(b.protocol)?],
        (None, None) => vec![Protocol::Fast, Protocol::Paper],
    };
    let orderings = match (plan.ordering, &bug) {
        (Orderings::Default, Some(b)) => vec![ordering::policy_by_name(b.ordering)?],
        (Orderings::Default, None) => vec![ordering::policy_by_name(ordering::DEFAULT_POLICY)?],
        (Orderings::One(o), _) => vec![o],
        (Orderings::All, _) => ordering::POLICIES.to_vec(),
    };
    let mut configs = Vec::with_capacity(protocols.len() * orderings.len());
    for &protocol in &protocols {
        for &ordering in &orderings {
            configs.push(NvramConfig { protocol, ordering });
        }
    }
    Ok(setup_models(plan, configs, bug))
}

/// Resolve `plan` for a cache: its one configuration and seeded bug.
fn setup_cache<C: SimCache>(target: &CacheTarget<C>, plan: &Plan) -> Result<Setup<CacheTarget<C>>> {
    plan.check()?;
    let bug = match &plan.seeded_bug {
        None => None,
        Some(n) => target.bugs().iter().find(|b| b.name == n).copied(),
    };
    Ok(setup_models(plan, vec![CacheConfig], bug))
}

/// The tiers and models of `plan` over `configs`: a checked plan in a target's terms.
fn setup_models<T: CrashTarget>(
    plan: &Plan,
    configs: Vec<T::Config>,
    bug: Option<BugSpec<T::Bug>>,
) -> Setup<T> {
    let ex_models = match (plan.random_only(), plan.fault) {
        (true, _) => vec![],
        (false, Some(m)) => vec![m],
        (false, None) => vec![FaultModel::M0, FaultModel::M1, FaultModel::M2],
    };
    // A seeded bug is reported under the first model that catches it: the weakest.
    debug_assert!(
        ex_models.windows(2).all(|m| (m[0] as u8) < (m[1] as u8)),
        "exhaustive models in order of strength"
    );
    debug_assert!(
        !configs.is_empty(),
        "a plan checks a configuration at least"
    );
    Setup {
        configs,
        bug,
        ex_models,
        random_cycles: plan.random_cycles,
        random_model: plan.fault.unwrap_or(FaultModel::M2),
        scenario: plan.scenario.clone(),
        seed: plan.seed,
        threads: plan.threads,
    }
}

/// One row of the report: a (configuration, model, tier). Fields as in docs/crashtest.md 9.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    pub protocol: &'static str,
    pub ordering: &'static str,
    pub fault: &'static str,
    pub tier: &'static str,
    pub crash_points: u64,
    pub images_checked: u64,
    pub cycles: u64,
    pub violations: u64,
}

/// How the hunt for a seeded bug went: `caught_under` and the `*_to_first` counts are
/// None when it was not caught. Fields as in docs/crashtest.md 9.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BugResult {
    pub name: &'static str,
    pub what: &'static str,
    pub protocol: &'static str,
    pub ordering: &'static str,
    pub expected_weakest: &'static str,
    pub caught: bool,
    pub caught_under: Option<&'static str>,
    pub seconds_to_first: Option<f64>,
    pub crash_points_to_first: Option<u64>,
    pub images_to_first: Option<u64>,
}

/// What a run found: `nvstack crashtest --json` prints it as is (docs/crashtest.md 9).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    pub crash_points: u64,
    pub images_checked: u64,
    /// Recoveries actually run (images shared by M0, M1 and M2 run once).
    pub images_run: u64,
    /// Decimal: the sum of the final rounds' restricted space sizes (saturating u128).
    pub images_possible: String,
    pub depth2_images: u64,
    pub cycles: u64,
    pub points_exhaustive: u64,
    pub points_sampled: u64,
    /// Crash points allowing the same executions as the point before (skipped, counted in
    /// `crash_points`).
    pub points_equivalent: u64,
    pub fraction_covered_at_sampled_points: f64,
    pub violations: u64,
    /// The first VIOLATIONS_KEPT violations in full.
    pub violation_details: Vec<Violation>,
    /// `protocol:state` names seen.
    pub states_covered: Vec<String>,
    pub images_per_sec: f64,
    pub threads: usize,
    pub seed: u64,
    pub seconds: f64,
    pub rows: Vec<Row>,
    pub seeded_bug: Option<BugResult>,
    /// M3 only: media faults injected and how nvstack handled them.
    pub media_faults: u64,
    pub media_detected_at_open: u64,
    pub media_detected_on_read: u64,
    pub media_no_effect: u64,
}

/// Run `plan` on nvramdisk on a pool of `plan.threads` workers. Err: a bad plan (BadInput,
/// naming the field), or the environment (the threads cannot start, a scenario's workload
/// itself fails). Violations are findings of the report, not errors.
pub fn run(plan: &Plan, progress: &dyn Progress) -> Result<Report> {
    match plan.layer {
        Layer::Nvramdisk => {
            let target = NvramTarget::new();
            let s = setup(&target, plan)?;
            pool(s.threads)?.install(|| run_in_pool(&target, &s, progress))
        }
        Layer::Ubj => {
            let target = UbjTarget::new();
            let s = setup_cache(&target, plan)?;
            pool(s.threads)?.install(|| run_in_pool(&target, &s, progress))
        }
        Layer::Write => {
            let target = WriteTarget::new();
            let s = setup_cache(&target, plan)?;
            pool(s.threads)?.install(|| run_in_pool(&target, &s, progress))
        }
    }
}

fn pool(threads: usize) -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| Error::env(format!("cannot start {threads} threads: {e}")))
}

/// The running totals of a run.
struct Run<'a, T: CrashTarget> {
    target: &'a T,
    s: &'a Setup<T>,
    progress: &'a dyn Progress,
    started: Instant,
    rows: Vec<Row>,
    total: Counters,
    bug_result: Option<BugResult>,
}

fn run_in_pool<T: CrashTarget>(
    target: &T,
    s: &Setup<T>,
    progress: &dyn Progress,
) -> Result<Report> {
    let mut r = Run {
        target,
        s,
        progress,
        started: Instant::now(),
        rows: Vec::new(),
        total: Counters::default(),
        bug_result: None,
    };
    if !s.ex_models.is_empty() {
        r.exhaustive()?;
    }
    if let Some(n) = s.random_cycles {
        r.random(n);
    }
    // Without a seeded bug nothing stops early: a row per (configuration, model, tier).
    let random_rows = if s.random_cycles.is_some() { 1 } else { 0 };
    debug_assert!(
        s.bug.is_some() || r.rows.len() == s.configs.len() * (s.ex_models.len() + random_rows),
        "{} rows",
        r.rows.len()
    );
    let seconds = r.started.elapsed().as_secs_f64();
    if let (Some(b), None) = (&s.bug, &r.bug_result) {
        r.bug_result = Some(bug_result(b, None));
    }
    Ok(report(r, seconds))
}

impl<T: CrashTarget> Run<'_, T> {
    /// Every (configuration, model) of the exhaustive tier, in order, each over every
    /// scenario; with a seeded bug, until one catches it.
    fn exhaustive(&mut self) -> Result<()> {
        let (s, target) = (self.s, self.target);
        let mut combos: Vec<(T::Config, FaultModel)> = Vec::new();
        for &c in &s.configs {
            for &m in &s.ex_models {
                combos.push((c, m));
            }
        }
        let steps = (combos.len() * target.scenarios().len()) as u64;
        self.progress.start("", steps);
        // Jobs whose recording holds only non-temporal stores allow the same images under
        // M0, M1 and M2: checked once, counted under each model.
        let mut invariant: HashMap<(usize, usize), Counters> = HashMap::new();
        for (i, &(config, m)) in combos.iter().enumerate() {
            let config_index = i / s.ex_models.len();
            let c = Counters::default();
            let t = Instant::now();
            let bug = s.bug.map(|b| b.bug);
            for job in exhaustive::jobs(target, config, m, bug, s.seed, bug.is_some()) {
                self.job(&job, config_index, m, &c, &mut invariant)?;
                if bug.is_some() && c.violations.load(Ordering::Relaxed) > 0 {
                    break;
                }
            }
            self.rows.push(row(target, config, m, "exhaustive", &c));
            self.judge_bug(m, &c, t);
            merge(&self.total, &c);
            if self.bug_result.is_some() {
                break;
            }
        }
        self.progress.finish();
        Ok(())
    }

    /// One job of the exhaustive tier, into `c`: skipped (scenario filter), taken from the
    /// model-invariant results, or run.
    fn job(
        &self,
        job: &exhaustive::Job<T>,
        config_index: usize,
        m: FaultModel,
        c: &Counters,
        invariant: &mut HashMap<(usize, usize), Counters>,
    ) -> Result<()> {
        if self.s.scenario.as_deref().is_some_and(|n| n != job.name) {
            self.progress.advance(1);
            return Ok(());
        }
        let l = self.target.labels(job.config);
        self.progress.message(&format!(
            "{} {} {} {}",
            l.protocol,
            l.ordering,
            m.name(),
            job.name
        ));
        let key = (config_index, job.scenario);
        if let Some(done) = invariant.get(&key) {
            debug_assert_eq!(
                done.violations.load(Ordering::Relaxed),
                0,
                "only clean jobs shared"
            );
            merge(c, done);
            // Counted under this model too, but not run again.
            debug_assert!(
                c.images_run.load(Ordering::Relaxed) >= done.images_run.load(Ordering::Relaxed)
            );
            c.images_run
                .fetch_sub(done.images_run.load(Ordering::Relaxed), Ordering::Relaxed);
            self.progress.advance(1);
            return Ok(());
        }
        let jc = Counters::default();
        let model_invariant = exhaustive::run(self.target, job, &jc)?;
        merge(c, &jc);
        if model_invariant && jc.violations.load(Ordering::Relaxed) == 0 {
            invariant.insert(key, jc);
        }
        self.progress.advance(1);
        Ok(())
    }

    /// The randomized tier: `n` cycles per configuration, in chains run in parallel.
    fn random(&mut self, n: u64) {
        let (s, target) = (self.s, self.target);
        let model = s.random_model;
        for &config in &s.configs {
            let c = Counters::default();
            let t = Instant::now();
            let job = RandomJob::<T> {
                config,
                model,
                bug: s.bug.map(|b| b.bug),
                seed: s.seed,
            };
            let l = target.labels(config);
            let label = format!("random {} {} {}", l.protocol, l.ordering, model.name());
            self.progress.start(&label, n);
            let chains = n.div_ceil(CHAIN_CYCLES);
            let hunting = s.bug.is_some();
            (0..chains).into_par_iter().for_each(|ch| {
                let cycles = (n - ch * CHAIN_CYCLES).min(CHAIN_CYCLES);
                debug_assert!(cycles >= 1, "chain {ch} of {chains} has a cycle");
                if hunting && c.violations.load(Ordering::Relaxed) > 0 {
                    return;
                }
                let before = c.cycles.load(Ordering::Relaxed);
                if let Err(v) = random::run_chain(target, &job, ch, cycles, &c) {
                    c.violation(*v);
                }
                let done = c.cycles.load(Ordering::Relaxed).saturating_sub(before);
                self.progress.advance(done.min(cycles));
            });
            self.progress.finish();
            // A chain stops early only at a violation (or, hunting, once one is found).
            debug_assert!(
                c.violations.load(Ordering::Relaxed) > 0 || c.cycles.load(Ordering::Relaxed) == n,
                "every cycle of a clean run completes"
            );
            self.rows.push(row(target, config, model, "random", &c));
            self.judge_bug(model, &c, t);
            merge(&self.total, &c);
        }
    }

    /// With a seeded bug not yet caught: caught under `m` if `c` holds a violation.
    fn judge_bug(&mut self, m: FaultModel, c: &Counters, _since: Instant) {
        let Some(b) = &self.s.bug else { return };
        if self.bug_result.is_some() || c.violations.load(Ordering::Relaxed) == 0 {
            return;
        }
        let at = lock(&c.first_violation_at).unwrap_or_else(Instant::now);
        let first = First {
            model: m,
            seconds: at.duration_since(self.started).as_secs_f64(),
            crash_points: self.total.crash_points.load(Ordering::Relaxed)
                + c.first_violation_points.load(Ordering::Relaxed),
            images: self.total.images_checked.load(Ordering::Relaxed)
                + c.first_violation_images.load(Ordering::Relaxed),
        };
        self.bug_result = Some(bug_result(b, Some(first)));
    }
}

/// Where a seeded bug was first caught.
struct First {
    model: FaultModel,
    seconds: f64,
    crash_points: u64,
    images: u64,
}

fn bug_result<B>(b: &BugSpec<B>, first: Option<First>) -> BugResult {
    BugResult {
        name: b.name,
        what: b.what,
        protocol: b.protocol,
        ordering: b.ordering,
        expected_weakest: b.weakest.name(),
        caught: first.is_some(),
        caught_under: first.as_ref().map(|f| f.model.name()),
        seconds_to_first: first.as_ref().map(|f| f.seconds),
        crash_points_to_first: first.as_ref().map(|f| f.crash_points),
        images_to_first: first.as_ref().map(|f| f.images),
    }
}

fn report<T: CrashTarget>(r: Run<'_, T>, seconds: f64) -> Report {
    let total = &r.total;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let images_run = load(&total.images_run);
    // Images shared by M0, M1 and M2 are judged under each but run once.
    debug_assert!(images_run <= load(&total.images_checked));
    // An equivalent point (`CrashTarget::skip_unread_points`) counts as a crash point too.
    debug_assert_eq!(
        load(&total.points_exhaustive)
            + load(&total.points_sampled)
            + load(&total.points_equivalent),
        load(&total.crash_points),
        "every crash point is enumerated in full, sampled, or equivalent to the one before"
    );
    let images_possible = format!("{}", *lock(&total.images_possible));
    Report {
        crash_points: load(&total.crash_points),
        images_checked: load(&total.images_checked),
        images_run,
        images_possible,
        depth2_images: load(&total.depth2_images),
        cycles: load(&total.cycles),
        points_exhaustive: load(&total.points_exhaustive),
        points_equivalent: load(&total.points_equivalent),
        points_sampled: load(&total.points_sampled),
        fraction_covered_at_sampled_points: total.sampled_fraction(),
        violations: load(&total.violations),
        violation_details: total.kept(),
        states_covered: total
            .states()
            .into_iter()
            .map(|(p, s)| format!("{p}:{s}"))
            .collect(),
        images_per_sec: images_run as f64 / seconds / r.s.threads as f64,
        threads: r.s.threads,
        seed: r.s.seed,
        seconds,
        rows: r.rows,
        seeded_bug: r.bug_result,
        media_faults: load(&total.media_faults),
        media_detected_at_open: load(&total.media_detected_at_open),
        media_detected_on_read: load(&total.media_detected_on_read),
        media_no_effect: load(&total.media_no_effect),
    }
}

fn row<T: CrashTarget>(
    target: &T,
    config: T::Config,
    m: FaultModel,
    tier: &'static str,
    c: &Counters,
) -> Row {
    let l = target.labels(config);
    Row {
        protocol: l.protocol,
        ordering: l.ordering,
        fault: m.name(),
        tier,
        crash_points: c.crash_points.load(Ordering::Relaxed),
        images_checked: c.images_checked.load(Ordering::Relaxed),
        cycles: c.cycles.load(Ordering::Relaxed),
        violations: c.violations.load(Ordering::Relaxed),
    }
}

/// Add the counters of `c` into `total` (one thread merges into `total` at a time).
fn merge(total: &Counters, c: &Counters) {
    let violations_before = total.violations.load(Ordering::Relaxed);
    for (t, x) in [
        (&total.crash_points, &c.crash_points),
        (&total.images_checked, &c.images_checked),
        (&total.images_run, &c.images_run),
        (&total.depth2_images, &c.depth2_images),
        (&total.cycles, &c.cycles),
        (&total.points_exhaustive, &c.points_exhaustive),
        (&total.points_equivalent, &c.points_equivalent),
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
    if let Some(at) = *lock(&c.first_violation_at) {
        let mut t = lock(&total.first_violation_at);
        if t.is_none_or(|x| at < x) {
            *t = Some(at);
        }
    }
    {
        let add = *lock(&c.images_possible);
        let mut g = lock(&total.images_possible);
        *g = g.saturating_add(add);
    }
    let kept = c.kept();
    let extra = c
        .violations
        .load(Ordering::Relaxed)
        .saturating_sub(kept.len() as u64);
    for v in kept {
        total.violation(v);
    }
    total.violations.fetch_add(extra, Ordering::Relaxed);
    debug_assert_eq!(
        total.violations.load(Ordering::Relaxed) - violations_before,
        c.violations.load(Ordering::Relaxed),
        "every violation counted once, kept or not"
    );
    for (p, s) in c.states() {
        total.state(&p, &s);
    }
}

/// Rerun one randomized cycle: `plan`'s configurations, model (default M2) and seeded bug,
/// with `seed` in place of the plan's.
#[derive(Clone, Debug)]
pub struct ReplayPlan {
    /// Configurations, fault model and seeded bug; its seed is not used.
    pub plan: Plan,
    /// The seed the cycle ran under.
    pub seed: u64,
    /// The cycle (`step` of a randomized-tier violation).
    pub cycle: u64,
}

/// One configuration's outcome of a replay.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ReplayLine {
    pub protocol: &'static str,
    pub ordering: &'static str,
    pub fault: FaultModel,
    /// None: the cycle passes.
    pub violation: Option<Violation>,
}

/// What a replay found, per configuration.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Replay {
    /// As replayed.
    pub seed: u64,
    /// As replayed.
    pub cycle: u64,
    /// One per configuration, in the plan's order.
    pub lines: Vec<ReplayLine>,
}

impl Replay {
    /// Violations found (one at most per configuration).
    pub fn violations(&self) -> usize {
        self.lines.iter().filter(|l| l.violation.is_some()).count()
    }
}

/// Rerun the chain of cycle `rp.cycle` from its start up to that cycle, for each
/// configuration of the plan. The plan is checked as `run` checks it.
pub fn replay(rp: &ReplayPlan) -> Result<Replay> {
    match rp.plan.layer {
        Layer::Nvramdisk => {
            let target = NvramTarget::new();
            let s = setup(&target, &rp.plan)?;
            Ok(replay_on(&target, &s, rp))
        }
        Layer::Ubj => {
            let target = UbjTarget::new();
            let s = setup_cache(&target, &rp.plan)?;
            Ok(replay_on(&target, &s, rp))
        }
        Layer::Write => {
            let target = WriteTarget::new();
            let s = setup_cache(&target, &rp.plan)?;
            Ok(replay_on(&target, &s, rp))
        }
    }
}

fn replay_on<T: CrashTarget>(target: &T, s: &Setup<T>, rp: &ReplayPlan) -> Replay {
    let mut lines = Vec::with_capacity(s.configs.len());
    for &config in &s.configs {
        let job = RandomJob::<T> {
            config,
            model: s.random_model,
            bug: s.bug.map(|b| b.bug),
            seed: rp.seed,
        };
        let counters = Counters::default();
        let chain = rp.cycle / CHAIN_CYCLES;
        let cycles = rp.cycle % CHAIN_CYCLES + 1;
        debug_assert_eq!(
            chain * CHAIN_CYCLES + cycles - 1,
            rp.cycle,
            "the last cycle run"
        );
        let l = target.labels(config);
        lines.push(ReplayLine {
            protocol: l.protocol,
            ordering: l.ordering,
            fault: s.random_model,
            violation: random::run_chain(target, &job, chain, cycles, &counters)
                .err()
                .map(|v| *v),
        });
    }
    Replay {
        seed: rp.seed,
        cycle: rp.cycle,
        lines,
    }
}
