//! Unwinding captured stacks: ichnos with SFrame rows, ichnos with converted
//! `.eh_frame` rows, and framehop (`.eh_frame` with its rule cache), on the
//! same stack copies in the same run.
//!
//! Three cases: the C fixture stopped by gdb in its leaf (13 frames through
//! SFrame code, a shared library and libc; needs gcc and gdb); this
//! benchmark's own stack captured 40 Rust frames deep (Rust code, libc,
//! `.eh_frame` only); and eight stacks of this benchmark, 40 calls deep
//! each, whose frames alternate between two callers in eight different
//! random patterns, walked in turn, so that a frame's caller is not the one
//! it had the last time. Before timing, both unwinders must produce the
//! same return addresses. The table at the end gives frames per second and the
//! ratio to framehop, computed from criterion's estimates of this run.
//!
//! `cargo bench -p ichnos-code --bench unwind`

#[path = "../tests/support/mod.rs"]
mod support;

use std::hint::black_box;
use std::path::Path;

use criterion::{BatchSize, Criterion};
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, Module, Unwinder};
use ichnos_code::memory::{Memory, NoMemory, ProcessMemory};
use ichnos_code::unwind::unwind_into;
use ichnos_code::{unwind_cached, CodeMap, Regs, UnwindCache, UnwindOptions};
use object::{Object, ObjectSection, ObjectSegment};

#[path = "../../../tools/bench/estimates.rs"]
mod estimates;

struct Stack {
    regs: Regs,
    bytes: Vec<u8>,
    maps: String,
}

/// Stacks unwound in turn, each whole, as one measurement.
struct Case {
    name: &'static str,
    stacks: Vec<Stack>,
}

/// framehop modules for the executable file mappings of `maps`.
fn framehop_unwinder(maps: &str) -> UnwinderX86_64<Vec<u8>> {
    let mut unwinder = UnwinderX86_64::new();
    let entries = ichnos_image::parse_maps(0, maps).unwrap();
    for (m, origin) in ichnos_code::process::executable_file_mappings(&entries) {
        let Some(origin) = origin else {
            continue;
        };
        let Ok(bytes) = std::fs::read(&m.name) else {
            continue;
        };
        let file = object::File::parse(&*bytes).unwrap();
        let first = file.segments().map(|s| s.address()).min().unwrap_or(0) & !0xfff;
        let section = |name: &str| {
            file.section_by_name(name).map(|s| {
                (
                    s.address()..s.address() + s.size(),
                    s.data().unwrap_or(&[]).to_vec(),
                )
            })
        };
        let text = section(".text");
        let eh = section(".eh_frame");
        let hdr = section(".eh_frame_hdr");
        let got = section(".got");
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: text.as_ref().map(|t| t.0.clone()),
            text: text.map(|t| t.1),
            got_svma: got.map(|g| g.0),
            eh_frame_svma: eh.as_ref().map(|e| e.0.clone()),
            eh_frame: eh.map(|e| e.1),
            eh_frame_hdr_svma: hdr.as_ref().map(|h| h.0.clone()),
            eh_frame_hdr: hdr.map(|h| h.1),
            ..Default::default()
        };
        unwinder.add_module(Module::new(
            m.name.clone(),
            m.range.clone(),
            origin - first,
            info,
        ));
    }
    unwinder
}

fn framehop_walk(
    unwinder: &UnwinderX86_64<Vec<u8>>,
    cache: &mut CacheX86_64,
    stack: &Stack,
    out: &mut Vec<u64>,
) {
    out.clear();
    let base = stack.regs.sp;
    let bytes = &stack.bytes;
    let mut read = |addr: u64| -> Result<u64, ()> {
        let off = usize::try_from(addr.checked_sub(base).ok_or(())?).map_err(|_| ())?;
        let b = bytes.get(off..off + 8).ok_or(())?;
        Ok(u64::from_le_bytes(b.try_into().unwrap()))
    };
    let regs = UnwindRegsX86_64::new(stack.regs.ip, stack.regs.sp, stack.regs.fp);
    let mut frames = unwinder.iter_frames(stack.regs.ip, regs, cache, &mut read);
    while let Ok(Some(frame)) = frames.next() {
        out.push(frame.address());
    }
}

const OPTIONS: UnwindOptions = UnwindOptions {
    max_frames: 256,
    frame_pointer_fallback: true,
};

fn ichnos_walk(map: &CodeMap, case: &Case, frames: &mut Vec<ichnos_code::Frame>) {
    for stack in &case.stacks {
        unwind_into(
            map,
            stack.regs,
            &stack.bytes,
            &mut NoMemory,
            &OPTIONS,
            frames,
        );
    }
}

