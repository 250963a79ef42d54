//! The built-in demo: the workload of `ichnos-demo`, run by `ichnos
//! record` with no command (as `ichnos __demo-workload`, so that the
//! recorder profiles a process of its own) and by `ichnos demo`, which
//! records and reports it in one step.

mod command;

pub use command::{demo, DemoArgs};
pub use ichnos_demo::workload;

/// The hidden argument that makes `ichnos` run the workload.
pub const WORKLOAD_ARG: &str = "__demo-workload";
