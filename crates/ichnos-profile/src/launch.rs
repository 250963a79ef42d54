//! Running the command to profile: found on `PATH` before anything is
//! forked (so a typo is a clear error, not an exit status), forked and
//! held until its events are open, then released to exec.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::sys::{self, ExitStatus};

/// Why the command could not be run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// No command was given.
    #[error("no command to run")]
    Empty,
    /// Not found on `PATH`.
    #[error("{name}: command not found (searched PATH)")]
    NotFound {
        /// What was asked for.
        name: String,
    },
    /// The file does not exist.
    #[error("{}: no such file", path.display())]
    NoSuchFile {
        /// The path.
        path: PathBuf,
    },
    /// The file is not executable by us, or not a regular file.
    #[error("{}: not an executable file (permission denied)", path.display())]
    NotExecutable {
        /// The path.
        path: PathBuf,
    },
    /// The path names a directory.
    #[error("{}: is a directory, not a program", path.display())]
    Directory {
        /// The path.
        path: PathBuf,
    },
    /// An argument holds a NUL byte.
    #[error("an argument holds a NUL byte")]
    Nul,
    /// The kernel refused to execute it.
    #[error("cannot run {}: {source}", path.display())]
    Exec {
        /// The program.
        path: PathBuf,
        /// The error (from the child's exec).
        source: io::Error,
    },
    /// The program is there, but what runs it is not: the interpreter its
    /// `#!` line names, or the dynamic linker it asks for (exec says "No
    /// such file or directory" of either).
    #[error("cannot run {}: its {what} {} does not exist{note}", path.display(), missing.display())]
    Missing {
        /// The program.
        path: PathBuf,
        /// "interpreter" or "dynamic linker".
        what: &'static str,
        /// What it names.
        missing: PathBuf,
        /// More on why (or nothing).
        note: &'static str,
    },
    /// A system call of the launch failed.
    #[error("cannot start the command: {what}: {source}")]
    Os {
        /// Which step.
        what: &'static str,
        /// The error.
        source: io::Error,
    },
}

/// Finds the program `name` as a shell would: a name with a slash is a
/// path; anything else is looked up in `PATH`.
pub fn resolve(name: &OsStr) -> Result<PathBuf, LaunchError> {
    let is_exe = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file())
            && CString::new(p.as_os_str().as_bytes()).is_ok_and(|c| sys::executable(&c))
    };
    if name.as_bytes().contains(&b'/') {
        let path = PathBuf::from(name);
        if !path.exists() {
            return Err(LaunchError::NoSuchFile { path });
        }
        if path.is_dir() {
            return Err(LaunchError::Directory { path });
        }
        if !is_exe(&path) {
            return Err(LaunchError::NotExecutable { path });
        }
        return Ok(path);
    }
    let search = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    let mut denied = None;
    for dir in std::env::split_paths(&search) {
        let candidate = dir.join(name);
        if is_exe(&candidate) {
            return Ok(candidate);
        }
        if candidate.is_file() {
            denied.get_or_insert(candidate);
        }
    }
    Err(match denied {
        Some(path) => LaunchError::NotExecutable { path },
        None => LaunchError::NotFound {
            name: name.to_string_lossy().into_owned(),
        },
    })
}

/// A forked child waiting for its start signal.
#[derive(Debug)]
pub struct Held {
    pid: u32,
    program: PathBuf,
    go: Option<OwnedFd>,
    report: OwnedFd,
}

/// A running child.
#[derive(Debug)]
pub struct Child {
    pid: u32,
    status: Option<ExitStatus>,
}

/// Forks `command` (its first element resolved already) and holds it
/// before exec.
pub fn hold(program: &Path, command: &[OsString]) -> Result<Held, LaunchError> {
    hold_with_env(program, command, &[])
}

