//! Java's compiled code and the frame pointer.
//!
//! HotSpot's compiled methods keep no frame pointer unless the JVM runs
//! with `-XX:+PreserveFramePointer` (to them rbp is one more register),
//! and no table describes their frames to a profiler: a perf map names
//! them (`-XX:+DumpPerfMapAtExit`, `jcmd PID Compiler.perfmap`), nothing
//! unwinds them. A walk out of such code along the frame-pointer chain
//! goes on from whichever frame last kept rbp (the interpreter's, a
//! stub's, the VM's) and skips the compiled callers between: the stack
//! still reaches the thread's start, complete by every count, with frames
//! missing. perf's frame-pointer and DWARF modes fare the same.
//!
//! Which stacks skipped frames cannot be told, nor, without names, which
//! of the JVM's generated code is a compiled method (the interpreter and
//! the stubs live in the same code cache, and keep rbp). The recorder
//! counts the stacks of a Java process walked out of any of its generated
//! code by the frame pointer (every Java thread's stack is, at its call
//! stub: an upper bound) and, where the JVM may compile (no `-Xint`) and
//! was not told to keep the frame pointer, says so at the end. It reads
//! the options as HotSpot and the `java` launcher do, the launcher's
//! `@argfiles` split as the launcher splits them (checked against the
//! launcher and the JVM of the JDK installed, in the tests).

use std::collections::VecDeque;

/// What a process's stacks walked out of JIT code by the frame pointer
/// say of Java.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct JavaFrames {
    /// The process maps `libjvm.so`: it runs HotSpot.
    jvm: bool,
    /// Stacks walked out of JIT code by the frame pointer, while it did.
    walked: u64,
    /// Whether its compiled code keeps no frame pointer, by its options
    /// (`None` until they could be read).
    compiled_without: Option<bool>,
    /// Times its options could not be read (another user's process:
    /// given up after [`MAX_TRIES`]).
    tries: u8,
}

/// Reads of a process's options tried at most.
const MAX_TRIES: u8 = 4;

impl JavaFrames {
    /// Whether the process maps `libjvm.so`.
    pub fn jvm(&self) -> bool {
        self.jvm
    }

    /// The process mapped the file at `path`.
    pub fn mapped(&mut self, path: &[u8]) {
        self.jvm |= path.ends_with(b"/libjvm.so");
    }

    /// A stack of process `pid` (not running here if `offline`: then
    /// nothing is read of it) was walked out of JIT code by the frame
    /// pointer.
    pub fn walked_out_of_jit(&mut self, pid: u32, offline: bool) {
        if !self.jvm || offline {
            return;
        }
        self.walked += 1;
        if self.compiled_without.is_none() && self.tries < MAX_TRIES {
            // Read while the process runs; tried again at its next such
            // stack if it cannot be, a few times.
            self.tries += 1;
            self.compiled_without = options_of(pid).and_then(|(cmdline, environ)| {
                let options = jvm_options(&cmdline, &environ, &|path| argfile_of(pid, path))?;
                Some(may_compile(&options) && !keeps_frame_pointer(&options))
            });
        }
    }

    /// The stacks that may have skipped compiled callers.
    pub fn may_skip(&self) -> u64 {
        if self.compiled_without == Some(true) {
            self.walked
        } else {
            0
        }
    }
}

/// Process `pid`'s command line and environment, as `/proc` shows them.
fn options_of(pid: u32) -> Option<(Vec<u8>, Vec<u8>)> {
    let read = |what: &str| std::fs::read(format!("/proc/{pid}/{what}")).ok();
    Some((read("cmdline")?, read("environ")?))
}

/// An argument file's bytes read at most: the launcher takes up to 2 GiB,
/// a real one of options is a few KiB.
const MAX_ARGFILE: u64 = 1 << 20;

/// Argument files read at most for one process.
const MAX_ARGFILES: usize = 16;

/// The argument file at `path` (as the launcher of process `pid` was
/// given it: a relative one is in its working directory), if it is still
/// a regular file that can be read whole within [`MAX_ARGFILE`]. Opened
/// without blocking and checked once open: the path is the process's to
/// choose, and a FIFO or a device there must not hold the recorder.
fn argfile_of(pid: u32, path: &[u8]) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;
    let path = std::ffi::OsStr::from_bytes(path);
    let path = if path.as_bytes().starts_with(b"/") {
        std::path::PathBuf::from(path)
    } else {
        std::path::Path::new(&format!("/proc/{pid}/cwd")).join(path)
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(MAX_ARGFILE + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 <= MAX_ARGFILE).then_some(bytes)
}

