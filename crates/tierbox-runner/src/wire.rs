//! Output bytes as JSON carries them.
//!
//! JSON strings are text and output is bytes, so every place that carries output (a
//! stream of the [`crate::Outcome`], a streamed [`crate::OutputEvent`], a background
//! process's [`crate::ring::OutputChunk`]) carries two fields:
//!
//! - `text`: the bytes decoded as UTF-8, each invalid sequence replaced by `U+FFFD` — a
//!   view for reading, exact whenever the bytes are valid UTF-8;
//! - `bytes_base64`: the bytes themselves (standard base64 with padding), present exactly
//!   when that decoding was lossy (`lossy_utf8` where the type has that flag).
//!
//! A consumer that needs the bytes ([`decode`]) takes `bytes_base64` when it is present
//! and `text`'s UTF-8 otherwise. Output that is valid UTF-8 — most of it — costs nothing
//! more than before; binary output costs its base64 on top of its text view.

use std::borrow::Cow;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// Bytes in their JSON form: the text view and, when it is lossy, the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wire {
    /// The bytes as UTF-8, invalid sequences replaced by `U+FFFD`.
    pub text: String,
    /// The bytes, base64, exactly when `text` is lossy.
    pub bytes_base64: Option<String>,
}

impl Wire {
    /// Whether `text` is lossy (and `bytes_base64` present).
    pub fn lossy(&self) -> bool {
        self.bytes_base64.is_some()
    }
}

/// `bytes` in their JSON form.
///
/// ```
/// use tierbox_runner::wire;
///
/// assert_eq!(wire::encode(b"ok\n").bytes_base64, None);
/// let w = wire::encode(b"\x1f\x8b\x08");
/// assert_eq!((w.text.as_str(), w.bytes_base64.as_deref()), ("\u{1f}\u{fffd}\u{8}", Some("H4sI")));
/// assert_eq!(&*wire::decode(&w.text, w.bytes_base64.as_deref()).unwrap(), b"\x1f\x8b\x08");
/// ```
pub fn encode(bytes: &[u8]) -> Wire {
    match String::from_utf8_lossy(bytes) {
        Cow::Borrowed(text) => Wire {
            text: text.to_owned(),
            bytes_base64: None,
        },
        Cow::Owned(text) => Wire {
            text,
            bytes_base64: Some(STANDARD.encode(bytes)),
        },
    }
}

/// [`encode`], taking the bytes when they are valid UTF-8 (no copy).
pub fn encode_owned(bytes: Vec<u8>) -> Wire {
    match String::from_utf8(bytes) {
        Ok(text) => Wire {
            text,
            bytes_base64: None,
        },
        Err(e) => encode(e.as_bytes()),
    }
}

/// The bytes that `text` and `bytes_base64` (as [`encode`] made them) carry.
pub fn decode<'a>(text: &'a str, bytes_base64: Option<&str>) -> Result<Cow<'a, [u8]>, WireError> {
    match bytes_base64 {
        None => Ok(Cow::Borrowed(text.as_bytes())),
        Some(b64) => STANDARD
            .decode(b64)
            .map(Cow::Owned)
            .map_err(|e| WireError::Base64(e.to_string())),
    }
}

/// How many bytes `bytes_base64` (padded standard base64) decodes to, without decoding it.
pub(crate) fn decoded_len(bytes_base64: &str) -> usize {
    let pad = bytes_base64
        .as_bytes()
        .iter()
        .rev()
        .take(2)
        .take_while(|&&b| b == b'=')
        .count();
    (bytes_base64.len() / 4 * 3).saturating_sub(pad)
}

/// `bytes_base64` that is not base64.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The decoder's complaint.
    #[error("bytes_base64 is not standard base64: {0}")]
    Base64(String),
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_byte_string_round_trips() {
        let all: Vec<u8> = (0u8..=255).cycle().take(1000).collect();
        for bytes in [
            &b""[..],
            b"text\n",
            "é日本".as_bytes(),
            b"\xff",
            &all,
            b"a\xc3",
        ] {
            let w = encode(bytes);
            assert_eq!(w.lossy(), std::str::from_utf8(bytes).is_err());
            assert_eq!(&*decode(&w.text, w.bytes_base64.as_deref()).unwrap(), bytes);
            assert_eq!(encode_owned(bytes.to_vec()), w);
            if let Some(b64) = &w.bytes_base64 {
                assert_eq!(decoded_len(b64), bytes.len());
            }
        }
        assert!(decode("", Some("not base64!")).is_err());
    }
}
