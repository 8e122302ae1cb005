//! The transport-neutral half of a serve daemon: what any transport (FUSE today; ublk or FUSE
//! over io_uring later) does around the device it serves.
//!
//! 1. [`open`]: the device opened through `nvstack_stack::served::open`. Nothing is published
//!    yet, so that the transport can wrap the device (the program records a trace) and refuse
//!    it (its limits) first.
//! 2. [`Opened::publish`]: a served cache's live state published, always (`cache status` on a
//!    live cache reads it: [`crate::stats::publish_live`]), the daemon's counters created
//!    (mirrored into the stats file when one is given) and set as the cache's observer.
//! 3. The transport serves [`Daemon::dev`] (or a wrapper of it), counting into
//!    [`Daemon::stats`]; a power-cut run arms its cut through [`Daemon::power_cut`].
//! 4. [`Daemon::close`] after a clean stop: the cache closed, then a power-cut region written
//!    back. The live-state entry goes when the daemon is dropped.
//!
//! The daemon prints nothing: what it has to say goes, one line at a time, to the caller's
//! `report`, which adds its own prefix.

use crate::stats::{Published, ServeStats};
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::Result;
use nvstack_stack::{Backend, ServeSpec, Served};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A device opened to be served, its live state not yet published.
pub struct Opened {
    served: Served,
    image: Option<PathBuf>,
}

/// Open what `spec` names with `backend`, through the stack.
pub fn open(backend: Backend, spec: &ServeSpec) -> Result<Opened> {
    let served = nvstack_stack::served::open(backend, spec)?;
    // A cache is always served from its image.
    assert!(served.cache.is_none() || spec.image.is_some());
    Ok(Opened {
        served,
        image: spec.image.map(Path::to_path_buf),
    })
}

impl Opened {
    /// The device opened (what the transport serves, or wraps).
    pub fn dev(&self) -> &Arc<dyn BlockDevice> {
        &self.served.dev
    }

    /// Publish a served cache's live state, create the daemon's counters (mirrored into
    /// `stats` when given; a served cache's entry links to it) and make them the cache's
    /// observer.
    pub fn publish(self, stats: Option<&Path>) -> Result<Daemon> {
        let (live, counters) = match (&self.served.cache, self.image.as_deref()) {
            (Some(_), Some(img)) => {
                let (guard, counters) = crate::stats::publish_live(img, stats)?;
                (Some(guard), counters)
            }
            _ => (None, ServeStats::new(stats)?),
        };
        let counters = Arc::new(counters);
        if let Some(c) = &self.served.cache {
            let first = c.cache.observe(counters.clone());
            assert!(first, "a cache just opened has no observer yet");
        }
        Ok(Daemon {
            _live: live,
            stats: counters,
            served: self.served,
            closed: false,
        })
    }
}

/// A device being served: its counters, its published live state, its power cut.
pub struct Daemon {
    /// Dropped first (fields drop in order): the entry goes while the image is still held.
    _live: Option<Published>,
    stats: Arc<ServeStats>,
    served: Served,
    closed: bool,
}

impl Daemon {
    /// The device served (the transport may serve a wrapper of it).
    pub fn dev(&self) -> &Arc<dyn BlockDevice> {
        &self.served.dev
    }

    /// What opening the device did, a phrase for the serve line.
    pub fn what(&self) -> &str {
        &self.served.what
    }

    /// The daemon's counters (the transport counts into them).
    pub fn stats(&self) -> &Arc<ServeStats> {
        &self.stats
    }

    /// The power cut of a run on the simulated region, to arm from the transport's signal
    /// handling.
    #[cfg(feature = "powercut")]
    pub fn power_cut(&self) -> Option<PowerCutArm> {
        let pc = self.served.power_cut.clone()?;
        Some(PowerCutArm {
            pc,
            stats: self.stats.clone(),
        })
    }

    /// After a clean stop: close the cache (its sentence to `report`), then write a power-cut
    /// region back to its files. Once only.
    pub fn close(&mut self, report: &mut dyn FnMut(&str)) -> Result<()> {
        assert!(!self.closed, "a daemon closes once");
        self.closed = true;
        if let Some(c) = &self.served.cache {
            let done = c.close()?.describe();
            report(&done);
        }
        #[cfg(feature = "powercut")]
        if let Some(pc) = &self.served.power_cut {
            pc.write_back_all()?;
        }
        Ok(())
    }
}

/// A power cut to arm: the cut and the counters it freezes.
#[cfg(feature = "powercut")]
#[derive(Clone)]
pub struct PowerCutArm {
    pc: Arc<nvstack_stack::powercut::PowerCut>,
    stats: Arc<ServeStats>,
}

#[cfg(feature = "powercut")]
impl PowerCutArm {
    /// Arm the cut: its delay starts now (a test arms it once its workload runs, so that no
    /// cut lands in its recovery checks). Each line goes to `report`, the last one from the
    /// cut's thread.
    pub fn arm(&self, report: impl Fn(&str) + Send + 'static) {
        report("power cut armed");
        let st = self.stats.clone();
        self.pc.arm_with(move || {
            // After the delay, the first instant (within 300 ms) at which acknowledged writes
            // wait for an fsync (the cut must find writes in flight, like the kill tests'
            // SIGKILL), and the counters stop there: nothing is acknowledged after the cut.
            let wait = std::time::Duration::from_millis(300);
            let (s, hit) = st.freeze_when(|s| s.acked_not_fsynced() > 0, wait);
            report(&format!(
                "power cut: counters frozen at {} writes acknowledged, {} covered by fsyncs{}",
                s.writes_acked,
                s.fsync_covered,
                if hit {
                    ""
                } else {
                    " (no unfsynced write within 300 ms)"
                }
            ));
        });
    }
}
