//! Call-frame information evaluated where no row can express it.
//!
//! Most `.eh_frame` rules become [`UnwindRow`](crate::UnwindRow)s. The rest
//! are marked unexpressible: a CFA read from memory (glibc's signal
//! trampoline `__restore_rt` has CFA = `[rsp + 160]`, the stack pointer
//! saved in the signal frame), registers restored by DWARF expressions, CFA
//! expressions that no per-address evaluation reduces to "SP + constant".
//! For those ranges the conversion keeps the FDEs ([`FdeSpan`]) and the
//! section's bytes in a [`CfiSection`], and the unwinder evaluates the CFI
//! itself at the address — gimli runs the CFA program and the DWARF
//! expressions, reading registers from the walk and memory from the stack
//! copy — before it falls back to the frame-pointer chain.
//!
//! A frame whose FDE belongs to a signal trampoline (CIE augmentation `S`)
//! returns to code that was interrupted, not to a call: the caller's
//! instruction pointer is exact ([`CfiStep::Caller::interrupted`]).
//!
//! Only the registers the unwinder tracks are known (`rip`, `rsp`, `rbp`);
//! an expression that needs another one fails with
//! [`CfiError::UnknownRegister`] and the walk falls back as before.

use gimli::{
    BaseAddresses, CfaRule, EhFrame, EhFrameOffset, EvaluationResult, LittleEndian, Location,
    Register, RegisterRule, UnwindContext, UnwindSection, Value, X86_64,
};

use crate::unwind::Regs;

/// Most operations one DWARF expression may run.
const MAX_EXPRESSION_STEPS: u32 = 1000;

/// An FDE whose range holds rows no [`UnwindRow`](crate::UnwindRow) can
/// express, in the file's link-time addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FdeSpan {
    /// First address the FDE covers.
    pub start: u64,
    /// One past the last.
    pub end: u64,
    /// The FDE's offset in `.eh_frame`.
    pub offset: usize,
}

/// The `.eh_frame` of one file, kept for the FDEs whose rules rows cannot
/// express.
pub struct CfiSection {
    data: Box<[u8]>,
    bases: BaseAddresses,
    fdes: Vec<FdeSpan>,
}

impl std::fmt::Debug for CfiSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CfiSection")
            .field("bytes", &self.data.len())
            .field("fdes", &self.fdes)
            .finish_non_exhaustive()
    }
}

/// What evaluating a frame's CFI says about its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CfiStep {
    /// The caller's registers.
    Caller {
        /// `ip` is the return address (or, for an interrupted caller, the
        /// interrupted instruction), `sp` the CFA, `fp` the restored frame
        /// pointer.
        regs: Regs,
        /// The frame is a signal trampoline: the caller was interrupted at
        /// `regs.ip`, which is to be looked up as is, not minus one.
        interrupted: bool,
    },
    /// The return address is undefined here: the outermost frame.
    Outermost,
}

/// Why the CFI at an address could not be evaluated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CfiError {
    /// No kept FDE covers the address.
    #[error("no FDE with unexpressible rules covers {addr:#x}")]
    NoFde {
        /// The link-time address looked up.
        addr: u64,
    },
    /// The FDE or its CIE could not be parsed, or its CFA program failed.
    #[error(".eh_frame FDE at offset {fde_offset:#x}: {source}")]
    Dwarf {
        /// The FDE's offset in `.eh_frame`.
        fde_offset: usize,
        /// What gimli reported.
        source: gimli::Error,
    },
    /// A rule needs a register the unwinder does not track.
    #[error(".eh_frame FDE at offset {fde_offset:#x}: needs register {register}, which is not known in caller frames")]
    UnknownRegister {
        /// The FDE's offset in `.eh_frame`.
        fde_offset: usize,
        /// The DWARF register number.
        register: u16,
    },
    /// Memory a rule reads is neither in the stack copy nor elsewhere.
    #[error(".eh_frame FDE at offset {fde_offset:#x}: cannot read {addr:#x}")]
    Unreadable {
        /// The FDE's offset in `.eh_frame`.
        fde_offset: usize,
        /// The address.
        addr: u64,
    },
    /// An expression needs something besides registers and memory (thread
    /// storage, a frame base, an entry value), or gives no single value.
    #[error(".eh_frame FDE at offset {fde_offset:#x}: the {what} expression is not a value of registers and memory")]
    UnsupportedExpression {
        /// The FDE's offset in `.eh_frame`.
        fde_offset: usize,
        /// Which rule's expression.
        what: RuleOf,
    },
    /// The return address has no rule, or an architectural one.
    #[error(".eh_frame FDE at offset {fde_offset:#x}: no usable rule for the return address")]
    NoReturnAddressRule {
        /// The FDE's offset in `.eh_frame`.
        fde_offset: usize,
    },
}

/// Which rule of a row an error concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleOf {
    /// The CFA rule.
    Cfa,
    /// The rule of a register (DWARF number).
    Register(u16),
}

