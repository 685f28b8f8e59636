//! Rule 6: assignments, HTTP headers (rule 2), CLI flags, netrc and `curl -u`.

use crate::keys::{KeyClass, classify_key};
use crate::patterns::Rules;
use crate::rules::{normalized_eq, strip_auth_scheme};
use crate::values::{in_list, is_non_secret_value, looks_random};
use crate::words::TYPE_WORDS;
use crate::{CURL_LOOKBACK, Sink, is_key_byte, key_boundary, skip_blanks, trim_range};

pub(crate) fn assignments(rules: &Rules, sink: &mut Sink<'_, '_>) {
    let text = sink.text;
    let b = text.as_bytes();

    for m in rules.kv.find_iter(text) {
        key_value(sink, m.start(), m.end());
    }

    // --key value
    for m in rules.cli_flag.find_iter(text) {
        if m.start() > 0 && !matches!(b[m.start() - 1], b' ' | b'\t' | b'\n') {
            continue;
        }
        let ks = m.start() + 2;
        let mut ke = ks;
        while ke < m.end() && is_key_byte(b[ke]) {
            ke += 1;
        }
        let vs = skip_blanks(b, ke, m.end());
        value_span(sink, &text[ks..ke], vs, m.end(), false);
    }

    // machine host login user password secret: the value is the last word.
    for m in rules.netrc.find_iter(text) {
        let vs = text[..m.end()]
            .rfind([' ', '\t'])
            .map_or(m.start(), |i| i + 1);
        value_span(sink, "password", vs, m.end(), false);
    }

    // curl -u user:password (only on a curl/wget line: `docker run -u 1000:1000` is not).
    for m in rules.curl_user.find_iter(text) {
        let flag_ok = m.start() == 0 || matches!(b[m.start() - 1], b' ' | b'\t');
        let Some(colon) = m.as_str().find(':') else {
            continue;
        };
        let vs = m.start() + colon + 1;
        // `-u 1000:1000` is a uid:gid even on a line that mentions curl.
        let user = m.as_str()[..colon].rsplit([' ', '\t', '"', '\'']).next();
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
        if user.is_some_and(digits) && digits(&text[vs..m.end()]) {
            continue;
        }
        // Look back along the line, but not past CURL_LOOKBACK bytes: many `-u a:b` on one
        // huge line must not make this quadratic.
        let before = &b[m.start().saturating_sub(CURL_LOOKBACK)..m.start()];
        let line = before
            .iter()
            .rposition(|&c| c == b'\n')
            .map_or(before, |p| &before[p + 1..]);
        let curl = line.windows(4).any(|w| w == b"curl" || w == b"wget");
        if flag_ok && curl {
            value_span(sink, "password", vs, m.end(), false);
        }
    }
}

/// One match `ms..me` of the `kv` pattern: `[quote] key [quote] sep value`, where sep is
/// `=`, `:=` or `:`. The parts are found by scanning the match, which the pattern makes
/// unambiguous: the key is the longest run of key characters.
fn key_value(sink: &mut Sink<'_, '_>, ms: usize, me: usize) {
    let text = sink.text;
    let b = text.as_bytes();
    let open = &b[ms..ms + quote_len(b, ms, me)];
    // A quote starts a new token whatever precedes it. (Checking the byte before it would
    // make redaction depend on its own output: a value that ends at the quote is a word
    // character before the first pass and `]` of the marker after it.)
    if open.is_empty() && !key_boundary(text, ms) {
        return;
    }
    let ks = ms + open.len();
    let mut ke = ks;
    while ke < me && is_key_byte(b[ke]) {
        ke += 1;
    }
    let close = &b[ke..ke + quote_len(b, ke, me)];
    let sep = skip_blanks(b, ke + close.len(), me);
    let colon = b.get(sep) == Some(&b':') && b.get(sep + 1) != Some(&b'=');
    let sep_end = sep
        + if colon || b.get(sep) == Some(&b'=') {
            1
        } else {
            2
        };
    let mut vs = skip_blanks(b, sep_end, me);
    // Rust `Debug` of an `Option<String>`: `token: Some("abc")`.
    if text[vs..me].starts_with("Some(") && quote_len(b, vs + 5, me) == 1 {
        vs += "Some(".len();
    }
    if vs >= me {
        return;
    }
    let key = &text[ks..ke];
    if open != close {
        // A header inside a quoted string: `-H "Authorization: Bearer abc"`. The value
        // runs to the closing quote.
        if let ([q], [], true) = (open, close, colon)
            && is_header_name(key)
        {
            let end = text[vs..]
                .find([char::from(*q), '\n'])
                .map_or(text.len(), |i| vs + i);
            header_value(sink, vs, end);
        }
        return;
    }
    let value_quoted = quote_len(b, vs, me) > 0;
    if value_quoted || !colon {
        value_span(sink, key, vs, me, false);
        return;
    }
    // `key: value` with an unquoted value needs a space after the colon (`sha256:abc`,
    // `host:port`, `token.rs:12:5` are not assignments).
    if !matches!(b.get(sep_end), Some(b' ' | b'\t')) {
        return;
    }
    if !open.is_empty() {
        // "key": value (JSON numbers and literals)
        value_span(sink, key, vs, me, false);
    } else if at_line_start(text, ks) {
        // YAML, logs, HTTP headers: the value is the rest of the line.
        let eol = text[vs..].find('\n').map_or(text.len(), |i| vs + i);
        let (s, e) = trim_range(text, vs, eol);
        if is_auth_header_name(key) {
            header_value(sink, s, e);
        } else if !looks_like_code_annotation(&text[s..e]) {
            value_span(sink, key, s, e, true);
        }
    }
}

