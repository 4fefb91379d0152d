//! What an operator reads of a library's error: its words, without the library's own
//! wording. Rust's `io::Error` ends an OS error with "(os error N)", a number for a
//! programmer; the words before it already say it (issue 60: `no kubeconfig at …: No such
//! file or directory (os error 2)`). A leaf module: anything that shows an error may use it.

use std::fmt;
use std::io;
use std::time::Duration;

/// An I/O error in words ("No such file or directory"), for a `Display` or `format!`.
pub struct Io<'a>(&'a io::Error);

/// `e` in words, without the "(os error N)" its `Display` adds.
pub fn io(e: &io::Error) -> Io<'_> {
    Io(e)
}

impl fmt::Display for Io<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&without_os_error(&self.0.to_string()))
    }
}

/// `text` without any " (os error N)": also where a library kept an `io::Error`'s rendering
/// in its own message (a copy made with `io::Error::new(kind, e.to_string())`, tonic's and
/// hyper's transport errors).
pub fn without_os_error(text: &str) -> String {
    const MARK: &str = " (os error ";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(MARK) {
        let after = &rest[at + MARK.len()..];
        let digits = after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits > 0 && after[digits..].starts_with(')') {
            out.push_str(&rest[..at]);
            rest = &after[digits + 1..];
        } else {
            out.push_str(&rest[..at + MARK.len()]);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Seconds with one decimal and a unit: `1.8 s`.
pub fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_os_error_in_words_only() {
        let e = io::Error::from_raw_os_error(2);
        assert!(e.to_string().ends_with("(os error 2)"), "{e}");
        assert_eq!(io(&e).to_string(), "No such file or directory");
        // A copy that kept the rendering in its message, as the CRI client makes.
        let copy = io::Error::new(e.kind(), format!("connect: {e}"));
        assert_eq!(io(&copy).to_string(), "connect: No such file or directory");
        // Errors without an errno are left as they are.
        let plain = io::Error::new(io::ErrorKind::InvalidData, "bad header");
        assert_eq!(io(&plain).to_string(), "bad header");
    }

    #[test]
    fn only_the_os_error_mark_is_taken_out() {
        assert_eq!(
            without_os_error(
                "a: Connection refused (os error 111); b: Permission denied (os error 13)"
            ),
            "a: Connection refused; b: Permission denied"
        );
        for kept in [
            "(os error)",
            "x (os error 1a)",
            "x (os error ",
            "no error here",
        ] {
            assert_eq!(without_os_error(kept), kept);
        }
    }
}
