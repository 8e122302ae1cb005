//! The simulated machine: Table II of seed 003 as the default, every constant a field.

use nvstack_core::error::{Error, Result};
use serde::Serialize;

/// How a commit (PersistentCommit of a range, or PCOMMIT) is made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// PCOMMIT-like: every sub-queue is locked and drained, one synchronisation per commit.
    Global,
    /// The paper's proposal: only the sub-queues bound to the committed range are locked;
    /// completion is learned from persistence credits by query reads.
    Fine,
    /// The write queue is persistent: a commit is done once its lines are in the write queue
    /// (its flushes were accepted), so it costs nothing more.
    Adr,
    /// Caches are persistent too: flushes and commits complete at once.
    Eadr,
}

impl Mode {
    pub const ALL: [Mode; 4] = [Mode::Global, Mode::Fine, Mode::Adr, Mode::Eadr];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Global => "global",
            Mode::Fine => "fine",
            Mode::Adr => "adr",
            Mode::Eadr => "eadr",
        }
    }

    pub fn parse(s: &str) -> Result<Mode> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                Error::bad(format!(
                    "commit mode {s:?}: expected global, fine, adr or eadr"
                ))
            })
    }
}

/// One cache level: write-back, write-allocate, LRU within a set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CacheLevel {
    pub bytes: u64,
    pub ways: u32,
    pub hit_cycles: u32,
}

/// The machine. Times in nanoseconds are converted to CPU cycles (rounded up) at `clock_mhz`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Config {
    pub mode: Mode,
    pub cores: u32,
    pub clock_mhz: u32,
    pub rob_entries: u32,
    pub fetch_width: u32,
    pub retire_width: u32,
    pub line_bytes: u32,
    pub l1: CacheLevel,
    pub l2: CacheLevel,
    /// The shared last level: `bytes` is per core (Table II: 1 MB per core).
    pub l3_per_core: CacheLevel,
    pub channels: u32,
    /// Independently busy units per channel: Table II's 2 ranks x 8 sub-ranks.
    pub units_per_channel: u32,
    pub read_queue_entries: u32,
    /// The write queue is `sub_queues` x `sub_queue_entries`; the last sub-queue takes every
    /// address no range register names.
    pub sub_queues: u32,
    pub sub_queue_entries: u32,
    /// Range registers per bindable sub-queue.
    pub range_registers: u32,
    /// Persistence credits per sub-queue (writes of that sub-queue in flight at the NVM side).
    pub credits: u32,
    pub read_ns: u32,
    pub write_ns: u32,
    /// One line's transfer on its channel's data bus (also the bus time of a query read).
    pub burst_ns: u32,
    /// Keep an event log (tests: the properties are checked on it).
    pub log_events: bool,
    /// The engine's bound, not a machine: no memory controller at all. A read's data is back
    /// `read_ns + burst_ns` after it arrives, a write is accepted at once and lands in memory
    /// in arrival order, a commit is done at once; no queue, bus, unit, credit or pass. What a
    /// run costs then is what the cores, the caches and the event queue cost alone (the
    /// bench's `mcsim-ideal` row): the part of the timing no controller can remove.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub ideal_memory: bool,
}

impl Default for Config {
    /// Table II of seed 003, with 16 cores as in section IV.
    fn default() -> Config {
        Config {
            mode: Mode::Fine,
            cores: 16,
            clock_mhz: 2700,
            rob_entries: 256,
            fetch_width: 4,
            retire_width: 2,
            line_bytes: 64,
            l1: CacheLevel {
                bytes: 32 << 10,
                ways: 4,
                hit_cycles: 4,
            },
            l2: CacheLevel {
                bytes: 256 << 10,
                ways: 8,
                hit_cycles: 10,
            },
            l3_per_core: CacheLevel {
                bytes: 1 << 20,
                ways: 16,
                hit_cycles: 40,
            },
            channels: 2,
            units_per_channel: 16,
            read_queue_entries: 64,
            sub_queues: 8,
            sub_queue_entries: 8,
            range_registers: 4,
            credits: 8,
            read_ns: 55,
            write_ns: 150,
            burst_ns: 5,
            log_events: false,
            ideal_memory: false,
        }
    }
}