/// `Authorization`, `Cookie` and their proxy/response forms: header values that may
/// contain spaces (`Bearer abc`, `a=1; b=2`) and are never code.
fn is_auth_header_name(key: &str) -> bool {
    [
        "authorization",
        "proxy_authorization",
        "cookie",
        "set_cookie",
    ]
    .iter()
    .any(|h| normalized_eq(key, h))
}

/// Length of the quote at `i` (before `end`): 1 for `"` or `'`, 2 for an escaped `\"`
/// or `\'` (JSON inside a string), 0 for none.
fn quote_len(b: &[u8], i: usize, end: usize) -> usize {
    match b.get(i..end) {
        Some([b'"' | b'\'', ..]) => 1,
        Some([b'\\', b'"' | b'\'', ..]) => 2,
        _ => 0,
    }
}

/// HTTP header names whose whole value is a credential.
fn is_header_name(key: &str) -> bool {
    [
        "authorization",
        "proxy_authorization",
        "cookie",
        "set_cookie",
        "x_api_key",
        "api_key",
    ]
    .iter()
    .any(|h| normalized_eq(key, h))
}

/// Redacts a header value (trimmed) unless it is a placeholder such as `Bearer <token>`.
fn header_value(sink: &mut Sink<'_, '_>, start: usize, end: usize) {
    let (s, e) = trim_range(sink.text, start, end);
    if !is_non_secret_value(strip_auth_scheme(&sink.text[s..e]), "", true) {
        sink.push(s, e);
    }
}

/// Redacts the value at `vs..ve` of `key` if the key names a secret and the value is one.
/// A quoted value keeps its quotes. `whole` values (the rest of a YAML line) are not
/// trimmed of punctuation.
fn value_span(sink: &mut Sink<'_, '_>, key: &str, vs: usize, ve: usize, whole: bool) {
    let raw = &sink.text[vs..ve];
    let class = classify_key(key);
    if class == KeyClass::Plain {
        return;
    }
    let (start, value, quoted) = match raw.as_bytes() {
        [b'\\', q @ (b'"' | b'\''), .., b'\\', q2] if raw.len() >= 4 && q == q2 => {
            (vs + 2, &raw[2..raw.len() - 2], true)
        }
        [q @ (b'"' | b'\''), .., q2] if q == q2 => (vs + 1, &raw[1..raw.len() - 1], true),
        _ if whole => (vs, raw, false),
        _ => (vs, trim_trailing_punctuation(raw), false),
    };
    if accepts_value(class, key, value, quoted) {
        sink.push(start, start + value.len());
    }
}

pub(crate) fn accepts_value(class: KeyClass, key: &str, value: &str, quoted: bool) -> bool {
    match class {
        KeyClass::Plain => false,
        KeyClass::Strong => !is_non_secret_value(value, key, quoted),
        KeyClass::Weak => !is_non_secret_value(value, key, quoted) && looks_random(value),
    }
}

/// Only indentation and an optional YAML list dash or curl `-v` marker (`>`, `<`, `*`)
/// precede `at` on its line.
fn at_line_start(text: &str, at: usize) -> bool {
    let b = text.as_bytes();
    let mut i = at;
    while i > 0 && matches!(b[i - 1], b' ' | b'\t') {
        i -= 1;
    }
    if i > 0 && matches!(b[i - 1], b'-' | b'>' | b'<' | b'*') {
        i -= 1;
        while i > 0 && matches!(b[i - 1], b' ' | b'\t') {
            i -= 1;
        }
    }
    i == 0 || b[i - 1] == b'\n'
}

/// `api_key: String,` / `password: string;` / `token: Option<String>` — a field
/// declaration in code, not a YAML value.
fn looks_like_code_annotation(value: &str) -> bool {
    let v = value.trim_end_matches([',', ';']);
    value.ends_with([',', ';', '{', '('])
        || v.contains(['(', '['])
        || (v.contains('<') && v.ends_with('>') && !v.starts_with('<'))
        || in_list(v, TYPE_WORDS)
        || v.starts_with('&')
}

/// Drops trailing sentence punctuation and closing brackets that have no opener inside
/// the value (`password=abc),` → `abc`). Linear in the value.
pub(crate) fn trim_trailing_punctuation(value: &str) -> &str {
    let b = value.as_bytes();
    let count = |c: u8| b.iter().filter(|x| **x == c).count();
    let open = [count(b'('), count(b'['), count(b'{'), count(b'<')];
    let mut close = [count(b')'), count(b']'), count(b'}'), count(b'>')];
    let mut end = b.len();
    while end > 0 {
        let c = b[end - 1];
        let bracket = match c {
            b')' => Some(0),
            b']' => Some(1),
            b'}' => Some(2),
            b'>' => Some(3),
            _ => None,
        };
        match bracket {
            Some(i) if close[i] > open[i] => {
                close[i] -= 1;
            }
            Some(_) => break,
            None if matches!(c, b'.' | b',' | b';' | b':' | b'!' | b'?' | b'`') => {}
            None => break,
        }
        end -= 1;
    }
    &value[..end]
}
