//! The demo workload built into ichnos: what `ichnos record` with no
//! command and `ichnos demo` profile.
//!
//! Two threads run for about 2.5 seconds. `demo-native` runs C call
//! chains five levels deep, built without frame pointers and with SFrame
//! (build.rs); `demo-jit` calls a function emitted at run time
//! (`jit_hot_loop`, registered with the code registry with its unwind
//! table), which calls back into C. A report of the demo shows both chains
//! whole, the JIT frame by its name with the native frames below and
//! above it.
//!
//! The code that must be unsafe (executable memory, calling the emitted
//! function and the C workload) lives here, fenced, so that the
//! command-line crate has none.

mod jit;
mod sys;

pub use jit::{JITDUMP_SWITCH, NAME, PERF_MAP_SWITCH};

use std::time::Duration;

use anyhow::{Context, Result};

/// How long each thread works.
pub const DURATION: Duration = Duration::from_millis(2500);

extern "C" {
    fn demo_native_work(seconds: f64) -> u64;
    fn demo_jit_driver(function: jit::LoopFn, seconds: f64) -> u64;
}

/// Runs the workload: two named threads, for [`DURATION`].
pub fn workload() -> Result<()> {
    let jit = jit::Jit::emit()?;
    let function = jit.function();
    let seconds = DURATION.as_secs_f64();
    let native = std::thread::Builder::new()
        .name("demo-native".into())
        // SAFETY: a C function taking and returning plain numbers.
        .spawn(move || unsafe { demo_native_work(seconds) })
        .context("cannot start the demo's native thread")?;
    let jit_thread = std::thread::Builder::new()
        .name("demo-jit".into())
        // SAFETY: the driver calls `function` (valid while `jit` lives,
        // which outlives this thread: it is joined below) with a C
        // callback of the signature the JIT code expects.
        .spawn(move || unsafe { demo_jit_driver(function, seconds) })
        .context("cannot start the demo's JIT thread")?;
    // Both joined before either result is looked at: the JIT code is
    // unmapped when `jit` goes, and no thread may still be running it.
    let (a, b) = (native.join(), jit_thread.join());
    drop(jit);
    let a = a.map_err(|_| anyhow::anyhow!("the native thread panicked"))?;
    let b = b.map_err(|_| anyhow::anyhow!("the JIT thread panicked"))?;
    std::hint::black_box(a ^ b);
    Ok(())
}
