//! Builds the demo workload's native code without frame pointers and
//! with SFrame, as the code a profiler meets in the field is built. (The
//! binary that links it merges the SFrame sections: its own build script
//! asks for GNU ld.)

fn main() {
    println!("cargo:rerun-if-changed=src/workload.c");
    let mut build = cc::Build::new();
    build
        .file("src/workload.c")
        .opt_level(2)
        .debug(true)
        .flag("-fomit-frame-pointer");
    // SFrame needs binutils 2.40; older assemblers leave .eh_frame, which
    // the unwinder reads as well.
    if build.is_flag_supported("-Wa,--gsframe").unwrap_or(false) {
        build.flag("-Wa,--gsframe");
    }
    build.compile("ichnos_demo");
}
