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
    /// it (empty where nothing was recorded): from the words' bytes, so
    /// that one not valid UTF-8 reads back as it was.
    #[must_use]
    pub fn command_line(&self) -> String {
        if self.command_bytes.len() == self.command.len() {
            quote_words(&self.command_bytes)
        } else {
            quote_words(&self.command)
        }
    }
}

/// `words` quoted for a shell (bash, for a word with control characters
/// or bytes that are not UTF-8) and joined with spaces.
#[must_use]
pub fn quote_words<W: AsRef<[u8]>>(words: &[W]) -> String {
    let mut out = String::new();
    for (i, word) in words.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        quote_word(word.as_ref(), &mut out);
    }
    out
}

/// Characters no shell splits on or expands.
fn plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c)
}

fn quote_word(word: &[u8], out: &mut String) {
    let text = std::str::from_utf8(word).ok();
    if let Some(text) = text.filter(|t| !t.is_empty() && t.chars().all(plain)) {
        out.push_str(text);
    } else if let Some(text) = text.filter(|t| !t.chars().any(|c| c == '\'' || c.is_control())) {
        out.push('\'');
        out.push_str(text);
        out.push('\'');
    } else {
        out.push_str("$'");
        for chunk in word.utf8_chunks() {
            for c in chunk.valid().chars() {
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
            // Bytes that are no UTF-8, each as itself.
            for b in chunk.invalid() {
                let _ = write!(out, "\\x{b:02x}");
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

    /// A word that is not UTF-8 (a file name of any bytes) reads back as
    /// its bytes: each byte that is no UTF-8 escaped as itself.
    #[test]
    fn bash_reads_back_words_that_are_not_utf8() {
        let words: Vec<Vec<u8>> = vec![
            b"./uselib".to_vec(),
            b"/tmp/nonutf\xff/lib\xfe.so".to_vec(),
            b"\xc3\xa9t\xc3".to_vec(),
        ];
        let quoted = quote_words(&words);
        assert!(!quoted.contains('\u{fffd}'), "{quoted}");
        let script = format!("printf '%s\\0' {quoted}");
        let out = std::process::Command::new("bash")
            .args(["-c", &script])
            .output()
            .expect("bash runs");
        let back: Vec<Vec<u8>> = out
            .stdout
            .split(|&b| b == 0)
            .filter(|w| !w.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        assert_eq!(back, words, "{quoted}");
    }
}