fn ichnos_walk_cached(
    map: &CodeMap,
    cache: &mut UnwindCache,
    case: &Case,
    frames: &mut Vec<ichnos_code::Frame>,
) {
    for stack in &case.stacks {
        unwind_cached(
            map,
            stack.regs,
            &stack.bytes,
            &mut NoMemory,
            &OPTIONS,
            cache,
            frames,
        );
    }
}

fn framehop_walk_all(
    unwinder: &UnwinderX86_64<Vec<u8>>,
    cache: &mut CacheX86_64,
    case: &Case,
    out: &mut Vec<u64>,
) {
    for stack in &case.stacks {
        framehop_walk(unwinder, cache, stack, out);
    }
}

#[inline(never)]
fn capture_here() -> Stack {
    let (ip, sp, fp): (u64, u64, u64);
    // SAFETY: reads rip, rsp and rbp; touches no memory.
    unsafe {
        std::arch::asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {fp}, rbp",
            ip = out(reg) ip,
            sp = out(reg) sp,
            fp = out(reg) fp,
            options(nomem, nostack, preserves_flags),
        );
    }
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let top = ichnos_image::parse_maps(0, &maps)
        .unwrap()
        .into_iter()
        .find(|m| m.range.contains(&sp))
        .map_or(sp, |m| m.range.end);
    let mut bytes = vec![0u8; (top - sp).min(64 * 1024) as usize];
    ProcessMemory::current().read(sp, &mut bytes).unwrap();
    Stack {
        regs: Regs {
            ip,
            sp,
            fp,
            bx: None,
        },
        bytes,
        maps,
    }
}

#[inline(never)]
fn deep(n: u32) -> Stack {
    if n == 0 {
        return capture_here();
    }
    let s = deep(black_box(n - 1));
    black_box(&s);
    s
}

/// `depth` calls deep, alternating through [`hop_a`] or [`hop_b`] as the
/// bits of `pattern` say; all calls to them are from one site, so the
/// frame of `hop` that returns there has either as its caller.
#[inline(never)]
fn hop(pattern: u64, depth: u32) -> Stack {
    if depth == 0 {
        return capture_here();
    }
    let next: fn(u64, u32) -> Stack = if pattern & 1 == 1 { hop_a } else { hop_b };
    let s = black_box(next)(black_box(pattern >> 1), depth - 1);
    black_box(&s);
    s
}

#[inline(never)]
fn hop_a(pattern: u64, depth: u32) -> Stack {
    let s = hop(pattern, depth);
    black_box(&s);
    s
}

#[inline(never)]
fn hop_b(pattern: u64, depth: u32) -> Stack {
    let s = hop(pattern, black_box(depth));
    black_box((&s, 1u8));
    s
}

/// Eight stacks of 40 hops in patterns from a fixed generator.
fn varied() -> Vec<Stack> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    (0..8)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            hop(state, 20)
        })
        .collect()
}

fn fixture_stack(dir: &Path) -> Option<Stack> {
    let prog = support::build_prog(dir);
    let stops = support::capture(&prog, &[]);
    let stop = stops.into_iter().find(|s| s.label.ends_with(":leaf"))?;
    Some(Stack {
        regs: Regs {
            ip: stop.rip,
            sp: stop.rsp,
            fp: stop.rbp,
            bx: None,
        },
        bytes: stop.stack,
        maps: stop.maps,
    })
}

