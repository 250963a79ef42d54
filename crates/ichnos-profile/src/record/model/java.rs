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
//! was not told to keep the frame pointer, says so at the end.

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
            self.compiled_without = options_of(pid).map(|(cmdline, environ)| {
                let options = jvm_options(&cmdline, &environ);
                may_compile(&options) && !keeps_frame_pointer(&options)
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
/// module: what follows is the program's); `_JAVA_OPTIONS`. Options in
/// `@argfiles`, `-XX:Flags=` or `-XX:VMOptionsFile=` files are not read.
fn jvm_options<'a>(cmdline: &'a [u8], environ: &'a [u8]) -> Vec<&'a [u8]> {
    let variable = |name: &[u8]| -> Vec<&'a [u8]> {
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
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut args = cmdline.split(|&b| b == 0);
    let launcher = args.next().unwrap_or_default();
    let java = launcher.rsplit(|&b| b == b'/').next() == Some(b"java");
    let mut options = variable(b"JAVA_TOOL_OPTIONS");
    if java {
        options.extend(variable(b"JDK_JAVA_OPTIONS"));
        while let Some(arg) = args.next() {
            if WITH_VALUE.contains(&arg) {
                args.next();
            } else if !arg.starts_with(b"-")
                || [&b"-jar"[..], b"-m", b"--module"].contains(&arg)
                || arg.starts_with(b"--module=")
            {
                break;
            } else {
                options.push(arg);
            }
        }
    }
    options.extend(variable(b"_JAVA_OPTIONS"));
    options
}

/// Whether `options` (in order) leave the frame pointer kept: the last
/// word on `PreserveFramePointer`; by default it is not.
fn keeps_frame_pointer(options: &[&[u8]]) -> bool {
    options.iter().fold(false, |keeps, &option| match option {
        b"-XX:+PreserveFramePointer" => true,
        b"-XX:-PreserveFramePointer" => false,
        _ => keeps,
    })
}

/// Whether `options` let the JVM compile: not `-Xint` (interpreted
/// only), unless a later mode option overrides it.
fn may_compile(options: &[&[u8]]) -> bool {
    options.iter().fold(true, |compiles, &option| match option {
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
        let options = jvm_options(cmdline.as_bytes(), environ.as_bytes());
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
