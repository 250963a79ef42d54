//! What a JVM was told, from its process's command line and environment:
//! the options HotSpot reads, much as it and the `java` launcher read
//! them (the JDK's `libjli/args.c` and `java.c`), as far as the two
//! flags the Java note asks about.
//!
//! HotSpot reads three containers of options: `JAVA_TOOL_OPTIONS`, then
//! the options the program that started it passes (for the `java`
//! launcher: `JDK_JAVA_OPTIONS`, then its own arguments up to the main
//! class, `-jar`'s file or the module), then `_JAVA_OPTIONS`. In each, a
//! `-XX:VMOptionsFile=FILE` is replaced where it stands by the options of
//! FILE (split as the variables are). The last `-XX:Flags=FILE` of them
//! all names a settings file whose settings (`+Flag`, `-Flag`,
//! `Flag=value`; `#` comments) come first, before the three containers'
//! options; the last word on a flag decides (HotSpot's `arguments.cpp`).
//! The launcher replaces each `@file` argument (not inside an argument
//! file, not after `--disable-@files`; `@@` escapes an `@`) by the words
//! of that file, and splits a `--source` argument that holds spaces (a
//! script's `#!/usr/bin/java --source 21 ...` line) into words.
//!
//! A file that can no longer be read (moved, deleted, not a regular file
//! now, or past the bounds below) leaves the options unknown. A NUL byte
//! inside a file's word ends it, as the launcher and the JVM read it as a
//! C string. Not read: a `.hotspotrc` (read only by debug builds of the
//! JVM), and the options a runtime made by `jlink --add-options` keeps in
//! its `modules` image (`jdk/internal/vm/options`, read first by HotSpot,
//! its `-XX:Flags=` last).

use std::ops::ControlFlow;

/// An argument file's bytes read at most, and all of a process's
/// together: the launcher takes up to 2 GiB a file; one of options is a
/// few KiB.
pub(super) const MAX_ARGFILE_BYTES: u64 = 1 << 20;

/// Files (argument files, options files and the settings file) read at
/// most for one process.
const MAX_ARGFILES: usize = 16;

/// A settings file's word is cut here, and the file's reading ends
/// (HotSpot's `process_settings_file` reads into 1,024 bytes).
const MAX_SETTING: usize = 1023;

/// What a JVM's options say of the note's two questions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Flags {
    /// `-XX:+PreserveFramePointer`: compiled code keeps rbp (by default
    /// it does not).
    pub(super) keeps_frame_pointer: bool,
    /// Not `-Xint`: the JVM may compile.
    pub(super) may_compile: bool,
}

impl Default for Flags {
    fn default() -> Self {
        Flags {
            keeps_frame_pointer: false,
            may_compile: true,
        }
    }
}

/// `word` up to its first NUL byte: the JVM and the launcher read it as
/// a C string.
fn c_string(word: &[u8]) -> &[u8] {
    word.split(|&b| b == 0).next().unwrap_or_default()
}

impl Flags {
    /// One option, in its turn.
    fn take(&mut self, option: &[u8]) {
        match c_string(option) {
            b"-Xint" => self.may_compile = false,
            b"-Xmixed" | b"-Xcomp" => self.may_compile = true,
            _ => {
                if let Some(setting) = option.strip_prefix(b"-XX:") {
                    self.set(setting);
                }
            }
        }
    }

    /// One flag setting, as after `-XX:` or in a settings file. (HotSpot
    /// sets a boolean flag by `+` or `-` alone: `PreserveFramePointer=true`
    /// stops the JVM from starting.)
    fn set(&mut self, setting: &[u8]) {
        match c_string(setting) {
            b"+PreserveFramePointer" => self.keeps_frame_pointer = true,
            b"-PreserveFramePointer" => self.keeps_frame_pointer = false,
            _ => {}
        }
    }
}

/// The files a process's options name, read through a reader within one
/// budget of files and bytes.
struct Files<'a> {
    read: ReadArgfile<'a>,
    count: usize,
    bytes_left: u64,
}

impl Files<'_> {
    /// The bytes of the file at `path`; `None` where it cannot be read
    /// whole, or the budget is spent.
    fn read(&mut self, path: &[u8]) -> Option<Vec<u8>> {
        self.count += 1;
        if self.count > MAX_ARGFILES {
            return None;
        }
        let text = (self.read)(path, self.bytes_left)?;
        self.bytes_left = self.bytes_left.saturating_sub(text.len() as u64);
        Some(text)
    }
}

/// Reads an argument file: its path as given (relative to the process's
/// working directory) and the bytes left to read; `None` if it cannot be
/// read whole within them.
pub(super) type ReadArgfile<'a> = &'a dyn Fn(&[u8], u64) -> Option<Vec<u8>>;

