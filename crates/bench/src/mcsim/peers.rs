//! The suite's peers: established memory simulators replaying the fine run's requests in
//! their own trace-driven programs, each named by an environment variable. A replay runs for
//! the last arrival plus a drain; it is run again with a longer drain while requests remain
//! and it still serves them, and is reported unfair (our rows are then not compared with it)
//! if it never serves them all.

use super::{dramsim2, dramsim3};
use nvstack_core::error::{Error, Result};
use nvstack_mcsim::{Arrival, Config};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// DRAM cycles a peer first runs past the last arrival, for its queues to drain; a run that
/// left requests unserved while still serving them runs again with a drain DRAIN_GROWTH times
/// longer, at most RUNS runs in all.
pub(super) const DRAIN_CYCLES: u64 = 1_000_000;
pub(super) const DRAIN_GROWTH: u64 = 8;
pub(super) const RUNS: u32 = 3;

/// The names of a peer's ini files in its scratch directory (its device or whole machine, and
/// DRAMSim2's system).
const DEVICE_INI: &str = "pcm.ini";
const SYSTEM_INI: &str = "system.ini";

/// A peer simulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Dramsim3,
    Dramsim2,
}

impl Kind {
    pub const ALL: [Kind; 2] = [Kind::Dramsim3, Kind::Dramsim2];

    /// Its row's name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Dramsim3 => "dramsim3",
            Kind::Dramsim2 => "dramsim2",
        }
    }

    /// As its authors write it.
    pub fn title(self) -> &'static str {
        match self {
            Kind::Dramsim3 => "DRAMsim3",
            Kind::Dramsim2 => "DRAMSim2",
        }
    }

    /// The environment variable naming its trace-driven program.
    pub fn env(self) -> &'static str {
        match self {
            Kind::Dramsim3 => "NVSTACK_DRAMSIM3",
            Kind::Dramsim2 => "NVSTACK_DRAMSIM2",
        }
    }

    fn tck_ns(self) -> f64 {
        match self {
            Kind::Dramsim3 => dramsim3::TCK_NS,
            Kind::Dramsim2 => dramsim2::TCK_NS,
        }
    }

    fn epoch_cycles(self) -> u64 {
        match self {
            Kind::Dramsim3 => dramsim3::EPOCH_CYCLES,
            Kind::Dramsim2 => dramsim2::EPOCH_CYCLES,
        }
    }

    /// Write its ini files and the trace of `arrivals` into `dir`: the trace's path and the
    /// last arrival's DRAM cycle.
    fn prepare(self, dir: &Path, arrivals: &[Arrival], machine: &Config) -> Result<(PathBuf, u64)> {
        let io = |what: &Path, e: std::io::Error| Error::env(format!("{}: {e}", what.display()));
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).map_err(|e| io(&path, e))
        };
        let trace = match self {
            Kind::Dramsim3 => {
                write(DEVICE_INI, dramsim3::INI)?;
                dir.join("requests.trace")
            }
            Kind::Dramsim2 => {
                write(DEVICE_INI, dramsim2::DEVICE_INI)?;
                write(SYSTEM_INI, dramsim2::SYSTEM_INI)?;
                dir.join(dramsim2::TRACE_NAME)
            }
        };
        let last =
            write_trace(&trace, arrivals, machine, self.tck_ns()).map_err(|e| io(&trace, e))?;
        Ok((trace, last))
    }

    /// The command running it on `trace` (in `dir`, beside its ini files) for `cycles` DRAM
    /// cycles, its output files (if any) into `out`.
    fn command(
        self,
        program: &Path,
        (dir, trace): (&Path, &Path),
        out: &Path,
        cycles: u64,
    ) -> std::process::Command {
        let mut cmd = std::process::Command::new(program);
        match self {
            Kind::Dramsim3 => {
                cmd.arg(dir.join(DEVICE_INI))
                    .args(["-c", &cycles.to_string(), "-t"])
                    .arg(trace)
                    .arg("-o")
                    .arg(format!("{}/", out.display()));
            }
            Kind::Dramsim2 => {
                cmd.arg("-t")
                    .arg(trace)
                    .arg("-s")
                    .arg(dir.join(SYSTEM_INI))
                    .arg("-d")
                    .arg(dir.join(DEVICE_INI))
                    .args(["-c", &cycles.to_string()])
                    .args(["-S", &dramsim2::MEGS.to_string()]);
            }
        }
        // Whatever else it writes stays in the run's own directory.
        cmd.current_dir(out);
        cmd
    }

    /// The requests it served and those served per whole epoch, from its run's outputs.
    fn outcome(self, out: &Path, stdout: &str) -> Result<(u64, Vec<u64>)> {
        match self {
            Kind::Dramsim3 => Ok((
                dramsim3::served(&out.join("dramsim3.json"))?,
                dramsim3::epoch_served(&out.join("dramsim3epoch.json"))?,
            )),
            Kind::Dramsim2 => dramsim2::outcome(stdout),
        }
    }

    /// The longest run it can be asked for, in DRAM cycles.
    fn cycles_max(self) -> u64 {
        match self {
            Kind::Dramsim3 => u64::MAX,
            Kind::Dramsim2 => dramsim2::CYCLES_MAX,
        }
    }
}

