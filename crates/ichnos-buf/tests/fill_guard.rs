//! Guard-page mode: the write path has no bounds check; the fault at the
//! guard page is the full check. Against the trace-buffer model in this
//! process, and, in child processes, with faults that are not ours and
//! with an application SIGSEGV handler installed before or after ours.
#![cfg(target_arch = "x86_64")]

use ichnos_buf::fill::{FillBuffer, Flush, WriteError};
use proptest::prelude::*;
use std::sync::{Arc, Mutex};

fn record(n: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (n * 131 + i * 7 + 1) as u8).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    /// Same model as the checked trace buffer: flushes concatenate to the
    /// records, hold whole records only, and come exactly when the next
    /// record does not fit — found by faults instead of comparisons.
    #[test]
    fn guarded_buffer_matches_model(capacity in 1usize..9000, lens in proptest::collection::vec(1usize..4095, 0..150)) {
        let sink: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let out = sink.clone();
        let buf = FillBuffer::trace_guarded(capacity, move |f: &Flush<'_>| out.lock().unwrap().push(f.data.to_vec())).unwrap();
        let lens2 = lens.clone();
        let b = buf.clone();
        // A fresh thread: its buffer starts empty and is flushed at exit.
        std::thread::spawn(move || {
            for (n, &len) in lens2.iter().enumerate() {
                let r = b.write(&record(n, len));
                if len > capacity {
                    assert!(matches!(r, Err(WriteError::Size { .. })));
                } else {
                    assert_eq!(r, Ok(()));
                }
            }
        })
        .join()
        .unwrap();
        let mut model: Vec<Vec<u8>> = Vec::new();
        let mut pending = Vec::new();
        for (n, &len) in lens.iter().enumerate() {
            if len > capacity {
                continue;
            }
            if pending.len() + len > capacity {
                model.push(std::mem::take(&mut pending));
            }
            pending.extend_from_slice(&record(n, len));
        }
        if !pending.is_empty() {
            model.push(pending);
        }
        prop_assert_eq!(&*sink.lock().unwrap(), &model);
    }
}

