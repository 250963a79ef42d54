//! Progress on a terminal: a status line or a bar on standard error while
//! long work runs, nothing when standard error is not a terminal (or
//! with `-q`).

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A live status line, if standard error is a terminal and not `quiet`.
pub fn status_line(quiet: bool) -> Option<ProgressBar> {
    if quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(4));
    bar.set_style(ProgressStyle::with_template("{spinner} {msg}").ok()?);
    bar.enable_steady_tick(Duration::from_millis(250));
    Some(bar)
}

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
