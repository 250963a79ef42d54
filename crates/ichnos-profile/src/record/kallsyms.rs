//! The running kernel's table of functions, from `/proc/kallsyms`, and a
//! copy of it kept for the boot.
//!
//! `/proc/kallsyms` gives each symbol's start only: a function ends where
//! the next one starts. Where the kernel hides the addresses
//! (`kernel.kptr_restrict`, or a reader without `CAP_SYSLOG`, sees
//! zeros), there is no table.
//!
//! Reading it costs the kernel 40 to 50 ms of CPU time here (it formats
//! 120,000 lines) and parsing it 20 ms more, on every recording and
//! every report of a perf.data file that has kernel frames: four times
//! what reporting a 50 MB perf.data file takes otherwise. So the table
//! parsed is kept in the cache directory (`$XDG_CACHE_HOME/ichnos/kernel`,
//! else `~/.cache/ichnos/kernel`), one file for the boot and the modules
//! loaded (`/proc/sys/kernel/random/boot_id`, and each module's name and
//! address in `/proc/modules`), read back in a few milliseconds. The
//! copy is checked as untrusted input; one that does not check out is
//! read again from the kernel.

use std::path::{Path, PathBuf};

/// Where the table is read from.
pub(crate) const KALLSYMS: &str = "/proc/kallsyms";

/// The first bytes of a kept copy of the table.
const MAGIC: &[u8; 16] = b"ichnos kallsyms1";

/// The largest kept copy read back (a kernel's table takes about 6 MB).
const MAX_COPY: u64 = 256 << 20;

/// The text symbols of `/proc/kallsyms`: each one's start, end and line,
/// its name and module read from its line only when a frame needs it (a
/// recording names a few hundred of the kernel's hundred thousand).
#[derive(Debug)]
pub(crate) struct Table {
    text: String,
    /// By start, one per address.
    functions: Vec<Function>,
}

/// A function of the table.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Function {
    pub(crate) start: u64,
    /// One past its last byte: where the next function starts.
    pub(crate) end: u64,
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

/// The running kernel's table: the copy kept for this boot in `cache`
/// (the cache directory), else read from the kernel (and kept there).
/// `Err` says why there is none.
pub(crate) fn load(cache: Option<&Path>) -> Result<Table, String> {
    let copy = cache.and_then(|dir| Some(dir.join("kernel").join(copy_name()?)));
    if let Some(table) = copy.as_deref().and_then(read_copy) {
        return Ok(table);
    }
    let table = std::fs::read_to_string(KALLSYMS)
        .map_err(|e| format!("{KALLSYMS} could not be read: {e}"))
        .and_then(Table::parse)?;
    if let Some(copy) = copy {
        keep_copy(&copy, &table);
    }
    Ok(table)
}

/// The name of the copy for this boot and its modules, if the boot has
/// an id.
fn copy_name() -> Option<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let boot = boot.trim();
    if boot.is_empty() || !boot.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
        return None;
    }
    // Each module's name and address: the count of its users changes,
    // not where its functions are.
    let modules = std::fs::read_to_string("/proc/modules").unwrap_or_default();
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for line in modules.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        for word in [words.first(), words.get(5)].into_iter().flatten() {
            for b in word.bytes().chain([b' ']) {
                hash = (hash ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
            }
        }
    }
    Some(format!("kallsyms-{boot}-{hash:016x}"))
}

/// The copy at `path`, if it is there and checks out.
fn read_copy(path: &Path) -> Option<Table> {
    let file = std::fs::File::open(path).ok()?;
    if file.metadata().ok()?.len() > MAX_COPY {
        return None;
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_COPY), &mut bytes).ok()?;
    Table::decode(&bytes)
}

