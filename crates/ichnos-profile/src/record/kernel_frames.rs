//! The kernel's frames of samples taken in the kernel: taken from the
//! callchain the kernel gives with each (its own part only), and named by
//! the running kernel's functions.
//!
//! The kernel's addresses move at every boot (KASLR) and its symbol table
//! is only in `/proc/kallsyms` of that boot, so the names are captured
//! by the recorder: each function that the stacks have a frame in is
//! written once (a `KernelSymbol` record). A recording holds the few
//! hundred functions its stacks touch, not the kernel's hundred thousand.
//!
//! The table is read when the recording ends, as perf reads it: reading
//! it costs the kernel about 50 ms of CPU time here (it formats 120,000
//! lines), which at the start would be taken from the program being
//! profiled (1.7% of a two-second run on two CPUs), and which, on the
//! recorder's thread, stalled the draining of the rings long enough for
//! them to overflow. Until then the addresses to name are held, a million
//! at most; that many read the table at once, and it is kept. A recorder
//! killed before its end leaves its kernel frames unnamed.
//!
//! `/proc/kallsyms` gives each symbol's start only: a function ends where
//! the next one starts. Where the kernel hides the addresses
//! (`kernel.kptr_restrict`, or a reader without `CAP_SYSLOG`, sees
//! zeros), kernel frames stay unnamed and a note says why.

use std::collections::HashSet;

use ichnos_data::Record;

use ichnos_perf::record::{CONTEXT_KERNEL, CONTEXT_MAX};

use super::output::Output;

/// Where the table is read from.
const KALLSYMS: &str = "/proc/kallsyms";

/// The least kernel address: the upper half of x86-64's address space.
pub(crate) const KERNEL_HALF: u64 = 1 << 63;

/// The kernel's own frames of a sample's callchain `chain` (taken without
/// its user part: `PERF_CONTEXT_KERNEL`, then kernel addresses, innermost
/// first), up to `max` in `stack`.
pub(crate) fn push_kernel_frames(
    chain: impl Iterator<Item = u64>,
    max: usize,
    stack: &mut Vec<u64>,
) {
    let mut kernel = false;
    for address in chain {
        if address >= CONTEXT_MAX {
            kernel = address == CONTEXT_KERNEL;
            continue;
        }
        // Nothing but kernel addresses: a stack's kernel frames are known
        // by their half of the address space.
        if !kernel || address < KERNEL_HALF || stack.len() >= max {
            break;
        }
        stack.push(address);
    }
}

/// The text symbols of `/proc/kallsyms`: each one's start, end and line,
/// its name and module read from its line only when a frame needs it (a
/// recording names a few hundred of the kernel's hundred thousand).
#[derive(Debug)]
struct Table {
    text: String,
    /// By start, one per address.
    functions: Vec<Function>,
}

/// A function of the table.
#[derive(Clone, Copy, Debug)]
struct Function {
    start: u64,
    /// One past its last byte: where the next function starts.
    end: u64,
    /// Where its name starts in the table's text.
    name_at: usize,
}

/// Where the running kernel's text starts (`_text`, among the first
/// lines of `/proc/kallsyms`), if it shows it: a boot with KASLR moves
/// it, so a recording made elsewhere whose kernel starts there was made
/// on this kernel as it runs now.
pub(crate) fn running_kernel_text() -> Option<u64> {
    use std::io::BufRead;
    let file = std::fs::File::open(KALLSYMS).ok()?;
    std::io::BufReader::new(file)
        .lines()
        .take(1000)
        .map_while(Result::ok)
        .find_map(|line| {
            let mut words = line.split_whitespace();
            let address = u64::from_str_radix(words.next()?, 16).ok()?;
            let kind = words.next()?;
            (matches!(kind, "T" | "t") && words.next()? == "_text").then_some(address)
        })
        .filter(|&address| address != 0)
}

/// The most distinct kernel addresses held until the end; as many read
/// the table at once.
const MAX_WAITING: usize = 1 << 20;

/// The kernel's functions, once read, and those written so far.
#[derive(Debug, Default)]
pub(crate) struct KernelSymbols {
    /// The table once read, or why there is none.
    table: Option<Result<Table, String>>,
    /// Addresses looked up (a frame's, less one for a caller's) until the
    /// table is read.
    waiting: HashSet<u64>,
    /// Starts of the functions written into the recording.
    written: HashSet<u64>,
    /// Kernel addresses (distinct until the table is read) left unnamed.
    pub(crate) unnamed_frames: u64,
}