/// The flags a JVM run with `cmdline` and `environ` (NUL-separated, as
/// `/proc` shows them) was given; `None` where an argument file the
/// launcher read cannot be read through `argfile` now, or more than
/// [`MAX_ARGFILES`] files or [`MAX_ARGFILE_BYTES`] bytes are named.
pub(super) fn jvm_flags(cmdline: &[u8], environ: &[u8], argfile: ReadArgfile<'_>) -> Option<Flags> {
    let variable = |name: &[u8]| {
        environ.split(|&b| b == 0).find_map(|entry| {
            entry
                .strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(b"="))
        })
    };
    let mut files = Files {
        read: argfile,
        count: 0,
        bytes_left: MAX_ARGFILE_BYTES,
    };
    let tool = variable_words(variable(b"JAVA_TOOL_OPTIONS").unwrap_or_default());
    let mut passed = Vec::new();
    let mut args = cmdline.split(|&b| b == 0);
    let program = args.next().unwrap_or_default();
    if program.rsplit(|&b| b == b'/').next() == Some(b"java") {
        let mut launcher = Launcher {
            options: Vec::new(),
            files: &mut files,
            expand: true,
            value_next: false,
            main_found: false,
        };
        for word in variable_words(variable(b"JDK_JAVA_OPTIONS").unwrap_or_default()) {
            launcher.argument(&word, Source::Variable)?;
        }
        for arg in args {
            if launcher.main_found {
                break;
            }
            launcher.argument(arg, Source::CommandLine)?;
        }
        passed = launcher.options;
    }
    let java = variable_words(variable(b"_JAVA_OPTIONS").unwrap_or_default());
    let mut containers = [tool, passed, java];
    for options in &mut containers {
        *options = with_options_file(std::mem::take(options), &mut files)?;
    }
    let mut flags = Flags::default();
    let settings = containers
        .iter()
        .flatten()
        .filter_map(|o| c_string(o).strip_prefix(b"-XX:Flags="))
        .next_back();
    if let Some(path) = settings {
        for setting in settings_words(&files.read(path)?) {
            flags.set(&setting);
        }
    }
    for option in containers.iter().flatten() {
        flags.take(option);
    }
    Some(flags)
}

/// A container's options with each `-XX:VMOptionsFile=FILE` replaced by
/// the options of FILE, where it stands (HotSpot refuses a second one in
/// one container, and one inside such a file: the JVM would not start,
/// and they are read here as plain options); `None` where a file cannot
/// be read.
fn with_options_file(options: Vec<Vec<u8>>, files: &mut Files<'_>) -> Option<Vec<Vec<u8>>> {
    if !options.iter().any(|o| o.starts_with(b"-XX:VMOptionsFile=")) {
        return Some(options);
    }
    let mut out = Vec::with_capacity(options.len());
    for option in options {
        match option.strip_prefix(b"-XX:VMOptionsFile=") {
            Some(path) => out.extend(variable_words(&files.read(c_string(path))?)),
            None => out.push(option),
        }
    }
    Some(out)
}

