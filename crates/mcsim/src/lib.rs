//! nvstack-mcsim: the committing simulator of seed 003 (fine-grained data committing in the
//! memory controller), a discrete-event model in CPU cycles. docs/mcsim.md describes the
//! model, what it simplifies and why, and the trace format.
//!
//! - [`config`]: the machine (Table II by default) and the commit [`config::Mode`]s.
//! - [`trace`]: per-thread operation streams ([`trace::Workload`]) and the trace format.
//! - [`sim`]: the engine ([`sim::run`]); [`mc`]: the memory controller; [`cache`]: caches.
//! - [`replay`]: the controller alone, replaying a run's inputs (how the peer simulators run).
//! - [`floor`]: the functional work alone (workload and caches, no timing): the cost floor.
//! - [`kernels`]: synthetic workloads after WHISPER's kinds.

pub mod cache;
pub mod config;
mod event;
pub mod figures;
pub mod floor;
#[allow(unsafe_code)]
mod host;
pub mod kernels;
pub mod mc;
mod ranges;
pub mod replay;
pub mod rob;
pub mod sim;
pub mod trace;

pub use config::{CacheLevel, Config, Mode};
pub use event::Log;
pub use floor::{floor, Floor};
pub use mc::{Arrival, Input};
pub use replay::{replay, Replay};
pub use sim::{run, run_recording, run_stepping, Outcome, Report};
pub use trace::{Op, TraceReader, TraceWriter, VecWorkload, Workload};
