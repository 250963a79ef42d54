//! JIT unwind tables: the codectl `struct code_jit_unwind_table` chain.
//!
//! A JIT registers a text range once and then describes the code it emits
//! by appending rows to a table in its own memory, without a system call:
//!
//! ```text
//! struct code_jit_unwind_table {       offset
//!     u64 reserved_len;                0   bytes of fre[] allocated
//!     u64 used_len;                    8   bytes of fre[] published (store-release)
//!     u64 next;                        16  next table in the chain, or 0
//!     u32 fre_stride;                  24  bytes from one row to the next
//!     u32 fre_size;                    28  bytes of each row that are meaningful
//!     char fre[];                      32  rows: struct code_jit_unwind_fre
//! };
//! ```
//!
//! Rows are appended in increasing address order without overlap, and the
//! tables of a chain follow each other in address order. The writer stores
//! a row and then publishes it by a store-release of `used_len`; readers
//! load `used_len` and then read only the rows below it.
//!
//! [`JitUnwindTable`] is the writer side for a JIT written in Rust.
//! [`JitRows`] is the reader side: it reads a chain through
//! [`process_vm_readv`](crate::memory::ProcessMemory) (of this process or
//! another one), validates every field, keeps what it has read and reads
//! only the new rows when an address is not yet covered.

use std::alloc::Layout;
use std::collections::HashSet;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::ArcSwap;

use crate::memory::{Memory, ProcessMemory};
use crate::row::{RowTable, UnwindRow, ROW_KNOWN_BITS};

/// Bytes of the table header before `fre[]`.
pub const TABLE_HEADER_LEN: usize = 32;
/// Meaningful bytes of a version-1 row (through `info`).
pub const FRE_SIZE: u32 = 21;
/// The natural stride of a version-1 row (`sizeof(struct code_jit_unwind_fre)`).
pub const FRE_STRIDE: u32 = 24;
/// Largest stride accepted from a table.
pub const MAX_FRE_STRIDE: u32 = 4096;
/// Most tables followed in one chain.
pub const MAX_TABLES: usize = 65_536;
/// Most rows kept for one registration.
pub const MAX_ROWS: usize = 1 << 24;
/// Bytes of `fre[]` read per system call.
const READ_CHUNK: usize = 64 * 1024;

