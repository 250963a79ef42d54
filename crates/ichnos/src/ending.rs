//! How the command recorded or traced ended, as ichnos reports it: its
//! exit status passed on as shells give it, and a note where a signal
//! ended it (ichnos itself exits normally, so the shell says nothing of
//! the signal).

use ichnos_profile::ExitStatus;

/// The command's exit status as ours: its code, or 128 + the signal
/// that killed it, as shells report it; 0 where there was no command.
pub fn exit_code(status: Option<ExitStatus>) -> u8 {
    match status {
        Some(ExitStatus::Code(c)) => u8::try_from(c).unwrap_or(1),
        Some(ExitStatus::Signal(sig)) => u8::try_from(128 + sig).unwrap_or(255),
        None => 0,
    }
}

/// The note for a command a signal ended, unless the stop asked for
/// (`stopped`: Ctrl-C, SIGTERM to ichnos) explains it: `the command was
/// killed by SIGSEGV (signal 11)`, as uftrace warns and a shell would
/// say of the command run alone.
pub fn signal_note(status: Option<ExitStatus>, stopped: bool) -> Option<String> {
    let Some(ExitStatus::Signal(sig)) = status else {
        return None;
    };
    if stopped {
        return None;
    }
    Some(match signal_name(sig) {
        Some(name) => format!("the command was killed by {name} (signal {sig})"),
        None => format!("the command was killed by signal {sig}"),
    })
}

/// The name of Linux signal `sig` (x86-64 and arm64 numbering), where it
/// has one.
fn signal_name(sig: i32) -> Option<&'static str> {
    const NAMES: [&str; 31] = [
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    usize::try_from(sig)
        .ok()
        .and_then(|n| n.checked_sub(1))
        .and_then(|i| NAMES.get(i).copied())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_are_named_as_libc_numbers_them() {
        for (sig, name) in [
            (libc::SIGHUP, "SIGHUP"),
            (libc::SIGABRT, "SIGABRT"),
            (libc::SIGKILL, "SIGKILL"),
            (libc::SIGSEGV, "SIGSEGV"),
            (libc::SIGPIPE, "SIGPIPE"),
            (libc::SIGTERM, "SIGTERM"),
            (libc::SIGCHLD, "SIGCHLD"),
            (libc::SIGXCPU, "SIGXCPU"),
            (libc::SIGSYS, "SIGSYS"),
        ] {
            assert_eq!(signal_name(sig), Some(name));
        }
        assert_eq!(signal_name(0), None);
        assert_eq!(signal_name(34), None);
    }

    #[test]
    fn only_a_signal_the_stop_did_not_ask_for_is_noted() {
        let segv = Some(ExitStatus::Signal(11));
        assert_eq!(
            signal_note(segv, false).as_deref(),
            Some("the command was killed by SIGSEGV (signal 11)")
        );
        assert_eq!(signal_note(segv, true), None);
        assert_eq!(signal_note(Some(ExitStatus::Code(3)), false), None);
        assert_eq!(signal_note(None, false), None);
        assert_eq!(exit_code(segv), 139);
        assert_eq!(exit_code(Some(ExitStatus::Code(3))), 3);
    }
}
