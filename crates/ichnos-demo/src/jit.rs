//! The demo's JIT: one x86-64 function emitted into executable memory at
//! run time, registered with the code registry under a name, with a JIT
//! unwind table describing its frame at every byte.

use std::ops::Range;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use ichnos_code::row::{UnwindRow, ROW_CFA_BASE_SP};
use ichnos_code::{JitCode, JitUnwindTable, Registry};

/// The environment variable that has the demo's JIT code written to
/// `/tmp/perf-PID.map` as it is registered (any value but `0`).
pub const PERF_MAP_SWITCH: &str = "ICHNOS_DEMO_PERF_MAP";

/// The environment variable that has the demo's JIT code written to a
/// jitdump file (for `perf record -k mono` and `perf inject --jit`).
pub const JITDUMP_SWITCH: &str = "ICHNOS_DEMO_JITDUMP";

/// The name the code is registered under (what reports show).
pub const NAME: &str = "jit_hot_loop";

/// `uint64_t jit_hot_loop(uint64_t n, uint64_t (*cb)(uint64_t))`: `n`
/// times, 3,000 rounds of multiply-add on an accumulator, then the
/// callback on it (System V ABI; rbx, r12, r13 saved).
const CODE: &[u8] = &[
    0x53, // 00 push rbx
    0x41, 0x54, // 01 push r12
    0x41, 0x55, // 03 push r13
    0x49, 0x89, 0xfc, // 05 mov r12, rdi
    0x49, 0x89, 0xf5, // 08 mov r13, rsi
    0x31, 0xdb, // 0b xor ebx, ebx
    0xb9, 0xb8, 0x0b, 0x00, 0x00, // 0d mov ecx, 3000
    0x48, 0x69, 0xdb, 0x2d, 0x7f, 0x95, 0x4c, // 12 imul rbx, rbx, 0x4c957f2d
    0x48, 0x83, 0xc3, 0x01, // 19 add rbx, 1
    0xff, 0xc9, // 1d dec ecx
    0x75, 0xf1, // 1f jnz 12
    0x48, 0x89, 0xdf, // 21 mov rdi, rbx
    0x41, 0xff, 0xd5, // 24 call r13
    0x48, 0x01, 0xc3, // 27 add rbx, rax
    0x49, 0xff, 0xcc, // 2a dec r12
    0x75, 0xde, // 2d jnz 0d
    0x48, 0x89, 0xd8, // 2f mov rax, rbx
    0x41, 0x5d, // 32 pop r13
    0x41, 0x5c, // 34 pop r12
    0x5b, // 36 pop rbx
    0xc3, // 37 ret
];

/// The CFA (SP + offset) over each range of the code: the return address
/// is at CFA - 8 throughout.
const FRAME: &[(Range<u32>, i32)] = &[
    (0x00..0x01, 8),
    (0x01..0x03, 16),
    (0x03..0x05, 24),
    (0x05..0x34, 32),
    (0x34..0x36, 24),
    (0x36..0x37, 16),
    (0x37..0x38, 8),
];

/// The generated function.
pub type LoopFn = unsafe extern "C" fn(u64, extern "C" fn(u64) -> u64) -> u64;

/// The emitted code, registered; unregistered and unmapped on drop.
pub struct Jit {
    code: crate::sys::ExecMemory,
    _table: Arc<JitUnwindTable>,
}

impl Jit {
    /// Emits the function and registers it and its unwind rows.
    pub fn emit() -> Result<Jit> {
        let code = crate::sys::ExecMemory::with_code(CODE)
            .context("cannot map memory for the demo's JIT code")?;
        let table = Arc::new(JitUnwindTable::with_capacity(FRAME.len()));
        for (range, cfa) in FRAME {
            table
                .push(UnwindRow {
                    ip_off: range.start,
                    size: range.end - range.start,
                    cfa_off: *cfa,
                    ra_off: -8,
                    fp_off: 0,
                    info: ROW_CFA_BASE_SP,
                })
                .context("JIT unwind table")?;
        }
        let text = code.range();
        if FRAME.last().map(|f| f.0.end as usize) != Some(CODE.len()) {
            bail!("the JIT's rows do not cover its code");
        }
        // For perf and samply, which name JIT frames from perf maps: the
        // registry keeps one written when the environment asks.
        if std::env::var_os(PERF_MAP_SWITCH).is_some_and(|v| v != "0") {
            Registry::global()
                .keep_perf_map(true)
                .context("cannot write the demo's perf map")?;
        }
        if std::env::var_os(JITDUMP_SWITCH).is_some_and(|v| v != "0") {
            Registry::global()
                .keep_jitdump(true)
                .context("cannot write the demo's jitdump file")?;
        }
        Registry::global()
            .register_jit(JitCode::with_table(text, &table).with_name(NAME))
            .context("cannot register the demo's JIT code")?;
        Ok(Jit {
            code,
            _table: table,
        })
    }

    /// The function.
    pub fn function(&self) -> LoopFn {
        // SAFETY: the memory holds CODE, a complete System V function of
        // this signature, executable for as long as `self` lives.
        unsafe { std::mem::transmute::<*const u8, LoopFn>(self.code.ptr()) }
    }
}

impl Drop for Jit {
    fn drop(&mut self) {
        let _ = Registry::global().unregister(self.code.range().start);
    }
}