impl KernelSymbols {
    /// Holds the addresses to name of the kernel frames of `frames` (a
    /// stack as it is stored: innermost first, the first looked up at
    /// itself, the rest minus one); writes the functions they lie in to
    /// `out` where the table is read.
    pub(crate) fn name_frames(&mut self, frames: &[u64], out: &mut Output) {
        let kernel = frames.iter().take_while(|&&f| f >= KERNEL_HALF).count();
        let pcs =
            frames[..kernel]
                .iter()
                .enumerate()
                .map(|(i, &f)| if i == 0 { f } else { f.wrapping_sub(1) });
        if self.table.is_some() {
            for pc in pcs {
                self.name(pc, out);
            }
            return;
        }
        self.waiting.extend(pcs);
        if self.waiting.len() >= MAX_WAITING {
            self.finish(out);
        }
    }

    /// Reads the table, if any frame waits for it, and names the frames
    /// that did.
    pub(crate) fn finish(&mut self, out: &mut Output) {
        if self.waiting.is_empty() {
            return;
        }
        if self.table.is_none() {
            self.table = Some(
                std::fs::read_to_string(KALLSYMS)
                    .map_err(|e| format!("{KALLSYMS} could not be read: {e}"))
                    .and_then(Table::parse),
            );
        }
        for pc in std::mem::take(&mut self.waiting) {
            self.name(pc, out);
        }
    }

    /// Writes the function `pc` lies in, if it is not written yet.
    fn name(&mut self, pc: u64, out: &mut Output) {
        let Some(Ok(table)) = &self.table else {
            self.unnamed_frames += 1;
            return;
        };
        match table.find(pc) {
            Some(f) => {
                if self.written.insert(f.start) {
                    let (name, module) = table.name_of(f);
                    out.meta(&Record::KernelSymbol {
                        start: f.start,
                        end: f.end,
                        module: module.as_bytes(),
                        name: name.as_bytes(),
                    });
                }
            }
            None => self.unnamed_frames += 1,
        }
    }

    /// Why kernel frames went unnamed, if any did.
    pub(crate) fn unnamed_note(&self) -> Option<String> {
        if self.unnamed_frames == 0 {
            return None;
        }
        let why = match &self.table {
            Some(Err(why)) => why.clone(),
            _ => format!("they lie in no function {KALLSYMS} lists"),
        };
        Some(format!(
            "kernel frames at {} addresses are shown by address: {why}",
            self.unnamed_frames
        ))
    }
}

/// How much a name is preferred among those of one address, as perf
/// chooses: a global function over a weak one over a local one, then a
/// name with fewer leading underscores (`_text` and `_stext` start where
/// the first function does).
fn preference(kind: u8, name: &[u8]) -> (u8, usize) {
    let binding = match kind {
        b'T' => 0,
        b'W' | b'w' => 1,
        _ => 2,
    };
    (binding, name.iter().take_while(|&&b| b == b'_').count())
}

/// The words of a line, split at spaces and tabs, with where each starts.
fn words(line: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || {
        while at < line.len() && matches!(line[at], b' ' | b'\t') {
            at += 1;
        }
        let start = at;
        while at < line.len() && !matches!(line[at], b' ' | b'\t') {
            at += 1;
        }
        (at > start).then(|| (start, &line[start..at]))
    })
}

impl Table {
    /// The functions of `/proc/kallsyms` text `text` (lines of `address
    /// type name [module]`), one per address, each ending where the next
    /// starts. `Err` where it lists none, or where it shows every address
    /// as zero (hidden from this reader).
    fn parse(text: String) -> Result<Self, String> {
        // (start, preference, where the name starts)
        let mut all: Vec<(u64, (u8, usize), usize)> = Vec::new();
        let mut hidden = 0usize;
        let mut line_at = 0;
        for line in text.as_bytes().split(|&b| b == b'\n') {
            let at = line_at;
            line_at += line.len() + 1;
            let mut w = words(line);
            let (Some((_, address)), Some((_, kind)), Some((name_at, name))) =
                (w.next(), w.next(), w.next())
            else {
                continue;
            };
            let (&[kind], Ok(address)) = (
                kind,
                std::str::from_utf8(address)
                    .map_err(|_| ())
                    .and_then(|a| u64::from_str_radix(a, 16).map_err(|_| ())),
            ) else {
                continue;
            };
            if !matches!(kind, b't' | b'T' | b'w' | b'W') {
                continue;
            }
            if address == 0 {
                hidden += 1;
                continue;
            }
            all.push((address, preference(kind, name), at + name_at));
        }
        if all.is_empty() {
            return Err(if hidden > 0 {
                let restrict = std::fs::read_to_string("/proc/sys/kernel/kptr_restrict")
                    .map_or_else(|_| "unreadable".to_owned(), |s| s.trim().to_owned());
                format!(
                    "{KALLSYMS} hides the kernel's addresses from this recorder \
                     (kernel.kptr_restrict is {restrict}: root sees them where it is 0 or 1)"
                )
            } else {
                format!("{KALLSYMS} lists no kernel function")
            });
        }
        all.sort_unstable_by_key(|&(address, preference, _)| (address, preference));
        all.dedup_by_key(|&mut (address, ..)| address);
        let ends: Vec<u64> = all
            .iter()
            .skip(1)
            .map(|&(address, ..)| address)
            // The last one's end is not known: a page.
            .chain(std::iter::once(all[all.len() - 1].0.saturating_add(4096)))
            .collect();
        let functions = all
            .into_iter()
            .zip(ends)
            .map(|((start, _, name_at), end)| Function {
                start,
                end,
                name_at,
            })
            .collect();
        Ok(Self { text, functions })
    }

