//! Registering and unregistering N JIT ranges with the code registry, as
//! `codectl()` does: the mean time of one registration and one removal at
//! each size, for a private registry and for the global one, which also
//! keeps the exported table other processes read up to date. The cost of
//! a call should not grow with the number of registrations (issue 14: it
//! was 9 µs each at 1,000 and 420 µs at 16,000).
//!
//! Run: `cargo bench -p ichnos-code --bench registrations`. No peer: the
//! kernel's `codectl(2)` is a proposal, with no implementation to run.

use std::time::Instant;

use ichnos_code::{JitCode, Registry};

fn churn(registry: &Registry, n: u64, base: u64) -> (f64, f64) {
    let started = Instant::now();
    for i in 0..n {
        let start = base + i * 0x100;
        registry
            .register_jit(JitCode::new(start..start + 0x80, 0).with_name("jit"))
            .unwrap();
    }
    let register = started.elapsed().as_secs_f64() * 1e6 / n as f64;
    let started = Instant::now();
    for i in 0..n {
        registry.unregister(base + i * 0x100).unwrap();
    }
    let unregister = started.elapsed().as_secs_f64() * 1e6 / n as f64;
    (register, unregister)
}

fn main() {
    println!("| registrations | private: register | private: unregister | global: register | global: unregister |");
    println!("|---:|---:|---:|---:|---:|");
    for n in [1_000u64, 16_000, 100_000] {
        let private = churn(&Registry::new(), n, 0x1000_0000);
        let global = churn(Registry::global(), n, 0x2000_0000_0000);
        println!(
            "| {n} | {:.2} µs | {:.2} µs | {:.2} µs | {:.2} µs |",
            private.0, private.1, global.0, global.1
        );
    }
}
