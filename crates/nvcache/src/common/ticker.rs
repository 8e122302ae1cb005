//! One ticker for both caches' timed triggers (UBJ's autocommit and autocheckpoint; the write
//! cache's max-age and cleaner): a thread that calls [`Tick::tick`] every
//! [`Tick::tick_period`] until it is dropped or the cache is gone.

use nvstack_core::error::Result;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What a ticker drives: a cache's timed triggers.
pub trait Tick: Send + Sync + 'static {
    /// Act on the triggers due at `now`. An error is the cache's error state, which its
    /// status shows; a cache in its error state does nothing.
    fn tick(&self, now: Instant) -> Result<()>;
    /// How often to tick (None: no timed trigger is on, no thread is needed).
    fn tick_period(&self) -> Option<Duration>;
}

/// The thread; stopped and joined when dropped.
pub struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    /// Start ticking `target` (held weakly: the thread ends when it is gone), or None when no
    /// timed trigger is on or no thread could be started.
    pub fn start<T: Tick>(target: &Arc<T>) -> Option<Ticker> {
        let period = target.tick_period()?;
        assert!(period > Duration::ZERO, "a tick period is positive");
        let stop = Arc::new(AtomicBool::new(false));
        let (weak, flag): (Weak<T>, _) = (Arc::downgrade(target), stop.clone());
        let thread = std::thread::Builder::new()
            .name("nvcache-ticker".into())
            .spawn(move || {
                while !flag.load(Ordering::Acquire) {
                    std::thread::park_timeout(period);
                    let Some(t) = weak.upgrade() else { return };
                    // The error is the cache's error state (see `Tick::tick`): keep ticking.
                    let _ = t.tick(Instant::now());
                }
            })
            .ok()?;
        Some(Ticker {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}
