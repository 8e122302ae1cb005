//! The memory controller alone, replaying what reached it in a run: every read, write, commit
//! and range binding, in order, with the cycle the run gave it. This is how DRAMsim3 and
//! DRAMSim2 run (trace-driven: requests at given cycles, no cores), so it is the like-for-like
//! measure of our controller's speed beside theirs (`nvstack bench --suite mcsim`).
//!
//! The replay is open-loop (nothing it decides moves a later input), yet it reproduces the
//! recorded run's controller exactly: the inputs carry the cycles the closed-loop run gave
//! them, the controller is deterministic, and the replay keeps the engine's order at equal
//! cycles (the controller's due actions before an input at the same cycle). Its event log,
//! counters and final memory are the run's (tests/replay.rs checks it on every kernel and
//! mode), less the dirty lines the run's caches still held at its end.

use crate::config::Config;
use crate::event::Log;
use crate::mc::{Done, Mc, McStats};
use nvstack_core::error::{Error, Result};
use rustc_hash::FxHashMap;

/// The controller's vocabulary, which a replay takes (it lives in [`crate::mc`]).
pub use crate::mc::Input;

/// Refuse input `i` if the controller cannot take it after an input at `last_t`.
fn check(i: usize, input: &Input, last_t: u64) -> Result<()> {
    let t = input.t();
    if t < last_t {
        return Err(Error::bad(format!(
            "replay input {i} at cycle {t} comes before the one at cycle {last_t}: inputs \
             reach the controller in time order"
        )));
    }
    if t > CYCLE_MAX {
        return Err(Error::bad(format!(
            "replay input {i} at cycle {t}: after cycle {CYCLE_MAX}, the latest the controller \
             takes"
        )));
    }
    if let Input::Commit { addr, len, .. } | Input::Bind { addr, len, .. } = *input {
        if len == 0 || addr.checked_add(len).is_none() {
            return Err(Error::bad(format!(
                "replay input {i}: a range of {len} bytes at {addr:#x} (it must hold a byte \
                 and end inside the address space)"
            )));
        }
    }
    Ok(())
}

/// What a replay left: the controller's counters, its event log (with `Config::log_events`)
/// and the final memory (line -> version of the write that finished last).
pub struct Replay {
    pub stats: McStats,
    pub log: Vec<Log>,
    pub memory: FxHashMap<u64, u64>,
}

/// The latest cycle an input may come at: the controller adds latencies to it (2^62 cycles is
/// 54 years at 2.7 GHz).
pub const CYCLE_MAX: u64 = 1 << 62;

/// Replay `inputs` on the controller of machine `cfg`, then run it until it is idle. Refused:
/// a machine `Config::validate` refuses, inputs out of time order or after `CYCLE_MAX`, a
/// commit or binding of no bytes or past the end of the address space, or more commits at
/// the controller at once than the machine has cores (a core waits for its commit).
pub fn replay(cfg: &Config, inputs: &[Input]) -> Result<Replay> {
    cfg.validate()?;
    let mut mc = Mc::new(cfg);
    // What the controller finishes (flushes accepted, commits done) goes to no engine here.
    let mut done: Vec<Done> = Vec::new();
    let mut last_t = 0;
    for (i, input) in inputs.iter().enumerate() {
        check(i, input, last_t)?;
        let t = input.t();
        last_t = t;
        // The engine's order at equal cycles: the controller's due actions first.
        while mc.next_action() <= t {
            mc.step(&mut done);
            done.clear();
        }
        match *input {
            Input::Read { t, line } => {
                mc.read(t, line);
            }
            Input::Write {
                t,
                line,
                version,
                waiter,
            } => {
                mc.write(t, line, version, waiter);
            }
            Input::Commit {
                t,
                token,
                addr,
                len,
            } => {
                if mc.commits_open() >= cfg.cores as usize {
                    return Err(Error::bad(format!(
                        "replay input {i}: a commit while {} are at the controller, one a core \
                         at most",
                        cfg.cores
                    )));
                }
                mc.commit(t, token, addr, len);
            }
            Input::Bind { t, addr, len } => mc.bind(t, addr, len),
        }
    }
    while mc.next_action() != u64::MAX {
        mc.step(&mut done);
        done.clear();
    }
    assert!(mc.idle(), "the controller is idle once nothing is due");
    Ok(Replay {
        memory: std::mem::take(mc.memory()),
        log: mc.take_log(),
        stats: mc.stats.clone(),
    })
}
