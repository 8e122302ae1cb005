//! The mcsim suite (issue 24, item 5): how fast the committing simulator runs. A request is a
//! read or a write arriving at the simulated memory controller; a row runs the default machine
//! (Table II, 16 simulated cores) on the hash-map kernel, committing after every update, on one
//! host core, until at least 10^7 requests (10^6 with --quick) have arrived, and reports
//! requests per second of wall time (its note adds requests per CPU-second of the running
//! thread, which a shared host does not inflate). Each mode is a row; `fine` does the most controller work
//! (credits, query reads) and is the one the target is checked on. Two rows bound it from
//! below: `mcsim-ideal` times the same run with no memory controller at all
//! (`Config::ideal_memory`: what the cores, caches and events cost alone), and `mcsim-floor`
//! runs the same workload's functional work alone (generator and caches, no timing): the part
//! of a request's cost no engine can avoid.
//!
//! The peer is DRAMsim3 (github:umd-memsys/DRAMsim3), in its own trace-driven mode, when
//! `NVSTACK_DRAMSIM3` names its `dramsim3main` (scripts/bench-mcsim.sh builds it from source
//! on demand): the fine row's run records every request reaching our controller, the suite
//! writes them as a DRAMsim3 trace (address, READ or WRITE, arrival in DRAM cycles), and
//! DRAMsim3 replays the same requests on `dramsim3-pcm.ini` (DDR4 with Table II's PCM read and
//! write times). Its row is the baseline of ours: the throughput ratio is ours / DRAMsim3's,
//! per request, and only when it served every request (it runs until the last arrival plus a
//! drain, and again with longer drains if requests remain while it still serves them).
//! Without the variable no peer row is made, and the notes say the peer was not measured.

use super::measure::Timing;
use super::{BenchResult, Ctx, Row, Suite, Target};
use nvstack_core::error::{Error, Result};
use nvstack_mcsim::kernels::{KernelConfig, KernelWorkload};
use nvstack_mcsim::{Arrival, Config, Mode};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

const SUITE: Suite = Suite::Mcsim;
const REQUESTS_MIN: u64 = 10_000_000;
const REQUESTS_MIN_QUICK: u64 = 1_000_000;
/// The issue's target, requests per second on one core.
const TARGET_PER_S: f64 = 10e6;
/// The environment variable naming DRAMsim3's trace-driven program.
const PEER_ENV: &str = "NVSTACK_DRAMSIM3";
const PEER_NAME: &str = "dramsim3";
/// The peer's machine (its tCK is the DRAM clock the trace's cycles are in).
const PEER_INI: &str = include_str!("dramsim3-pcm.ini");
const PEER_TCK_NS: f64 = 0.83;
/// DRAM cycles the peer first runs past the last arrival, for its queues to drain (its
/// program runs a given number of cycles; the suite checks from its statistics that all were
/// served, and runs it again with a drain PEER_DRAIN_GROWTH times longer if not, at most
/// PEER_RUNS runs in all).
const PEER_DRAIN_CYCLES: u64 = 1_000_000;
const PEER_DRAIN_GROWTH: u64 = 8;
const PEER_RUNS: u32 = 3;
/// DRAM cycles of one epoch of its statistics (the ini's epoch_period, 1 ms).
const PEER_EPOCH_CYCLES: u64 = 1_204_819;

