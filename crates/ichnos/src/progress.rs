//! Progress on a terminal: a bar on standard error while long work runs,
//! nothing when standard error is not a terminal (or with `-q`). The live
//! status line of `record` and `trace` is `status_line`'s.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar of `len` steps named `what`, if standard error is a terminal and
/// not `quiet`.
pub fn bar(quiet: bool, len: u64, what: &str) -> Option<ProgressBar> {
    if quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr_with_hz(8));
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len}")
            .ok()?
            .progress_chars("=> "),
    );
    bar.set_message(what.to_owned());
    Some(bar)
}

/// A bar that appears only once work has taken longer than a moment
/// (300 ms): symbolizing a small recording shows nothing.
pub struct Delayed {
    quiet: bool,
    what: &'static str,
    started: std::time::Instant,
    bar: Option<ProgressBar>,
}

impl Delayed {
    /// Starts timing work named `what`.
    pub fn new(quiet: bool, what: &'static str) -> Delayed {
        Delayed {
            quiet,
            what,
            started: std::time::Instant::now(),
            bar: None,
        }
    }

    /// `done` of `total` steps are done.
    pub fn tick(&mut self, done: usize, total: usize) {
        if self.bar.is_none() && self.started.elapsed().as_millis() >= 300 {
            self.bar = bar(self.quiet, total as u64, self.what);
        }
        if let Some(b) = &self.bar {
            b.set_position(done as u64);
        }
    }

    /// The work is over: the bar goes.
    pub fn finish(self) {
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}
