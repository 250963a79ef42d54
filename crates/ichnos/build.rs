//! Builds the demo workload's native code without frame pointers and
//! with SFrame, as the code a profiler meets in the field is built.

fn main() {
    println!("cargo:rerun-if-changed=src/demo/workload.c");
    let mut build = cc::Build::new();
    build
        .file("src/demo/workload.c")
        .opt_level(2)
        .debug(true)
        .flag("-fomit-frame-pointer");
    // SFrame needs binutils 2.40; older assemblers leave .eh_frame, which
    // the unwinder reads as well.
    let sframe = build.is_flag_supported("-Wa,--gsframe").unwrap_or(false);
    if sframe {
        build.flag("-Wa,--gsframe");
        // SFrame sections are merged by GNU ld, not by the lld that rustc
        // links with by default (lld concatenates them, leaving function
        // addresses relative to each entry instead of to the section): link
        // the binary with ld.bfd. ld 2.40 also drops .sframe under
        // --gc-sections, which rustc passes (fixed in 2.41): keep it with
        // a script that augments the default one.
        println!("cargo:rustc-link-arg-bins=-fuse-ld=bfd");
        let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
        let script = out.join("keep-sframe.ld");
        std::fs::write(
            &script,
            "SECTIONS { .sframe : ONLY_IF_RO { KEEP (*(.sframe)) *(.sframe.*) } } INSERT AFTER .eh_frame;\n",
        )
        .expect("writing the linker script");
        println!("cargo:rustc-link-arg-bins=-Wl,-T,{}", script.display());
    }
    build.compile("ichnos_demo");
}
