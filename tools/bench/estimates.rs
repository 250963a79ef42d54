//! Criterion's estimates of the current run, read back by the benchmarks
//! that print a side-by-side ratio table after criterion's own report.
//! Included with `#[path]` by each crate's benchmarks.
//!
//! Criterion leaves each benchmark's estimates in `target/criterion`
//! from run to run: a table labelled "this run" must not pick up a figure
//! of an earlier one (a benchmark filtered out, or one that failed), so
//! only estimates written since the run began are read.

use std::path::Path;
use std::time::SystemTime;

/// A benchmark run: estimates written since it began.
pub struct Run {
    began: SystemTime,
}

impl Run {
    /// The run begins now: call first thing in the benchmark's `main`.
    pub fn start() -> Run {
        Run {
            began: SystemTime::now(),
        }
    }

    /// Criterion's point estimate of the mean, in nanoseconds, of
    /// `group/function` (`target/criterion/.../new/estimates.json`), if
    /// this run measured it: `None` for one left from an earlier run.
    pub fn mean_ns(&self, group: &str, function: &str) -> Option<f64> {
        let dir = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
            Into::into,
        );
        let path = dir
            .join("criterion")
            .join(group.replace('/', "_"))
            .join(function)
            .join("new/estimates.json");
        let written = std::fs::metadata(&path).ok()?.modified().ok()?;
        if written < self.began {
            return None;
        }
        let json: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
        json["mean"]["point_estimate"].as_f64()
    }
}