fn check(ok: bool, field: &str, value: u64, want: &str) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::bad(format!("{field} = {value}: must be {want}")))
    }
}

fn check_cache(name: &str, c: &CacheLevel, line: u32, scale: u64) -> Result<()> {
    let bytes = c.bytes.saturating_mul(scale);
    check(
        (1..=64).contains(&c.ways),
        &format!("{name}.ways"),
        c.ways.into(),
        "1 to 64",
    )?;
    let set_bytes = u64::from(c.ways) * u64::from(line);
    let sets = bytes / set_bytes.max(1);
    check(
        bytes.is_multiple_of(set_bytes) && sets.is_power_of_two(),
        &format!("{name}.bytes"),
        c.bytes,
        "ways x line_bytes x a power of two (sets)",
    )?;
    check(
        c.hit_cycles <= 10_000,
        &format!("{name}.hit_cycles"),
        c.hit_cycles.into(),
        "at most 10000",
    )
}

impl Config {
    /// Refuse a machine the model cannot run, naming the field.
    pub fn validate(&self) -> Result<()> {
        let u = |v: u32| u64::from(v);
        check(
            (1..=1024).contains(&self.cores),
            "cores",
            u(self.cores),
            "1 to 1024",
        )?;
        check(
            (100..=100_000).contains(&self.clock_mhz),
            "clock_mhz",
            u(self.clock_mhz),
            "100 to 100000",
        )?;
        check(
            (1..=65_536).contains(&self.rob_entries),
            "rob_entries",
            u(self.rob_entries),
            "1 to 65536",
        )?;
        check(
            self.fetch_width >= 1,
            "fetch_width",
            u(self.fetch_width),
            "at least 1",
        )?;
        check(
            (1..=self.fetch_width).contains(&self.retire_width),
            "retire_width",
            u(self.retire_width),
            "1 to fetch_width",
        )?;
        check(
            self.line_bytes.is_power_of_two() && (8..=4096).contains(&self.line_bytes),
            "line_bytes",
            u(self.line_bytes),
            "a power of two from 8 to 4096",
        )?;
        check_cache("l1", &self.l1, self.line_bytes, 1)?;
        check_cache("l2", &self.l2, self.line_bytes, 1)?;
        check_cache(
            "l3_per_core",
            &self.l3_per_core,
            self.line_bytes,
            u(self.cores),
        )?;
        self.validate_memory()
    }

    /// The controller and the NVM.
    fn validate_memory(&self) -> Result<()> {
        let u = |v: u32| u64::from(v);
        check(
            (1..=64).contains(&self.channels),
            "channels",
            u(self.channels),
            "1 to 64",
        )?;
        check(
            (1..=1024).contains(&self.units_per_channel),
            "units_per_channel",
            u(self.units_per_channel),
            "1 to 1024",
        )?;
        check(
            self.read_queue_entries >= 1,
            "read_queue_entries",
            u(self.read_queue_entries),
            "at least 1",
        )?;
        check(
            (2..=32).contains(&self.sub_queues),
            "sub_queues",
            u(self.sub_queues),
            "2 to 32 (the last takes unregistered addresses)",
        )?;
        check(
            (1..=4096).contains(&self.sub_queue_entries),
            "sub_queue_entries",
            u(self.sub_queue_entries),
            "1 to 4096",
        )?;
        check(
            self.range_registers <= 64,
            "range_registers",
            u(self.range_registers),
            "at most 64",
        )?;
        check(
            (1..=4096).contains(&self.credits),
            "credits",
            u(self.credits),
            "1 to 4096",
        )?;
        for (name, ns) in [("read_ns", self.read_ns), ("write_ns", self.write_ns)] {
            check((1..=1_000_000).contains(&ns), name, u(ns), "1 to 1000000")?;
        }
        check(
            self.burst_ns <= 1_000_000,
            "burst_ns",
            u(self.burst_ns),
            "at most 1000000",
        )
    }

    /// Nanoseconds as whole CPU cycles, rounded up.
    pub fn cycles(&self, ns: u32) -> u64 {
        (u64::from(ns) * u64::from(self.clock_mhz)).div_ceil(1000)
    }

    pub fn write_queue_entries(&self) -> u32 {
        self.sub_queues * self.sub_queue_entries
    }
}