/// Keeps `table` at `path`, written whole under another name and then
/// renamed, the copies of other boots removed. Best effort: a cache that
/// cannot be written is not kept.
fn keep_copy(path: &Path, table: &Table) {
    let Some(dir) = path.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with("kallsyms-") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    let partial = PathBuf::from(format!("{}.{}", path.display(), std::process::id()));
    if std::fs::write(&partial, table.encode()).is_ok() {
        let _ = std::fs::rename(&partial, path);
    }
    let _ = std::fs::remove_file(&partial);
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
    pub(crate) fn parse(text: String) -> Result<Self, String> {
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
    pub(crate) fn find(&self, pc: u64) -> Option<Function> {
        let i = self.functions.partition_point(|f| f.start <= pc);
        let f = *self.functions.get(i.checked_sub(1)?)?;
        (pc < f.end).then_some(f)
    }

    /// The name and module (empty: the kernel itself) of `f`.
    pub(crate) fn name_of(&self, f: Function) -> (&str, &str) {
        let line = self.text[f.name_at..].lines().next().unwrap_or("");
        let mut words = line.split_whitespace();
        let name = words.next().unwrap_or("");
        let module = words
            .next()
            .and_then(|m| m.strip_prefix('[')?.strip_suffix(']'))
            .unwrap_or("");
        (name, module)
    }

    /// The table as a kept copy: [`MAGIC`], the count of functions and
    /// the text's length, each function's start, end and name's place (8
    /// bytes each, little-endian), then the text: one line per function,
    /// its name and `[module]`.
    fn encode(&self) -> Vec<u8> {
        let mut text = String::new();
        let mut places = Vec::with_capacity(self.functions.len());
        for &f in &self.functions {
            let (name, module) = self.name_of(f);
            places.push(text.len());
            text.push_str(name);
            if !module.is_empty() {
                text.push_str(" [");
                text.push_str(module);
                text.push(']');
            }
            text.push('\n');
        }
        let mut out = Vec::with_capacity(32 + self.functions.len() * 24 + text.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(self.functions.len() as u64).to_le_bytes());
        out.extend_from_slice(&(text.len() as u64).to_le_bytes());
        for (f, at) in self.functions.iter().zip(places) {
            for v in [f.start, f.end, at as u64] {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out.extend_from_slice(text.as_bytes());
        out
    }

    /// A kept copy read back, if it checks out: its lengths agree, its
    /// text is UTF-8, its functions are in order and do not overlap, and
    /// each name's place is the start of a line of the text.
    fn decode(bytes: &[u8]) -> Option<Self> {
        let word = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
        };
        if bytes.get(..16)? != MAGIC {
            return None;
        }
        let n = usize::try_from(word(16)?).ok()?;
        let text_len = usize::try_from(word(24)?).ok()?;
        let table_end = n.checked_mul(24)?.checked_add(32)?;
        if table_end.checked_add(text_len)? != bytes.len() || n == 0 {
            return None;
        }
        let text = std::str::from_utf8(&bytes[table_end..]).ok()?.to_owned();
        let mut functions = Vec::with_capacity(n);
        let mut last_end = 0;
        for i in 0..n {
            let at = 32 + i * 24;
            let (start, end) = (word(at)?, word(at + 8)?);
            let name_at = usize::try_from(word(at + 16)?).ok()?;
            let starts_line = name_at == 0 || text.as_bytes().get(name_at - 1) == Some(&b'\n');
            if start < last_end || end <= start || name_at >= text.len() || !starts_line {
                return None;
            }
            last_end = end;
            functions.push(Function {
                start,
                end,
                name_at,
            });
        }
        Some(Self { text, functions })
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

    #[test]
    fn a_kept_copy_reads_back_as_the_table_and_a_damaged_one_not_at_all() {
        let table = Table::parse(TABLE.to_owned()).unwrap();
        let bytes = table.encode();
        let back = Table::decode(&bytes).unwrap();
        let names = |t: &Table| -> Vec<(u64, u64, String, String)> {
            t.functions
                .iter()
                .map(|&f| {
                    let (name, module) = t.name_of(f);
                    (f.start, f.end, name.to_owned(), module.to_owned())
                })
                .collect()
        };
        assert_eq!(names(&back), names(&table));
        assert_eq!(names(&back)[3].3, "ext4");
        // Cut, lengthened, a name's place moved off its line, functions
        // out of order, the magic changed: none is taken.
        let mut damaged: Vec<Vec<u8>> = vec![
            bytes[..bytes.len() - 1].to_vec(),
            [&bytes[..], b"x"].concat(),
            Vec::new(),
        ];
        let mut moved = bytes.clone();
        moved[32 + 16] += 1;
        damaged.push(moved);
        let mut swapped = bytes.clone();
        swapped.copy_within(32..32 + 8, 32 + 24);
        damaged.push(swapped);
        let mut magic = bytes.clone();
        magic[0] ^= 1;
        damaged.push(magic);
        for (i, d) in damaged.iter().enumerate() {
            assert!(Table::decode(d).is_none(), "damage {i} was taken");
        }
        // Every cut of it is refused, never a panic.
        for cut in 0..bytes.len() {
            assert!(Table::decode(&bytes[..cut]).is_none());
        }
    }

    #[test]
    fn the_copy_is_kept_once_and_read_back_in_place_of_the_kernels() {
        let dir = tempfile::tempdir().unwrap();
        let Some(name) = copy_name() else {
            panic!("no boot id in /proc/sys/kernel/random/boot_id");
        };
        let copy = dir.path().join("kernel").join(&name);
        // An older boot's copy is removed when this one's is kept.
        std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
        let old = copy.with_file_name("kallsyms-old-boot");
        std::fs::write(&old, b"old").unwrap();
        let table = Table::parse(TABLE.to_owned()).unwrap();
        keep_copy(&copy, &table);
        assert!(!old.exists());
        // What load reads is the copy (the test's table), not the kernel's.
        let loaded = load(Some(dir.path())).unwrap();
        assert_eq!(loaded.functions.len(), table.functions.len());
        let f = loaded.find(0xffff_ffff_8100_0201).unwrap();
        assert_eq!(loaded.name_of(f), ("vfs_read", ""));
    }
}
