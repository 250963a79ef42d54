//! The launcher's reading checked against the launcher and the JVM of
//! the JDK installed here (`default-jdk-headless`): the words of
//! argument files as its debug output lists them, and
//! `PreserveFramePointer` as `-XX:+PrintFlagsFinal` says it.

use super::*;

/// The option variables, which the tests set themselves or clear.
const VARIABLES: [&str; 3] = ["JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS"];

/// Whether a JVM run with `cmdline` (words apart by spaces) and
/// `environ` (entries apart by `|`) keeps the frame pointer in the
/// code it compiles, and may compile at all.
fn read(cmdline: &str, environ: &str) -> (bool, bool) {
    let (cmdline, environ) = (cmdline.replace(' ', "\0"), environ.replace('|', "\0"));
    let flags = jvm_flags(cmdline.as_bytes(), environ.as_bytes(), &|_, _| None).unwrap();
    (flags.keeps_frame_pointer, flags.may_compile)
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
fn variables_split_on_whitespace_keeping_quoted_parts_whole() {
    let words = |v: &str| {
        variable_words(v.as_bytes())
            .into_iter()
            .map(|w| String::from_utf8(w).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(words("  -Da=1\t-Db=2 "), ["-Da=1", "-Db=2"]);
    assert_eq!(words("-Dx=\"a b\" 'c d'e"), ["-Dx=a b", "c de"]);
    assert_eq!(words("'' x"), ["", "x"]);
    assert!(words("").is_empty());
}

/// The argument files of `cases` (name, text) in a directory of their
/// own.
fn argfiles(cases: &[(&str, String)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in cases {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

/// A `java` of the JDK installed here, in `dir`, with none of the option
/// variables of the environment the tests run in.
fn java(dir: &std::path::Path) -> std::process::Command {
    let mut java = std::process::Command::new("java");
    java.current_dir(dir);
    for v in VARIABLES {
        java.env_remove(v);
    }
    java
}

/// How the `java` launcher itself splits the argument file `name` in
/// `dir`: its debug output lists its arguments once expanded.
fn launcher_words(dir: &std::path::Path, name: &str) -> Vec<Vec<u8>> {
    let out = java(dir)
        .arg(format!("@{name}"))
        .arg("-version")
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

/// The words of an argument file, by [`for_each_word`].
fn words_of(text: &[u8]) -> Vec<Vec<u8>> {
    let mut words = Vec::new();
    for_each_word(text, &mut |w| {
        words.push(w.to_vec());
        ControlFlow::Continue(())
    });
    words
}

/// The words of argument files as the launcher of the JDK installed here
/// splits them, quirks included: a comment drops what of its word came
/// after the last quote (and keeps what came before, which starts the
/// next word), a quote ends at its line's end, a backslash joins lines
/// only inside quotes, and a word cut where the launcher's 4 KiB reads
/// end is kept whole past a comment.
#[test]
fn argument_files_split_into_the_words_the_java_launcher_makes() {
    let cut = format!("{}abc#x\nnext", " ".repeat(ARGFILE_PIECE - 2));
    let cases = [
        (
            "plain",
            "-Da=1   -Db=2\n\t-XX:+PreserveFramePointer\r\nMain".to_owned(),
        ),
        (
            "comments",
            "# a comment\n-Da=1 # the rest\nx#y z\n  \n-Db=2".to_owned(),
        ),
        (
            "quoted",
            "-cp \"/a b/c\" 'it''s' pre\"fix\"post \"mixed 'q' in\"".to_owned(),
        ),
        (
            "escapes",
            "\"tab\\there\" \"back\\\\slash\" \"quote\\\"d\" plain\\back".to_owned(),
        ),
        ("controls", "\"cr\\r ff\\f other\\q\"".to_owned()),
        (
            "joined",
            "\"one \\\n     two\" 'three \\\r\n\t four'".to_owned(),
        ),
        ("open", "\"open quote\nnext 'also open".to_owned()),
        ("carried", "-Da=1 'x y'#c\n-Db=2 \"\"#d\n\"\" e".to_owned()),
        ("before a quote", "pre'q'post#c\nX".to_owned()),
        ("empty", "'' \"\" x".to_owned()),
        ("nothing", "# only a comment\n\n   ".to_owned()),
        ("cut", cut),
    ];
    let dir = argfiles(&cases);
    for (name, text) in &cases {
        let ours = words_of(text.as_bytes());
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
/// pointer, as it says itself; and what [`jvm_flags`] says.
fn keeps_as_the_jvm_says(
    dir: &std::path::Path,
    args: &[&str],
    jdk_java_options: &str,
) -> (bool, bool) {
    keeps_as_the_jvm_says_with(dir, args, jdk_java_options, "")
}

/// [`keeps_as_the_jvm_says`], with `JAVA_TOOL_OPTIONS` holding `tool`
/// (and `-XX:+PrintFlagsFinal`, first) and `_JAVA_OPTIONS` `java_options`
/// where not empty.
fn keeps_as_the_jvm_says_with(
    dir: &std::path::Path,
    args: &[&str],
    jdk_java_options: &str,
    java_options: &str,
) -> (bool, bool) {
    let mut command = java(dir);
    command
        .args(args)
        .env("JAVA_TOOL_OPTIONS", "-XX:+PrintFlagsFinal")
        .env("JDK_JAVA_OPTIONS", jdk_java_options);
    if !java_options.is_empty() {
        command.env("_JAVA_OPTIONS", java_options);
    }
    let out = command
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
    let mut environ =
        format!("JAVA_TOOL_OPTIONS=-XX:+PrintFlagsFinal\0JDK_JAVA_OPTIONS={jdk_java_options}\0");
    if !java_options.is_empty() {
        environ.push_str("_JAVA_OPTIONS=");
        environ.push_str(java_options);
        environ.push('\0');
    }
    let read = |path: &[u8], most: u64| {
        let text = std::fs::read(dir.join(std::str::from_utf8(path).unwrap())).ok()?;
        (text.len() as u64 <= most).then_some(text)
    };
    let flags = jvm_flags(&cmdline, environ.as_bytes(), &read).unwrap();
    (jvm, flags.keeps_frame_pointer)
}

/// Argument files expanded where the launcher expands them, checked
/// against what the JVM itself says of `PreserveFramePointer`.
#[test]
fn the_launchers_argument_files_are_read_as_it_reads_them() {
    let dir = argfiles(&[
        ("keep", "-XX:+PreserveFramePointer".to_owned()),
        ("drop", "-XX:-PreserveFramePointer".to_owned()),
        ("cp", "/nowhere -XX:+PreserveFramePointer".to_owned()),
        ("main", "Main -XX:+PreserveFramePointer".to_owned()),
        ("nested", "@keep".to_owned()),
        ("a b", "-XX:+PreserveFramePointer".to_owned()),
    ]);
    let dir = dir.path();
    let cases: [(&[&str], &str, bool); 11] = [
        (&["@keep", "Main"], "", true),
        (&["-XX:+PreserveFramePointer", "@drop", "Main"], "", false),
        // An option's value may come from a file: its first word.
        (&["-cp", "@cp", "Main"], "", true),
        // A file may name the main class: what follows it, in the file or
        // after it, is the program's.
        (&["@main", "-XX:+PreserveFramePointer"], "", false),
        (&["@keep", "@main", "-XX:-PreserveFramePointer"], "", true),
        // `@@` is an escaped `@`: a main class named `@keep`.
        (&["@@keep", "-XX:+PreserveFramePointer"], "", false),
        // A file's own `@` words are plain (here the main class).
        (&["@nested", "-XX:+PreserveFramePointer"], "", false),
        // JDK_JAVA_OPTIONS may name files too, quoted.
        (&["Main"], "@keep", true),
        (&["@drop", "Main"], "@keep", false),
        (&["Main"], "'@a b'", true),
        // A script's `--source` line, split into words.
        (&["--source 17 @keep", "Main.java"], "", true),
    ];
    for (args, jdk_java_options, keeps) in cases {
        assert_eq!(
            keeps_as_the_jvm_says(dir, args, jdk_java_options),
            (keeps, keeps),
            "java {args:?} with JDK_JAVA_OPTIONS={jdk_java_options:?}: (the JVM, ours)"
        );
    }
}

/// Options files (`-XX:VMOptionsFile=`) and settings files
/// (`-XX:Flags=`) read as HotSpot reads them, checked against what the
/// JVM itself says of `PreserveFramePointer`.
#[test]
fn options_and_settings_files_are_read_as_the_jvm_reads_them() {
    let dir = argfiles(&[
        (
            "keep.opts",
            "-Xmx64m '-XX:+PreserveFramePointer'".to_owned(),
        ),
        ("drop.opts", "-XX:-PreserveFramePointer".to_owned()),
        ("settings.opts", "-XX:Flags=keep.rc".to_owned()),
        ("keep.rc", "# a comment\n+PreserveFramePointer\n".to_owned()),
        ("drop.rc", "-PreserveFramePointer".to_owned()),
        ("commented.rc", "#+PreserveFramePointer\n".to_owned()),
        (
            "keep_then_comment.rc",
            "+PreserveFramePointer #-PreserveFramePointer".to_owned(),
        ),
    ]);
    let dir = dir.path();
    let cases: [(&[&str], &str, bool); 11] = [
        (&["-XX:VMOptionsFile=keep.opts", "Main"], "", true),
        // In place: the options after it have the last word.
        (
            &[
                "-XX:VMOptionsFile=keep.opts",
                "-XX:-PreserveFramePointer",
                "Main",
            ],
            "",
            false,
        ),
        (
            &[
                "-XX:+PreserveFramePointer",
                "-XX:VMOptionsFile=drop.opts",
                "Main",
            ],
            "",
            false,
        ),
        (&["Main"], "-XX:VMOptionsFile=keep.opts", true),
        (&["-XX:Flags=keep.rc", "Main"], "", true),
        (&["-XX:Flags=commented.rc", "Main"], "", false),
        (&["-XX:Flags=keep_then_comment.rc", "Main"], "", true),
        // The settings file comes first, whatever its place.
        (
            &["-XX:-PreserveFramePointer", "-XX:Flags=keep.rc", "Main"],
            "",
            false,
        ),
        (
            &["-XX:+PreserveFramePointer", "-XX:Flags=drop.rc", "Main"],
            "",
            true,
        ),
        // The last one named is the one read; an options file may name it.
        (
            &["-XX:Flags=keep.rc", "-XX:Flags=drop.rc", "Main"],
            "",
            false,
        ),
        (&["-XX:VMOptionsFile=settings.opts", "Main"], "", true),
    ];
    for (args, jdk_java_options, keeps) in cases {
        assert_eq!(
            keeps_as_the_jvm_says(dir, args, jdk_java_options),
            (keeps, keeps),
            "java {args:?} with JDK_JAVA_OPTIONS={jdk_java_options:?}: (the JVM, ours)"
        );
    }
    // _JAVA_OPTIONS, the last container: its options file comes after the
    // command line's options, and its settings file is the last named.
    let last: [(&[&str], &str, bool); 3] = [
        (
            &["-XX:-PreserveFramePointer", "Main"],
            "-XX:VMOptionsFile=keep.opts",
            true,
        ),
        (&["-XX:Flags=keep.rc", "Main"], "-XX:Flags=drop.rc", false),
        (&["-XX:Flags=drop.rc", "Main"], "-XX:Flags=keep.rc", true),
    ];
    for (args, java_options, keeps) in last {
        assert_eq!(
            keeps_as_the_jvm_says_with(dir, args, "", java_options),
            (keeps, keeps),
            "java {args:?} with _JAVA_OPTIONS={java_options:?}: (the JVM, ours)"
        );
    }
    // A NUL ends an option, as the JVM reads a C string.
    let nul = |_: &[u8], _: u64| Some(b"-XX:+PreserveFramePointer\0x".to_vec());
    let flags = jvm_flags(b"java\0-XX:VMOptionsFile=f\0Main\0", b"", &nul).unwrap();
    assert!(flags.keeps_frame_pointer);
    // Files that cannot be read leave the flags unknown (the JVM would
    // not start).
    let none = |_: &[u8], _: u64| None;
    assert_eq!(jvm_flags(b"java\0-XX:Flags=gone\0Main\0", b"", &none), None);
    assert_eq!(
        jvm_flags(
            b"java\0Main\0",
            b"_JAVA_OPTIONS=-XX:VMOptionsFile=gone\0",
            &none
        ),
        None
    );
}

#[test]
fn settings_files_split_as_hotspot_splits_them() {
    let words = |text: &str| -> Vec<String> {
        settings_words(text.as_bytes())
            .into_iter()
            .map(|w| String::from_utf8(w).unwrap())
            .collect()
    };
    assert_eq!(words("+A  -B\n\tC=1 # D\n#E\nF"), ["+A", "-B", "C=1", "F"]);
    // Quotes keep whitespace, not a line end; a quote that opens a
    // setting is a plain character.
    assert_eq!(words("S='a b'c\n"), ["S=a bc"]);
    assert_eq!(words("S='a\nb"), ["S=a", "b"]);
    assert_eq!(words("'x y"), ["'x", "y"]);
    // A `#` inside a setting is plain.
    assert_eq!(words("A#B"), ["A#B"]);
    // The reading ends at a setting of 1,023 bytes.
    let long = format!("{} +B", "x".repeat(2000));
    assert_eq!(words(&long), ["x".repeat(MAX_SETTING)]);
}

/// What cannot be read, or is past the bounds, leaves the flags unknown;
/// `--disable-@files` (even as an option's value) stops the expansion.
#[test]
fn argument_files_past_reach_leave_the_flags_unknown() {
    let keep = |_: &[u8], _: u64| Some(b"-XX:+PreserveFramePointer".to_vec());
    let flags = |cmdline: &[u8], read: ReadArgfile<'_>| jvm_flags(cmdline, b"", read);
    assert_eq!(flags(b"java\0@gone\0Main\0", &|_, _| None), None);
    assert!(
        flags(b"java\0@keep\0Main\0", &keep)
            .unwrap()
            .keeps_frame_pointer
    );
    let disabled = flags(b"java\0--disable-@files\0@keep\0Main\0", &keep).unwrap();
    assert!(!disabled.keeps_frame_pointer);
    let as_value = flags(b"java\0-cp\0--disable-@files\0@keep\0Main\0", &keep).unwrap();
    assert!(!as_value.keeps_frame_pointer);
    // Sixteen files at most; their bytes together within the bound.
    let many: Vec<u8> = std::iter::once(&b"java"[..])
        .chain(std::iter::repeat_n(&b"@keep"[..], MAX_ARGFILES + 1))
        .chain([&b"Main"[..]])
        .flat_map(|a| a.iter().copied().chain([0]))
        .collect();
    assert_eq!(flags(&many, &keep), None);
    let half = (MAX_ARGFILE_BYTES / 2 + 1) as usize;
    let large = |_: &[u8], most: u64| (half as u64 <= most).then(|| vec![b' '; half]);
    assert!(flags(b"java\0@a\0Main\0", &large).is_some());
    assert_eq!(flags(b"java\0@a\0@b\0Main\0", &large), None);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Whatever a process's command line, environment and argument files
    /// hold, the reading ends without a panic, and an argument file's
    /// words hold no byte the file did not.
    #[test]
    fn any_command_line_environment_and_argument_file_is_read(
        cmdline in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
        environ in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
        file in proptest::collection::vec(
            proptest::prop_oneof![
                proptest::prelude::any::<u8>(),
                proptest::sample::select(b" \t\n\r#'\"\\@-".to_vec()),
            ],
            0..300,
        ),
    ) {
        // The same file as an options file (which may name itself), a
        // settings file and an argument file.
        let mut cmdline = [&b"java\0-XX:VMOptionsFile=f\0-XX:Flags=f\0"[..], &cmdline].concat();
        cmdline.extend_from_slice(b"\0@f\0");
        let read = |_: &[u8], most: u64| (file.len() as u64 <= most).then(|| file.clone());
        let _ = jvm_flags(&cmdline, &environ, &read);
        let mut bytes = 0;
        for_each_word(&file, &mut |w| {
            bytes += w.len();
            ControlFlow::Continue(())
        });
        proptest::prop_assert!(bytes <= file.len());
        let settings: usize = settings_words(&file).iter().map(Vec::len).sum();
        proptest::prop_assert!(settings <= file.len());
    }
}
