//! Shared by the tests that need a fresh process: this test binary runs
//! itself, filtered to one entry test (ignored in a plain run, so that it
//! is not counted as a test of its own), with an environment variable
//! that tells the entry what to do.

use std::process::{Command, Output};

/// Runs the test `entry` of this binary in a child process with
/// `var=value` and returns what it did.
pub fn run_self(entry: &str, var: &str, value: &str) -> Output {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            entry,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(var, value)
        .output()
        .unwrap()
}
