//! jitdump files (`jit-PID.dump`, perf's `jitdump-specification.txt`,
//! version 1): code loads, moves and line information written by JIT
//! runtimes.
//!
//! The reader checks every length against the file and names the offset
//! of whatever it cannot read; it never trusts a count or a size.

/// `magic` as written in the JIT's byte order.
const MAGIC: u32 = 0x4A69_5444;
const HEADER_MIN: usize = 40;
/// `JITDUMP_FLAGS_ARCH_TIMESTAMP`: the records' timestamps are the TSC's.
const FLAGS_ARCH_TIMESTAMP: u64 = 1;
const RECORD_HEADER: usize = 16;
const CODE_LOAD: u32 = 0;
const CODE_MOVE: u32 = 1;
const CODE_DEBUG_INFO: u32 = 2;

/// What was wrong in a jitdump file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("jitdump offset {offset:#x}: {what}")]
pub struct JitDumpError {
    /// Byte offset in the file.
    pub offset: usize,
    /// What is wrong there.
    pub what: String,
}

/// A line of JIT code (`JIT_CODE_DEBUG_INFO` entry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JitLine {
    /// First address the line applies to.
    pub addr: u64,
    /// The source file.
    pub file: String,
    /// The line.
    pub line: u32,
}

/// One piece of JIT code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JitCode {
    /// Where the code is (after any moves).
    pub addr: u64,
    /// Its size.
    pub size: u64,
    /// The function name.
    pub name: String,
    /// The JIT's index of the code.
    pub index: u64,
    /// Line information, sorted by address.
    pub lines: Vec<JitLine>,
    /// Timestamp of the load, or of the last move (since when the code
    /// is where `addr` says).
    pub timestamp: u64,
}

/// A parsed jitdump file.
#[derive(Clone, Debug, Default)]
pub struct JitDump {
    /// The process that wrote it.
    pub pid: u32,
    /// Code, sorted by address.
    pub code: Vec<JitCode>,
    /// The first problem met; reading stops there (records after a bad
    /// length cannot be found).
    pub error: Option<JitDumpError>,
    /// Whether the records' timestamps are the TSC's
    /// (`JITDUMP_FLAGS_ARCH_TIMESTAMP`), not `CLOCK_MONOTONIC`.
    pub arch_timestamps: bool,
    /// Which code is live where: disjoint ranges by start, each to its
    /// end and the index in `code` of the newest code covering it, so a
    /// lookup is one search however many times the JIT reused addresses.
    live: std::collections::BTreeMap<u64, (u64, usize)>,
}

struct Cursor<'a> {
    data: &'a [u8],
    at: usize,
    /// Reads stop here: the end of the file, or of the current record.
    limit: usize,
    swap: bool,
}

impl Cursor<'_> {
    fn err(&self, what: impl Into<String>) -> JitDumpError {
        JitDumpError {
            offset: self.at,
            what: what.into(),
        }
    }

    fn bytes<const N: usize>(&mut self, what: &str) -> Result<[u8; N], JitDumpError> {
        let b: [u8; N] = self
            .data
            .get(self.at..self.at + N)
            .filter(|_| self.at + N <= self.limit)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| self.err(format!("{what}: truncated")))?;
        self.at += N;
        Ok(b)
    }

    fn u32(&mut self, what: &str) -> Result<u32, JitDumpError> {
        let v = u32::from_le_bytes(self.bytes(what)?);
        Ok(if self.swap { v.swap_bytes() } else { v })
    }

    fn u64(&mut self, what: &str) -> Result<u64, JitDumpError> {
        let v = u64::from_le_bytes(self.bytes(what)?);
        Ok(if self.swap { v.swap_bytes() } else { v })
    }

    /// A NUL-terminated string that must end before `end`.
    fn string(&mut self, end: usize, what: &str) -> Result<String, JitDumpError> {
        let room = self.data.get(self.at..end).unwrap_or(&[]);
        let n = room
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| self.err(format!("{what}: no terminating NUL in the record")))?;
        let s = String::from_utf8_lossy(&room[..n]).into_owned();
        self.at += n + 1;
        Ok(s)
    }
}

impl JitDump {
    /// Parses a jitdump file's bytes.
    #[must_use]
    pub fn parse(data: &[u8]) -> Self {
        let mut dump = JitDump::default();
        if let Err(e) = dump.read(data) {
            dump.error = Some(e);
        }
        dump.code.sort_by_key(|c| c.addr);
        dump.index();
        dump
    }

    /// Paints each code's range over the older ones, oldest first.
    fn index(&mut self) {
        let mut order: Vec<usize> = (0..self.code.len()).collect();
        order.sort_by_key(|&i| self.code[i].timestamp);
        for i in order {
            let c = &self.code[i];
            if c.size == 0 {
                continue;
            }
            let (start, end) = (c.addr, c.addr.saturating_add(c.size));
            // Cut what overlaps [start, end) out of the painted ranges.
            let overlapping: Vec<(u64, (u64, usize))> = self
                .live
                .range(..end)
                .rev()
                .take_while(|(_, (e, _))| *e > start)
                .map(|(&s, &v)| (s, v))
                .collect();
            for (s, (e, j)) in overlapping {
                self.live.remove(&s);
                if s < start {
                    self.live.insert(s, (start, j));
                }
                if e > end {
                    self.live.insert(end, (e, j));
                }
            }
            self.live.insert(start, (end, i));
        }
    }

