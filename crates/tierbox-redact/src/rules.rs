//! Rules 1, 3, 4 and 5: private key blocks, auth schemes, known token formats and URLs.

use crate::assignments::{accepts_value, trim_trailing_punctuation};
use crate::keys::{KeyClass, classify_key};
use crate::patterns::Rules;
use crate::values::{in_list, is_non_secret_value};
use crate::words::{SEGMENT_EXTENSIONS, SEGMENT_WORDS, URL_SENSITIVE_KEYS};
use crate::{Sink, skip_blanks};

/// The `-----BEGIN …` line [`Redactor::redact_piece`](crate::Redactor::redact_piece) puts before a piece that continues
/// a key block (it stays in the redacted text, and is taken off again).
pub(crate) const PIECE_KEY_BEGIN: &str = "-----BEGIN PRIVATE KEY-----\n";

/// Whether `text` ends inside a private key block, given whether it starts inside one.
pub(crate) fn ends_in_key_block(rules: &Rules, text: &str, starts_inside: bool) -> bool {
    let mut at = 0;
    if starts_inside {
        match rules.pem_end.find_at(text, 0) {
            Some(end) => at = end.end(),
            None => return true,
        }
    }
    while let Some(begin) = rules.pem_begin.find_at(text, at) {
        match rules.pem_end.find_at(text, begin.end()) {
            Some(end) => at = end.end(),
            None => return true,
        }
    }
    false
}