/// What the table builder refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JitTableError {
    /// The table has no room left; chain a new one.
    #[error("the unwind table is full ({capacity} rows)")]
    Full {
        /// Rows the table holds.
        capacity: usize,
    },
    /// The row starts before the end of the last row appended.
    #[error("row at offset {ip_off:#x} starts before the previous row's end {prev_end:#x}")]
    Unsorted {
        /// The rejected row's start.
        ip_off: u32,
        /// The previous row's end.
        prev_end: u64,
    },
    /// The row covers no bytes, or has `info` bits without a meaning.
    #[error("row is not valid: {0}")]
    BadRow(&'static str),
    /// The table already has a successor: rows go to the last table.
    #[error("the table is already chained; append to the last table")]
    AlreadyChained,
    /// The table cannot be chained as asked.
    #[error("cannot chain: {0}")]
    BadChain(&'static str),
}

#[repr(C)]
struct Header {
    reserved_len: u64,
    used_len: AtomicU64,
    next: AtomicU64,
    fre_stride: u32,
    fre_size: u32,
}

struct WriterState {
    rows: usize,
    /// Where the last row ends; a chained table starts from its
    /// predecessor's, so the chain stays sorted.
    prev_end: u64,
    /// A table with a successor takes no more rows.
    chained: bool,
}

/// A JIT unwind table owned by a JIT written in Rust: the codectl layout in
/// memory that stays put, with a safe append.
///
/// Register it with [`JitCode::with_table`](crate::JitCode::with_table); the
/// registry keeps the table alive while it is registered.
pub struct JitUnwindTable {
    ptr: NonNull<u8>,
    layout: Layout,
    capacity: usize,
    writer: Mutex<WriterState>,
    next: OnceLock<Arc<JitUnwindTable>>,
}

// SAFETY: the memory behind `ptr` is only written through `push` and
// `chain`, which serialise on `writer`/`next`; bytes are written before
// `used_len` publishes them (release) and readers never look past
// `used_len`. The header words that change are atomics.
unsafe impl Send for JitUnwindTable {}
// SAFETY: as for Send; shared references only read published bytes or use
// the atomics.
unsafe impl Sync for JitUnwindTable {}

impl std::fmt::Debug for JitUnwindTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JitUnwindTable")
            .field("address", &format_args!("{:#x}", self.address()))
            .field("capacity", &self.capacity)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

impl JitUnwindTable {
    /// A table with room for `capacity` rows.
    ///
    /// # Panics
    /// If the size overflows `isize` (a capacity beyond any memory).
    #[must_use]
    pub fn with_capacity(capacity: usize) -> Self {
        let bytes = capacity
            .checked_mul(FRE_STRIDE as usize)
            .and_then(|b| b.checked_add(TABLE_HEADER_LEN))
            .expect("JIT table capacity overflows");
        let layout = Layout::from_size_align(bytes, 8).expect("JIT table layout");
        // SAFETY: the layout is non-zero (the header alone is 32 bytes).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout)
        };
        let table = Self {
            ptr,
            layout,
            capacity,
            writer: Mutex::new(WriterState {
                rows: 0,
                prev_end: 0,
                chained: false,
            }),
            next: OnceLock::new(),
        };
        let header = table.header_ptr();
        // SAFETY: `header` points at the start of our zeroed, 8-aligned
        // allocation, large enough for a Header; nobody else sees it yet.
        unsafe {
            (*header).reserved_len = (capacity * FRE_STRIDE as usize) as u64;
            (*header).fre_stride = FRE_STRIDE;
            (*header).fre_size = FRE_SIZE;
        }
        table
    }

    fn header_ptr(&self) -> *mut Header {
        self.ptr.as_ptr().cast()
    }

    fn header(&self) -> &Header {
        // SAFETY: the header lives as long as `self`; the fields that change
        // after construction are atomics.
        unsafe { &*self.header_ptr() }
    }

    /// The table's address, for `unwind_head` or another table's `next`.
    #[must_use]
    pub fn address(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// Rows published so far.
    #[must_use]
    pub fn len(&self) -> usize {
        (self.header().used_len.load(Ordering::Acquire) / u64::from(FRE_STRIDE)) as usize
    }

    /// Whether no row is published.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rows the table can hold.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Appends `row` (its `ip_off` counts from the registered text start)
    /// and publishes it.
    pub fn push(&self, row: UnwindRow) -> Result<(), JitTableError> {
        if row.size == 0 {
            return Err(JitTableError::BadRow("size is 0"));
        }
        if row.info & !ROW_KNOWN_BITS != 0 {
            return Err(JitTableError::BadRow("info has undefined bits"));
        }
        let mut w = self.writer_state();
        if w.chained {
            return Err(JitTableError::AlreadyChained);
        }
        if w.rows == self.capacity {
            return Err(JitTableError::Full {
                capacity: self.capacity,
            });
        }
        if u64::from(row.ip_off) < w.prev_end {
            return Err(JitTableError::Unsorted {
                ip_off: row.ip_off,
                prev_end: w.prev_end,
            });
        }
        let at = TABLE_HEADER_LEN + w.rows * FRE_STRIDE as usize;
        // SAFETY: `at + 24 <= layout.size()` because rows < capacity; the
        // slot is above `used_len`, so no reader looks at it; `UnwindRow` is
        // repr(C) with the FRE layout; the write is unaligned-safe.
        unsafe {
            self.ptr
                .as_ptr()
                .add(at)
                .cast::<UnwindRow>()
                .write_unaligned(row);
        }
        w.rows += 1;
        w.prev_end = row.end_off();
        self.header()
            .used_len
            .store((w.rows * FRE_STRIDE as usize) as u64, Ordering::Release);
        Ok(())
    }

    fn writer_state(&self) -> std::sync::MutexGuard<'_, WriterState> {
        self.writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Links `next`, an empty table, after this one; the chain keeps it
    /// alive. This table then takes no more rows, and `next` takes only
    /// rows after this one's last, so the chain stays sorted.
    pub fn chain(&self, next: Arc<JitUnwindTable>) -> Result<(), JitTableError> {
        if std::ptr::eq(self, Arc::as_ptr(&next)) {
            return Err(JitTableError::BadChain("a table cannot follow itself"));
        }
        // One lock at a time (never both), so no two chain calls can
        // deadlock: claim this table first, then check the next one.
        let end = {
            let mut w = self.writer_state();
            if w.chained {
                return Err(JitTableError::AlreadyChained);
            }
            w.chained = true;
            w.prev_end
        };
        {
            let mut n = next.writer_state();
            if n.rows != 0 || n.chained {
                drop(n);
                self.writer_state().chained = false;
                return Err(JitTableError::BadChain(
                    "the next table must be empty and unchained",
                ));
            }
            n.prev_end = end;
        }
        let addr = next.address();
        // Cannot fail: `chained` was false, so `next` was never set.
        let _ = self.next.set(next);
        self.header().next.store(addr, Ordering::Release);
        Ok(())
    }
}

impl Drop for JitUnwindTable {
    fn drop(&mut self) {
        // SAFETY: allocated in `with_capacity` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// Something wrong in a JIT table, found by the reader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JitProblem {
    /// Address of the table.
    pub table: u64,
    /// The field or row concerned.
    pub field: &'static str,
    /// What was wrong and what the reader did about it.
    pub detail: String,
}

impl std::fmt::Display for JitProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "JIT unwind table at {:#x}: {}: {}",
            self.table, self.field, self.detail
        )
    }
}