    fn read(&mut self, data: &[u8]) -> Result<(), JitDumpError> {
        let mut c = Cursor {
            data,
            at: 0,
            limit: data.len(),
            swap: false,
        };
        let magic = c.u32("magic")?;
        if magic == MAGIC.swap_bytes() {
            c.swap = true;
        } else if magic != MAGIC {
            c.at = 0;
            return Err(c.err(format!("magic {magic:#010x} is not JiTD")));
        }
        let version = c.u32("version")?;
        if version != 1 {
            c.at = 4;
            return Err(c.err(format!("version {version} (only 1 is known)")));
        }
        let header_size = c.u32("total_size")? as usize;
        if header_size < HEADER_MIN || header_size > data.len() {
            c.at = 8;
            return Err(c.err(format!("header size {header_size}")));
        }
        let _elf_mach = c.u32("elf_mach")?;
        let _pad = c.u32("pad1")?;
        self.pid = c.u32("pid")?;
        let _timestamp = c.u64("timestamp")?;
        self.arch_timestamps = c.u64("flags")? & FLAGS_ARCH_TIMESTAMP != 0;
        c.at = header_size;
        // Line information precedes the load of the code it describes.
        let mut pending_lines: std::collections::HashMap<u64, Vec<JitLine>> =
            std::collections::HashMap::new();
        while c.at < data.len() {
            let start = c.at;
            c.limit = data.len();
            let id = c.u32("record id")?;
            let size = c.u32("record total_size")? as usize;
            let timestamp = c.u64("record timestamp")?;
            let end = start
                .checked_add(size)
                .filter(|&e| size >= RECORD_HEADER && e <= data.len())
                .ok_or_else(|| JitDumpError {
                    offset: start + 4,
                    what: format!("record size {size} runs past the file or below 16"),
                })?;
            // Fields of the record are read inside it only.
            c.limit = end;
            match id {
                CODE_LOAD => self.read_load(&mut c, end, timestamp, &mut pending_lines)?,
                CODE_MOVE => self.read_move(&mut c, timestamp)?,
                CODE_DEBUG_INFO => {
                    let (addr, lines) = read_debug_info(&mut c, end)?;
                    pending_lines.insert(addr, lines);
                }
                // CLOSE, UNWINDING_INFO and records of later versions.
                _ => {}
            }
            c.at = end;
        }
        Ok(())
    }

    fn read_load(
        &mut self,
        c: &mut Cursor<'_>,
        end: usize,
        timestamp: u64,
        pending_lines: &mut std::collections::HashMap<u64, Vec<JitLine>>,
    ) -> Result<(), JitDumpError> {
        let _pid = c.u32("pid")?;
        let _tid = c.u32("tid")?;
        let _vma = c.u64("vma")?;
        let addr = c.u64("code_addr")?;
        let code_size = c.u64("code_size")?;
        let index = c.u64("code_index")?;
        let name = c.string(end, "name")?;
        if code_size > (end - c.at) as u64 {
            return Err(c.err(format!("code_size {code_size} runs past the record")));
        }
        let lines = pending_lines.remove(&addr).unwrap_or_default();
        self.code.push(JitCode {
            addr,
            size: code_size,
            name,
            index,
            lines,
            timestamp,
        });
        Ok(())
    }

    fn read_move(&mut self, c: &mut Cursor<'_>, timestamp: u64) -> Result<(), JitDumpError> {
        let _pid = c.u32("pid")?;
        let _tid = c.u32("tid")?;
        let _vma = c.u64("vma")?;
        let old = c.u64("old_code_addr")?;
        let new = c.u64("new_code_addr")?;
        let code_size = c.u64("code_size")?;
        let index = c.u64("code_index")?;
        if let Some(code) = self
            .code
            .iter_mut()
            .rev()
            .find(|k| k.index == index && k.addr == old)
        {
            let delta = new.wrapping_sub(old);
            code.addr = new;
            code.size = code_size;
            // Where it is now, it is from the move on.
            code.timestamp = timestamp;
            for l in &mut code.lines {
                l.addr = l.addr.wrapping_add(delta);
            }
        }
        Ok(())
    }

    /// The code covering `addr` (the one loaded last if several).
    #[must_use]
    pub fn lookup(&self, addr: u64) -> Option<&JitCode> {
        let (_, &(end, i)) = self.live.range(..=addr).next_back()?;
        (addr < end).then(|| &self.code[i])
    }
}

impl JitCode {
    /// The source line of `addr` in this code, if the JIT gave lines.
    #[must_use]
    pub fn line(&self, addr: u64) -> Option<&JitLine> {
        let i = self.lines.partition_point(|l| l.addr <= addr);
        self.lines.get(i.checked_sub(1)?)
    }
}

/// A `JIT_CODE_DEBUG_INFO` record's body: the code it describes and its
/// lines, sorted.
fn read_debug_info(c: &mut Cursor<'_>, end: usize) -> Result<(u64, Vec<JitLine>), JitDumpError> {
    let addr = c.u64("code_addr")?;
    let count = c.u64("nr_entry")?;
    // Each entry takes at least 17 bytes: a bound from the record's own
    // size, not from the count.
    if count > ((end - c.at) / 17) as u64 {
        return Err(c.err(format!("nr_entry {count} cannot fit in the record")));
    }
    let mut lines = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let line_addr = c.u64("entry code_addr")?;
        let line = c.u32("entry line")?;
        let _discrim = c.u32("entry discrim")?;
        // "\xff\0" stands for the previous entry's file.
        let same = c.at + 2 <= c.limit && c.data.get(c.at..c.at + 2) == Some(&[0xff, 0][..]);
        let file = if same {
            c.at += 2;
            lines
                .last()
                .map(|l: &JitLine| l.file.clone())
                .unwrap_or_default()
        } else {
            c.string(end, "entry name")?
        };
        lines.push(JitLine {
            addr: line_addr,
            file,
            line,
        });
    }
    lines.sort_by_key(|l| l.addr);
    Ok((addr, lines))
}
