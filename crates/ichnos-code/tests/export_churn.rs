//! The exported registry through many registrations and removals, read
//! back from this process as a recorder reads another's: every change is
//! made in place (an entry added at the end, a removed one replaced by the
//! last, the array doubled when full), and what a reader sees must be the
//! registrations as they are, names included.

use std::collections::BTreeMap;

use ichnos_code::export::{find_exported_registry, read_exported_registry};
use ichnos_code::{JitCode, Registration, Registry};

fn exported() -> BTreeMap<u64, (u64, Option<String>)> {
    let pid = std::process::id();
    let at = find_exported_registry(pid).unwrap();
    read_exported_registry(pid, at)
        .unwrap()
        .into_iter()
        .map(|r| match r {
            Registration::Jit { text, name, .. } => (text.start, (text.end, name)),
            Registration::Elf(e) => (e.text.start, (e.text.end, None)),
        })
        .collect()
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
    // Past several doublings of the array (16, 32, ... 512).
    for i in 0..300 {
        add(&mut model, i);
    }
    assert_eq!(exported(), model);
    // Removals from the middle, the start and the end move entries.
    for i in (0..300).step_by(3).chain([1, 299]) {
        let start = base + i * 0x1000;
        if model.remove(&start).is_some() {
            registry.unregister(start).unwrap();
        }
    }
    assert_eq!(exported(), model);
    for i in 300..350 {
        add(&mut model, i);
    }
    assert_eq!(exported(), model);
    for &start in model.keys().collect::<Vec<_>>() {
        registry.unregister(start).unwrap();
    }
    assert!(exported().is_empty());
}