pub(super) fn run(ctx: &mut Ctx) -> Result<()> {
    // The simulator maps no image: the page size of the place changes nothing, so it runs once.
    if ctx.place.huge {
        return Ok(());
    }
    // The crate's own tests run it tiny: they check rows, never a speed.
    let need = match (ctx.opts.quick_test, ctx.opts.quick) {
        (true, _) => 20_000,
        (false, true) => REQUESTS_MIN_QUICK,
        (false, false) => REQUESTS_MIN,
    };
    let peer = std::env::var_os(PEER_ENV).map(PathBuf::from);
    let mut stream = None;
    for mode in [Mode::Fine, Mode::Global] {
        // The fine run also keeps its requests for the peer (one push per request, timed).
        let record = peer.is_some() && mode == Mode::Fine;
        let bar = ctx.bar(&format!("mcsim {}", mode.name()));
        let machine = Config {
            mode,
            ..Config::default()
        };
        let (requests, wall_s, note, arrivals) = run_ours(&machine, need, record)?;
        drop(bar);
        stream = stream.or(arrivals);
        let peer_note = match &peer {
            Some(_) => PEER_COMPARED.to_string(),
            None => format!("DRAMsim3 not measured: {PEER_ENV} unset (scripts/bench-mcsim.sh)"),
        };
        let mut row = Row::new(SUITE, &format!("mcsim-{}", mode.name()), "request", 64, 1)
            .method("simulated")
            .note(format!("{note}; {peer_note}"));
        if peer.is_some() {
            row = row.baseline(PEER_NAME);
        }
        ctx.push(row.timed(&timing(requests, wall_s), 0));
    }
    ctx.push(ideal_row(ctx, need)?);
    ctx.push(floor_row(ctx, need)?);
    if let (Some(program), Some(arrivals)) = (peer, stream) {
        let bar = ctx.bar("mcsim dramsim3");
        let run = run_peer(&program, &arrivals, &Config::default())?;
        drop(bar);
        let row = Row::new(SUITE, PEER_NAME, "request", 64, 1)
            .method("DRAMsim3 trace-driven")
            .note(run.note());
        ctx.push(row.timed(&timing(run.served, run.wall_s), 0));
        if !run.all_served() {
            not_compared(ctx, &run);
        }
    }
    Ok(())
}

/// Our rows' notes when DRAMsim3 is their baseline.
const PEER_COMPARED: &str = "baseline: DRAMsim3 replaying the fine run's requests";

/// Our rows lose their baseline when DRAMsim3 left requests unserved: a ratio over a replay
/// that did less work than ours would flatter us.
fn not_compared(ctx: &mut Ctx, run: &PeerRun) {
    assert!(!run.all_served());
    for r in ctx.results.iter_mut().filter(|r| r.suite == SUITE.name()) {
        r.baseline = None;
        r.note = r.note.take().map(|n| {
            n.replace(
                PEER_COMPARED,
                "not compared: DRAMsim3 left requests unserved",
            )
        });
    }
    ctx.notes.push(format!(
        "mcsim: no ratio to DRAMsim3: it served {} of the {} requests (its row)",
        run.served, run.requests
    ));
}

/// One timed run of ours, sized for `need` requests: the requests made, the wall time, a
/// note, and the requests themselves if `record`.
type Ours = (u64, f64, String, Option<Vec<Arrival>>);

fn run_ours(machine: &Config, need: u64, record: bool) -> Result<Ours> {
    let kc = KernelConfig::hashmap_for_requests(machine.cores, need);
    let mut work = KernelWorkload::new(&kc)?;
    let cpu_start_ns = thread_cpu_ns();
    let start = Instant::now();
    let (out, arrivals) = if record {
        let (out, arrivals) = nvstack_mcsim::run_recording(machine, &mut work)?;
        (out, Some(arrivals))
    } else {
        (nvstack_mcsim::run(machine, &mut work)?, None)
    };
    let wall_s = start.elapsed().as_secs_f64();
    let requests = out.report.mc.reads + out.report.mc.writes;
    let cpu = cpu_note(cpu_start_ns, requests);
    assert!(
        requests >= need,
        "the run is sized for {need} requests, made {requests}"
    );
    let note = format!(
        "{requests} requests ({} simulated cycles, IPC {:.2}) in {wall_s:.1} s on one core{}{cpu}; \
         median = p99 = wall time per request",
        out.report.cycles,
        out.report.ipc,
        if record { ", recording them" } else { "" },
    );
    Ok((requests, wall_s, note, arrivals))
}

