//! Which keys name a secret: keys split into words and classified.

use crate::values::{contains_ignore_case, ends_with_ignore_case, in_list};
use crate::words::{
    MAX_KEY_WORDS, META_WORDS, NON_SECRET_KEY_KINDS, PASS_OWNERS, QUANT_WORDS, STRONG_KEY_KINDS,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum KeyClass {
    /// Not a secret key.
    Plain,
    /// `*_key`: redacted only when the value looks random.
    Weak,
    /// Redacted unless the value is plainly not a secret.
    Strong,
}

/// Splits `key` at `_ - .` and camelCase boundaries into `out`; `None` if there are more
/// than [`MAX_KEY_WORDS`] words. Allocation-free.
pub(crate) fn key_words<'k>(key: &'k str, out: &mut [&'k str; MAX_KEY_WORDS]) -> Option<usize> {
    let b = key.as_bytes();
    let mut n = 0;
    let mut start = 0;
    for i in 0..=b.len() {
        let sep = i == b.len() || matches!(b[i], b'_' | b'-' | b'.');
        let camel = !sep
            && i > start
            && b[i].is_ascii_uppercase()
            && (b[i - 1].is_ascii_lowercase()
                || b[i - 1].is_ascii_digit()
                || (b[i - 1].is_ascii_uppercase()
                    && b.get(i + 1).is_some_and(u8::is_ascii_lowercase)));
        if sep || camel {
            if i > start {
                *out.get_mut(n)? = &key[start..i];
                n += 1;
            }
            start = if sep { i + 1 } else { i };
        }
    }
    Some(n)
}

pub(crate) fn classify_key(key: &str) -> KeyClass {
    let mut buf = [""; MAX_KEY_WORDS];
    let Some(n) = key_words(key, &mut buf) else {
        return KeyClass::Plain;
    };
    let words = &buf[..n];
    if is_header_key(words) {
        return KeyClass::Strong;
    }
    let mut class = KeyClass::Plain;
    let mut last_secret = None;
    for i in 0..words.len() {
        let c = word_class(words, i);
        if c != KeyClass::Plain {
            class = class.max(c);
            last_secret = Some(i);
        }
    }
    let Some(last) = last_secret else {
        return KeyClass::Plain;
    };
    if words.iter().any(|w| in_list(w, QUANT_WORDS))
        || words[last + 1..].iter().any(|w| in_list(w, META_WORDS))
    {
        return KeyClass::Plain;
    }
    class
}

fn is_header_key(words: &[&str]) -> bool {
    let eq = |i: usize, w: &str| words.get(i).is_some_and(|x| x.eq_ignore_ascii_case(w));
    match words.len() {
        1 => eq(0, "authorization") || eq(0, "cookie"),
        2 => (eq(0, "proxy") && eq(1, "authorization")) || (eq(0, "set") && eq(1, "cookie")),
        _ => false,
    }
}

fn word_class(words: &[&str], i: usize) -> KeyClass {
    let w = words[i];
    const STRONG_PARTS: &[&str] = &[
        "password",
        "passwd",
        "passphrase",
        "secret",
        "credential",
        "apikey",
        "privatekey",
        "accesskey",
    ];
    if STRONG_PARTS.iter().any(|p| contains_ignore_case(w, p))
        || w.eq_ignore_ascii_case("token")
        || (w.len() > 5 && ends_with_ignore_case(w, "token"))
    {
        return KeyClass::Strong;
    }
    let last = i + 1 == words.len();
    let prev = i.checked_sub(1).map(|p| words[p]);
    if last
        && (w.eq_ignore_ascii_case("pass")
            || w.eq_ignore_ascii_case("pw")
            || w.eq_ignore_ascii_case("pwd"))
        && prev.is_some_and(|p| in_list(p, PASS_OWNERS))
    {
        return KeyClass::Strong;
    }
    if w.eq_ignore_ascii_case("key")
        && let Some(prev) = prev
    {
        if in_list(prev, STRONG_KEY_KINDS) {
            return KeyClass::Strong;
        }
        if !in_list(prev, NON_SECRET_KEY_KINDS) {
            return KeyClass::Weak;
        }
    }
    KeyClass::Plain
}
