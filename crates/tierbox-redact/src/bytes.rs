//! Redaction of bytes. Output is bytes, and programs print more than UTF-8 (`gzip -c`,
//! `tar -c`, a PNG, a log with one Latin-1 line): redaction must hide the secrets in it
//! and keep every other byte exactly, never decode it lossily first.
//!
//! # Invariants
//!
//! - **Valid UTF-8 is redacted as the text it is**: [`Redactor::redact_bytes`] of `s.as_bytes()`
//!   is [`Redactor::redact`] of `s`, byte for byte, with the same flag.
//! - **Every byte outside a secret is kept.** Bytes that are not valid UTF-8 stand in the
//!   text the rules scan as one character each, from a private-use range no rule treats
//!   as a key character, a delimiter or whitespace (as `U+FFFD` of a lossy decoding would
//!   not be), and are put back as the same bytes afterwards. So a secret next to invalid
//!   bytes is found as it would be in the lossy text, and only its bytes become
//!   [`REDACTED`](crate::REDACTED).
//! - A valid character of that private-use range itself (`U+10FF80`–`U+10FFFF`, which no
//!   text uses) in input that is not all valid UTF-8 is carried as its four bytes, each
//!   standing for itself: it comes back unchanged, and the rules see it as they see
//!   invalid bytes.

use std::borrow::Cow;

use crate::Redactor;

/// The stand-in for byte `b` (0x80–0xFF; ASCII is always valid) is `U+10FF00 + b`: the
/// top of plane 16's private-use area, `U+10FF80`–`U+10FFFF`.
const STAND_IN_BASE: u32 = 0x10_FF00;

/// The character standing for byte `b` (at least 0x80).
fn stand_in(b: u8) -> char {
    // 0x10FF80..=0x10FFFF are all scalar values; the fallback is unreachable.
    char::from_u32(STAND_IN_BASE + u32::from(b)).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// The byte `c` stands for, when it is a stand-in.
fn stood_for(c: char) -> Option<u8> {
    let v = u32::from(c);
    (STAND_IN_BASE + 0x80..=STAND_IN_BASE + 0xFF)
        .contains(&v)
        .then(|| u8::try_from(v - STAND_IN_BASE).unwrap_or(0))
}

/// `bytes` (not valid UTF-8) as text the rules can scan: valid runs as they are, every
/// other byte as its stand-in ([`stood_for`] undoes it in [`from_text`]).
fn to_text(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + bytes.len() / 2);
    for chunk in bytes.utf8_chunks() {
        let valid = chunk.valid();
        if valid.chars().any(|c| stood_for(c).is_some()) {
            for c in valid.chars() {
                if stood_for(c).is_some() {
                    let mut buf = [0u8; 4];
                    out.extend(c.encode_utf8(&mut buf).bytes().map(stand_in));
                } else {
                    out.push(c);
                }
            }
        } else {
            out.push_str(valid);
        }
        out.extend(chunk.invalid().iter().copied().map(stand_in));
    }
    out
}

/// The bytes `text` (made by [`to_text`], then redacted) stands for.
fn from_text(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut run = 0;
    for (i, c) in text.char_indices() {
        if let Some(b) = stood_for(c) {
            out.extend_from_slice(&text.as_bytes()[run..i]);
            out.push(b);
            run = i + c.len_utf8();
        }
    }
    out.extend_from_slice(&text.as_bytes()[run..]);
    out
}

/// `out` as bytes: borrowing `input` when nothing changed.
fn as_bytes<'a>(
    input: &'a [u8],
    out: Cow<'_, str>,
    changed: bool,
    text_was_input: bool,
) -> Cow<'a, [u8]> {
    match out {
        Cow::Borrowed(_) if !changed => Cow::Borrowed(input),
        Cow::Owned(s) if text_was_input => Cow::Owned(s.into_bytes()),
        other => Cow::Owned(from_text(&other)),
    }
}