/// The ideal row: the timed run with no memory controller (`Config::ideal_memory`: reads back
/// an unloaded read's time after they arrive, writes and commits done at once). What it costs
/// per request is what the cores, the caches and the event queue cost alone: a bound that no
/// controller, however cheap, takes a timed row below.
fn ideal_row(ctx: &Ctx, need: u64) -> Result<BenchResult> {
    let bar = ctx.bar("mcsim ideal");
    let machine = Config {
        ideal_memory: true,
        ..Config::default()
    };
    let (requests, wall_s, note, _) = run_ours(&machine, need, false)?;
    drop(bar);
    let row = Row::new(SUITE, "mcsim-ideal", "request", 64, 1)
        .method("simulated, no controller")
        .note(format!(
            "{note}; no memory controller (reads back {} + {} ns after they arrive, writes and \
             commits at once): the cores, caches and events alone, the bound of the timed rows",
            machine.read_ns, machine.burst_ns
        ));
    Ok(row.timed(&timing(requests, wall_s), 0))
}

/// The floor row: the same workload's functional work alone (the kernel generator and the
/// cache hierarchy deciding which accesses become requests), no timing. What it costs per
/// request is what any engine of this model pays before it keeps time.
fn floor_row(ctx: &Ctx, need: u64) -> Result<BenchResult> {
    let bar = ctx.bar("mcsim floor");
    let machine = Config::default();
    let mut work = KernelWorkload::new(&KernelConfig::hashmap_for_requests(machine.cores, need))?;
    let cpu_start_ns = thread_cpu_ns();
    let start = Instant::now();
    let f = nvstack_mcsim::floor(&machine, &mut work)?;
    let wall_s = start.elapsed().as_secs_f64();
    let cpu = cpu_note(cpu_start_ns, f.requests());
    drop(bar);
    let note = format!(
        "{} requests ({} reads, {} writes) from {} operations in {wall_s:.1} s on one core{cpu}; \
         the functional work alone (kernel generator and caches, no timing): the floor of \
         the timed rows; median = p99 = wall time per request",
        f.requests(),
        f.reads,
        f.writes,
        f.ops
    );
    let row = Row::new(SUITE, "mcsim-floor", "request", 64, 1)
        .method("functional, untimed")
        .note(note);
    Ok(row.timed(&timing(f.requests(), wall_s), 0))
}

/// "; N requests per CPU-second (S s ...)" from the thread's CPU time since `cpu_start_ns`.
fn cpu_note(cpu_start_ns: Option<u64>, requests: u64) -> String {
    match (cpu_start_ns, thread_cpu_ns()) {
        (Some(a), Some(b)) if b > a => {
            let cpu_s = (b - a) as f64 / 1e9;
            format!(
                "; {:.0} requests per CPU-second ({cpu_s:.1} s of this thread's CPU time)",
                requests as f64 / cpu_s
            )
        }
        _ => "; CPU time not measured (no /proc/thread-self/schedstat)".into(),
    }
}

/// This thread's CPU time so far, in ns (the scheduler's own account: the first field of
/// /proc/thread-self/schedstat). On a shared host the wall time counts other programs' turns
/// on the core too; the CPU time is what the simulator itself used.
fn thread_cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

fn timing(requests: u64, wall_s: f64) -> Timing {
    let per_request_ns = wall_s * 1e9 / requests as f64;
    Timing {
        ops_per_sec: requests as f64 / wall_s,
        median_ns: per_request_ns,
        p99_ns: per_request_ns,
        ops: requests,
    }
}

/// How DRAMsim3's replay of the fine run's requests ended: the last of its runs.
struct PeerRun {
    /// The requests in the trace.
    requests: u64,
    /// DRAM cycles it ran: the last arrival plus the drain.
    cycles: u64,
    drain_cycles: u64,
    /// Its runs (one, unless a drain was too short), at most PEER_RUNS.
    runs: u32,
    /// Requests it finished, from its final statistics.
    served: u64,
    /// Requests finished in each epoch of its statistics, both channels together.
    epochs: Vec<u64>,
    wall_s: f64,
    /// Its CPU time, when /proc tells.
    cpu_s: Option<f64>,
}

