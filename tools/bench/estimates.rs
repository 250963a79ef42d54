//! Criterion's estimates of the current run, read back by the benchmarks
//! that print a side-by-side ratio table after criterion's own report.
//! Included with `#[path]` by each crate's benchmarks.

use std::path::Path;

/// Criterion's point estimate of the mean, in nanoseconds, of
/// `group/function` in this run (`target/criterion/.../new/estimates.json`).
pub fn mean_ns(group: &str, function: &str) -> Option<f64> {
    let dir = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        Into::into,
    );
    let path = dir
        .join("criterion")
        .join(group.replace('/', "_"))
        .join(function)
        .join("new/estimates.json");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    json["mean"]["point_estimate"].as_f64()
}