pub(crate) fn pem_blocks(rules: &Rules, sink: &mut Sink<'_, '_>) {
    let text = sink.text;
    let mut at = 0;
    while let Some(begin) = rules.pem_begin.find_at(text, at) {
        let (body_end, next) = match rules.pem_end.find_at(text, begin.end()) {
            Some(end) => (end.start(), end.end()),
            None => (text.len(), text.len()),
        };
        sink.push_trimmed(begin.end(), body_end);
        at = next;
        if at >= text.len() {
            break;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Rule 3: auth schemes (headers, rule 2, are handled with the assignments).

/// `Bearer abc` → `abc`, so that `Authorization: Bearer <token>` is seen as a placeholder.
pub(crate) fn strip_auth_scheme(value: &str) -> &str {
    for scheme in ["bearer ", "basic ", "token ", "digest "] {
        if value.len() > scheme.len()
            && value.as_bytes()[..scheme.len()].eq_ignore_ascii_case(scheme.as_bytes())
        {
            return value[scheme.len()..].trim_start();
        }
    }
    value
}

pub(crate) fn auth_schemes(rules: &Rules, sink: &mut Sink<'_, '_>) {
    let text = sink.text;
    for m in rules.auth_scheme.find_iter(text) {
        // `bearer`/`basic`, blanks, the token.
        let basic = m.as_str().as_bytes()[..5].eq_ignore_ascii_case(b"basic");
        let vs = skip_blanks(
            text.as_bytes(),
            m.start() + if basic { 5 } else { 6 },
            m.end(),
        );
        let value = &text[vs..m.end()];
        let accepted = if basic {
            looks_like_basic_credentials(value)
        } else {
            let value = trim_trailing_punctuation(value);
            looks_like_bearer_token(value).then_some(value.len())
        };
        if let Some(len) = accepted {
            sink.push(vs, vs + len);
        }
    }
}

/// A `Bearer` token: 8+ characters with a digit or an inner capital letter, or 24+.
fn looks_like_bearer_token(v: &str) -> bool {
    let b = v.as_bytes();
    b.len() >= 8
        && (b.iter().any(u8::is_ascii_digit)
            || b[1..].iter().any(u8::is_ascii_uppercase)
            || b.len() >= 24)
}

/// Padded base64 of `user:password`; returns the length to redact.
fn looks_like_basic_credentials(v: &str) -> Option<usize> {
    let b = v.as_bytes();
    let body = b
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || **c == b'+' || **c == b'/')
        .count();
    let pad = b[body..].iter().take_while(|c| **c == b'=').count();
    let len = body + pad;
    let rest = &b[len..];
    // The b64token charset also allows `-._~`; base64 does not, except as a sentence's end.
    if pad > 2 || !(rest.is_empty() || rest.iter().all(|c| *c == b'.')) {
        return None;
    }
    let token = &b[..len];
    if len < 8 || len % 4 != 0 {
        return None;
    }
    let random = token.iter().any(u8::is_ascii_digit)
        || token[1..].iter().any(u8::is_ascii_uppercase)
        || token.iter().any(|c| matches!(c, b'+' | b'/' | b'='));
    random.then_some(len)
}

// ---------------------------------------------------------------------------------------
// Rule 4: known token formats.

pub(crate) fn known_tokens(rules: &Rules, sink: &mut Sink<'_, '_>) {
    let text = sink.text;
    for m in rules.tokens.find_iter(text) {
        let token = m.as_str();
        if token.starts_with("sk-") && !looks_like_sk_key(token) {
            continue;
        }
        sink.push(m.start(), m.end());
    }
}

/// `sk-…` keys are random: a digit, and a capital letter or a long run without `-`.
/// Slugs such as `sk-learn-compatible-estimator-v2` are not keys.
fn looks_like_sk_key(token: &str) -> bool {
    let tail = ["sk-ant-", "sk-proj-", "sk-svcacct-", "sk-admin-", "sk-"]
        .iter()
        .find_map(|p| token.strip_prefix(p))
        .unwrap_or(token);
    let has_digit = tail.bytes().any(|c| c.is_ascii_digit());
    let has_upper = tail.bytes().any(|c| c.is_ascii_uppercase());
    let longest_run = tail.split('-').map(str::len).max().unwrap_or(0);
    has_digit && (has_upper || longest_run >= 16)
}

// ---------------------------------------------------------------------------------------
// Rule 5: URLs.

pub(crate) fn urls(rules: &Rules, sink: &mut Sink<'_, '_>) {
    let text = sink.text;

    for m in rules.url_userinfo.find_iter(text) {
        // `scheme://` userinfo `@`
        let Some(s) = m.as_str().find("://").map(|i| m.start() + i + 3) else {
            continue;
        };
        let e = m.end() - 1;
        let info = &text[s..e];
        let secret = match info.split_once(':') {
            Some((_, password)) => !is_non_secret_value(password, "", true),
            None => looks_like_lone_token(info),
        };
        if secret {
            sink.push(s, e);
        }
    }

    // Path segments count only inside URLs: walk the segment matches and the URL
    // matches together (both are sorted), so every byte is scanned once per pattern.
    let mut segments = rules.url_segment.find_iter(text).peekable();
    for url in rules.url.find_iter(text) {
        while let Some(seg) = segments.next_if(|seg| seg.start() < url.end()) {
            if seg.start() < url.start() || seg.end() > url.end() {
                continue;
            }
            // `/word/` segment: the value starts after the second slash.
            let Some(s) = seg.as_str()[1..].find('/').map(|i| seg.start() + i + 2) else {
                continue;
            };
            if !is_non_secret_segment(&text[s..seg.end()]) {
                sink.push(s, seg.end());
            }
        }
    }

    for m in rules.query.find_iter(text) {
        // `?` / `&` / `#` / `&amp;`, key, `=`, value.
        let prefix = if m.as_str().starts_with("&amp;") {
            5
        } else {
            1
        };
        let Some((key, value)) = m.as_str()[prefix..].split_once('=') else {
            continue;
        };
        let vs = m.end() - value.len();
        let value = trim_trailing_punctuation(value);
        let class = if is_url_sensitive_key(key) {
            KeyClass::Strong
        } else {
            classify_key(key)
        };
        if accepts_value(class, key, value, true) {
            sink.push(vs, vs + value.len());
        }
    }
}

/// A userinfo without a password is a user name (`git@`), unless it is a long token.
fn looks_like_lone_token(info: &str) -> bool {
    info.len() >= 20 && info.bytes().any(|c| c.is_ascii_digit())
}

fn is_non_secret_segment(segment: &str) -> bool {
    let ext_doc = segment.rsplit_once('.').is_some_and(|(_, ext)| {
        SEGMENT_EXTENSIONS
            .iter()
            .any(|x| x.eq_ignore_ascii_case(ext))
    });
    ext_doc
        || segment.starts_with(':')
        || (segment.starts_with('{') && segment.ends_with('}'))
        || in_list(segment, SEGMENT_WORDS)
        || is_non_secret_value(segment, "", true)
}

fn is_url_sensitive_key(key: &str) -> bool {
    URL_SENSITIVE_KEYS.iter().any(|k| normalized_eq(key, k))
        || normalized_starts_with(key, "x_amz_")
        || normalized_starts_with(key, "x_goog_")
}

/// `key` lower-cased with `-` and `.` read as `_` equals `target` (already normalised).
pub(crate) fn normalized_eq(key: &str, target: &str) -> bool {
    key.len() == target.len() && normalized_starts_with(key, target)
}

fn normalized_starts_with(key: &str, prefix: &str) -> bool {
    key.len() >= prefix.len()
        && key.bytes().zip(prefix.bytes()).all(|(k, p)| {
            let k = match k {
                b'-' | b'.' => b'_',
                other => other.to_ascii_lowercase(),
            };
            k == p
        })
}
