//! Progress for people: the library crates report through `nvstack_core::Progress`, and this is
//! the one place that draws it, as indicatif bars on stderr. Hidden for `--json` runs.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use nvstack_core::Progress;
use std::sync::Mutex;

/// How a bar looks: each command keeps the layout it has always shown.
#[derive(Clone, Copy, Debug)]
pub enum Look {
    /// `nvstack crashtest`: elapsed time first, the running job last.
    Crashtest,
    /// `nvstack sim`: the label first, runs counted.
    Sim,
    /// `nvstack bench`: the row's label, ops per second.
    Bench,
}

impl Look {
    fn template(self) -> &'static str {
        match self {
            Look::Crashtest => "{elapsed_precise} [{bar:30}] {pos}/{len} {msg}",
            Look::Sim => "{msg} [{bar:30}] {pos}/{len} runs, {elapsed}",
            Look::Bench => "{prefix:<44} [{bar:28}] {pos:>9}/{len:9} {per_sec:>14} {elapsed:>4}",
        }
    }
}

/// indicatif bars behind the library's progress callback: one bar per phase.
pub struct Bars {
    look: Look,
    show: bool,
    bar: Mutex<ProgressBar>,
}

impl Bars {
    /// Bars drawn on stderr when `show`, else nothing at all.
    pub fn new(look: Look, show: bool) -> Bars {
        Bars {
            look,
            show,
            bar: Mutex::new(ProgressBar::hidden()),
        }
    }

    fn current(&self) -> ProgressBar {
        // A poisoned lock only means another thread panicked mid-draw: the bar is still usable.
        self.bar.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Progress for Bars {
    fn start(&self, label: &str, steps_total: u64) {
        if !self.show {
            return;
        }
        let pb = ProgressBar::with_draw_target(Some(steps_total), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template(self.look.template())
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        pb.set_style(style);
        match self.look {
            Look::Bench => pb.set_prefix(label.to_string()),
            Look::Crashtest | Look::Sim => pb.set_message(label.to_string()),
        }
        let old = std::mem::replace(&mut *self.bar.lock().unwrap_or_else(|e| e.into_inner()), pb);
        old.finish_and_clear();
    }

    fn advance(&self, steps: u64) {
        self.current().inc(steps);
    }

    fn message(&self, text: &str) {
        self.current().set_message(text.to_string());
    }

    fn finish(&self) {
        self.current().finish_and_clear();
    }
}