/// The settings of a settings file (`-XX:Flags=`), as HotSpot's
/// `process_settings_file` splits them: apart by whitespace, a `#`
/// between settings starting a comment to the end of its line, a part in
/// `'` or `"` quotes kept whole but for a line end, which ends a setting
/// anywhere. A setting of [`MAX_SETTING`] bytes ends the reading there.
fn settings_words(text: &[u8]) -> Vec<Vec<u8>> {
    let mut words = Vec::new();
    let mut word = Vec::new();
    let (mut between, mut comment, mut quote) = (true, false, None);
    for &b in text {
        if word.len() >= MAX_SETTING {
            // HotSpot's loop stops: this setting is the file's last.
            break;
        }
        if between {
            if comment {
                comment = b != b'\n';
            } else if b == b'#' {
                comment = true;
            } else if !b.is_ascii_whitespace() && b != 0x0b {
                between = false;
                word.push(b);
            }
            continue;
        }
        match quote {
            _ if b == b'\n' => {
                words.push(std::mem::take(&mut word));
                (between, quote) = (true, None);
            }
            None if b.is_ascii_whitespace() || b == 0x0b => {
                words.push(std::mem::take(&mut word));
                between = true;
            }
            None if b == b'\'' || b == b'"' => quote = Some(b),
            Some(q) if b == q => quote = None,
            _ => word.push(b),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// The words of an options variable: apart by whitespace, a part in `'`
/// or `"` quotes taken as it is (whitespace included), as both the
/// launcher and HotSpot split them.
fn variable_words(value: &[u8]) -> Vec<Vec<u8>> {
    let mut words = Vec::new();
    let mut word = None::<Vec<u8>>;
    let mut quote = None;
    for &b in value {
        match quote {
            Some(q) if b == q => quote = None,
            None if b.is_ascii_whitespace() || b == 0x0b => words.extend(word.take()),
            None if b == b'\'' || b == b'"' => {
                word.get_or_insert_with(Vec::new);
                quote = Some(b);
            }
            _ => word.get_or_insert_with(Vec::new).push(b),
        }
    }
    words.extend(word);
    words
}

/// Where a launcher argument came from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The command line: an `@file` is expanded, a `--source` with
    /// spaces split.
    CommandLine,
    /// `JDK_JAVA_OPTIONS`, or a word of a split `--source`: an `@file` is
    /// expanded.
    Variable,
    /// An argument file: taken as it is.
    Argfile,
}

/// The `java` launcher reading its arguments.
struct Launcher<'a, 'b> {
    /// The options it passes to the JVM, in order.
    options: Vec<Vec<u8>>,
    files: &'a mut Files<'b>,
    /// Not past `--disable-@files`.
    expand: bool,
    /// The word before takes the next as its value.
    value_next: bool,
    /// The main class (or `-jar`, `-m`, `--module=`) came: what follows
    /// is the program's.
    main_found: bool,
}

impl Launcher<'_, '_> {
    /// One argument from `source`, expanded as the launcher expands it;
    /// `None` where an argument file cannot be read.
    fn argument(&mut self, arg: &[u8], source: Source) -> Option<()> {
        if self.main_found {
            return Some(());
        }
        if source == Source::CommandLine && arg.starts_with(b"--source") && arg.contains(&b' ') {
            for word in arg.split(u8::is_ascii_whitespace).filter(|w| !w.is_empty()) {
                self.argument(word, Source::Variable)?;
            }
            return Some(());
        }
        match arg.strip_prefix(b"@") {
            Some(path) if self.expand && source != Source::Argfile && !path.is_empty() => {
                if path.starts_with(b"@") {
                    // `@@word`: the word `@word`.
                    self.word(path);
                } else {
                    let text = self.files.read(path)?;
                    for_each_word(&text, &mut |word| {
                        self.word(word);
                        if self.main_found {
                            ControlFlow::Break(())
                        } else {
                            ControlFlow::Continue(())
                        }
                    });
                }
            }
            _ => self.word(arg),
        }
        Some(())
    }

    /// One word, expanded: an option, an option's value, or the main
    /// class.
    fn word(&mut self, word: &[u8]) {
        let word = c_string(word);
        // Wherever it stands, even as an option's value (args.c's checkArg).
        if word == b"--disable-@files" {
            self.expand = false;
        }
        if std::mem::take(&mut self.value_next) {
            return;
        }
        if WITH_VALUE.contains(&word) {
            self.value_next = true;
        } else if !word.starts_with(b"-")
            || [&b"-jar"[..], b"-m", b"--module"].contains(&word)
            || word.starts_with(b"--module=")
        {
            self.main_found = true;
        } else {
            self.options.push(word.to_vec());
        }
    }
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

/// The launcher reads an argument file this many bytes at a time, and a
/// word cut at the end of a piece is kept whole past a comment after it.
const ARGFILE_PIECE: usize = 4096;

/// Each word of an argument file, as the `java` launcher splits it (JDK
/// 9 and later): apart by spaces, tabs, form feeds and line ends. `'` or
/// `"` quote part of a word: inside, whitespace and `#` are plain, a
/// backslash makes `n`, `r`, `t`, `f` those characters and any other
/// character itself, a backslash before a line end joins the next line
/// without its leading whitespace, and a line end (unescaped) ends the
/// word, and so the quote. Outside quotes a backslash is plain, and a `#`
/// starts a comment to the end of its line and drops what of the word
/// came after its last quote or escape (what came before starts the next
/// word, as the launcher has it). `f` may stop the walk.
fn for_each_word(text: &[u8], f: &mut dyn FnMut(&[u8]) -> ControlFlow<()>) {
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
    let mut word = Vec::new();
    // How much of `word` a comment keeps: up to its last quote or escape
    // (or the end of the launcher's last piece), where its parts end.
    let mut kept = 0;
    let mut state = State::Between;
    for (at, &b) in text.iter().enumerate() {
        if at > 0 && at % ARGFILE_PIECE == 0 && matches!(state, State::Word | State::Quoted(_)) {
            kept = word.len();
        }
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
                let flow = f(&word);
                word.clear();
                kept = 0;
                if flow.is_break() {
                    return;
                }
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
        let _ = f(&word);
    }
}

#[cfg(test)]
mod tests;