impl PeerRun {
    fn all_served(&self) -> bool {
        assert!(
            self.served <= self.requests,
            "at most the trace's requests count"
        );
        self.served == self.requests
    }

    /// Requests remained and its last whole epoch (about 1 ms of DRAM time, a thousand times
    /// a request's latency) finished none: it had stopped serving, a longer drain would not help.
    fn stalled(&self) -> bool {
        !self.all_served() && self.epochs.last() == Some(&0)
    }

    /// The DRAM cycle after which no epoch finished a request.
    fn served_until_cycle(&self) -> u64 {
        let epochs = self
            .epochs
            .iter()
            .rposition(|&s| s > 0)
            .map_or(0, |i| i + 1);
        epochs as u64 * PEER_EPOCH_CYCLES
    }

    fn note(&self) -> String {
        let (cycles, drain, n, served) =
            (self.cycles, self.drain_cycles, self.requests, self.served);
        let runs = if self.runs > 1 {
            format!(
                " (its run {}: shorter drains left requests unserved)",
                self.runs
            )
        } else {
            String::new()
        };
        let outcome = if self.all_served() {
            format!("all {n} requests served")
        } else if self.stalled() {
            format!(
                "UNFAIR: served only {served} of {n} requests, none after DRAM cycle {} \
                 (stalled, not slow: our rows are not compared with it)",
                self.served_until_cycle()
            )
        } else {
            format!(
                "UNFAIR: served only {served} of {n} requests, still serving after {PEER_RUNS} \
                 runs (our rows are not compared with it)"
            )
        };
        let cpu = match self.cpu_s {
            Some(cpu_s) if cpu_s > 0.0 => format!(
                "; {:.0} requests per CPU-second ({cpu_s:.1} s of its CPU time)",
                served as f64 / cpu_s
            ),
            _ => "; its CPU time not measured".into(),
        };
        format!(
            "DRAMsim3 {cycles} DRAM cycles of {PEER_TCK_NS} ns ({drain} past the last \
             arrival){runs}, {outcome}, in {:.1} s on one core{cpu}; median = p99 = wall time \
             per request served",
            self.wall_s
        )
    }
}

/// Replay `arrivals` (in `machine`'s CPU cycles and lines) on DRAMsim3 until it has served
/// every request: a run that leaves some unserved while still serving them runs again with a
/// drain PEER_DRAIN_GROWTH times longer, at most PEER_RUNS runs; a run that stopped serving
/// (a stall) is not run again. The last run is timed, reading the trace included (it is how
/// its trace-driven mode runs).
fn run_peer(program: &Path, arrivals: &[Arrival], machine: &Config) -> Result<PeerRun> {
    let dir = Scratch::new()?;
    let (ini, trace) = (
        dir.path().join("pcm.ini"),
        dir.path().join("requests.trace"),
    );
    let io = |what: &Path, e: std::io::Error| Error::env(format!("{}: {e}", what.display()));
    std::fs::write(&ini, PEER_INI).map_err(|e| io(&ini, e))?;
    let last_cycle = write_trace(&trace, arrivals, machine).map_err(|e| io(&trace, e))?;
    let requests = arrivals.len() as u64;
    let mut drain_cycles = PEER_DRAIN_CYCLES;
    let mut runs = 0;
    loop {
        runs += 1;
        let out = dir.path().join(format!("run{runs}"));
        std::fs::create_dir(&out).map_err(|e| io(&out, e))?;
        let cycles = last_cycle + drain_cycles;
        let (wall_s, cpu_s) = replay(program, (&ini, &trace, &out), cycles)?;
        // Its trace reader meets the end of the file one read late and adds the last
        // request a second time: at most the trace's count is taken.
        let served = served(&out.join("dramsim3.json"))?.min(requests);
        let epochs = epoch_served(&out.join("dramsim3epoch.json"))?;
        let run = PeerRun {
            requests,
            cycles,
            drain_cycles,
            runs,
            served,
            epochs,
            wall_s,
            cpu_s,
        };
        if run.all_served() || run.stalled() || runs == PEER_RUNS {
            return Ok(run);
        }
        drain_cycles *= PEER_DRAIN_GROWTH;
    }
}