/// How a peer's replay of the fine run's requests ended: the last of its runs.
#[derive(Debug)]
pub(super) struct PeerRun {
    pub kind: Kind,
    /// The requests in the trace.
    pub requests: u64,
    /// DRAM cycles it ran: the last arrival plus the drain.
    pub cycles: u64,
    pub drain_cycles: u64,
    /// Its runs (one, unless a drain was too short), at most RUNS.
    pub runs: u32,
    /// Requests it finished, from its final statistics.
    pub served: u64,
    /// Requests finished in each whole epoch of its statistics, all channels together.
    pub epochs: Vec<u64>,
    pub wall_s: f64,
    /// Its CPU time, when /proc tells.
    pub cpu_s: Option<f64>,
}

impl PeerRun {
    pub fn all_served(&self) -> bool {
        assert!(
            self.served <= self.requests,
            "at most the trace's requests count"
        );
        self.served == self.requests
    }

    /// Requests served per second of its wall time.
    pub fn per_s(&self) -> f64 {
        self.served as f64 / self.wall_s
    }

    /// Requests remained and its last whole epoch (a thousand times a request's latency or
    /// more) finished none: it had stopped serving, a longer drain would not help.
    pub fn stalled(&self) -> bool {
        !self.all_served() && self.epochs.last() == Some(&0)
    }

    /// The DRAM cycle after which no epoch finished a request.
    pub fn served_until_cycle(&self) -> u64 {
        let epochs = self
            .epochs
            .iter()
            .rposition(|&s| s > 0)
            .map_or(0, |i| i + 1);
        epochs as u64 * self.kind.epoch_cycles()
    }

    pub fn note(&self) -> String {
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
                "UNFAIR: served only {served} of {n} requests, still serving after {RUNS} \
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
            "{} {cycles} DRAM cycles of {} ns ({drain} past the last arrival){runs}, \
             {outcome}, in {:.1} s on one core{cpu}; median = p99 = wall time per request served",
            self.kind.title(),
            self.kind.tck_ns(),
            self.wall_s
        )
    }
}

/// Replay `arrivals` (in `machine`'s CPU cycles and lines) on peer `kind` until it has served
/// every request: a run that leaves some unserved while still serving them runs again with a
/// drain DRAIN_GROWTH times longer, at most RUNS runs; a run that stopped serving (a stall) is
/// not run again. The last run is timed, reading the trace included (it is how its
/// trace-driven mode runs).
pub(super) fn run_peer(
    kind: Kind,
    program: &Path,
    arrivals: &[Arrival],
    machine: &Config,
) -> Result<PeerRun> {
    let dir = Scratch::new()?;
    let (trace, last_cycle) = kind.prepare(dir.path(), arrivals, machine)?;
    let requests = arrivals.len() as u64;
    let mut drain_cycles = DRAIN_CYCLES;
    let mut runs = 0;
    loop {
        runs += 1;
        let out = dir.path().join(format!("run{runs}"));
        std::fs::create_dir(&out).map_err(|e| Error::env(format!("{}: {e}", out.display())))?;
        let cycles = last_cycle + drain_cycles;
        if cycles > kind.cycles_max() {
            return Err(Error::env(format!(
                "{} can run at most {} DRAM cycles; this replay needs {cycles}",
                kind.title(),
                kind.cycles_max()
            )));
        }
        let cmd = kind.command(program, (dir.path(), &trace), &out, cycles);
        let (wall_s, cpu_s, stdout) = replay(kind, cmd, program)?;
        // DRAMsim3's trace reader meets the end of the file one read late and adds the last
        // request a second time: at most the trace's count is taken.
        let (served, epochs) = kind.outcome(&out, &stdout)?;
        let run = PeerRun {
            kind,
            requests,
            cycles,
            drain_cycles,
            runs,
            served: served.min(requests),
            epochs,
            wall_s,
            cpu_s,
        };
        if run.all_served() || run.stalled() || runs == RUNS {
            return Ok(run);
        }
        drain_cycles *= DRAIN_GROWTH;
    }
}

/// Run `cmd` (peer `kind`'s `program`): its wall time, CPU time and standard output.
fn replay(
    kind: Kind,
    mut cmd: std::process::Command,
    program: &Path,
) -> Result<(f64, Option<f64>, String)> {
    let cpu_start_s = children_cpu_s();
    let start = Instant::now();
    let done = cmd
        .output()
        .map_err(|e| Error::env(format!("{}={}: {e}", kind.env(), program.display())))?;
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
    Ok((
        wall_s,
        cpu_s,
        String::from_utf8_lossy(&done.stdout).into_owned(),
    ))
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

/// A directory of the suite's own for the peers' files, removed when dropped.
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

/// A trace both peers read: `0xADDR READ|WRITE CYCLE` a line, in arrival order, the cycles
/// of `tck_ns`. Returns the last arrival's DRAM cycle.
fn write_trace(
    path: &Path,
    arrivals: &[Arrival],
    machine: &Config,
    tck_ns: f64,
) -> std::io::Result<u64> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    let dram_per_cpu = 1e3 / f64::from(machine.clock_mhz) / tck_ns;
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

#[cfg(test)]
mod tests;