#[derive(Debug, Default)]
struct Cursor {
    /// Bytes of `fre[]` consumed per table address.
    consumed: std::collections::HashMap<u64, u64>,
    /// Tables that failed validation as a whole.
    rejected: HashSet<u64>,
    /// Tables whose partial last row was reported.
    partial_noted: HashSet<u64>,
    rows: Vec<UnwindRow>,
    prev_end: u64,
    problems: Vec<JitProblem>,
    /// Rows looked at in the current pass, good or bad.
    scanned: usize,
    /// Every table reached so far, for loops and the table bound.
    seen: HashSet<u64>,
    /// The last table reached: the next pass starts there. Rows are only
    /// ever appended to the last table of a chain (each chained table
    /// continues where the previous one ends), so the tables before it
    /// have nothing new, and re-reading their headers on every miss would
    /// make a chain of n tables cost O(n) system calls per refresh.
    resume: Option<u64>,
}

const MAX_PROBLEMS: usize = 64;

/// The reader's view of one JIT registration's table chain.
#[derive(Debug)]
pub struct JitRows {
    pid: u32,
    text_start: u64,
    text_len: u64,
    head: u64,
    snapshot: ArcSwap<Segments>,
    cursor: Mutex<Cursor>,
    /// No more rows are read: the registration is gone, and its table's
    /// memory may describe other code now ([`JitRows::freeze`]).
    frozen: std::sync::atomic::AtomicBool,
}

/// The rows read so far, as tables of about halving sizes (newest last)
/// rather than one table: a refresh that finds new rows builds a table of
/// those alone and merges only the small tables at the end, so a JIT that
/// publishes one function at a time costs O(log n) copied rows per
/// function, not O(n). Rows are validated in address order, so the tables
/// are disjoint and sorted.
#[derive(Debug, Default)]
struct Segments {
    tables: Vec<Arc<RowTable>>,
    /// Where each table's first row starts.
    starts: Vec<u64>,
}

