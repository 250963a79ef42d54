//! The PLT's stubs are named as objdump names them (`puts@plt`), in
//! `.plt`, `.plt.got` and, in a program built for indirect branch
//! tracking, `.plt.sec`: every instruction of every stub objdump
//! heads with a name, stripped or not, linked by GNU ld, lld or mold.

use std::process::Command;

use ichnos_symbol::{Symbolizer, SymbolizerOptions};

mod support;
use support::{objdump_stubs, run};

const SOURCE: &str = r#"
#include <stdio.h>
#include <stdlib.h>
int (*take)(int) = abs;
int main(int c, char **v) { puts(v[0]); printf("%d\n", abs(c)); return take(c) + atoi("3"); }
"#;

#[test]
fn plt_stubs_are_named_as_objdump_names_them() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("plt.c");
    std::fs::write(&src, SOURCE).unwrap();
    // Each build with the PLT sections it must have.
    let builds: [(&str, &[&str], &[&str]); 5] = [
        ("classic", &["-fcf-protection=none"], &[".plt", ".plt.got"]),
        (
            "ibt",
            &["-fcf-protection=full", "-Wl,-z,ibtplt"],
            &[".plt.sec", ".plt.got"],
        ),
        // LLVM's linker lays its PLT out its own way.
        ("lld", &["-fcf-protection=none", "-fuse-ld=lld"], &[".plt"]),
        (
            "lld-ibt",
            &["-fcf-protection=full", "-fuse-ld=lld", "-Wl,-z,force-ibt"],
            &[".plt", ".plt.sec"],
        ),
        // And mold its own (each stub moves its index to r11d first).
        (
            "mold",
            &["-fcf-protection=none", "-fuse-ld=mold"],
            &[".plt", ".plt.got"],
        ),
    ];
    for (name, flags, sections) in builds {
        let exe = dir.path().join(name);
        run(Command::new("gcc")
            .arg("-O2")
            .args(flags)
            .arg("-o")
            .arg(&exe)
            .arg(&src));
        let stripped = dir.path().join(format!("{name}-stripped"));
        run(Command::new("strip").arg("-o").arg(&stripped).arg(&exe));
        let want = objdump_stubs(&exe);
        assert!(
            want.iter().any(|(_, n)| n == "puts@plt")
                && want.iter().any(|(_, n)| n == "__cxa_finalize@plt"),
            "{want:?}"
        );
        let listed = run(Command::new("readelf").args(["-S", "-W"]).arg(&exe));
        for s in sections {
            assert!(
                listed.contains(&format!(" {s} ")),
                "{name}: no {s}: {listed}"
            );
        }
        if name == "classic" {
            assert!(!listed.contains(" .plt.sec "), "{listed}");
        }
        let addrs: Vec<u64> = want.iter().map(|&(a, _)| a).collect();
        for file in [&exe, &stripped] {
            let got = Symbolizer::new(SymbolizerOptions::default())
                .symbolize_file(file, &addrs)
                .unwrap();
            for ((a, name), s) in want.iter().zip(&got) {
                let ours = s.frames.first().and_then(|f| f.function.as_deref());
                assert_eq!(ours, Some(name.as_str()), "{} at {a:#x}", file.display());
            }
        }
    }
}
