//! The exported registry through many registrations and removals, read
//! back from this process as a recorder reads another's: every change is
//! made in place (an entry added at the end, a removed one replaced by the
//! last, the array doubled when full), and what a reader sees must be the
//! registrations as they are, names included.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use ichnos_code::export::{
    exported_registry_generation, find_exported_registry, read_exported_registry,
};
use ichnos_code::{JitCode, Registration, Registry};

/// The exported table as read back, sorted (a duplicated or stale entry
/// shows).
fn exported() -> Vec<(u64, (u64, Option<String>))> {
    let pid = std::process::id();
    let at = find_exported_registry(pid).unwrap();
    let mut rows: Vec<_> = read_exported_registry(pid, at)
        .unwrap()
        .into_iter()
        .map(|r| match r {
            Registration::Jit { text, name, .. } => (text.start, (text.end, name)),
            Registration::Elf(e) => (e.text.start, (e.text.end, None)),
        })
        .collect();
    rows.sort();
    rows
}

fn listed(model: &BTreeMap<u64, (u64, Option<String>)>) -> Vec<(u64, (u64, Option<String>))> {
    model.iter().map(|(k, v)| (*k, v.clone())).collect()
}

#[test]
fn the_exported_table_follows_registrations_and_removals() {
    let registry = Registry::global();
    let mut model: BTreeMap<u64, (u64, Option<String>)> = BTreeMap::new();
    let base = 0x7000_0000_0000u64;
    let add = |model: &mut BTreeMap<_, _>, i: u64| {
        let start = base + i * 0x1000;
        let name = format!("jit_{i}");
        registry
            .register_jit(JitCode::new(start..start + 0x800, 0).with_name(name.clone()))
            .unwrap();
        model.insert(start, (start + 0x800, Some(name)));
    };
    // A reader in another thread, as a recorder in another process reads:
    // every table it takes is consistent, each entry named for its range.
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let pid = std::process::id();
            let at = find_exported_registry(pid).unwrap();
            let mut reads = 0;
            while !done.load(Ordering::Relaxed) || reads == 0 {
                match read_exported_registry(pid, at) {
                    Ok(rows) => {
                        reads += 1;
                        for r in rows {
                            if let Registration::Jit { text, name, .. } = r {
                                let i = (text.start - base) / 0x1000;
                                assert_eq!(name.as_deref(), Some(format!("jit_{i}").as_str()));
                                assert_eq!(text.end, text.start + 0x800);
                            }
                        }
                    }
                    Err(ichnos_code::export::RemoteError::Busy { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            }
        });
        // Past several doublings of the array (16, 32, ... 512), with
        // removals among them.
        let mut churn = BTreeMap::new();
        for i in 1000..1300 {
            add(&mut churn, i);
            if i % 4 == 0 {
                let start = base + (i - 2) * 0x1000;
                if churn.remove(&start).is_some() {
                    registry.unregister(start).unwrap();
                }
            }
        }
        for &start in churn.keys() {
            registry.unregister(start).unwrap();
        }
        done.store(true, Ordering::Relaxed);
    });
    for i in 0..300 {
        add(&mut model, i);
    }
    assert_eq!(exported(), listed(&model));
    // Removals from the middle, the start and the end move entries.
    for i in (0..300).step_by(3).chain([1, 299]) {
        let start = base + i * 0x1000;
        if model.remove(&start).is_some() {
            registry.unregister(start).unwrap();
        }
    }
    assert_eq!(exported(), listed(&model));
    // The generation a reader checks before reading the entries again:
    // still while nothing changes, moved by each registration and removal.
    let pid = std::process::id();
    let at = find_exported_registry(pid).unwrap();
    let generation = || exported_registry_generation(pid, at).unwrap();
    let before = generation();
    assert_eq!(generation(), before);
    assert_eq!(before % 2, 0, "a registry at rest has an even generation");
    add(&mut model, 300);
    let added = generation();
    assert_ne!(added, before);
    registry.unregister(base + 300 * 0x1000).unwrap();
    model.remove(&(base + 300 * 0x1000));
    assert_ne!(generation(), added);
    for i in 300..350 {
        add(&mut model, i);
    }
    assert_eq!(exported(), listed(&model));
    for &start in model.keys().collect::<Vec<_>>() {
        registry.unregister(start).unwrap();
    }
    assert!(exported().is_empty());
}