fn main() {
    // Only this run's estimates go into its table.
    let run = estimates::Run::start();
    let dir = tempfile::tempdir().unwrap();
    let mut cases = vec![
        Case {
            name: "rust-self",
            stacks: vec![deep(40)],
        },
        Case {
            name: "rust-varied",
            stacks: varied(),
        },
    ];
    match fixture_stack(dir.path()) {
        Some(s) => cases.insert(
            0,
            Case {
                name: "c-fixture",
                stacks: vec![s],
            },
        ),
        None => eprintln!("note: the C fixture stack needs gcc and gdb; skipped"),
    }
    let mut c = Criterion::default().configure_from_args();
    let mut rows = Vec::new();
    for case in &cases {
        // The stacks of a case come from one process.
        let maps = &case.stacks[0].maps;
        let sframe = support::code_map(maps, support::Rules::Preferred);
        let eh = support::code_map(maps, support::Rules::EhFrameOnly);
        let fh = framehop_unwinder(maps);
        let mut fh_cache = CacheX86_64::new();

        // Same answers before any timing, stack by stack.
        let mut ours = Vec::new();
        let mut theirs = Vec::new();
        let mut frames = 0;
        for stack in &case.stacks {
            framehop_walk(&fh, &mut fh_cache, stack, &mut theirs);
            for rules in [&eh, &sframe] {
                unwind_into(
                    rules,
                    stack.regs,
                    &stack.bytes,
                    &mut NoMemory,
                    &OPTIONS,
                    &mut ours,
                );
                let ours_ips: Vec<u64> = ours.iter().map(|f| f.ip).collect();
                assert_eq!(
                    ours_ips, theirs,
                    "{}: ichnos and framehop disagree",
                    case.name
                );
            }
            frames += theirs.len();
        }

        let group_name = format!("unwind/{}", case.name);
        let mut group = c.benchmark_group(&group_name);
        group.bench_function("ichnos_sframe_rows", |b| {
            b.iter(|| ichnos_walk(black_box(&sframe), case, &mut ours));
        });
        group.bench_function("ichnos_eh_frame_rows", |b| {
            b.iter(|| ichnos_walk(black_box(&eh), case, &mut ours));
        });
        let mut cache = UnwindCache::new();
        group.bench_function("ichnos_sframe_rows_cached", |b| {
            b.iter(|| ichnos_walk_cached(black_box(&sframe), &mut cache, case, &mut ours));
        });
        let mut cache = UnwindCache::new();
        group.bench_function("ichnos_eh_frame_rows_cached", |b| {
            b.iter(|| ichnos_walk_cached(black_box(&eh), &mut cache, case, &mut ours));
        });
        // The cached walk of the last stack still agrees.
        assert_eq!(ours.iter().map(|f| f.ip).collect::<Vec<_>>(), theirs);
        group.bench_function("framehop", |b| {
            b.iter(|| framehop_walk_all(black_box(&fh), &mut fh_cache, case, &mut theirs));
        });
        // framehop as the uncached walks run: nothing kept from one walk
        // to the next (a fresh cache for each stack, made untimed).
        group.bench_function("framehop_cold", |b| {
            b.iter_batched_ref(
                || {
                    case.stacks
                        .iter()
                        .map(|_| CacheX86_64::new())
                        .collect::<Vec<_>>()
                },
                |caches| {
                    for (stack, cache) in case.stacks.iter().zip(caches.iter_mut()) {
                        framehop_walk(black_box(&fh), cache, stack, &mut theirs);
                    }
                },
                BatchSize::SmallInput,
            );
        });
        group.finish();
        rows.push((case.name, frames, group_name.replace('/', "_")));
    }
    c.final_summary();
    print_table(&run, rows);
}

/// Nanoseconds per frame of each case, and the ratios to framehop: the
/// uncached walks to framehop's with a fresh cache, the cached ones to
/// framehop's with its cache kept.
fn print_table(run: &estimates::Run, rows: Vec<(&str, usize, String)>) {
    println!(
        "\nnanoseconds per frame, and framehop's time over ours (above 1: ichnos is faster), this run;"
    );
    println!("uncached ratios against framehop cold (a fresh cache per walk), cached against framehop with its cache:");
    println!(
        "{:>11} {:>6}  {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}  {:>7} {:>7} {:>8} {:>7}",
        "stack",
        "frames",
        "sframe",
        "eh",
        "sframe+c",
        "eh+c",
        "fh cold",
        "framehop",
        "sframe",
        "eh",
        "sframe+c",
        "eh+c"
    );
    for (name, frames, group) in rows {
        let per_frame = |f| run.mean_ns(&group, f).map(|ns| ns / frames as f64);
        let fh = per_frame("framehop");
        let cold = per_frame("framehop_cold");
        let ours = [
            per_frame("ichnos_sframe_rows"),
            per_frame("ichnos_eh_frame_rows"),
            per_frame("ichnos_sframe_rows_cached"),
            per_frame("ichnos_eh_frame_rows_cached"),
        ];
        let show = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}"));
        let ratio = |a: Option<f64>, peer: Option<f64>| match (a, peer) {
            (Some(a), Some(b)) => format!("{:.2}x", b / a),
            _ => "-".to_owned(),
        };
        println!(
            "{name:>11} {frames:>6}  {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}  {:>7} {:>7} {:>8} {:>7}",
            show(ours[0]),
            show(ours[1]),
            show(ours[2]),
            show(ours[3]),
            show(cold),
            show(fh),
            ratio(ours[0], cold),
            ratio(ours[1], cold),
            ratio(ours[2], fh),
            ratio(ours[3], fh),
        );
    }
}