/// One run of DRAMsim3's trace-driven program for `cycles` DRAM cycles, its statistics into
/// `out`: its wall time and CPU time.
fn replay(
    program: &Path,
    (ini, trace, out): (&Path, &Path, &Path),
    cycles: u64,
) -> Result<(f64, Option<f64>)> {
    let cpu_start_s = children_cpu_s();
    let start = Instant::now();
    let done = std::process::Command::new(program)
        .arg(ini)
        .arg("-c")
        .arg(cycles.to_string())
        .arg("-t")
        .arg(trace)
        .arg("-o")
        .arg(format!("{}/", out.display()))
        .output()
        .map_err(|e| Error::env(format!("{PEER_ENV}={}: {e}", program.display())))?;
    let wall_s = start.elapsed().as_secs_f64();
    if !done.status.success() {
        return Err(Error::env(format!(
            "{} failed ({}): {}",
            program.display(),
            done.status,
            String::from_utf8_lossy(&done.stderr).trim()
        )));
    }
    let cpu_s = match (cpu_start_s, children_cpu_s()) {
        (Some(a), Some(b)) if b >= a => Some(b - a),
        _ => None,
    };
    Ok((wall_s, cpu_s))
}

/// The CPU time (user and system) of this process's children that have ended and been waited
/// for: fields 16 and 17 of /proc/self/stat, in clock ticks of 1/100 s (Linux's USER_HZ).
fn children_cpu_s() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces: the
    // first of them is field 3.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |field: usize| fields.get(field - 3)?.parse::<u64>().ok();
    Some((ticks(16)? + ticks(17)?) as f64 / 100.0)
}

/// A directory of the suite's own for the peer's files, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!("nvstack-mcsim-peer-{}-{nanos}", std::process::id());
        let path = std::env::temp_dir().join(name);
        std::fs::create_dir(&path)
            .map_err(|e| Error::env(format!("a scratch directory {}: {e}", path.display())))?;
        Ok(Scratch(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Best effort: a leftover directory in the temporary directory harms nothing.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// DRAMsim3's trace: `0xADDR READ|WRITE CYCLE` a line, in arrival order. Returns the last
/// arrival's DRAM cycle.
fn write_trace(path: &Path, arrivals: &[Arrival], machine: &Config) -> std::io::Result<u64> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    let dram_per_cpu = 1e3 / f64::from(machine.clock_mhz) / PEER_TCK_NS;
    let line_bytes = u64::from(machine.line_bytes);
    let mut last = 0;
    for a in arrivals {
        let cycle = (a.t as f64 * dram_per_cpu) as u64;
        assert!(cycle >= last, "requests arrive in time order");
        last = cycle;
        let op = if a.write { "WRITE" } else { "READ" };
        writeln!(f, "0x{:x} {op} {cycle}", a.line * line_bytes)?;
    }
    f.flush()?;
    Ok(last)
}

/// Requests DRAMsim3 finished, from its statistics (one object per channel).
fn served(path: &Path) -> Result<u64> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::env(format!("DRAMsim3's statistics {}: {e}", path.display())))?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::env(format!("DRAMsim3's statistics {}: {e}", path.display())))?;
    let channels = json.as_object().into_iter().flat_map(|m| m.values());
    let mut served = 0;
    for ch in channels {
        for key in ["num_reads_done", "num_writes_done"] {
            served += ch
                .get(key)
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(|| {
                    Error::env(format!(
                        "DRAMsim3's statistics {}: no {key}",
                        path.display()
                    ))
                })?;
        }
    }
    Ok(served)
}