impl Segments {
    fn find(&self, pc: u64) -> Option<&UnwindRow> {
        let i = self.starts.partition_point(|&s| s <= pc);
        self.tables.get(i.checked_sub(1)?)?.find(pc)
    }

    /// These segments and a table of `rows` after them.
    fn appended(&self, text_start: u64, rows: &[UnwindRow]) -> Segments {
        let mut tables = self.tables.clone();
        let table = table_of(text_start, rows.iter());
        // An empty table (rows of size 0 are dropped) would break the
        // order of `starts`.
        if !table.is_empty() {
            tables.push(Arc::new(table));
        }
        // Merge while the newest table is at least half its neighbour:
        // each row is then copied O(log n) times over all refreshes.
        while let [.., older, newer] = tables.as_slice() {
            if newer.len() * 2 < older.len() {
                break;
            }
            let merged = table_of(text_start, older.rows().iter().chain(newer.rows()));
            tables.truncate(tables.len() - 2);
            tables.push(Arc::new(merged));
        }
        let starts = tables
            .iter()
            .map(|t| {
                t.rows()
                    .first()
                    .map_or(u64::MAX, |r| t.base() + u64::from(r.ip_off))
            })
            .collect();
        Segments { tables, starts }
    }
}

/// A table of rows already validated sorted and inside the text range.
fn table_of<'a>(text_start: u64, rows: impl Iterator<Item = &'a UnwindRow>) -> RowTable {
    let mut table = RowTable::new(text_start);
    for row in rows {
        let _ = table.push(text_start + u64::from(row.ip_off), *row);
    }
    table
}

impl JitRows {
    /// A reader for the chain at `head` describing `[text_start, text_end)`
    /// in process `pid`. Nothing is read until the first lookup or
    /// [`Self::refresh`].
    #[must_use]
    pub fn new(pid: u32, text_start: u64, text_end: u64, head: u64) -> Self {
        Self {
            pid,
            text_start,
            text_len: text_end.saturating_sub(text_start),
            head,
            snapshot: ArcSwap::from_pointee(Segments::default()),
            cursor: Mutex::new(Cursor::default()),
            frozen: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Keeps the rows read so far and reads no more: for a registration
    /// that is gone, whose code a profiler still unwinds in samples taken
    /// before it went, while its table's memory may already describe the
    /// code put in its place.
    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::Release);
    }

    /// Whether [`Self::freeze`] was called.
    #[must_use]
    pub fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::Acquire)
    }

    /// The row for `pc`. If the rows read so far do not cover it, reads
    /// what was published since — unless another thread is reading, in
    /// which case this lookup does not wait and answers from what it has.
    #[must_use]
    pub fn find(&self, pc: u64) -> Option<UnwindRow> {
        if let Some(row) = self.snapshot.load().find(pc) {
            return Some(*row);
        }
        if pc.wrapping_sub(self.text_start) >= self.text_len || self.is_frozen() {
            return None;
        }
        if let Ok(mut cursor) = self.cursor.try_lock() {
            if self.refresh_locked(&mut cursor) {
                return self.snapshot.load().find(pc).copied();
            }
        }
        None
    }

    /// Reads rows published since the last read (none once frozen).
    /// Returns whether new rows were found.
    pub fn refresh(&self) -> bool {
        if self.is_frozen() {
            return false;
        }
        let mut cursor = self
            .cursor
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.refresh_locked(&mut cursor)
    }

    /// The rows read so far, as one table.
    #[must_use]
    pub fn rows(&self) -> Arc<RowTable> {
        let snapshot = self.snapshot.load();
        match snapshot.tables.as_slice() {
            [] => Arc::new(RowTable::new(self.text_start)),
            [only] => Arc::clone(only),
            tables => Arc::new(table_of(
                self.text_start,
                tables.iter().flat_map(|t| t.rows()),
            )),
        }
    }

    /// Problems found in the chain so far (at most 64 are kept).
    #[must_use]
    pub fn problems(&self) -> Vec<JitProblem> {
        self.cursor
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .problems
            .clone()
    }

    fn refresh_locked(&self, cursor: &mut Cursor) -> bool {
        let mut memory = ProcessMemory::new(self.pid);
        let before = cursor.rows.len();
        read_chain(&mut memory, self.head, self.text_len, cursor);
        if cursor.rows.len() == before {
            return false;
        }
        let next = self
            .snapshot
            .load()
            .appended(self.text_start, &cursor.rows[before..]);
        self.snapshot.store(Arc::new(next));
        true
    }
}