/// The words of an argument file, as the `java` launcher splits it
/// (JDK 9 and later, `args.c`): apart by spaces, tabs, form feeds and
/// line ends. `'` or `"` quote part of a word: inside, whitespace and `#`
/// are plain, a backslash makes `n`, `r`, `t`, `f` those characters and
/// any other character itself, a backslash before a line end joins the
/// next line without its leading whitespace, and a line end ends the word
/// (and so the quote). Outside quotes a backslash is plain, and a `#`
/// starts a comment to the end of its line, dropping the unquoted text
/// of the word before it on that line (the quoted parts before it start
/// the next word, as the launcher has it).
fn argfile_words(text: &[u8]) -> Vec<Vec<u8>> {
    #[derive(Clone, Copy)]
    enum State {
        /// Between words, skipping whitespace.
        Between,
        /// In a comment, to the end of its line.
        Comment,
        /// In a word, outside quotes.
        Word,
        /// Inside quotes opened by this character.
        Quoted(u8),
        /// After a backslash inside quotes.
        Escape(u8),
        /// After a backslash and a line end inside quotes: skipping the
        /// next line's leading whitespace.
        Joined(u8),
    }
    let space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0c);
    let mut words = Vec::new();
    let mut word = Vec::new();
    // How much of `word` a comment keeps: up to the end of its last
    // quoted part (or escape), where the launcher's parts end.
    let mut kept = 0;
    let mut state = State::Between;
    for &b in text {
        // Whitespace skipped, the first character of what follows is
        // read in the state it starts.
        state = match state {
            State::Between | State::Joined(_) if space(b) => continue,
            State::Between => State::Word,
            State::Joined(q) => State::Quoted(q),
            other => other,
        };
        state = match (state, b) {
            (State::Comment, b'\n' | b'\r') => State::Between,
            (State::Comment, _) => State::Comment,
            (State::Escape(q), b'\n' | b'\r') => State::Joined(q),
            (State::Escape(q), _) => {
                word.push(match b {
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'f' => 0x0c,
                    other => other,
                });
                kept = word.len();
                State::Quoted(q)
            }
            (State::Word | State::Quoted(_), b'\n' | b'\r')
            | (State::Word, b' ' | b'\t' | 0x0c) => {
                words.push(std::mem::take(&mut word));
                kept = 0;
                State::Between
            }
            (State::Word, b'#') => {
                word.truncate(kept);
                State::Comment
            }
            (State::Word, b'\'' | b'"') => {
                kept = word.len();
                State::Quoted(b)
            }
            (State::Quoted(q), _) if b == q => {
                kept = word.len();
                State::Word
            }
            (State::Quoted(q), b'\\') => {
                kept = word.len();
                State::Escape(q)
            }
            (state, _) => {
                word.push(b);
                state
            }
        };
    }
    // A word the file ends in.
    if matches!(state, State::Word | State::Quoted(_)) && !word.is_empty() {
        words.push(word);
    }
    words
}

/// The `java` launcher's options that take the next word as their value.
const WITH_VALUE: &[&[u8]] = &[
    b"-cp",
    b"-classpath",
    b"--class-path",
    b"-p",
    b"--module-path",
    b"--upgrade-module-path",
    b"--add-modules",
    b"--limit-modules",
    b"--add-reads",
    b"--add-exports",
    b"--add-opens",
    b"--patch-module",
    b"--enable-native-access",
    b"--source",
];

