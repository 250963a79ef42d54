//! Rows of `.eh_frame` that cannot be the unwinder's rows are kept with
//! the reason why, one reason per kind of rule: checked against what
//! binutils' `readelf --debug-dump=frames-interp` shows of the same file.

use std::collections::BTreeMap;
use std::process::Command;

use ichnos_code::eh_frame::{rows_from_elf, Unexpressible};

/// Four functions whose second row each breaks one rule the unwinder's
/// rows express: the CFA off r12, the return address kept in rbx, the
/// frame pointer kept in rbx, and the CFA as `*(rbp + 0)`.
const SOURCE: &str = r#"
	.text
f1:	.cfi_startproc
	nop
	.cfi_def_cfa r12, 16
	nop
	.cfi_endproc
f2:	.cfi_startproc
	nop
	.cfi_register rip, rbx
	nop
	.cfi_endproc
f3:	.cfi_startproc
	pushq %rbp
	.cfi_def_cfa_offset 16
	.cfi_offset rbp, -16
	nop
	.cfi_register rbp, rbx
	nop
	.cfi_endproc
f4:	.cfi_startproc
	nop
	.cfi_escape 0x0f, 0x03, 0x76, 0x00, 0x06
	nop
	.cfi_endproc
	.section .note.GNU-stack,"",@progbits
"#;

#[test]
fn each_unexpressible_row_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("rules.s");
    let object = dir.path().join("rules.so");
    std::fs::write(&source, SOURCE).unwrap();
    let built = Command::new("gcc")
        .args(["-nostdlib", "-shared", "-o"])
        .arg(&object)
        .arg(&source)
        .status()
        .unwrap();
    assert!(built.success());
    // The truth: the rows readelf shows with those rules.
    let dump = Command::new("readelf")
        .arg("--debug-dump=frames-interp")
        .arg(&object)
        .output()
        .unwrap();
    let dump = String::from_utf8_lossy(&dump.stdout);
    let rows = |what: &str| dump.lines().filter(|l| l.contains(what)).count();
    assert_eq!(
        (
            rows("r12+16"),
            rows(" exp "),
            rows("rsp+8    r3 (rbx)"),
            rows("r3 (rbx) c-8")
        ),
        (1, 1, 1, 1),
        "{dump}"
    );

    let conversion = rows_from_elf(&std::fs::read(&object).unwrap(), None).unwrap();
    let want = BTreeMap::from([
        (Unexpressible::CfaRegister(12), 1),
        (Unexpressible::CfaExpression, 1),
        (Unexpressible::ReturnAddressRule, 1),
        (Unexpressible::FramePointerRule, 1),
    ]);
    assert_eq!(conversion.unexpressible_reasons, want);
    assert_eq!(conversion.unexpressible_rows, 4);
    assert_eq!(conversion.skipped_fdes, 0);
    assert_eq!(conversion.first_error, None);
}
