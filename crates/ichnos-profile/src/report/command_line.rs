//! A recorded command line as a shell would read it back: what the
//! outputs show of it on one line.
//!
//! The words were run without a shell, and may hold spaces, quotes or
//! newlines (`python3 -c` with a script); joined with spaces they would
//! read as other words, and a newline would break a report's header
//! lines (each starts with `#`). Each word is shown as it is where no
//! shell would split or expand it, in single quotes where it holds no
//! quote or control character, and else in bash's `$'...'` quoting, with
//! escapes for the quote, the backslash and control characters.

use std::fmt::Write;

use super::Description;

impl Description {
    /// The recorded command line, each word quoted as a shell would need
    /// it (empty where nothing was recorded).
    #[must_use]
    pub fn command_line(&self) -> String {
        quote_words(&self.command)
    }
}

/// `words` quoted for a shell (bash, for a word with control characters)
/// and joined with spaces.
#[must_use]
pub fn quote_words(words: &[String]) -> String {
    let mut out = String::new();
    for (i, word) in words.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        quote_word(word, &mut out);
    }
    out
}

/// Characters no shell splits on or expands.
fn plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c)
}

fn quote_word(word: &str, out: &mut String) {
    if !word.is_empty() && word.chars().all(plain) {
        out.push_str(word);
    } else if !word.chars().any(|c| c == '\'' || c.is_control()) {
        out.push('\'');
        out.push_str(word);
        out.push('\'');
    } else {
        out.push_str("$'");
        for c in word.chars() {
            match c {
                '\'' => out.push_str("\\'"),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                // Writing to a String cannot fail.
                c if c.is_control() => {
                    let mut bytes = [0u8; 4];
                    for b in c.encode_utf8(&mut bytes).bytes() {
                        let _ = write!(out, "\\x{b:02x}");
                    }
                }
                c => out.push(c),
            }
        }
        out.push('\'');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_words_stay_as_they_are_and_others_are_quoted() {
        let words =
            |w: &[&str]| quote_words(&w.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
        assert_eq!(
            words(&["./run", "-F", "1000", "a=b,c:d@e%f+g"]),
            "./run -F 1000 a=b,c:d@e%f+g"
        );
        assert_eq!(
            words(&["echo", "a b", "", "$HOME", "*"]),
            "echo 'a b' '' '$HOME' '*'"
        );
        assert_eq!(
            words(&["python3", "-c", "\nimport json\nprint('x')\t"]),
            "python3 -c $'\\nimport json\\nprint(\\'x\\')\\t'"
        );
        assert_eq!(words(&["a\u{1}b\\"]), "$'a\\x01b\\\\'");
        assert_eq!(words(&[]), "");
    }

    /// bash reads each quoted word back as the word it was: its own
    /// parser is the truth.
    #[test]
    fn bash_reads_the_words_back() {
        let words: Vec<String> = [
            "plain",
            "two words",
            "",
            "it's",
            "back\\slash",
            "\nimport json\nprint('x')\n",
            "tab\there",
            "bell\u{7}and\u{1b}[0m",
            "$(echo injected) `echo x` ${HOME} !z",
            "\"double\"",
            "ünïcödé ☃",
            "semi;colon&amp|pipe>redirect<in",
            "~tilde #hash",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let script = format!("printf '%s\\0' {}", quote_words(&words));
        let out = std::process::Command::new("bash")
            .args(["-c", &script])
            .output()
            .expect("bash runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let back: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .split_terminator('\0')
            .map(str::to_owned)
            .collect();
        assert_eq!(back, words);
    }
}