/// The options a JVM run with `cmdline` and `environ` (NUL-separated, as
/// `/proc` shows them) reads, in the order HotSpot reads them:
/// `JAVA_TOOL_OPTIONS`; for the `java` launcher, `JDK_JAVA_OPTIONS` and
/// then its own options (up to the main class, `-jar`'s file or the
/// module: what follows is the program's); `_JAVA_OPTIONS`. The
/// launcher's `@argfiles` (on its command line or in `JDK_JAVA_OPTIONS`)
/// are read through `argfile` and their words taken in their place, as
/// the launcher does (`@@` escapes an `@`; `--disable-@files` stops it);
/// `None` if one cannot be read now. Files named by `-XX:Flags=` or
/// `-XX:VMOptionsFile=` are not read.
fn jvm_options(
    cmdline: &[u8],
    environ: &[u8],
    argfile: &dyn Fn(&[u8]) -> Option<Vec<u8>>,
) -> Option<Vec<Vec<u8>>> {
    let variable = |name: &[u8]| -> Vec<Vec<u8>> {
        environ
            .split(|&b| b == 0)
            .find_map(|entry| {
                entry
                    .strip_prefix(name)
                    .and_then(|rest| rest.strip_prefix(b"="))
            })
            .map(|value| {
                value
                    .split(u8::is_ascii_whitespace)
                    .filter(|w| !w.is_empty())
                    .map(<[u8]>::to_vec)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut args = cmdline.split(|&b| b == 0);
    let launcher = args.next().unwrap_or_default();
    let java = launcher.rsplit(|&b| b == b'/').next() == Some(b"java");
    let mut options = variable(b"JAVA_TOOL_OPTIONS");
    if java {
        // The launcher's words in order, each with whether it came from
        // an argument file (whose words are not expanded again).
        let mut words: VecDeque<(Vec<u8>, bool)> = variable(b"JDK_JAVA_OPTIONS")
            .into_iter()
            .chain(args.map(<[u8]>::to_vec))
            .map(|w| (w, false))
            .collect();
        let mut expand = true;
        let mut files = 0;
        let mut value_next = false;
        while let Some((word, from_file)) = words.pop_front() {
            let word = match word.strip_prefix(b"@") {
                Some(rest) if expand && !from_file && !rest.is_empty() => {
                    if let Some(escaped) = rest.strip_prefix(b"@") {
                        [b"@", escaped].concat()
                    } else {
                        files += 1;
                        if files > MAX_ARGFILES {
                            return None;
                        }
                        let text = argfile(rest)?;
                        for w in argfile_words(&text).into_iter().rev() {
                            words.push_front((w, true));
                        }
                        continue;
                    }
                }
                _ => word,
            };
            if std::mem::take(&mut value_next) {
                continue;
            }
            if word == b"--disable-@files" {
                expand = false;
            }
            if WITH_VALUE.contains(&word.as_slice()) {
                value_next = true;
            } else if !word.starts_with(b"-")
                || [&b"-jar"[..], b"-m", b"--module"].contains(&word.as_slice())
                || word.starts_with(b"--module=")
            {
                // The main class, or what names it: the program's own
                // words follow.
                break;
            } else {
                options.push(word);
            }
        }
    }
    options.extend(variable(b"_JAVA_OPTIONS"));
    Some(options)
}

/// Whether `options` (in order) leave the frame pointer kept: the last
/// word on `PreserveFramePointer`; by default it is not.
fn keeps_frame_pointer(options: &[Vec<u8>]) -> bool {
    options
        .iter()
        .fold(false, |keeps, option| match option.as_slice() {
            b"-XX:+PreserveFramePointer" => true,
            b"-XX:-PreserveFramePointer" => false,
            _ => keeps,
        })
}

/// Whether `options` let the JVM compile: not `-Xint` (interpreted
/// only), unless a later mode option overrides it.
fn may_compile(options: &[Vec<u8>]) -> bool {
    options
        .iter()
        .fold(true, |compiles, option| match option.as_slice() {
            b"-Xint" => false,
            b"-Xmixed" | b"-Xcomp" => true,
            _ => compiles,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a JVM run with `cmdline` (words apart by spaces) and
    /// `environ` (entries apart by `|`) keeps the frame pointer in the
    /// code it compiles, and may compile at all.
    fn read(cmdline: &str, environ: &str) -> (bool, bool) {
        let (cmdline, environ) = (cmdline.replace(' ', "\0"), environ.replace('|', "\0"));
        let options = jvm_options(cmdline.as_bytes(), environ.as_bytes(), &|_| None).unwrap();
        (keeps_frame_pointer(&options), may_compile(&options))
    }

    #[test]
    fn the_last_word_on_preserve_frame_pointer_in_hotspots_order_decides() {
        let keeps = |cmdline: &str, environ: &str| read(cmdline, environ).0;
        // By default compiled code keeps no frame pointer.
        assert!(!keeps("java -cp . Busy", "HOME=/root|PATH=/bin"));
        assert!(keeps("java -XX:+PreserveFramePointer -cp . Busy", ""));
        assert!(keeps(
            "/usr/lib/jvm/bin/java -cp /x -XX:+PreserveFramePointer Busy",
            ""
        ));
        assert!(!keeps(
            "java -XX:+PreserveFramePointer -XX:-PreserveFramePointer Busy",
            ""
        ));
        // The environment's options: JAVA_TOOL_OPTIONS before the command
        // line, _JAVA_OPTIONS after it.
        assert!(keeps(
            "java Busy",
            "JAVA_TOOL_OPTIONS=-Xmx1g -XX:+PreserveFramePointer"
        ));
        assert!(!keeps(
            "java -XX:-PreserveFramePointer Busy",
            "JAVA_TOOL_OPTIONS=-XX:+PreserveFramePointer"
        ));
        assert!(keeps(
            "java -XX:-PreserveFramePointer Busy",
            "X=1|_JAVA_OPTIONS=-XX:+PreserveFramePointer"
        ));
        assert!(keeps(
            "java Busy",
            "JDK_JAVA_OPTIONS=-XX:+PreserveFramePointer"
        ));
        // A variable whose name only ends alike is another.
        assert!(!keeps(
            "java Busy",
            "MY_JAVA_TOOL_OPTIONS=-XX:+PreserveFramePointer"
        ));
        // The program's own arguments, after the main class, -jar's file
        // or the module, are not the JVM's.
        assert!(!keeps("java Busy -XX:+PreserveFramePointer", ""));
        assert!(!keeps("java -jar app.jar -XX:+PreserveFramePointer", ""));
        assert!(!keeps("java -m app/app.Main -XX:+PreserveFramePointer", ""));
        assert!(!keeps(
            "java --module=app/app.Main -XX:+PreserveFramePointer",
            ""
        ));
        // A source file's version is an option's value too.
        assert!(keeps(
            "java --source 17 -XX:+PreserveFramePointer Busy.java",
            ""
        ));
        // A class path is an option's value, not the main class.
        assert!(keeps("java -cp lib -XX:+PreserveFramePointer Busy", ""));
        // Only the java launcher reads JDK_JAVA_OPTIONS and its own
        // arguments this way (an embedder's are its own).
        assert!(!keeps(
            "jsvc Busy",
            "JDK_JAVA_OPTIONS=-XX:+PreserveFramePointer"
        ));
        assert!(!keeps("myserver -XX:+PreserveFramePointer", ""));
        assert!(keeps(
            "myserver",
            "JAVA_TOOL_OPTIONS=-XX:+PreserveFramePointer"
        ));
    }

    /// The argument files of `cases` (name, text) in a directory of
    /// their own.
    fn argfiles(cases: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in cases {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        dir
    }

    /// How the `java` launcher itself splits the argument file `name` in
    /// `dir`: its debug output lists its arguments once expanded.
    fn launcher_words(dir: &std::path::Path, name: &str) -> Vec<Vec<u8>> {
        let out = std::process::Command::new("java")
            .arg(format!("@{name}"))
            .arg("-version")
            .current_dir(dir)
            .env("_JAVA_LAUNCHER_DEBUG", "1")
            .output()
            .expect("java runs (install default-jdk-headless)");
        let text = out.stdout;
        let mut argv: Vec<Vec<u8>> = text
            .split(|&b| b == b'\n')
            .skip_while(|line| !line.starts_with(b"argv[0] = "))
            .take_while(|line| line.starts_with(b"argv["))
            .map(|line| {
                let at = line.windows(3).position(|w| w == b" = ").unwrap();
                line[at + 3..].to_vec()
            })
            .collect();
        assert_eq!(
            argv.first().map(Vec::as_slice),
            Some(&b"java"[..]),
            "{}",
            String::from_utf8_lossy(&text)
        );
        assert_eq!(argv.pop().as_deref(), Some(&b"-version"[..]));
        argv.remove(0);
        argv
    }

    /// The words of argument files as the launcher of the JDK installed
    /// here splits them, quirks included: a comment drops the unquoted
    /// text before it on its line and keeps the quoted, which starts the
    /// next word; a quote ends at its line's end; a backslash joins lines
    /// only inside quotes.
    #[test]
    fn argument_files_split_into_the_words_the_java_launcher_makes() {
        let cases = [
            (
                "plain",
                "-Da=1   -Db=2\n\t-XX:+PreserveFramePointer\r\nMain",
            ),
            (
                "comments",
                "# a comment\n-Da=1 # the rest\nx#y z\n  \n-Db=2",
            ),
            (
                "quoted",
                "-cp \"/a b/c\" 'it''s' pre\"fix\"post \"mixed 'q' in\"",
            ),
            (
                "escapes",
                "\"tab\\there\" \"back\\\\slash\" \"quote\\\"d\" plain\\back",
            ),
            ("joined", "\"one \\\n     two\" 'three \\\r\n\t four'"),
            ("open", "\"open quote\nnext 'also open"),
            ("carried", "-Da=1 'x y'#c\n-Db=2 \"\"#d\n\"\" e"),
            ("empty", "'' \"\" x"),
            ("nothing", "# only a comment\n\n   "),
        ];
        let dir = argfiles(&cases);
        for (name, text) in cases {
            let ours = argfile_words(text.as_bytes());
            let theirs = launcher_words(dir.path(), name);
            let show = |w: &[Vec<u8>]| {
                w.iter()
                    .map(|w| format!("{:?}", String::from_utf8_lossy(w)))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            assert_eq!(show(&ours), show(&theirs), "the words of {name}: {text:?}");
        }
    }

    /// Whether the JVM of the JDK installed here, run in `dir` with the
    /// launcher arguments `args` and `JDK_JAVA_OPTIONS`, keeps the frame
    /// pointer, as it says itself; and what `jvm_options` says.
    fn keeps_as_the_jvm_says(
        dir: &std::path::Path,
        args: &[&str],
        jdk_java_options: &str,
    ) -> (bool, bool) {
        let out = std::process::Command::new("java")
            .args(args)
            .current_dir(dir)
            .env("JAVA_TOOL_OPTIONS", "-XX:+PrintFlagsFinal")
            .env("JDK_JAVA_OPTIONS", jdk_java_options)
            .output()
            .expect("java runs (install default-jdk-headless)");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some("PreserveFramePointer"))
            .unwrap_or_else(|| panic!("no PreserveFramePointer in {text}"));
        let jvm = line.split_whitespace().nth(3) == Some("true");
        let cmdline: Vec<u8> = std::iter::once("java")
            .chain(args.iter().copied())
            .flat_map(|a| a.bytes().chain([0]))
            .collect();
        let environ = format!(
            "JAVA_TOOL_OPTIONS=-XX:+PrintFlagsFinal\0JDK_JAVA_OPTIONS={jdk_java_options}\0"
        );
        let read = |path: &[u8]| std::fs::read(dir.join(std::str::from_utf8(path).unwrap())).ok();
        let options = jvm_options(&cmdline, environ.as_bytes(), &read).unwrap();
        (jvm, keeps_frame_pointer(&options))
    }

    /// Argument files expanded where the launcher expands them, checked
    /// against what the JVM itself says of `PreserveFramePointer`.
    #[test]
    fn the_launchers_argument_files_are_read_as_it_reads_them() {
        let dir = argfiles(&[
            ("keep", "-XX:+PreserveFramePointer"),
            ("drop", "-XX:-PreserveFramePointer"),
            ("cp", "/nowhere -XX:+PreserveFramePointer"),
            ("main", "Main -XX:+PreserveFramePointer"),
            ("nested", "@keep"),
        ]);
        let dir = dir.path();
        let cases: [(&[&str], &str, bool); 9] = [
            (&["@keep", "Main"], "", true),
            (&["-XX:+PreserveFramePointer", "@drop", "Main"], "", false),
            // An option's value may come from a file: its first word.
            (&["-cp", "@cp", "Main"], "", true),
            // A file may name the main class: what follows it, in the
            // file or after it, is the program's.
            (&["@main", "-XX:+PreserveFramePointer"], "", false),
            (&["@keep", "@main", "-XX:-PreserveFramePointer"], "", true),
            // `@@` is an escaped `@`: a main class named `@keep`.
            (&["@@keep", "-XX:+PreserveFramePointer"], "", false),
            // A file's own `@` words are plain (here the main class).
            (&["@nested", "-XX:+PreserveFramePointer"], "", false),
            // JDK_JAVA_OPTIONS may name files too.
            (&["Main"], "@keep", true),
            (&["@drop", "Main"], "@keep", false),
        ];
        for (args, jdk_java_options, keeps) in cases {
            assert_eq!(
                keeps_as_the_jvm_says(dir, args, jdk_java_options),
                (keeps, keeps),
                "java {args:?} with JDK_JAVA_OPTIONS={jdk_java_options:?}: (the JVM, ours)"
            );
        }
        // A file that cannot be read now: not known.
        let cmdline = b"java\0@gone\0Main\0";
        assert_eq!(jvm_options(cmdline, b"", &|_| None), None);
        // After --disable-@files an `@` word is plain.
        let cmdline = b"java\0--disable-@files\0@keep\0Main\0";
        let read = |_: &[u8]| Some(b"-XX:+PreserveFramePointer".to_vec());
        assert!(!keeps_frame_pointer(
            &jvm_options(cmdline, b"", &read).unwrap()
        ));
        assert!(keeps_frame_pointer(
            &jvm_options(b"java\0@keep\0Main\0", b"", &read).unwrap()
        ));
    }

    /// A process's argument files: relative ones in its working
    /// directory; only regular files, whole and not too large (a FIFO
    /// there must not block the recorder).
    #[test]
    fn a_process_argument_file_is_read_only_where_it_is_a_whole_regular_file() {
        let dir = argfiles(&[("keep", "-XX:+PreserveFramePointer")]);
        std::fs::write(
            dir.path().join("large"),
            vec![b' '; MAX_ARGFILE as usize + 1],
        )
        .unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .current_dir(dir.path())
            .spawn()
            .unwrap();
        let pid = child.id();
        let absolute = dir.path().join("keep");
        assert_eq!(
            argfile_of(pid, b"keep").as_deref(),
            Some(&b"-XX:+PreserveFramePointer"[..])
        );
        assert_eq!(
            argfile_of(pid, absolute.to_str().unwrap().as_bytes()).as_deref(),
            Some(&b"-XX:+PreserveFramePointer"[..])
        );
        assert_eq!(argfile_of(pid, b"large"), None);
        assert_eq!(argfile_of(pid, b"fifo"), None);
        assert_eq!(argfile_of(pid, b"missing"), None);
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn an_interpreting_jvm_compiles_nothing() {
        assert!(read("java Busy", "").1);
        assert!(!read("java -Xint Busy", "").1);
        assert!(read("java -Xint -Xmixed Busy", "").1);
        assert!(!read("java Busy", "_JAVA_OPTIONS=-Xint").1);
    }

    #[test]
    fn only_a_process_that_maps_libjvm_is_counted_and_only_where_it_runs() {
        let libjvm = b"/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so";
        let mut node = JavaFrames::default();
        node.mapped(b"/usr/bin/node");
        node.walked_out_of_jit(std::process::id(), false);
        assert_eq!((node.walked, node.may_skip()), (0, 0));
        // This test's process, taken for a JVM: its options are read once
        // (what they say depends on the environment it runs in), and
        // both stacks are counted.
        let mut here = JavaFrames::default();
        here.mapped(libjvm);
        here.walked_out_of_jit(std::process::id(), false);
        here.walked_out_of_jit(std::process::id(), false);
        assert_eq!((here.walked, here.tries), (2, 1));
        assert!(here.compiled_without.is_some());
        // Not running here: nothing read, nothing said.
        let mut offline = JavaFrames::default();
        offline.mapped(libjvm);
        offline.walked_out_of_jit(std::process::id(), true);
        assert_eq!(offline.may_skip(), 0);
        // A process whose options cannot be read is tried again later.
        let mut gone = JavaFrames::default();
        gone.mapped(libjvm);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        gone.walked_out_of_jit(pid, false);
        assert_eq!((gone.walked, gone.compiled_without), (1, None));
        // A few times.
        for _ in 0..10 {
            gone.walked_out_of_jit(pid, false);
        }
        assert_eq!(gone.tries, MAX_TRIES);
    }
}
