//! Symbolizes the hex addresses on standard input (one per line) of an
//! ELF file or of a Gsym file with blazesym, in one batch, with source
//! locations and inlined functions, printing for each address its frames
//! innermost first (`name` then `file:line`, as `addr2line -f -i` does).
//!
//! usage: blazesym-driver elf|gsym PATH < ADDRS

use std::io::{BufRead, BufWriter, Write};
use std::path::PathBuf;

use blazesym::symbolize::source::{Elf, GsymFile, Source};
use blazesym::symbolize::{CodeInfo, Input, Symbolized, Symbolizer};

fn place(out: &mut impl Write, info: Option<&CodeInfo>) -> std::io::Result<()> {
    match info {
        Some(c) => writeln!(out, "{}:{}", c.to_path().display(), c.line.unwrap_or(0)),
        None => writeln!(out, "??:0"),
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(kind), Some(path)) = (args.next(), args.next()) else {
        eprintln!("usage: blazesym-driver elf|gsym PATH < ADDRS");
        std::process::exit(2);
    };
    let path = PathBuf::from(path);
    let source = match kind.as_str() {
        "elf" => Source::Elf(Elf::new(path)),
        "gsym" => Source::from(GsymFile::new(path)),
        _ => {
            eprintln!("usage: blazesym-driver elf|gsym PATH < ADDRS");
            std::process::exit(2);
        }
    };
    let addrs: Vec<u64> = std::io::stdin()
        .lock()
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| u64::from_str_radix(l.trim().trim_start_matches("0x"), 16).ok())
        .collect();
    let symbolizer = Symbolizer::builder()
        .enable_code_info(true)
        .enable_inlined_fns(true)
        .build();
    let results = symbolizer
        .symbolize(&source, Input::VirtOffset(&addrs))
        .unwrap_or_else(|e| {
            eprintln!("blazesym: {e}");
            std::process::exit(1);
        });
    let mut out = BufWriter::new(std::io::stdout().lock());
    for result in results {
        let ok = match result {
            Symbolized::Sym(sym) => {
                // Inlined functions, innermost first, then the function.
                let mut r = Ok(());
                for inlined in sym.inlined.iter().rev() {
                    r = r
                        .and_then(|()| writeln!(out, "{}", inlined.name))
                        .and_then(|()| place(&mut out, inlined.code_info.as_ref()));
                }
                r.and_then(|()| writeln!(out, "{}", sym.name))
                    .and_then(|()| place(&mut out, sym.code_info.as_deref()))
            }
            Symbolized::Unknown(_) => writeln!(out, "??\n??:0"),
        };
        if ok.is_err() {
            std::process::exit(1);
        }
    }
    let _ = out.flush();
}
