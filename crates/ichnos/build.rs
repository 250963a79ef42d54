//! Links the binary so that the SFrame sections of the demo workload
//! (compiled with `-Wa,--gsframe` by `ichnos-demo`) survive into it.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // SFrame needs binutils 2.40; without it the workload has .eh_frame
    // only, and nothing here is needed.
    if !cc::Build::new()
        .is_flag_supported("-Wa,--gsframe")
        .unwrap_or(false)
    {
        return;
    }
    // SFrame sections are merged by GNU ld, not by the lld that rustc
    // links with by default (lld concatenates them, leaving function
    // addresses relative to each entry instead of to the section): link
    // the binary with ld.bfd. ld 2.40 also drops .sframe under
    // --gc-sections, which rustc passes (fixed in 2.41): keep it with a
    // script that augments the default one.
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