impl std::fmt::Display for RuleOf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Cfa => write!(f, "CFA"),
            Self::Register(r) => write!(f, "register {r}"),
        }
    }
}

/// The values an evaluation reads: the walk's registers, memory, and the
/// load offset for addresses written in the file (`DW_OP_addr`).
struct Inputs<'a> {
    regs: Regs,
    relocation: u64,
    read: &'a mut dyn FnMut(u64) -> Option<u64>,
    fde_offset: usize,
}

impl Inputs<'_> {
    fn register(&self, register: Register) -> Result<u64, CfiError> {
        match register {
            X86_64::RSP => Ok(self.regs.sp),
            X86_64::RBP => Ok(self.regs.fp),
            X86_64::RA => Ok(self.regs.ip),
            X86_64::RBX => self.regs.bx.ok_or(CfiError::UnknownRegister {
                fde_offset: self.fde_offset,
                register: X86_64::RBX.0,
            }),
            other => Err(CfiError::UnknownRegister {
                fde_offset: self.fde_offset,
                register: other.0,
            }),
        }
    }

    fn load(&mut self, addr: u64) -> Result<u64, CfiError> {
        (self.read)(addr).ok_or(CfiError::Unreadable {
            fde_offset: self.fde_offset,
            addr,
        })
    }
}

impl CfiSection {
    /// `.eh_frame` bytes loaded at `eh_frame_addr` (link-time), with the
    /// `.text` and `.got` addresses its pointer encodings may need, and the
    /// FDEs to answer for.
    #[must_use]
    pub fn new(
        data: Vec<u8>,
        eh_frame_addr: u64,
        text_addr: Option<u64>,
        got_addr: Option<u64>,
        mut fdes: Vec<FdeSpan>,
    ) -> Self {
        let bases = crate::eh_frame::eh_frame_bases(eh_frame_addr, text_addr, got_addr);
        fdes.sort_by_key(|f| f.start);
        Self {
            data: data.into_boxed_slice(),
            bases,
            fdes,
        }
    }

    /// The FDEs kept, sorted by start.
    #[must_use]
    pub fn fdes(&self) -> &[FdeSpan] {
        &self.fdes
    }

    fn fde_at(&self, addr: u64) -> Option<&FdeSpan> {
        let i = self.fdes.partition_point(|f| f.start <= addr);
        let fde = self.fdes.get(i.checked_sub(1)?)?;
        (addr < fde.end).then_some(fde)
    }

    /// Evaluates the CFI at `link_pc` (the file's address of the frame's
    /// lookup address) for a frame with registers `regs` (run-time values).
    /// `relocation` is what turns a link-time address into a run-time one
    /// (added, wrapping); `read` loads a little-endian word of the
    /// unwound program's memory.
    pub fn evaluate(
        &self,
        link_pc: u64,
        regs: Regs,
        relocation: u64,
        read: &mut dyn FnMut(u64) -> Option<u64>,
    ) -> Result<CfiStep, CfiError> {
        let span = self
            .fde_at(link_pc)
            .ok_or(CfiError::NoFde { addr: link_pc })?;
        evaluate_fde(
            &self.data,
            &self.bases,
            span.offset,
            link_pc,
            regs,
            relocation,
            read,
        )
    }
}