/// Requests DRAMsim3 finished in each epoch of its statistics (an array of one object per
/// channel and epoch), both channels together, in epoch order; none if the run was shorter
/// than an epoch (it then writes no file).
fn epoch_served(path: &Path) -> Result<Vec<u64>> {
    let bad = |e: String| {
        Error::env(format!(
            "DRAMsim3's epoch statistics {}: {e}",
            path.display()
        ))
    };
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(bad(e.to_string())),
    };
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let objects = json.as_array().ok_or_else(|| bad("not an array".into()))?;
    let mut epochs: Vec<u64> = Vec::new();
    for o in objects {
        let count = |key: &str| {
            o.get(key)
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(|| bad(format!("no {key}")))
        };
        let epoch = usize::try_from(count("epoch_num")?).map_err(|e| bad(e.to_string()))?;
        // Epochs count from 1, each channel's object in turn.
        if epoch == 0 || epoch > epochs.len() + 1 {
            return Err(bad(format!("epoch {epoch} out of order")));
        }
        if epoch > epochs.len() {
            epochs.push(0);
        }
        epochs[epoch - 1] += count("num_reads_done")? + count("num_writes_done")?;
    }
    Ok(epochs)
}

pub(super) fn targets(rows: &[BenchResult]) -> Vec<Target> {
    let fine = rows
        .iter()
        .find(|r| r.suite == SUITE.name() && r.name == "mcsim-fine");
    fine.map(|r| Target {
        suite: SUITE.name(),
        page_bytes: r.page_bytes,
        what: "simulated memory requests per second on one core".into(),
        measured: r.ops_per_sec,
        bound: "at least",
        limit: TARGET_PER_S,
        met: r.ops_per_sec >= TARGET_PER_S,
    })
    .into_iter()
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read of line 1 at cycle 0, then a write of `line` 1 us later (2,700 cycles).
    fn read_then_write(line: u64) -> [Arrival; 2] {
        let read = Arrival {
            t: 0,
            line: 1,
            write: false,
        };
        let write = Arrival {
            t: 2700,
            line,
            write: true,
        };
        [read, write]
    }

    #[test]
    fn peer_trace_and_statistics() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let arrivals = read_then_write(2);
        let last = write_trace(&path, &arrivals, &Config::default()).unwrap();
        // 2700 cycles at 2.7 GHz = 1 us = 1204 cycles of 0.83 ns.
        assert_eq!(last, 1204);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "0x40 READ 0\n0x80 WRITE 1204\n");
        let stats = dir.path().join("s.json");
        std::fs::write(
            &stats,
            r#"{"0": {"num_reads_done": 3, "num_writes_done": 4}, "1": {"num_reads_done": 5, "num_writes_done": 0}}"#,
        )
        .unwrap();
        assert_eq!(served(&stats).unwrap(), 12);
        std::fs::write(&stats, r#"{"0": {"num_reads_done": 3}}"#).unwrap();
        let e = served(&stats).unwrap_err().to_string();
        assert!(e.contains("num_writes_done"), "{e}");
    }

    #[test]
    fn peer_ini_matches_the_suite() {
        for line in [
            format!("tCK = {PEER_TCK_NS}"),
            format!("epoch_period = {PEER_EPOCH_CYCLES}"),
            "unified_queue = true".to_string(),
        ] {
            assert!(
                PEER_INI.lines().any(|l| l.trim() == line),
                "dramsim3-pcm.ini has no '{line}'"
            );
        }
    }

    #[test]
    fn peer_epoch_statistics() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e.json");
        assert_eq!(
            epoch_served(&path).unwrap(),
            Vec::<u64>::new(),
            "no file: no epoch"
        );
        std::fs::write(
            &path,
            r#"[{"channel": 0, "epoch_num": 1, "num_reads_done": 3, "num_writes_done": 1},
{"channel": 1, "epoch_num": 1, "num_reads_done": 2, "num_writes_done": 0},
{"channel": 0, "epoch_num": 2, "num_reads_done": 0, "num_writes_done": 0},
{"channel": 1, "epoch_num": 2, "num_reads_done": 0, "num_writes_done": 0}]"#,
        )
        .unwrap();
        assert_eq!(epoch_served(&path).unwrap(), [6, 0]);
        std::fs::write(
            &path,
            r#"[{"channel": 0, "epoch_num": 2, "num_reads_done": 0, "num_writes_done": 0}]"#,
        )
        .unwrap();
        let e = epoch_served(&path).unwrap_err().to_string();
        assert!(e.contains("out of order"), "{e}");
    }

    /// A stand-in for dramsim3main: it serves both requests when run for more than
    /// `all_from` cycles, else one, its epochs then `epochs`.
    fn fake_peer(dir: &Path, all_from: u64, epochs: &str) -> PathBuf {
        let path = dir.join("fake-dramsim3main");
        let script = format!(
            "#!/bin/sh\n\
             # ini -c CYCLES -t TRACE -o DIR/\n\
             if [ \"$3\" -gt {all_from} ]; then w=1; e='[]'; else w=0; e='{epochs}'; fi\n\
             printf '{{\"0\": {{\"num_reads_done\": 1, \"num_writes_done\": %s}}}}' $w > \"$7dramsim3.json\"\n\
             printf '%s' \"$e\" > \"$7dramsim3epoch.json\"\n"
        );
        std::fs::write(&path, script).unwrap();
        let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        std::fs::set_permissions(&path, mode).unwrap();
        path
    }

    #[test]
    fn peer_runs_until_all_served_unless_stalled() {
        let dir = tempfile::tempdir().unwrap();
        let arrivals = read_then_write(1);
        let machine = Config::default();
        let serving =
            r#"[{"channel": 0, "epoch_num": 1, "num_reads_done": 1, "num_writes_done": 0}]"#;
        let stalled = r#"[{"channel": 0, "epoch_num": 1, "num_reads_done": 1, "num_writes_done": 0},
{"channel": 0, "epoch_num": 2, "num_reads_done": 0, "num_writes_done": 0}]"#;
        // Still serving when its first drain ends: a second run, 8 times the drain, serves all.
        let program = fake_peer(dir.path(), 2 * PEER_DRAIN_CYCLES, serving);
        let run = run_peer(&program, &arrivals, &machine).unwrap();
        assert_eq!((run.runs, run.served, run.requests), (2, 2, 2));
        assert_eq!(run.drain_cycles, PEER_DRAIN_CYCLES * PEER_DRAIN_GROWTH);
        assert_eq!(run.cycles, 1204 + run.drain_cycles);
        assert!(
            run.all_served() && run.note().contains("all 2 requests served"),
            "{}",
            run.note()
        );
        // Never done but still serving: PEER_RUNS runs, then it is reported unfair.
        let program = fake_peer(dir.path(), u64::MAX / 2, serving);
        let run = run_peer(&program, &arrivals, &machine).unwrap();
        assert_eq!((run.runs, run.served), (PEER_RUNS, 1));
        assert!(
            !run.stalled() && run.note().contains("still serving"),
            "{}",
            run.note()
        );
        // Stalled: a whole epoch served nothing while a request remained; run once.
        let program = fake_peer(dir.path(), u64::MAX / 2, stalled);
        let run = run_peer(&program, &arrivals, &machine).unwrap();
        assert_eq!((run.runs, run.served), (1, 1));
        assert!(run.stalled(), "{:?}", run.epochs);
        assert_eq!(run.served_until_cycle(), PEER_EPOCH_CYCLES);
        assert!(
            run.note()
                .contains("served only 1 of 2 requests, none after DRAM cycle 1204819"),
            "{}",
            run.note()
        );
    }
}