/// Like [`hold`], with `env` added to (or replacing variables of) this
/// process's environment for the command.
pub fn hold_with_env(
    program: &Path,
    command: &[OsString],
    env: &[(OsString, OsString)],
) -> Result<Held, LaunchError> {
    let cstring = |s: &OsStr| CString::new(s.as_bytes()).map_err(|_| LaunchError::Nul);
    let path = cstring(program.as_os_str())?;
    let argv = command
        .iter()
        .map(|a| cstring(a))
        .collect::<Result<Vec<_>, _>>()?;
    if argv.is_empty() {
        return Err(LaunchError::Empty);
    }
    let envp = std::env::vars_os()
        .filter(|(k, _)| !env.iter().any(|(name, _)| name == k))
        .chain(env.iter().cloned())
        .map(|(k, v)| {
            let mut kv = std::os::unix::ffi::OsStringExt::into_vec(k);
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv).map_err(|_| LaunchError::Nul)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let os = |what| move |source| LaunchError::Os { what, source };
    let (go_read, go_write) = sys::pipe().map_err(os("pipe"))?;
    let (report_read, report_write) = sys::pipe().map_err(os("pipe"))?;
    let pipes = sys::LaunchPipes {
        go_read: &go_read,
        go_write: &go_write,
        report_read: &report_read,
        report_write: &report_write,
    };
    let pid = sys::fork_exec_on_signal(&path, &argv, &envp, &pipes).map_err(os("fork"))?;
    drop((go_read, report_write));
    Ok(Held {
        pid: pid.cast_unsigned(),
        program: program.to_path_buf(),
        go: Some(go_write),
        report: report_read,
    })
}

impl Held {
    /// The child's process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Lets the child exec; an exec that fails is the error.
    pub fn start(mut self) -> Result<Child, LaunchError> {
        let go = self.go.take().ok_or(LaunchError::Empty)?;
        sys::write_all(&go, &[1]).map_err(|source| LaunchError::Os {
            what: "starting the command",
            source,
        })?;
        drop(go);
        let mut errno = [0u8; 4];
        let n = sys::read_full(&self.report, &mut errno).map_err(|source| LaunchError::Os {
            what: "waiting for exec",
            source,
        })?;
        let child = Child {
            pid: self.pid,
            status: None,
        };
        if n == errno.len() {
            // The child has exited (127): reap it.
            let mut child = child;
            let _ = child.wait_blocking();
            let errno = i32::from_le_bytes(errno);
            if errno == libc::ENOENT {
                if let Some((what, missing, note)) = missing_runner(&self.program) {
                    return Err(LaunchError::Missing {
                        path: self.program.clone(),
                        what,
                        missing,
                        note,
                    });
                }
            }
            return Err(LaunchError::Exec {
                path: self.program.clone(),
                source: io::Error::from_raw_os_error(errno),
            });
        }
        Ok(child)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Never started: closing the pipe makes the child exit (and SIGKILL
        // makes sure); reap it.
        if self.go.take().is_some() {
            let _ = sys::kill(self.pid.cast_signed(), libc::SIGKILL);
            let mut child = Child {
                pid: self.pid,
                status: None,
            };
            let _ = child.wait_blocking();
        }
    }
}

impl Child {
    /// The process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The exit status if the child has ended (reaped once, then kept).
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = sys::try_wait(self.pid.cast_signed())?;
        }
        Ok(self.status)
    }

    /// Waits for the child to end.
    pub fn wait_blocking(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(status);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Sends `signal` unless the child has ended.
    pub fn signal(&mut self, signal: i32) {
        if matches!(self.try_wait(), Ok(None)) {
            let _ = sys::kill(self.pid.cast_signed(), signal);
        }
    }

    /// Ends the child: SIGTERM, then SIGKILL if it is still there after
    /// `grace`; waits for it.
    pub fn terminate(&mut self, grace: std::time::Duration) -> io::Result<ExitStatus> {
        self.signal(libc::SIGTERM);
        let deadline = std::time::Instant::now() + grace;
        while std::time::Instant::now() < deadline {
            if let Some(status) = self.try_wait()? {
                return Ok(status);
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        self.signal(libc::SIGKILL);
        self.wait_blocking()
    }

    /// A descriptor that becomes readable when the child exits.
    pub fn exit_fd(&self) -> io::Result<OwnedFd> {
        sys::pidfd_open(self.pid.cast_signed())
    }
}

/// What `program` (which exists) names to run it that does not exist:
/// the interpreter of its `#!` line, or the dynamic linker of its
/// `PT_INTERP`, and a note on why. Read from its first bytes, bounded.
fn missing_runner(program: &Path) -> Option<(&'static str, PathBuf, &'static str)> {
    use std::io::Read;
    let mut head = Vec::with_capacity(4096);
    std::fs::File::open(program)
        .ok()?
        .take(4096)
        .read_to_end(&mut head)
        .ok()?;
    let (what, named) = if let Some(line) = head.strip_prefix(b"#!") {
        let line = line.split(|&b| b == b'\n').next()?;
        let word = line
            .split(|&b| b == b' ' || b == b'\t')
            .find(|w| !w.is_empty())?;
        // A script saved with DOS line ends names its interpreter with a
        // carriage return after it, which printed would hide the line.
        if let Some(word) = word.strip_suffix(b"\r") {
            // The name the kernel looked for is not the one shown, which
            // may well exist.
            return Some((
                "interpreter",
                PathBuf::from(std::ffi::OsStr::from_bytes(word)),
                " with a carriage return after its name: the script has DOS line ends",
            ));
        }
        (
            "interpreter",
            PathBuf::from(std::ffi::OsStr::from_bytes(word)),
        )
    } else {
        ("dynamic linker", elf_interpreter(program)?)
    };
    (!named.exists()).then_some((what, named, ""))
}

/// The dynamic linker an ELF program names (`PT_INTERP`), 64-bit or
/// 32-bit (a 32-bit program on a system without its libraries).
fn elf_interpreter(program: &Path) -> Option<PathBuf> {
    use object::elf::{FileHeader32, FileHeader64};
    let data = object::ReadCache::new(std::fs::File::open(program).ok()?);
    interpreter_of::<FileHeader64<object::Endianness>>(&data)
        .or_else(|| interpreter_of::<FileHeader32<object::Endianness>>(&data))
}

/// `PT_INTERP` of the ELF file `data`, read as of class `Elf`.
fn interpreter_of<Elf: object::read::elf::FileHeader<Endian = object::Endianness>>(
    data: &object::ReadCache<std::fs::File>,
) -> Option<PathBuf> {
    use object::read::elf::ProgramHeader;
    let header = Elf::parse(data).ok()?;
    let endian = header.endian().ok()?;
    let segment = header
        .program_headers(endian, data)
        .ok()?
        .iter()
        .find(|s| s.p_type(endian) == object::elf::PT_INTERP)?;
    let bytes = segment.data(endian, data).ok()?;
    let name = bytes.split(|&b| b == 0).next()?;
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(name)))
}
