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
//! missing. perf's frame-pointer and DWARF modes fare the same. Which
//! stacks skipped frames cannot be told; the recorder counts those walked
//! out of JIT code by the frame pointer in a Java process that did not
//! ask to keep it, and says so at the end.

use super::MappingInfo;

/// What a process's stacks walked out of JIT code by the frame pointer
/// say of Java.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct JavaFrames {
    /// Stacks walked out of JIT code by the frame pointer.
    walked: u64,
    /// Whether that skips frames: a Java process without
    /// `-XX:+PreserveFramePointer` (`None` until the first such stack).
    skips: Option<bool>,
}

impl JavaFrames {
    /// A stack of process `pid` (whose mappings are `mappings`; not
    /// running here if `offline`, and then nothing is read of it) was
    /// walked out of JIT code by the frame pointer.
    pub fn walked_out_of_jit(&mut self, pid: u32, mappings: &[MappingInfo], offline: bool) {
        self.walked += 1;
        if self.skips.is_none() {
            self.skips = Some(!offline && is_java(mappings) && !keeps_frame_pointer_in(pid));
        }
    }

    /// The stacks that may have skipped frames.
    pub fn may_skip(&self) -> u64 {
        if self.skips == Some(true) {
            self.walked
        } else {
            0
        }
    }
}

/// Whether the process runs HotSpot: it maps `libjvm.so`.
fn is_java(mappings: &[MappingInfo]) -> bool {
    mappings.iter().any(|m| m.path.ends_with(b"/libjvm.so"))
}

/// Whether the JVM of process `pid` keeps the frame pointer, by its
/// command line and environment (if they cannot be read: taken to, and
/// nothing is said).
fn keeps_frame_pointer_in(pid: u32) -> bool {
    let read = |what: &str| std::fs::read(format!("/proc/{pid}/{what}"));
    match (read("cmdline"), read("environ")) {
        (Ok(cmdline), Ok(environ)) => keeps_frame_pointer(&cmdline, &environ),
        _ => true,
    }
}

/// Whether a JVM run with `cmdline` and `environ` (NUL-separated, as
/// `/proc` shows them) keeps the frame pointer: the last word on
/// `PreserveFramePointer`, in the order HotSpot reads its options
/// (`JAVA_TOOL_OPTIONS`, then `JDK_JAVA_OPTIONS`, which the `java`
/// launcher puts before its arguments, then the command line, then
/// `_JAVA_OPTIONS`), says; by default it does not.
pub(crate) fn keeps_frame_pointer(cmdline: &[u8], environ: &[u8]) -> bool {
    let variable = |name: &[u8]| -> Vec<&[u8]> {
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
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let words = variable(b"JAVA_TOOL_OPTIONS")
        .into_iter()
        .chain(variable(b"JDK_JAVA_OPTIONS"))
        .chain(args)
        .chain(variable(b"_JAVA_OPTIONS"));
    let mut keeps = false;
    for word in words {
        match word {
            b"-XX:+PreserveFramePointer" => keeps = true,
            b"-XX:-PreserveFramePointer" => keeps = false,
            _ => {}
        }
    }
    keeps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_word_on_preserve_frame_pointer_in_hotspots_order_decides() {
        let keeps = |cmdline: &str, environ: &str| {
            keeps_frame_pointer(
                cmdline.replace(' ', "\0").as_bytes(),
                environ.replace('|', "\0").as_bytes(),
            )
        };
        // By default compiled code keeps no frame pointer.
        assert!(!keeps("java -cp . Busy", "HOME=/root|PATH=/bin"));
        assert!(keeps("java -XX:+PreserveFramePointer -cp . Busy", ""));
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
    }

    #[test]
    fn only_a_process_that_maps_libjvm_is_java() {
        let mapping = |path: &str| MappingInfo {
            range: 0..1,
            pgoff: 0,
            path: std::sync::Arc::from(path.as_bytes()),
        };
        assert!(is_java(&[
            mapping("/usr/lib/x86_64-linux-gnu/libc.so.6"),
            mapping("/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"),
        ]));
        assert!(!is_java(&[mapping("/usr/bin/node"), mapping("//anon")]));
        // Not running here: nothing read, nothing said.
        let mut frames = JavaFrames::default();
        frames.walked_out_of_jit(
            std::process::id(),
            &[mapping(
                "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so",
            )],
            true,
        );
        assert_eq!(frames.may_skip(), 0);
    }
}
