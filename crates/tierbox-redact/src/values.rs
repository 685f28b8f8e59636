//! Which values are not secrets: placeholders, masks, references and code.

use crate::REDACTED;
use crate::keys::{KeyClass, classify_key};
use crate::words::{CODE_KEYWORDS, CODE_RECEIVERS, ENV_REFERENCES, NON_SECRET_VALUES};

/// Values that are plainly not secrets (see the module docs). `quoted` values were
/// written as strings; unquoted ones may also be code.
pub(crate) fn is_non_secret_value(value: &str, key: &str, quoted: bool) -> bool {
    let v = value.trim();
    if v.is_empty() || v == REDACTED || in_list(v, NON_SECRET_VALUES) {
        return true;
    }
    let masked = v
        .bytes()
        .all(|c| matches!(c, b'*' | b'.' | b'-' | b'_' | b'#'))
        || v.chars().all(|c| matches!(c, '•' | '…' | '*'))
        || (v.len() >= 3 && v.bytes().all(|c| matches!(c, b'x' | b'X')));
    if masked {
        return true;
    }
    let b = v.as_bytes();
    let last = b[b.len() - 1];
    if (b[0] == b'<' && last == b'>')
        || v.starts_with("${")
        || v.starts_with("$(")
        || v.starts_with("{{")
        || (b[0] == b'%' && last == b'%' && b.len() > 2)
        || (b[0] == b'$' && is_identifier(&v[1..]))
        || (b[0] == b'{' && last == b'}' && is_identifier(&v[1..v.len() - 1]))
    {
        return true;
    }
    if ["your", "replace", "placeholder", "todo", "fixme"]
        .iter()
        .any(|p| starts_with_ignore_case(v, p))
        || ENV_REFERENCES.iter().any(|p| v.starts_with(p))
    {
        return true;
    }
    if quoted {
        return false;
    }
    matches!(b[0], b'{' | b'[' | b'(')
        || v.contains('(')
        || v.split_ascii_whitespace()
            .next()
            .is_some_and(|w| in_list(w, CODE_KEYWORDS))
        || is_code_reference(v, key)
}

/// `self.token`, `config.api_key` (a dotted reference), or `password` for the key
/// `password`.
fn is_code_reference(v: &str, key: &str) -> bool {
    if !v.split('.').all(is_identifier) {
        return false;
    }
    let first = v.split('.').next().unwrap_or_default();
    let last = v.rsplit('.').next().unwrap_or_default();
    if v.contains('.') {
        return in_list(first, CODE_RECEIVERS) || classify_key(last) != KeyClass::Plain;
    }
    let key_last = key.rsplit(['_', '-', '.']).next().unwrap_or(key);
    v.eq_ignore_ascii_case(key) || v.eq_ignore_ascii_case(key_last)
}

/// A weak key's value must look random to be redacted: 8+ characters, no spaces, not a
/// path or a dotted name, and mixing letters with digits or upper with lower case.
pub(crate) fn looks_random(v: &str) -> bool {
    let b = v.as_bytes();
    if b.len() < 8
        || b.iter().any(u8::is_ascii_whitespace)
        || matches!(b[0], b'/' | b'~')
        || v.starts_with("./")
        || v.starts_with("../")
        || (v.contains('.') && v.split('.').all(is_identifier))
    {
        return false;
    }
    let digit = b.iter().any(u8::is_ascii_digit);
    let alpha = b.iter().any(u8::is_ascii_alphabetic);
    let upper = b.iter().any(u8::is_ascii_uppercase);
    let lower = b.iter().any(u8::is_ascii_lowercase);
    (digit && alpha) || (upper && lower)
}

fn is_identifier(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

pub(crate) fn in_list(word: &str, list: &[&str]) -> bool {
    list.iter().any(|w| w.eq_ignore_ascii_case(word))
}

pub(crate) fn contains_ignore_case(hay: &str, needle: &str) -> bool {
    hay.as_bytes()
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

fn starts_with_ignore_case(hay: &str, prefix: &str) -> bool {
    hay.len() >= prefix.len()
        && hay.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

pub(crate) fn ends_with_ignore_case(hay: &str, suffix: &str) -> bool {
    hay.len() >= suffix.len()
        && hay.as_bytes()[hay.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
}
