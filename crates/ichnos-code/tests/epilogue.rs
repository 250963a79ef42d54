//! Samples taken in an epilogue, between the pop of a saved frame pointer
//! and the return. gcc notes no restore as an epilogue pops, so the rules
//! there still say `rbp` is saved at its slot, which now lies below the
//! stack pointer: outside the kernel's stack copy, which starts at it.
//! The register holds the caller's value again, and the walk goes on with
//! it, by rows and by the CFI the unwinder evaluates itself. (The stop
//! after `leave` in `gdb_unwind.rs` checks the same against gdb.)

mod support;

use ichnos_code::eh_frame::rows_from_elf;
use ichnos_code::memory::NoMemory;
use ichnos_code::row::{RowTable, UnwindRow, ROW_CFA_BASE_SP, ROW_OUTERMOST};
use ichnos_code::{unwind, CodeMap, FrameKind, Regs, RowSource, StopReason, UnwindOptions};

const SP: u64 = 0x7fff_0000;
/// The caller's frame pointer, back in `rbp` after the pop.
const CALLERS_FP: u64 = 0x7fff_8000;

fn one_object(start: u64, end: u64, table: RowTable) -> CodeMap {
    support::one_object(start, end, table, RowSource::EhFrame)
}

fn options() -> UnwindOptions {
    UnwindOptions {
        max_frames: 16,
        frame_pointer_fallback: false,
    }
}

#[test]
fn a_frame_pointer_popped_before_the_return_is_the_callers_by_rows() {
    // [0x1000, 0x1100): after `pop rbp`, CFA = SP+8 and rbp "saved" at
    // CFA-16, 8 bytes below SP. [0x1100, 0x1200): CFA = FP+16 with FP
    // saved at CFA-16 (the caller keeps a frame pointer, so the value
    // the walk carries is used). [0x1200, 0x1300): outermost.
    let mut table = RowTable::new(0x1000);
    let rows = [
        UnwindRow {
            cfa_off: 8,
            ra_off: -8,
            fp_off: -16,
            info: ROW_CFA_BASE_SP,
            ..UnwindRow::default()
        },
        UnwindRow {
            cfa_off: 16,
            ra_off: -8,
            fp_off: -16,
            info: 0,
            ..UnwindRow::default()
        },
        UnwindRow {
            info: ROW_OUTERMOST,
            ..UnwindRow::default()
        },
    ];
    for (addr, row) in [0x1000, 0x1100, 0x1200].into_iter().zip(rows) {
        table.push(addr, UnwindRow { size: 0x100, ..row }).unwrap();
    }
    let map = one_object(0x1000, 0x2000, table);
    // The copy from SP: the return address into 0x1100's code; the
    // caller's frame lies at CALLERS_FP: its saved FP, then its return
    // address into the outermost code.
    let words = (CALLERS_FP - SP) / 8 + 2;
    let mut stack = vec![0u64; usize::try_from(words).unwrap()];
    stack[0] = 0x1150;
    let at = |addr: u64| usize::try_from((addr - SP) / 8).unwrap();
    stack[at(CALLERS_FP)] = 0;
    stack[at(CALLERS_FP + 8)] = 0x1250;
    let bytes: Vec<u8> = stack.iter().flat_map(|w| w.to_le_bytes()).collect();
    let regs = Regs {
        ip: 0x1010,
        sp: SP,
        fp: CALLERS_FP,
        bx: None,
    };
    let w = unwind(&map, regs, &bytes, &mut NoMemory, &options());
    let ips: Vec<u64> = w.frames.iter().map(|f| f.ip).collect();
    assert_eq!(ips, [0x1010, 0x1150, 0x1250], "{:?}", w.stop);
    assert_eq!(w.stop, StopReason::Outermost);
}

/// `f` pops rbp with its CFA given as a DWARF expression (`rsp + 16`,
/// then `rsp + 8`, as `DW_OP_breg7 N; DW_OP_breg7 0; DW_OP_deref;
/// DW_OP_drop`: the read of memory keeps it out of the rows) and `rbp`
/// saved at CFA-16; `g` calls it and is the outermost frame.
const SOURCE: &str = r#"
	.text
	.globl f, after_pop, g, back_in_g
f:	.cfi_startproc
	pushq %rbp
	.cfi_escape 0x0f, 0x06, 0x77, 0x10, 0x77, 0x00, 0x06, 0x13
	.cfi_offset rbp, -16
	nop
	popq %rbp
	.cfi_escape 0x0f, 0x06, 0x77, 0x08, 0x77, 0x00, 0x06, 0x13
after_pop:
	ret
	.cfi_endproc
g:	.cfi_startproc
	.cfi_undefined rip
	call f
back_in_g:
	hlt
	.cfi_endproc
	.section .note.GNU-stack,"",@progbits
"#;

#[test]
fn a_frame_pointer_popped_before_the_return_is_the_callers_by_cfi() {
    let dir = tempfile::tempdir().unwrap();
    let (object, symbols) = support::assemble(dir.path(), "epilogue", SOURCE);
    let address = |name: &str| support::symbol(&symbols, name);
    let conversion = rows_from_elf(&std::fs::read(&object).unwrap(), Some(0)).unwrap();
    assert!(
        conversion.unexpressible_rows >= 2,
        "the CFA expressions are left to the CFI: {conversion:?}"
    );
    let map = one_object(0, 0x10_0000, conversion.table);
    let back = address("back_in_g");
    let regs = Regs {
        ip: address("after_pop"),
        sp: SP,
        fp: CALLERS_FP,
        bx: None,
    };
    // All the copy holds: the return address at SP.
    let w = unwind(&map, regs, &back.to_le_bytes(), &mut NoMemory, &options());
    let ips: Vec<u64> = w.frames.iter().map(|f| f.ip).collect();
    assert_eq!(ips, [regs.ip, back], "{:?}", w.stop);
    assert_eq!(w.stop, StopReason::Outermost);
    assert_eq!(w.frames[1].kind, FrameKind::Cfi);
}