fn note(cursor: &mut Cursor, table: u64, field: &'static str, detail: String) {
    if cursor.problems.len() < MAX_PROBLEMS {
        cursor.problems.push(JitProblem {
            table,
            field,
            detail,
        });
    }
}

/// Reads the chain at `head` into `cursor`, continuing where it stopped.
fn read_chain(memory: &mut dyn Memory, head: u64, text_len: u64, cursor: &mut Cursor) {
    let mut addr = cursor.resume.unwrap_or(head);
    // The table this pass resumes at was reached before; any other table
    // reached twice closes a loop.
    let mut resumed = cursor.resume.is_some();
    cursor.scanned = 0;
    while addr != 0 {
        if !std::mem::take(&mut resumed) && !cursor.seen.insert(addr) {
            note(
                cursor,
                addr,
                "next",
                "the chain loops back to this table; stopped".into(),
            );
            return;
        }
        if cursor.seen.len() > MAX_TABLES {
            note(
                cursor,
                addr,
                "next",
                format!("more than {MAX_TABLES} tables; stopped"),
            );
            return;
        }
        cursor.resume = Some(addr);
        let mut raw = [0u8; TABLE_HEADER_LEN];
        if memory.read(addr, &mut raw).is_err() {
            note(cursor, addr, "header", "unreadable; stopped".into());
            return;
        }
        // One copy may take `used_len` (offset 8) before `next` (offset
        // 16), while the writer publishes its last rows, then `next`. Once
        // `next` is seen set, a second read gets the final `used_len`: this
        // pass leaves the table for good (the next starts past it).
        if raw[16..24] != [0; 8] {
            std::sync::atomic::fence(Ordering::Acquire);
            if memory.read(addr, &mut raw).is_err() {
                note(cursor, addr, "header", "unreadable; stopped".into());
                return;
            }
        }
        let u64_at = |o: usize| u64::from_le_bytes(raw[o..o + 8].try_into().unwrap_or([0; 8]));
        let u32_at = |o: usize| u32::from_le_bytes(raw[o..o + 4].try_into().unwrap_or([0; 4]));
        let (reserved, used, next) = (u64_at(0), u64_at(8), u64_at(16));
        let (stride, size) = (u32_at(24), u32_at(28));
        // Rows below `used_len` were written before it was published (the
        // writer's store-release). The reads are system calls made in
        // order, and x86-64 does not reorder loads; the fence states the
        // intent and orders this thread's later reads.
        std::sync::atomic::fence(Ordering::Acquire);
        if !cursor.rejected.contains(&addr) {
            let problem = if size < FRE_SIZE {
                Some((
                    "fre_size",
                    format!("{size} is smaller than a row ({FRE_SIZE} bytes)"),
                ))
            } else if stride < size {
                Some((
                    "fre_stride",
                    format!("{stride} is smaller than fre_size {size}"),
                ))
            } else if stride > MAX_FRE_STRIDE {
                Some((
                    "fre_stride",
                    format!("{stride} is larger than {MAX_FRE_STRIDE}"),
                ))
            } else if used > reserved {
                Some((
                    "used_len",
                    format!("{used} is beyond reserved_len {reserved}"),
                ))
            } else {
                None
            };
            if let Some((field, detail)) = problem {
                note(cursor, addr, field, format!("{detail}; table ignored"));
                cursor.rejected.insert(addr);
            } else if !read_rows(memory, addr, used, stride, text_len, cursor) {
                // Rows after these would be taken for unsorted ones: stop
                // here and continue from this table next time.
                return;
            }
        }
        addr = next;
    }
}

