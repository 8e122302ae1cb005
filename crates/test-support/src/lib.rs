//! nvstack-test-support: helpers shared by several crates' tests (a dev-dependency only, never
//! linked into a library or the program): [`Watched`], a child process under a deadline, and
//! [`device::TestDevice`], a `BlockDevice` wrapper that records and can fail writes.
// kill(2) of our own child: the only `unsafe` here.
#![allow(unsafe_code)]

pub mod device;

use std::process::{Child, Command, ExitStatus};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A child process under a deadline: SIGKILLed by a watchdog thread once the deadline passes,
/// and killed and reaped when dropped, so a failing (panicking) test never leaves it running.
pub struct Watched {
    pub child: Child,
    /// Set, under the lock, once the child is reaped: the watchdog kills the pid only while
    /// this is false, so it can never signal a reused pid.
    reaped: Arc<Mutex<bool>>,
    pub limit: Duration,
}

impl Watched {
    pub fn spawn(cmd: &mut Command, limit: Duration) -> Watched {
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let pid = child.id() as libc::pid_t;
        let reaped = Arc::new(Mutex::new(false));
        let r = reaped.clone();
        std::thread::spawn(move || {
            let t = Instant::now();
            loop {
                std::thread::sleep(Duration::from_millis(50));
                let g = r.lock().unwrap_or_else(|e| e.into_inner());
                if *g {
                    return;
                }
                if t.elapsed() >= limit {
                    // SAFETY: plain kill(2) of our own unreaped child.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    eprintln!("child {pid} killed: still running after {limit:?}");
                    return;
                }
            }
        });
        Watched {
            child,
            reaped,
            limit,
        }
    }

    /// Its status once it ended (by itself, or killed by the deadline).
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        let mut g = self.reaped.lock().unwrap_or_else(|e| e.into_inner());
        let st = self.child.try_wait().expect("poll the child")?;
        *g = true;
        Some(st)
    }

    /// Wait for its end; the deadline still applies.
    pub fn wait(&mut self) -> ExitStatus {
        loop {
            if let Some(st) = self.try_wait() {
                return st;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGKILL it (if still running) and reap it.
    pub fn kill(&mut self) -> ExitStatus {
        let mut g = self.reaped.lock().unwrap_or_else(|e| e.into_inner());
        if !*g {
            let _ = self.child.kill();
        }
        let st = self.child.wait().expect("reap the child");
        *g = true;
        st
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The repository's root (the workspace), from any crate's `CARGO_MANIFEST_DIR`.
pub fn repo_root() -> std::path::PathBuf {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    // crates/test-support -> the workspace root.
    here.join("../..")
}

/// A real trace from `../shared/traces/` beside the checkout. CI has `shared/` there; a missing
/// trace is a failure naming where it was looked for, never a silent pass.
pub fn shared_trace(name: &str) -> std::path::PathBuf {
    let dir = repo_root().join("../shared/traces");
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "{} is missing: the real traces must be in {} (shared/ beside the checkout)",
        p.display(),
        dir.display()
    );
    p
}

/// A sample trace committed with the simulator's tests (crates/sim/tests/data/sim/).
pub fn sample_trace(name: &str) -> std::path::PathBuf {
    repo_root().join("crates/sim/tests/data/sim").join(name)
}
