//! A frame unwound by evaluating its CFI (a CFA no row expresses) whose
//! evaluation reads past the end of the stack copy ends the walk there,
//! at the copy's end, as a row's read does: not with a guess by frame
//! pointers or "no unwind info". The recorder counts such a walk as one
//! that went on past the copy, and a copy it had cut short as too short.

mod support;

use ichnos_code::eh_frame::rows_from_elf;
use ichnos_code::memory::NoMemory;
use ichnos_code::{unwind, Regs, RowSource, StopReason, UnwindOptions};

/// `deep` has its CFA as a DWARF expression that reads the word 16 bytes
/// above the stack pointer (`DW_OP_breg7 16; DW_OP_breg7 16; DW_OP_deref;
/// DW_OP_drop`: CFA = rsp + 16, after a read of [rsp + 16]).
const SOURCE: &str = r#"
	.text
	.globl deep, inside
deep:	.cfi_startproc
	subq $8, %rsp
	.cfi_escape 0x0f, 0x06, 0x77, 0x10, 0x77, 0x10, 0x06, 0x13
inside:
	nop
	addq $8, %rsp
	ret
	.cfi_endproc
	.section .note.GNU-stack,"",@progbits
"#;

const SP: u64 = 0x7fff_0000;

#[test]
fn a_cfi_read_past_the_copy_ends_the_walk_at_the_copys_end() {
    let dir = tempfile::tempdir().unwrap();
    let (object, symbols) = support::assemble(dir.path(), "deep", SOURCE);
    let conversion = rows_from_elf(&std::fs::read(&object).unwrap(), Some(0)).unwrap();
    assert!(conversion.unexpressible_rows >= 1, "{conversion:?}");
    let map = support::one_object(0, 0x10_0000, conversion.table, RowSource::EhFrame);
    let regs = Regs {
        ip: support::symbol(&symbols, "inside"),
        sp: SP,
        fp: 0x7fff_8000,
        bx: None,
    };
    let options = |fp| UnwindOptions {
        max_frames: 16,
        frame_pointer_fallback: fp,
    };
    // A copy of 8 bytes: [rsp + 16] is past it.
    let copy = 0x1234u64.to_le_bytes();
    for fp in [false, true] {
        let w = unwind(&map, regs, &copy, &mut NoMemory, &options(fp));
        assert_eq!(w.frames.len(), 1, "fp fallback {fp}");
        assert_eq!(
            w.stop,
            StopReason::StackEnd { addr: SP + 16 },
            "fp fallback {fp}"
        );
    }
    // A copy that holds the word: the walk goes on (to the return
    // address at the CFA - 8, in no code: the end of what is known).
    let longer: Vec<u8> = [0u64, 0x99, 0x5555]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    let w = unwind(&map, regs, &longer, &mut NoMemory, &options(false));
    let ips: Vec<u64> = w.frames.iter().map(|f| f.ip).collect();
    assert_eq!(ips, [regs.ip, 0x99], "{:?}", w.stop);
}