/// Evaluates the FDE at `fde_offset` of the `.eh_frame` bytes `data` at
/// `link_pc`, as [`CfiSection::evaluate`] does.
pub(crate) fn evaluate_fde(
    data: &[u8],
    bases: &BaseAddresses,
    fde_offset: usize,
    link_pc: u64,
    regs: Regs,
    relocation: u64,
    read: &mut dyn FnMut(u64) -> Option<u64>,
) -> Result<CfiStep, CfiError> {
    let dwarf = |source| CfiError::Dwarf { fde_offset, source };
    let eh_frame = EhFrame::new(data, LittleEndian);
    let fde = eh_frame
        .fde_from_offset(bases, EhFrameOffset(fde_offset), EhFrame::cie_from_offset)
        .map_err(dwarf)?;
    let encoding = fde.cie().encoding();
    let mut ctx = Box::new(UnwindContext::new());
    let row = fde
        .unwind_info_for_address(&eh_frame, bases, &mut ctx, link_pc)
        .map_err(dwarf)?;
    let mut inputs = Inputs {
        regs,
        relocation,
        read,
        fde_offset,
    };
    let cfa = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => {
            inputs.register(*register)?.wrapping_add_signed(*offset)
        }
        CfaRule::Expression(expression) => {
            let expression = expression.get(&eh_frame).map_err(dwarf)?;
            evaluate_expression(expression, encoding, None, &mut inputs, RuleOf::Cfa)?
        }
    };
    let recover = |rule: &RegisterRule<usize>,
                   current: u64,
                   inputs: &mut Inputs<'_>,
                   of: RuleOf|
     -> Result<Option<u64>, CfiError> {
        Ok(Some(match rule {
            RegisterRule::Undefined => return Ok(None),
            RegisterRule::SameValue => current,
            RegisterRule::Offset(n) => inputs.load(cfa.wrapping_add_signed(*n))?,
            RegisterRule::ValOffset(n) => cfa.wrapping_add_signed(*n),
            RegisterRule::Register(r) => inputs.register(*r)?,
            RegisterRule::Expression(e) => {
                let e = e.get(&eh_frame).map_err(dwarf)?;
                let addr = evaluate_expression(e, encoding, Some(cfa), inputs, of)?;
                inputs.load(addr)?
            }
            RegisterRule::ValExpression(e) => {
                let e = e.get(&eh_frame).map_err(dwarf)?;
                evaluate_expression(e, encoding, Some(cfa), inputs, of)?
            }
            RegisterRule::Constant(c) => *c,
            RegisterRule::Architectural => {
                return Err(CfiError::UnsupportedExpression {
                    fde_offset,
                    what: of,
                })
            }
        }))
    };
    let ip = match row.register(X86_64::RA) {
        None | Some(RegisterRule::Architectural) => {
            return Err(CfiError::NoReturnAddressRule { fde_offset })
        }
        Some(rule) => match recover(&rule, regs.ip, &mut inputs, RuleOf::Register(X86_64::RA.0))? {
            Some(ip) => ip,
            None => return Ok(CfiStep::Outermost),
        },
    };
    // Registers without a rule keep their value (the CFA is the caller's
    // stack pointer by definition); an undefined one is not known, and
    // keeping the old value is what the frame-pointer fallback would do.
    let fp = match row.register(X86_64::RBP) {
        None => regs.fp,
        // A slot below the stack pointer was popped: the register holds
        // the caller's value again.
        Some(RegisterRule::Offset(n))
            if crate::unwind::saved_below_sp(cfa.wrapping_add_signed(n), regs.sp) =>
        {
            regs.fp
        }
        Some(rule) => recover(&rule, regs.fp, &mut inputs, RuleOf::Register(X86_64::RBP.0))?
            .unwrap_or(regs.fp),
    };
    // rbx where it can be known; a rule that cannot be followed leaves it
    // unknown, never the step undone.
    let bx = match row.register(X86_64::RBX) {
        None | Some(RegisterRule::SameValue) => regs.bx,
        Some(RegisterRule::Offset(n))
            if crate::unwind::saved_below_sp(cfa.wrapping_add_signed(n), regs.sp) =>
        {
            regs.bx
        }
        Some(rule) => recover(
            &rule,
            regs.bx.unwrap_or(0),
            &mut inputs,
            RuleOf::Register(X86_64::RBX.0),
        )
        .ok()
        .flatten(),
    };
    let sp = match row.register(X86_64::RSP) {
        None => cfa,
        Some(rule) => {
            recover(&rule, regs.sp, &mut inputs, RuleOf::Register(X86_64::RSP.0))?.unwrap_or(cfa)
        }
    };
    Ok(CfiStep::Caller {
        regs: Regs { ip, sp, fp, bx },
        interrupted: fde.is_signal_trampoline(),
    })
}

/// Runs one DWARF expression of an unwind rule: registers and memory come
/// from `inputs`; a register rule's expression starts with the CFA pushed.
fn evaluate_expression(
    expression: gimli::Expression<gimli::EndianSlice<'_, LittleEndian>>,
    encoding: gimli::Encoding,
    initial: Option<u64>,
    inputs: &mut Inputs<'_>,
    of: RuleOf,
) -> Result<u64, CfiError> {
    let fde_offset = inputs.fde_offset;
    let dwarf = |source| CfiError::Dwarf { fde_offset, source };
    let unsupported = CfiError::UnsupportedExpression {
        fde_offset,
        what: of,
    };
    let mut eval = expression.evaluation(encoding);
    eval.set_max_iterations(MAX_EXPRESSION_STEPS);
    if let Some(value) = initial {
        eval.set_initial_value(value);
    }
    let mut result = eval.evaluate().map_err(dwarf)?;
    loop {
        result = match result {
            EvaluationResult::Complete => break,
            EvaluationResult::RequiresRegister { register, .. } => {
                let value = inputs.register(register)?;
                eval.resume_with_register(Value::Generic(value))
            }
            EvaluationResult::RequiresMemory { address, size, .. } => {
                let word = inputs.load(address)?;
                let value = match size {
                    1..=7 => word & ((1u64 << (u32::from(size) * 8)) - 1),
                    _ => word,
                };
                eval.resume_with_memory(Value::Generic(value))
            }
            EvaluationResult::RequiresRelocatedAddress(addr) => {
                eval.resume_with_relocated_address(addr.wrapping_add(inputs.relocation))
            }
            _ => return Err(unsupported),
        }
        .map_err(dwarf)?;
    }
    match eval.as_result() {
        [piece] => match piece.location {
            Location::Address { address } => Ok(address),
            Location::Value { value } => value.to_u64(u64::MAX).map_err(dwarf),
            _ => Err(unsupported),
        },
        _ => Err(unsupported),
    }
}