    /// The function `pc` lies in.
    fn find(&self, pc: u64) -> Option<Function> {
        let i = self.functions.partition_point(|f| f.start <= pc);
        let f = *self.functions.get(i.checked_sub(1)?)?;
        (pc < f.end).then_some(f)
    }

    /// The name and module (empty: the kernel itself) of `f`.
    fn name_of(&self, f: Function) -> (&str, &str) {
        let line = self.text[f.name_at..].lines().next().unwrap_or("");
        let mut words = line.split_whitespace();
        let name = words.next().unwrap_or("");
        let module = words
            .next()
            .and_then(|m| m.strip_prefix('[')?.strip_suffix(']'))
            .unwrap_or("");
        (name, module)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
ffffffff81000000 T srso_alias_untrain_ret
ffffffff81000000 T _stext
ffffffff81000000 t _text
ffffffff81000040 t local_one
ffffffff81000040 W weak_one
ffffffff81000100 D some_data
ffffffff81000200 T vfs_read
ffffffffc0000000 t ext4_read [ext4]
";

    #[test]
    fn each_address_is_one_function_that_ends_where_the_next_starts() {
        let table = Table::parse(TABLE.to_owned()).unwrap();
        let names: Vec<(&str, u64, u64, &str)> = table
            .functions
            .iter()
            .map(|&f| {
                let (name, module) = table.name_of(f);
                (name, f.start, f.end, module)
            })
            .collect();
        assert_eq!(
            names,
            [
                // A global name without leading underscores is chosen.
                (
                    "srso_alias_untrain_ret",
                    0xffff_ffff_8100_0000,
                    0xffff_ffff_8100_0040,
                    ""
                ),
                // A weak name over a local one.
                ("weak_one", 0xffff_ffff_8100_0040, 0xffff_ffff_8100_0200, ""),
                // Data is no function, and does not end the one before.
                ("vfs_read", 0xffff_ffff_8100_0200, 0xffff_ffff_c000_0000, ""),
                (
                    "ext4_read",
                    0xffff_ffff_c000_0000,
                    0xffff_ffff_c000_1000,
                    "ext4"
                ),
            ]
        );
        let find_name = |pc| table.find(pc).map(|f| table.name_of(f).0);
        assert_eq!(find_name(0xffff_ffff_8100_0041), Some("weak_one"));
        assert_eq!(find_name(0xffff_ffff_8100_01ff), Some("weak_one"));
        assert_eq!(find_name(0xffff_ffff_8100_0200), Some("vfs_read"));
        assert_eq!(find_name(0xffff_ffff_80ff_ffff), None);
        assert_eq!(find_name(0xffff_ffff_c000_1000), None);
    }

    #[test]
    fn only_the_kernel_part_of_a_callchain_is_taken() {
        let k = |n: u64| 0xffff_ffff_8100_0000 + n;
        let frames = |chain: &[u64], max: usize| {
            let mut stack = vec![];
            push_kernel_frames(chain.iter().copied(), max, &mut stack);
            stack
        };
        let user = ichnos_perf::record::CONTEXT_USER;
        assert_eq!(
            frames(&[CONTEXT_KERNEL, k(1), k(2), user, 0x4000], 64),
            [k(1), k(2)]
        );
        assert_eq!(frames(&[CONTEXT_KERNEL, k(1), k(2), k(3)], 2), [k(1), k(2)]);
        // A user address after the marker ends them; a user part first
        // has none.
        assert_eq!(frames(&[CONTEXT_KERNEL, k(1), 0x4000, k(2)], 64), [k(1)]);
        assert!(frames(&[user, 0x4000, k(1)], 64).is_empty());
        assert!(frames(&[], 64).is_empty());
    }

    #[test]
    fn addresses_hidden_as_zero_are_no_table() {
        let parse = |text: &str| Table::parse(text.to_owned());
        let hidden = "0000000000000000 T _stext\n0000000000000000 t vfs_read\n";
        let why = parse(hidden).unwrap_err();
        assert!(why.contains("hides the kernel's addresses"), "{why}");
        assert!(parse("").unwrap_err().contains("lists no kernel function"));
        // Lines of another shape are passed over.
        let odd =
            "zz T bad\nffffffff81000000 TT bad\nffffffff81000000\n\tffffffff81000000\tT  good\t[m]";
        let table = parse(odd).unwrap();
        assert_eq!(table.functions.len(), 1);
        assert_eq!(table.name_of(table.functions[0]), ("good", "m"));
    }
}
