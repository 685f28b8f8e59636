//! Text a run chose (file names, link targets, file contents) made safe to print as
//! plain text: every control character is shown as an escape instead of reaching the
//! reader's terminal, where `ESC [` sequences recolour, move the cursor or retitle the
//! window, `\r` overwrites what was printed and BEL rings; and nothing can pass for a
//! line or a name it is not.
//!
//! [`escaped`] shows each byte of a control character as `\xNN` — C0 (below `0x20`),
//! DEL (`0x7f`) and C1 (U+0080 to U+009F, which some terminals read as `ESC` sequences),
//! and any byte that is not UTF-8 — and each Unicode bidirectional control (U+202A to
//! U+202E, U+2066 to U+2069: text that reads in another order than it runs) as `\u{NNNN}`.
//! [`Escape::Text`] keeps newlines and tabs (a diff's lines stay lines); [`Escape::Name`]
//! escapes them too (a name stays on one line). Backslashes are left as they are: the
//! escapes are for a reader, not a format to parse back.

use std::borrow::Cow;
use std::fmt::Write;

/// What [`escaped`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Escape {
    /// A file name or link target: newlines and tabs are escaped too.
    Name,
    /// Text shown by lines (a diff): newlines and tabs are kept.
    Text,
}

/// A Unicode bidirectional embedding, override or isolate control.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn needs_escape(c: char, how: Escape) -> bool {
    let kept = how == Escape::Text && matches!(c, '\n' | '\t');
    (c.is_control() && !kept) || is_bidi_control(c)
}

/// `bytes` with every control character, bidirectional control and byte that is not
/// UTF-8 escaped (see the module documentation); borrowed when there is none.
///
/// ```
/// use tierbox_runner::review::{Escape, escaped};
///
/// assert_eq!(escaped(b"ring\x07\x1b[31mred\n", Escape::Text), "ring\\x07\\x1b[31mred\n");
/// assert_eq!(escaped(b"two\nlines\xff", Escape::Name), "two\\x0alines\\xff");
/// assert_eq!(escaped("csi\u{9b}".as_bytes(), Escape::Name), "csi\\xc2\\x9b");
/// ```
pub fn escaped(bytes: &[u8], how: Escape) -> Cow<'_, str> {
    if let Ok(text) = std::str::from_utf8(bytes)
        && !text.chars().any(|c| needs_escape(c, how))
    {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(bytes.len() + 16);
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if is_bidi_control(c) {
                let _ = write!(out, "\\u{{{:04x}}}", u32::from(c));
            } else if needs_escape(c, how) {
                for b in c.encode_utf8(&mut [0; 4]).bytes() {
                    let _ = write!(out, "\\x{b:02x}");
                }
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    Cow::Owned(out)
}

/// [`escaped`] of a path's bytes, as a name.
pub fn escaped_path(path: &std::path::Path) -> Cow<'_, str> {
    use std::os::unix::ffi::OsStrExt;
    escaped(path.as_os_str().as_bytes(), Escape::Name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_and_the_rest_is_left_alone() {
        // Text: newlines and tabs stay; every other C0, DEL, C1 and bad byte is escaped.
        assert_eq!(escaped(b"a\tb\nc", Escape::Text), "a\tb\nc");
        assert!(matches!(escaped(b"plain", Escape::Text), Cow::Borrowed(_)));
        assert_eq!(
            escaped(b"\x00\x07\x08\x0d\x1b\x1f\x7f", Escape::Text),
            "\\x00\\x07\\x08\\x0d\\x1b\\x1f\\x7f"
        );
        assert_eq!(
            escaped("\u{85}\u{9f}".as_bytes(), Escape::Text),
            "\\xc2\\x85\\xc2\\x9f"
        );
        assert_eq!(escaped(b"bad\xc3(", Escape::Text), "bad\\xc3(");
        // Names: newlines and tabs too.
        assert_eq!(escaped(b"a\tb\nc", Escape::Name), "a\\x09b\\x0ac");
        // Printable Unicode and backslashes stay as they are.
        assert_eq!(escaped("é ✓ \\x07".as_bytes(), Escape::Name), "é ✓ \\x07");
        // Text that reads in another order than it runs.
        assert_eq!(
            escaped("ok\u{202e}txt.exe".as_bytes(), Escape::Text),
            "ok\\u{202e}txt.exe"
        );
        assert_eq!(
            escaped_path(std::path::Path::new("x\u{1b}]0;t\u{7}")),
            "x\\x1b]0;t\\x07"
        );
    }
}
