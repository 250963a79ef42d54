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
//! A terminal that does not say its size (a pseudo-terminal whose size
//! was never set) or has too few rows gets the plain line, redrawn in
//! place. Nothing is drawn when standard error is not a terminal or a
//! `dumb` one, nor before the first status: a command that ends at once
//! leaves the terminal untouched.
//!
//! Nor while `ichnos` runs in the background (`ichnos record ... &`, or
//! stopped by Ctrl-Z and sent on with `bg`): the terminal then belongs to
//! the shell and whatever runs in the foreground, and a line drawn there
//! would land in their prompt and screens (and with `stty tostop`, each
//! draw would stop `ichnos`). A line already drawn is taken off, once, when
//! `ichnos` finds itself in the background, and drawn again if it is
//! brought back to the foreground (`fg`).

use std::io::{IsTerminal, Write};

use console::Term;

/// Fewer rows than this leave no room for output above the line.
const MIN_ROWS: u16 = 3;

/// The status line on standard error.
pub struct StatusLine {
    term: Term,
    drawn: Drawn,
}

/// Where the line is drawn.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Drawn {
    /// Not yet.
    Nothing,
    /// On the last row of a terminal of this size (rows, columns), the
    /// rows above made the scrolling region.
    LastRow(u16, u16),
    /// Where the cursor stands, redrawn in place.
    InPlace,
}

impl StatusLine {
    /// A status line on standard error, if it is a terminal and not
    /// `quiet`.
    pub fn start(quiet: bool) -> Option<StatusLine> {
        if quiet || !std::io::stderr().is_terminal() {
            return None;
        }
        if std::env::var_os("TERM").is_some_and(|t| t == "dumb") {
            return None;
        }
        Some(StatusLine {
            term: Term::stderr(),
            drawn: Drawn::Nothing,
        })
    }

    /// Shows `text` as the status, cut to the terminal's width (nothing
    /// while `ichnos` is in the background).
    pub fn show(&mut self, text: &str) {
        let mut out = Vec::with_capacity(128);
        if !in_foreground() {
            self.release(&mut out);
            write_terminal(&out);
            return;
        }
        let size = self.term.size_checked();
        match (size.filter(|&(rows, _)| rows >= MIN_ROWS), self.drawn) {
            (Some((rows, columns)), Drawn::LastRow(r, c)) if (rows, columns) == (r, c) => {}
            (Some((rows, columns)), drawn) => {
                match drawn {
                    // Resized: terminals give a resized screen its whole
                    // height as the region (xterm does on any resize), and
                    // what they keep of the rows differs: set up afresh.
                    // (The old last row is left as it is: where a terminal
                    // moved the rows, clearing it could wipe output.)
                    Drawn::LastRow(..) => out.extend_from_slice(b"\x1b7\x1b[r\x1b8"),
                    Drawn::InPlace => out.extend_from_slice(b"\r\x1b[2K"),
                    Drawn::Nothing => {}
                }
                reserve(&mut out, rows);
                self.drawn = Drawn::LastRow(rows, columns);
            }
            (None, _) => {
                self.release(&mut out);
                self.drawn = Drawn::InPlace;
            }
        }
        let width = size.map_or(usize::MAX, |(_, columns)| {
            usize::from(columns.saturating_sub(1))
        });
        let text = console::truncate_str(text, width, "");
        match self.drawn {
            // Saved cursor (with the command's colours and character set),
            // plain text, last row, row cleared, text, cursor restored.
            Drawn::LastRow(rows, _) => {
                let _ = write!(out, "\x1b7\x1b[0m\x1b(B\x1b[{rows};1H\x1b[2K{text}\x1b8");
            }
            _ => {
                let _ = write!(out, "\r\x1b[2K{text}");
            }
        }
        write_terminal(&out);
    }

    /// Takes the line off the terminal, which gets its whole height back.
    fn release(&mut self, out: &mut Vec<u8>) {
        match std::mem::replace(&mut self.drawn, Drawn::Nothing) {
            Drawn::LastRow(rows, _) => {
                // The last row now, if the terminal was resized since.
                let rows = self.term.size_checked().map_or(rows, |(r, _)| r);
                clear_row(out, rows);
                // Setting the region moves the cursor home: saved around it.
                out.extend_from_slice(b"\x1b7\x1b[r\x1b8");
            }
            Drawn::InPlace => out.extend_from_slice(b"\r\x1b[2K"),
            Drawn::Nothing => {}
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

/// Whether this process's group is the foreground group of the terminal
/// on standard error. A terminal that is not the controlling one (no job
/// control between the two) counts as foreground.
fn in_foreground() -> bool {
    match rustix::termios::tcgetpgrp(std::io::stderr()) {
        Ok(group) => group == rustix::process::getpgrp(),
        Err(_) => true,
    }
}

/// Makes rows 1 to `rows - 1` the scrolling region: a line feed first
/// frees the last row (scrolling the screen up by one where the cursor is
/// on it), and the cursor goes back up to where it was. The line feed is
/// a vertical tab, which terminals take as one, but which the terminal
/// driver does not turn into a carriage return and a new line as it does
/// `\n`: the cursor keeps its column, and a line the command has half
/// written goes on where it stopped.
fn reserve(out: &mut Vec<u8>, rows: u16) {
    let _ = write!(out, "\x0b\x1b7\x1b[1;{}r\x1b8\x1b[1A", rows - 1);
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
