//! The live status line of `record` and `trace` on a terminal, with a
//! command that prints while it runs: the command's lines stay whole and
//! the status stays on the last row.
//!
//! ichnos runs on a pseudo-terminal of 24 rows by 80 columns (`script`,
//! from util-linux), and everything written to that terminal is played
//! through a terminal emulator (the `vt100` crate): what a user would see
//! is the truth here, not the escape sequences ichnos writes.

mod common;

use std::process::{Command, Stdio};

use common::ICHNOS;

const ROWS: u16 = 24;
const COLUMNS: u16 = 80;
/// Lines the command prints, one every 30 ms: about six status draws.
const LINES: usize = 50;

/// What a terminal received from `ichnos ARGS` run on it.
fn on_terminal(args: &[&str]) -> Vec<u8> {
    on_terminal_as(&ichnos_line(args))
}

/// `ichnos ARGS` as a line of shell.
fn ichnos_line(args: &[&str]) -> String {
    let quoted: Vec<String> = std::iter::once(ICHNOS)
        .chain(args.iter().copied())
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect();
    quoted.join(" ")
}

/// What a terminal received from the shell line `line` run on it.
fn on_terminal_as(line: &str) -> Vec<u8> {
    let inner = format!("stty rows {ROWS} cols {COLUMNS} && {line}");
    let out = Command::new("script")
        .args(["-q", "-e", "-c", &inner, "/dev/null"])
        .env("TERM", "xterm")
        .stdin(Stdio::null())
        .output()
        .expect("run script (util-linux)");
    assert!(
        out.status.success(),
        "{line} on a terminal: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    out.stdout
}

/// The command: `LINES` numbered lines, paced so the status is drawn
/// between them.
fn printer() -> String {
    format!("i=0; while [ $i -lt {LINES} ]; do echo \"line $i\"; i=$((i+1)); sleep 0.03; done")
}

/// Plays `bytes` through a terminal, a few at a time, checking after
/// each step that `status` (the status line's first word) is only ever
/// on the last row; returns every row the terminal showed at the end,
/// scrolled-off rows first, and how many steps showed the status.
fn play(bytes: &[u8], status: &str) -> (Vec<String>, usize) {
    play_resized(bytes, status, None)
}

/// [`play`], the terminal resized to `resize` (rows, columns) once the
/// command's line `RESIZE` shows, as the command resizes its own.
fn play_resized(
    bytes: &[u8],
    status: &str,
    mut resize: Option<(u16, u16)>,
) -> (Vec<String>, usize) {
    let size = |n| std::num::NonZeroU16::new(n).unwrap();
    let mut terminal = vt100::Parser::new(size(ROWS), size(COLUMNS), 10_000);
    let mut shown = 0;
    for step in bytes.chunks(7) {
        terminal.process(step);
        let (rows, columns) = terminal.screen().size();
        let (rows, columns) = (rows.get(), columns.get());
        let shown_rows: Vec<String> = terminal.screen().rows(0, columns).collect();
        if let Some((r, c)) = resize {
            if shown_rows.iter().any(|row| row.starts_with("RESIZE")) {
                terminal.screen_mut().set_size(size(r), size(c));
                resize = None;
                continue;
            }
        }
        let rows_now = usize::from(rows);
        let rows = shown_rows;
        for (n, row) in rows.iter().enumerate().take(rows_now - 1) {
            assert!(
                !row.contains(status),
                "the status is on row {n}, among the command's lines: {row:?}\n{}",
                rows.join("\n")
            );
        }
        shown += usize::from(rows[rows_now - 1].starts_with(status));
    }
    let screen = terminal.screen_mut();
    let columns = screen.size().1.get();
    let mut all = Vec::new();
    let scrolled = screen.scrollback_len();
    for back in (1..=scrolled).rev() {
        screen.set_scrollback(back);
        all.extend(screen.rows(0, columns).next());
    }
    screen.set_scrollback(0);
    all.extend(screen.rows(0, columns));
    (all, shown)
}

/// Every line the command printed is a row of its own, in order: the
/// rows that begin `line ` are those lines (a line glued behind a status
/// is missing from them, one with a status glued behind is not whole).
fn assert_lines_whole(rows: &[String]) {
    let lines: Vec<&String> = rows.iter().filter(|r| r.starts_with("line ")).collect();
    let wanted: Vec<String> = (0..LINES).map(|i| format!("line {i}")).collect();
    assert_eq!(
        lines.iter().map(|r| r.trim_end()).collect::<Vec<_>>(),
        wanted,
        "the command's lines as the terminal shows them:\n{}",
        rows.join("\n")
    );
}

/// `ichnos SUBCOMMAND -o FILE -- sh -c PRINTER` on a terminal: its
/// status line (first word `status`) was drawn, on the last row only; the
/// command's lines are whole; the summary (starting `summary`) starts a
/// row of its own after them; and no status is left.
fn status_kept_off_the_lines(subcommand: &str, status: &str, summary: &str) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("status.data");
    let shown_by = on_terminal(&[
        subcommand,
        "-o",
        data.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &printer(),
    ]);
    let (rows, shown) = play(&shown_by, status);
    assert!(shown > 0, "no status line was drawn:\n{}", rows.join("\n"));
    assert_lines_whole(&rows);
    let last_line = rows.iter().rposition(|r| r.starts_with("line ")).unwrap();
    let summary = rows
        .iter()
        .rposition(|r| r.starts_with(summary))
        .unwrap_or_else(|| {
            panic!("no summary row:\n{}", rows.join("\n"));
        });
    assert!(summary > last_line, "{}", rows.join("\n"));
    assert!(
        !rows.iter().any(|r| r.contains(status)),
        "the status line was left on the terminal:\n{}",
        rows.join("\n")
    );
}

