//! The live status line of `record` and `trace`, on a row of its own.
//!
//! The command shares the terminal with the status line. A line redrawn
//! in place where the cursor stands (a plain progress line) is glued to
//! whatever the command prints: its lines end up behind copies of the
//! status. So the status line gets the terminal's last row to itself: the
//! rows above it are made the scrolling region (DECSTBM, as apt does for
//! its progress line), the command's output scrolls within them, and the
//! line is drawn on the last row between a save and a restore of the
//! cursor (DECSC, DECRC), so the command's next character lands where it
//! would have. Each draw is one write, which the terminal driver does not
//! interleave with the command's own writes. The region is given back
//! when the line goes (also on unwinding); a terminal left with it after
//! `ichnos` was killed outright is put right by `reset`.
//!
//! Nothing is drawn when standard error is not a terminal, a `dumb` one,
//! or one whose size is not known, nor before the first status: a command
//! that ends at once leaves the terminal untouched.

use std::io::{IsTerminal, Write};

use console::Term;

/// Fewer rows than this leave no room for output above the line.
const MIN_ROWS: u16 = 3;

/// The status line, drawn on the terminal's last row.
pub struct StatusLine {
    term: Term,
    /// The terminal's rows when the region was set, once the line is
    /// drawn.
    rows: Option<u16>,
}

impl StatusLine {
    /// A status line on standard error, if it is a terminal that can keep
    /// one and not `quiet`.
    pub fn start(quiet: bool) -> Option<StatusLine> {
        if quiet || !std::io::stderr().is_terminal() {
            return None;
        }
        if std::env::var_os("TERM").is_some_and(|t| t == "dumb") {
            return None;
        }
        let term = Term::stderr();
        let (rows, _) = term.size_checked()?;
        (rows >= MIN_ROWS).then_some(StatusLine { term, rows: None })
    }

    /// Shows `text` as the status, cut to the terminal's width.
    pub fn show(&mut self, text: &str) {
        let Some((rows, columns)) = self.term.size_checked() else {
            return;
        };
        let mut out = Vec::with_capacity(128);
        if self.rows != Some(rows) {
            if rows < MIN_ROWS {
                self.release(&mut out);
            } else {
                if let Some(old) = self.rows {
                    // Resized: the old last row is cleared before it joins
                    // the region (a terminal that shrank has dropped it).
                    clear_row(&mut out, old);
                }
                reserve(&mut out, rows, self.rows.is_none());
                self.rows = Some(rows);
            }
        }
        if let Some(rows) = self.rows {
            let text = console::truncate_str(text, usize::from(columns.saturating_sub(1)), "");
            // Saved cursor, last row, row cleared, text, cursor restored.
            let _ = write!(out, "\x1b7\x1b[{rows};1H\x1b[2K{text}\x1b8");
        }
        write_terminal(&out);
    }

    /// Gives the terminal back its whole height, the last row cleared.
    fn release(&mut self, out: &mut Vec<u8>) {
        if let Some(rows) = self.rows.take() {
            clear_row(out, rows);
            // Setting the region moves the cursor home: saved around it.
            out.extend_from_slice(b"\x1b7\x1b[r\x1b8");
        }
    }
}

impl Drop for StatusLine {
    fn drop(&mut self) {
        let mut out = Vec::new();
        self.release(&mut out);
        write_terminal(&out);
    }
}

/// Makes rows 1 to `rows - 1` the scrolling region. The `first` time, a
/// new line makes the last row free (scrolling the screen up by one when
/// the cursor is on it) and the cursor goes back up to where it was.
fn reserve(out: &mut Vec<u8>, rows: u16, first: bool) {
    if first {
        out.push(b'\n');
    }
    let _ = write!(out, "\x1b7\x1b[1;{}r\x1b8", rows - 1);
    if first {
        out.extend_from_slice(b"\x1b[1A");
    }
}

/// Clears row `row`, the cursor saved around it.
fn clear_row(out: &mut Vec<u8>, row: u16) {
    let _ = write!(out, "\x1b7\x1b[{row};1H\x1b[2K\x1b8");
}

/// One write to the terminal; a failed one is not worth a message.
fn write_terminal(out: &[u8]) {
    if !out.is_empty() {
        let _ = std::io::stderr().lock().write_all(out);
    }
}