impl Redactor {
    /// Returns `bytes` with every secret replaced by [`REDACTED`](crate::REDACTED), and whether anything
    /// was replaced. Valid UTF-8 is redacted exactly as [`Redactor::redact`] redacts it;
    /// in anything else every byte outside a secret is kept as it is (see the
    /// [module documentation](crate::bytes)). When nothing is replaced, the result
    /// borrows `bytes`.
    ///
    /// ```
    /// use tierbox_redact::{REDACTED, Redactor};
    ///
    /// let r = Redactor::default();
    /// let out = b"\x1f\x8b token ghp_0123456789abcdefghijABCDEFGHIJ012345 \xff\n";
    /// let (bytes, redacted) = r.redact_bytes(out);
    /// assert!(redacted);
    /// let mut want = b"\x1f\x8b token ".to_vec();
    /// want.extend_from_slice(REDACTED.as_bytes());
    /// want.extend_from_slice(b" \xff\n");
    /// assert_eq!(&*bytes, &want[..]);
    /// ```
    pub fn redact_bytes<'a>(&self, bytes: &'a [u8]) -> (Cow<'a, [u8]>, bool) {
        match std::str::from_utf8(bytes) {
            Ok(text) => {
                let (out, changed) = self.redact(text);
                (as_bytes(bytes, out, changed, true), changed)
            }
            Err(_) => {
                let text = to_text(bytes);
                let (out, changed) = self.redact(&text);
                (as_bytes(bytes, out, changed, false), changed)
            }
        }
    }

    /// [`Redactor::redact_piece`] of bytes: one piece of a stream shown piece by piece,
    /// redacted as [`Redactor::redact_bytes`] redacts (every byte outside a secret
    /// kept), `in_key` saying whether an earlier piece ended inside a private key block.
    /// Returns the redacted piece, whether anything was redacted, and whether the piece
    /// ends inside a key block.
    pub fn redact_piece_bytes<'a>(
        &self,
        bytes: &'a [u8],
        in_key: bool,
    ) -> (Cow<'a, [u8]>, bool, bool) {
        match std::str::from_utf8(bytes) {
            Ok(text) => {
                let (out, changed, open) = self.redact_piece(text, in_key);
                (as_bytes(bytes, out, changed, true), changed, open)
            }
            Err(_) => {
                let text = to_text(bytes);
                let (out, changed, open) = self.redact_piece(&text, in_key);
                (as_bytes(bytes, out, changed, false), changed, open)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::REDACTED;

    #[test]
    fn stand_ins_round_trip_every_byte_and_the_range_itself() {
        let mut input: Vec<u8> = (0u8..=255).collect();
        // A valid character of the stand-in range, and an incomplete sequence at the end.
        input.extend_from_slice("a\u{10FF80}b\u{10FFFF}".as_bytes());
        input.extend_from_slice(&[0xE2, 0x82]);
        assert!(std::str::from_utf8(&input).is_err());
        assert_eq!(from_text(&to_text(&input)), input);
        assert_eq!(stood_for(stand_in(0x80)), Some(0x80));
        assert_eq!(stood_for(stand_in(0xFF)), Some(0xFF));
        assert_eq!(stood_for('a'), None);
        assert_eq!(stood_for(char::REPLACEMENT_CHARACTER), None);
    }

    #[test]
    fn invalid_bytes_around_a_secret_stay_and_only_the_secret_goes() {
        let r = Redactor::new(&["db-pass-4f9a".to_owned()]);
        let input = b"\xff\xfe\x00 pw db-pass-4f9a\x80\xc3(\n\xf4\x8f\xbe\x80 tail \xe2\x82";
        let (out, redacted) = r.redact_bytes(input);
        assert!(redacted);
        let mut want = b"\xff\xfe\x00 pw ".to_vec();
        want.extend_from_slice(REDACTED.as_bytes());
        want.extend_from_slice(b"\x80\xc3(\n\xf4\x8f\xbe\x80 tail \xe2\x82");
        assert_eq!(&*out, &want[..]);
    }

    #[test]
    fn a_value_with_an_invalid_byte_is_hidden_whole_as_in_the_lossy_text() {
        let r = Redactor::default();
        let (out, redacted) = r.redact_bytes(b"password=abc\xffdef next\n");
        assert!(redacted);
        assert_eq!(&*out, format!("password={REDACTED} next\n").as_bytes());
        let text = String::from_utf8_lossy(b"password=abc\xffdef next\n");
        let (lossy, _) = r.redact(&text);
        assert_eq!(lossy, format!("password={REDACTED} next\n"));
    }

    #[test]
    fn nothing_to_hide_borrows_the_input() {
        let r = Redactor::default();
        for input in [&b"plain text\n"[..], b"\x1f\x8b\x08\x00binary\xff"] {
            let (out, redacted) = r.redact_bytes(input);
            assert!(!redacted);
            assert!(matches!(out, Cow::Borrowed(_)));
        }
    }

    #[test]
    fn a_key_block_spanning_binary_pieces_stays_hidden() {
        let r = Redactor::default();
        let (first, _, open) = r.redact_piece_bytes(b"\xff-----BEGIN PRIVATE KEY-----\n", false);
        assert!(open);
        assert_eq!(&*first, b"\xff-----BEGIN PRIVATE KEY-----\n");
        let (body, redacted, open) = r.redact_piece_bytes(b"MIIEvQIBADAN\xfeBgkqhkiG9w0B\n", open);
        assert!(redacted && open);
        assert!(!body.windows(6).any(|w| w == b"MIIEvQ"), "{body:?}");
        let (end, _, open) = r.redact_piece_bytes(b"-----END PRIVATE KEY-----\n\x80ok\n", open);
        assert!(!open);
        assert_eq!(&*end, b"-----END PRIVATE KEY-----\n\x80ok\n");
    }
}