#[test]
fn record_keeps_its_status_off_the_commands_lines() {
    status_kept_off_the_lines("record", "recording:", "recorded ");
}

#[test]
fn trace_keeps_its_status_off_the_commands_lines() {
    status_kept_off_the_lines("trace", "tracing:", "ichnos: traced ");
}

#[test]
fn a_quiet_record_draws_nothing_but_the_commands_lines() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("quiet.data");
    let shown_by = on_terminal(&[
        "-q",
        "record",
        "-o",
        data.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &printer(),
    ]);
    let (rows, shown) = play(&shown_by, "recording:");
    assert_eq!(shown, 0);
    assert_lines_whole(&rows);
    assert!(
        !shown_by.contains(&0x1b),
        "escape sequences written with -q: {:?}",
        String::from_utf8_lossy(&shown_by)
    );
}

/// A line the command has half written when the status is first drawn
/// goes on where it stopped (`configure`'s `checking for gcc... ` and its
/// answer later); a terminal the command resizes while it runs (rows and
/// columns) keeps the status on its new last row, and the command's lines
/// whole.
#[test]
fn half_written_lines_and_a_resize_keep_the_commands_lines_whole() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("resized.data");
    let lines = |from: usize, to: usize| {
        format!(
            "i={from}; while [ $i -lt {to} ]; do echo \"line $i\"; i=$((i+1)); sleep 0.03; done"
        )
    };
    let command = format!(
        "printf 'checking for gcc... '; sleep 0.6; echo yes; {}; echo RESIZE; \
         stty rows 20 cols 60; sleep 0.6; {}",
        lines(0, 20),
        lines(20, LINES)
    );
    let shown_by = on_terminal(&[
        "record",
        "-o",
        data.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &command,
    ]);
    let (rows, shown) = play_resized(&shown_by, "recording:", Some((20, 60)));
    assert!(shown > 0, "no status line was drawn:\n{}", rows.join("\n"));
    assert!(
        rows.iter()
            .any(|r| r.trim_end() == "checking for gcc... yes"),
        "the half-written line:\n{}",
        rows.join("\n")
    );
    assert_lines_whole(&rows);
    assert!(
        !rows.iter().any(|r| r.contains("recording:")),
        "the status line was left on the terminal:\n{}",
        rows.join("\n")
    );
}

/// `ichnos record` started in the background (`&` in a shell with job
/// control): the terminal is the shell's, and no status line is drawn
/// on it, nor a scrolling region set.
#[test]
fn a_record_in_the_background_draws_no_status() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("background.data");
    let record = ichnos_line(&[
        "record",
        "-o",
        data.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &printer(),
    ]);
    let shown_by = on_terminal_as(&format!("set -m; {record} & wait $!"));
    let (rows, shown) = play(&shown_by, "recording:");
    assert_eq!(shown, 0, "{}", rows.join("\n"));
    assert_lines_whole(&rows);
    assert!(
        rows.iter().any(|r| r.starts_with("recorded ")),
        "no summary:\n{}",
        rows.join("\n")
    );
    assert!(
        !shown_by.windows(2).any(|w| w == b"\x1b7"),
        "the terminal was drawn on: {:?}",
        String::from_utf8_lossy(&shown_by)
    );
}

/// `ichnos record` sent to the background while it runs (its command
/// hands the terminal's foreground to the shell, as Ctrl-Z and `bg` do):
/// the status line drawn before is taken off at the next draw, and none
/// is drawn after.
#[test]
fn a_record_sent_to_the_background_takes_its_status_off() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("sent.data");
    // The shell's process group is its own pid (it leads the session
    // `script` made).
    let command = r#"
import os, sys, time
def lines(a, b):
    for i in range(a, b):
        print(f"line {i}", flush=True)
        time.sleep(0.03)
lines(0, 25)
os.tcsetpgrp(2, int(sys.argv[1]))
print("MOVED", flush=True)
time.sleep(1)
print("SETTLED", flush=True)
lines(25, 50)
"#;
    let record = ichnos_line(&[
        "record",
        "-o",
        data.to_str().unwrap(),
        "--",
        "python3",
        "-c",
        command,
    ]);
    // `exit` after it keeps the shell from making itself `ichnos` (exec,
    // for a last command), which would leave one process group.
    let shown_by = on_terminal_as(&format!("set -m; {record} \"$$\"; exit $?"));
    let (before, after) = {
        let settled = find(&shown_by, b"SETTLED").expect("the command's SETTLED line");
        shown_by.split_at(settled)
    };
    let (rows, shown) = play(before, "recording:");
    assert!(
        shown > 0,
        "no status line was drawn in the foreground:\n{}",
        rows.join("\n")
    );
    let (rows, shown_after) = play(&shown_by, "recording:");
    assert_eq!(
        shown_after,
        shown,
        "the status line was drawn, or left, after ichnos went to the background:\n{}",
        rows.join("\n")
    );
    assert_lines_whole(&rows);
    assert!(
        !after.windows(2).any(|w| w == b"\x1b7"),
        "drawn on after going to the background: {:?}",
        String::from_utf8_lossy(after)
    );
}

/// Where `needle` first starts in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
