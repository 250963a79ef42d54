//! The runtime binds the hooks in the loaded objects' PLTs at its start,
//! so that no traced call pays for the dynamic linker's first binding of
//! a hook (0.3 to 0.7 us, which fell in the first exiting call). Checked
//! against the dynamic linker's own account of what it binds and when
//! (`LD_DEBUG=bindings,files`): a slot resolved lazily shows as a binding
//! from the object that made the call after the linker has transferred
//! control to the program.

use std::path::{Path, PathBuf};

mod trace_support;

use trace_support::*;

/// A program linked with an instrumented library of ours (built with
/// `library_extra` and `program_extra`): the program, and the library.
fn program_with_library(
    dir: &Path,
    library_extra: &[&str],
    program_extra: &[&str],
) -> (PathBuf, PathBuf) {
    build_with_library(
        dir,
        "plugin.c",
        library_extra,
        "linked_main.c",
        program_extra,
    )
}

/// Asserts that `object` bound both hooks lazily (the dynamic linker's
/// report lines `lazily`).
fn assert_bound_lazily(object: &Path, lazily: &[String]) {
    for hook in ["`__cyg_profile_func_enter'", "`__cyg_profile_func_exit'"] {
        assert!(
            lazily.iter().any(|l| l.contains(hook)),
            "{} binds no {hook} lazily:\n{}",
            object.display(),
            lazily.join("\n")
        );
    }
}

/// Traces `program` with the dynamic linker reporting its bindings (and
/// `env` set); the lines of its report that bind a hook for `object` once
/// the program runs.
fn hook_bindings(dir: &Path, program: &Path, object: &Path, env: &[(&str, &str)]) -> Vec<String> {
    let reports = dir.join("ld");
    std::fs::create_dir_all(&reports).unwrap();
    run(ichnos()
        .env("LD_DEBUG", "bindings,files")
        .env("LD_DEBUG_OUTPUT", reports.join("bindings"))
        .envs(env.iter().copied())
        .args(["trace", "-q", "-o"])
        .arg(dir.join("t.data"))
        .arg("--")
        .arg(program));
    let from = format!("binding file {} ", object.display());
    let running = format!("transferring control: {}", program.display());
    let mut lines = Vec::new();
    let mut ran = false;
    for report in std::fs::read_dir(&reports).unwrap() {
        let text = std::fs::read_to_string(report.unwrap().path()).unwrap();
        // One report per process: ichnos's own, and the program's.
        let Some(start) = text.find(&running) else {
            continue;
        };
        ran = true;
        lines.extend(
            text[start..]
                .lines()
                .filter(|l| l.contains(&from) && l.contains("`__cyg_profile_func_"))
                .map(str::to_owned),
        );
    }
    std::fs::remove_dir_all(&reports).unwrap();
    assert!(
        ran,
        "no report of the dynamic linker's says it ran {}",
        program.display()
    );
    lines
}

/// The calls of the fixture, counted: `main` once, `plugin_work` once,
/// `plugin_step` ten times.
fn assert_all_calls_traced(dir: &Path) {
    let counts = calls(dir, "t.data");
    assert_eq!(counts.get("main"), Some(&1), "{counts:?}");
    assert_eq!(counts.get("plugin_work"), Some(&1), "{counts:?}");
    assert_eq!(counts.get("plugin_step"), Some(&10), "{counts:?}");
}

#[test]
fn no_object_loaded_at_the_start_binds_a_hook_lazily() {
    let dir = tempfile::tempdir().unwrap();
    let (program, library) = program_with_library(dir.path(), &[], &[]);
    for object in [&program, &library] {
        let lazily = hook_bindings(dir.path(), &program, object, &[]);
        assert!(lazily.is_empty(), "{}", lazily.join("\n"));
        assert_all_calls_traced(dir.path());
    }
}

/// Under `LD_BIND_NOT` the dynamic linker would not write a slot it
/// resolves, and under `LD_PROFILE` it counts the calls through the PLT:
/// the runtime writes no slot, and every object binds the hooks lazily,
/// as the dynamic linker reports (which also shows that the test above
/// would see such a binding).
#[test]
fn under_ld_bind_not_or_ld_profile_the_slots_are_left_to_the_dynamic_linker() {
    let dir = tempfile::tempdir().unwrap();
    let (program, library) = program_with_library(dir.path(), &[], &[]);
    let profiles = dir.path().display().to_string();
    let settings: [&[(&str, &str)]; 2] = [
        &[("LD_BIND_NOT", "1")],
        &[
            ("LD_PROFILE", "libplugin.so"),
            ("LD_PROFILE_OUTPUT", &profiles),
        ],
    ];
    for env in settings {
        for object in [&program, &library] {
            let lazily = hook_bindings(dir.path(), &program, object, env);
            assert_bound_lazily(object, &lazily);
            assert_all_calls_traced(dir.path());
        }
    }
}

/// With an auditor (`LD_AUDIT`, or a `DT_AUDIT` the program names; here
/// one that cannot be loaded, which the dynamic linker reports and
/// ignores) the program is traced (the dynamic linker refused the
/// runtime, whose TLS did not fit, until the recorder asked for room) and
/// the runtime writes no slot: every object binds the hooks lazily.
#[test]
fn under_an_auditor_the_program_is_traced_and_its_slots_left_to_the_dynamic_linker() {
    let dir = tempfile::tempdir().unwrap();
    let (program, library) = program_with_library(dir.path(), &[], &[]);
    for object in [&program, &library] {
        let lazily = hook_bindings(
            dir.path(),
            &program,
            object,
            &[("LD_AUDIT", "no-such-auditor.so")],
        );
        assert_bound_lazily(object, &lazily);
        assert_all_calls_traced(dir.path());
    }
    let (program, library) =
        program_with_library(dir.path(), &[], &["-Wl,--audit,no-such-auditor.so"]);
    for object in [&program, &library] {
        let lazily = hook_bindings(dir.path(), &program, object, &[]);
        assert_bound_lazily(object, &lazily);
        assert_all_calls_traced(dir.path());
    }
}

/// A library that looks its own symbols up first (`-Bsymbolic`), for
/// which the resolver could choose another hook than the runtime's: its
/// slots are left lazy, and the program's are bound.
#[test]
fn a_symbolic_library_is_left_to_the_dynamic_linker() {
    let dir = tempfile::tempdir().unwrap();
    let (program, library) = program_with_library(dir.path(), &["-Wl,-Bsymbolic"], &[]);
    assert_bound_lazily(
        &library,
        &hook_bindings(dir.path(), &program, &library, &[]),
    );
    let lazily = hook_bindings(dir.path(), &program, &program, &[]);
    assert!(lazily.is_empty(), "{}", lazily.join("\n"));
    assert_all_calls_traced(dir.path());
}

/// Objects bound at load and protected after (`-z now`, `-z relro`): the
/// runtime writes nothing there (a write would fault), and nothing is
/// bound once the program runs.
#[test]
fn objects_bound_at_load_are_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let now = ["-Wl,-z,relro,-z,now"];
    let (program, library) = program_with_library(dir.path(), &now, &now);
    for object in [&program, &library] {
        let lazily = hook_bindings(dir.path(), &program, object, &[]);
        assert!(lazily.is_empty(), "{}", lazily.join("\n"));
        assert_all_calls_traced(dir.path());
    }
}