#[test]
fn records_of_a_page_or_more_are_refused() {
    let buf = FillBuffer::trace_guarded(1 << 20, |_: &Flush<'_>| {}).unwrap();
    let page = 4096;
    assert!(matches!(
        buf.write(&vec![0; page]),
        Err(WriteError::Size { .. })
    ));
    assert_eq!(buf.write(&vec![0; page - 1]), Ok(()));
}

const SCENARIO: &str = "ICHNOS_GUARD_SCENARIO";

mod support;

fn run(scenario: &str) -> (std::process::ExitStatus, String) {
    let out = support::run_self("scenario_entry", SCENARIO, scenario);
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// A page of the application's own that starts inaccessible; its handler
/// makes it accessible and returns, as a real program's lazy-mapping
/// handler would.
static mut APP_PAGE: usize = 0;
static mut PREVIOUS: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::uninit();
static APP_FAULTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

extern "C" fn app_handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: test-only handler; reads the siginfo the kernel gave us.
    unsafe {
        let addr = (*info).si_addr() as usize;
        let page = APP_PAGE;
        if addr >= page && addr < page + 4096 {
            APP_FAULTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            libc::mprotect(
                page as *mut libc::c_void,
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
            );
            return;
        }
        // Not ours: chain to whoever was there before, as handlers should.
        let prev = (*std::ptr::addr_of!(PREVIOUS)).assume_init_ref();
        if prev.sa_flags & libc::SA_SIGINFO != 0 && prev.sa_sigaction > 1 {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute(prev.sa_sigaction);
            f(sig, info, ctx);
        } else {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
}

fn install_app_handler() {
    // SAFETY: test set-up: one page of our own, and a SIGSEGV handler.
    unsafe {
        let page = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        APP_PAGE = page as usize;
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = app_handler as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER;
        libc::sigaction(
            libc::SIGSEGV,
            &raw const sa,
            (*std::ptr::addr_of_mut!(PREVIOUS)).as_mut_ptr(),
        );
    }
}

fn touch_app_page() {
    // SAFETY: the app handler makes the page writable on the first fault.
    unsafe { std::ptr::write_volatile(APP_PAGE as *mut u8, 1) };
}

/// Writes 20,000 numbered 24-byte records through a 1000-byte guarded
/// buffer and prints "ok N" if every flushed record is whole and in order.
fn write_and_check() {
    let seen = Arc::new(Mutex::new((0u64, true)));
    let s = seen.clone();
    let buf = FillBuffer::trace_guarded(1000, move |f: &Flush<'_>| {
        let mut s = s.lock().unwrap();
        for r in f.data.chunks(24) {
            let n = u64::from_le_bytes(r[..8].try_into().unwrap());
            let whole = r.len() == 24
                && r[8..16] == (!n).to_le_bytes()
                && r[16..] == n.wrapping_mul(3).to_le_bytes();
            s.1 &= whole && n == s.0;
            s.0 += 1;
        }
    })
    .unwrap();
    for n in 0..20_000u64 {
        let mut r = [0u8; 24];
        r[..8].copy_from_slice(&n.to_le_bytes());
        r[8..16].copy_from_slice(&(!n).to_le_bytes());
        r[16..].copy_from_slice(&n.wrapping_mul(3).to_le_bytes());
        buf.write(&r).unwrap();
    }
    buf.flush();
    let s = seen.lock().unwrap();
    println!("ok {} {}", s.0, s.1);
}

/// The child half of the scenarios, which `support::run_self` runs in a
/// fresh process: not a test of its own, so ignored by a plain run.
#[test]
#[ignore = "the child process of the scenario tests, run by them"]
fn scenario_entry() {
    let scenario = std::env::var(SCENARIO)
        .expect("run by the scenario tests in a child process, with the scenario named");
    match scenario.as_str() {
        "foreign-fault" => {
            write_and_check();
            // SAFETY: deliberately faults; the process must die of it.
            unsafe { std::ptr::write_volatile(8 as *mut u8, 1) };
            println!("survived");
        }
        "app-handler-before" => {
            install_app_handler();
            write_and_check();
            touch_app_page();
            println!(
                "app faults {}",
                APP_FAULTS.load(std::sync::atomic::Ordering::Relaxed)
            );
        }
        "app-handler-after" => {
            // Ours first (installed with the first guarded buffer)...
            let _ = FillBuffer::trace_guarded(64, |_: &Flush<'_>| {}).unwrap();
            install_app_handler();
            write_and_check();
            touch_app_page();
            println!(
                "app faults {}",
                APP_FAULTS.load(std::sync::atomic::Ordering::Relaxed)
            );
        }
        other => panic!("unknown scenario {other}"),
    }
}

#[test]
fn a_fault_that_is_not_ours_keeps_its_default_action() {
    use std::os::unix::process::ExitStatusExt;
    let (status, out) = run("foreign-fault");
    assert!(out.contains("ok 20000 true"), "{out}");
    assert!(!out.contains("survived"), "{out}");
    assert_eq!(status.signal(), Some(libc::SIGSEGV), "{status:?}");
}

#[test]
fn an_application_handler_installed_before_ours_still_gets_its_faults() {
    let (status, out) = run("app-handler-before");
    assert!(status.success(), "{status:?} {out}");
    assert!(out.contains("ok 20000 true"), "{out}");
    assert!(out.contains("app faults 1"), "{out}");
}

#[test]
fn an_application_handler_installed_after_ours_chains_to_it() {
    let (status, out) = run("app-handler-after");
    assert!(status.success(), "{status:?} {out}");
    assert!(out.contains("ok 20000 true"), "{out}");
    assert!(out.contains("app faults 1"), "{out}");
}
