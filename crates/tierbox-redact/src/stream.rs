//! A stream of output bytes redacted as it arrives ([`StreamRedactor`]): cut into pieces
//! at line ends and each piece redacted with what came before in mind.
//!
//! # Invariants
//!
//! - **A secret is never split across two pieces.** A piece ends after a newline; a line
//!   longer than [`STREAM_FLUSH_BYTES`] ends after its last ASCII whitespace (credentials
//!   contain none), so a token split across two reads reaches the redactor whole.
//! - **A private key block spanning pieces stays hidden** up to its `-----END …` line
//!   ([`Redactor::redact_piece_bytes`]).
//! - **A piece never ends inside a UTF-8 character** when more bytes may follow: an
//!   incomplete sequence at its end waits for the next bytes ([`incomplete_utf8_suffix`]),
//!   so a consumer reading pieces as text never sees one character as two halves. Only
//!   the stream's end ([`StreamRedactor::finish`]) emits an incomplete tail as it is.
//! - **Bytes in, bytes out**: every byte outside a secret comes out as it went in.

use crate::Redactor;

/// Longest a line may grow before it is cut without its newline, in bytes (16 KiB).
/// Bounds both the buffering delay of a newline-free stream and the memory it holds.
pub const STREAM_FLUSH_BYTES: usize = 16 * 1024;

/// One output stream cut into pieces at line ends and redacted piece by piece (see the
/// [module documentation](self)).
///
/// ```
/// use tierbox_redact::{REDACTED, Redactor};
/// use tierbox_redact::stream::StreamRedactor;
///
/// let r = Redactor::default();
/// let mut s = StreamRedactor::default();
/// assert_eq!(s.push(b"token ghp_0123456789abcdef", false, Some(&r)), None);
/// let piece = s.push(b"ghijABCDEFGHIJ012345\n\xff", false, Some(&r)).unwrap();
/// assert_eq!(piece, format!("token {REDACTED}\n").into_bytes());
/// assert_eq!(s.finish(Some(&r)).unwrap(), b"\xff");
/// ```
#[derive(Debug, Default)]
pub struct StreamRedactor {
    buf: Vec<u8>,
    /// The last piece ended inside a private key block.
    in_key: bool,
}

impl StreamRedactor {
    /// Adds `chunk`; returns the redacted bytes of the piece it completes, if any
    /// (unredacted when `redactor` is `None`). `force` ends a piece even without a
    /// newline (the caller will send no more, e.g. a quota is reached).
    pub fn push(
        &mut self,
        chunk: &[u8],
        force: bool,
        redactor: Option<&Redactor>,
    ) -> Option<Vec<u8>> {
        self.buf.extend_from_slice(chunk);
        let force = force || self.buf.len() >= STREAM_FLUSH_BYTES;
        let cut = cut_point(&self.buf, force)?;
        let rest = self.buf.split_off(cut);
        let piece = std::mem::replace(&mut self.buf, rest);
        Some(self.redact(piece, redactor))
    }

    /// The producer has nothing more for now (a terminal waiting for its input): the
    /// pending bytes up to their last ASCII whitespace, redacted, if there is one. A word
    /// still being written — which could be the start of a secret — waits for its end,
    /// so the invariant that no secret is split across pieces holds.
    ///
    /// ```
    /// use tierbox_redact::stream::StreamRedactor;
    ///
    /// let mut s = StreamRedactor::default();
    /// assert_eq!(s.push(b">>> ", false, None), None);
    /// assert_eq!(s.settle(None).unwrap(), b">>> ");
    /// assert_eq!(s.push(b"ghp_01", false, None), None);
    /// assert_eq!(s.settle(None), None);
    /// ```
    pub fn settle(&mut self, redactor: Option<&Redactor>) -> Option<Vec<u8>> {
        let cut = self.buf.iter().rposition(u8::is_ascii_whitespace)? + 1;
        let rest = self.buf.split_off(cut);
        let piece = std::mem::replace(&mut self.buf, rest);
        Some(self.redact(piece, redactor))
    }

    /// Bytes pending: waiting for the end of their line (or word, after [`Self::settle`]).
    ///
    /// ```
    /// use tierbox_redact::stream::StreamRedactor;
    ///
    /// let mut s = StreamRedactor::default();
    /// assert_eq!(s.push(b"$ ls", false, None), None);
    /// assert_eq!(s.pending(), 4);
    /// ```
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// What is left once the stream has ended (or once a producer that went quiet in the
    /// middle of a word is given up on: the word is then redacted as it stands, and a
    /// secret whose rest comes later is not recognised), redacted.
    pub fn finish(&mut self, redactor: Option<&Redactor>) -> Option<Vec<u8>> {
        if self.buf.is_empty() {
            return None;
        }
        let rest = std::mem::take(&mut self.buf);
        Some(self.redact(rest, redactor))
    }