fn read_rows(
    memory: &mut dyn Memory,
    table: u64,
    used: u64,
    stride: u32,
    text_len: u64,
    cursor: &mut Cursor,
) -> bool {
    let stride64 = u64::from(stride);
    let whole = used - used % stride64;
    let mut done = *cursor.consumed.get(&table).unwrap_or(&0);
    let per_chunk = (READ_CHUNK / stride as usize).max(1) as u64 * stride64;
    let mut buf = Vec::new();
    while done < whole {
        if cursor.rows.len() >= MAX_ROWS {
            note(
                cursor,
                table,
                "used_len",
                format!("more than {MAX_ROWS} rows; rest ignored"),
            );
            return false;
        }
        if cursor.scanned >= 2 * MAX_ROWS {
            note(
                cursor,
                table,
                "used_len",
                format!(
                    "more than {} rows looked at in one pass; stopped",
                    2 * MAX_ROWS
                ),
            );
            return false;
        }
        let n = per_chunk.min(whole - done);
        buf.resize(n as usize, 0);
        let Some(at) =
            (table.checked_add(TABLE_HEADER_LEN as u64)).and_then(|rows| rows.checked_add(done))
        else {
            return false;
        };
        if memory.read(at, &mut buf).is_err() {
            note(
                cursor,
                table,
                "fre",
                format!("rows at {at:#x} unreadable; will retry"),
            );
            return false;
        }
        for (i, raw) in buf.chunks_exact(stride as usize).enumerate() {
            let f32_at = |o: usize| u32::from_le_bytes(raw[o..o + 4].try_into().unwrap_or([0; 4]));
            let row = UnwindRow {
                size: f32_at(0),
                ip_off: f32_at(4),
                cfa_off: f32_at(8).cast_signed(),
                ra_off: f32_at(12).cast_signed(),
                fp_off: f32_at(16).cast_signed(),
                info: raw[20],
            };
            let index = (done / stride64) as usize + i;
            let bad = if row.size == 0 {
                Some("size is 0")
            } else if row.info & !ROW_KNOWN_BITS != 0 {
                Some("info has undefined bits")
            } else if row.end_off() > text_len {
                Some("runs past the registered text range")
            } else if u64::from(row.ip_off) < cursor.prev_end {
                Some("starts before the previous row ends (unsorted or overlapping)")
            } else {
                None
            };
            cursor.scanned += 1;
            if let Some(why) = bad {
                if cursor.problems.len() < MAX_PROBLEMS {
                    let detail = format!(
                        "row {index} [{:#x}+{:#x}) {why}; row ignored",
                        row.ip_off, row.size
                    );
                    note(cursor, table, "fre", detail);
                }
            } else {
                cursor.prev_end = row.end_off();
                cursor.rows.push(row);
            }
        }
        done += n;
        cursor.consumed.insert(table, done);
    }
    if !used.is_multiple_of(stride64) && cursor.partial_noted.insert(table) {
        note(
            cursor,
            table,
            "used_len",
            format!("{used} is not a multiple of fre_stride {stride}; partial row ignored"),
        );
    }
    true
}

/// Reads a whole chain once (no cursor kept), for tools and tests: the rows
/// in text-relative offsets and the problems found.
pub fn read_table_chain(
    memory: &mut dyn Memory,
    head: u64,
    text_start: u64,
    text_end: u64,
) -> (RowTable, Vec<JitProblem>) {
    let mut cursor = Cursor::default();
    read_chain(
        memory,
        head,
        text_end.saturating_sub(text_start),
        &mut cursor,
    );
    let mut table = RowTable::new(text_start);
    for row in &cursor.rows {
        let _ = table.push(text_start + u64::from(row.ip_off), *row);
    }
    (table, cursor.problems)
}