    fn redact(&mut self, piece: Vec<u8>, redactor: Option<&Redactor>) -> Vec<u8> {
        let Some(r) = redactor else {
            return piece;
        };
        let (out, _, open) = r.redact_piece_bytes(&piece, self.in_key);
        self.in_key = open;
        match out {
            std::borrow::Cow::Borrowed(_) => piece,
            std::borrow::Cow::Owned(out) => out,
        }
    }
}

/// Where to cut a pending buffer, if anywhere: after the last newline; when `force`d,
/// after the last ASCII whitespace, else before an incomplete UTF-8 sequence at its end.
fn cut_point(buf: &[u8], force: bool) -> Option<usize> {
    if let Some(i) = buf.iter().rposition(|&b| b == b'\n') {
        return Some(i + 1);
    }
    if !force || buf.is_empty() {
        return None;
    }
    if let Some(i) = buf.iter().rposition(u8::is_ascii_whitespace) {
        return Some(i + 1);
    }
    let cut = buf.len() - incomplete_utf8_suffix(buf);
    (cut > 0).then_some(cut)
}

/// How many bytes at the end of `buf` (0 to 3) are the start of a UTF-8 character that
/// the next bytes could still complete: a lead byte followed by fewer continuation
/// bytes than it announces. Whatever else `buf` holds (it need not be valid UTF-8).
///
/// ```
/// use tierbox_redact::stream::incomplete_utf8_suffix;
///
/// assert_eq!(incomplete_utf8_suffix(b"caf\xc3"), 1);
/// assert_eq!(incomplete_utf8_suffix(b"\xff\xf0\x9f\x94"), 3);
/// assert_eq!(incomplete_utf8_suffix("café".as_bytes()), 0);
/// assert_eq!(incomplete_utf8_suffix(b"\x80\x80\x80"), 0);
/// ```
pub fn incomplete_utf8_suffix(buf: &[u8]) -> usize {
    let from = buf.len().saturating_sub(3);
    for i in (from..buf.len()).rev() {
        if buf[i] & 0xC0 == 0x80 {
            continue;
        }
        return match std::str::from_utf8(&buf[i..]) {
            Err(e) if e.error_len().is_none() && e.valid_up_to() == 0 => buf.len() - i,
            _ => 0,
        };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::REDACTED;

    #[test]
    fn pieces_end_at_newlines() {
        let mut s = StreamRedactor::default();
        assert_eq!(s.push(b"one\ntw", false, None).unwrap(), b"one\n");
        assert_eq!(s.push(b"o\nthr", false, None).unwrap(), b"two\n");
        assert_eq!(s.finish(None).unwrap(), b"thr");
        assert_eq!(s.finish(None), None);
    }

    #[test]
    fn overlong_lines_are_cut_at_whitespace_and_never_inside_a_character() {
        let mut s = StreamRedactor::default();
        let mut line = "a ".repeat(STREAM_FLUSH_BYTES / 2).into_bytes();
        line.extend_from_slice(b"tail");
        let first = s.push(&line, false, None).unwrap();
        assert!(first.ends_with(b" "));
        let _ = s.finish(None);
        // No whitespace at all, and invalid bytes before: cut before the incomplete 'é'.
        let mut blob = vec![0xFFu8; STREAM_FLUSH_BYTES - 1];
        blob.push(0xC3);
        let first = s.push(&blob, false, None).unwrap();
        assert_eq!(first.len(), STREAM_FLUSH_BYTES - 1);
        assert_eq!(
            s.push(&[0xA9, b'\n'], false, None).unwrap(),
            "é\n".as_bytes()
        );
    }

    #[test]
    fn a_forced_piece_holds_back_only_an_incomplete_character() {
        let mut s = StreamRedactor::default();
        assert_eq!(s.push(b"x\xe2\x82", true, None).unwrap(), b"x");
        assert_eq!(
            s.push(b"", true, None),
            None,
            "nothing but the partial character"
        );
        assert_eq!(s.finish(None).unwrap(), b"\xe2\x82");
    }

    #[test]
    fn a_secret_split_across_binary_chunks_is_redacted_whole() {
        let r = Redactor::new(&["db-pass-4f9a".to_owned()]);
        let mut s = StreamRedactor::default();
        let mut out = Vec::new();
        for chunk in [&b"\x00\xff pw db-pa"[..], b"ss-4f", b"9a \x80\n\xfe"] {
            out.extend(s.push(chunk, false, Some(&r)).unwrap_or_default());
        }
        out.extend(s.finish(Some(&r)).unwrap_or_default());
        let mut want = b"\x00\xff pw ".to_vec();
        want.extend_from_slice(REDACTED.as_bytes());
        want.extend_from_slice(b" \x80\n\xfe");
        assert_eq!(out, want);
    }
}
