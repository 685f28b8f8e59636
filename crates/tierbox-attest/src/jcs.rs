//! RFC 8785 JSON Canonicalization Scheme (JCS), the encoding attestations are signed in.
//!
//! Invariants: the output is a pure function of the [`Value`] (no feature flag of
//! `serde_json`, no platform, no locale changes it); it is valid JSON that parses back
//! to the same value; distinct values give distinct bytes.
//!
//! How it differs from [`crate::canonical_json`] (kept for plan digests, whose bytes must
//! not change):
//!
//! | | `canonical_json` | `jcs` |
//! |---|---|---|
//! | key order | UTF-8 bytes | UTF-16 code units (RFC 8785 §3.2.3) |
//! | numbers | `serde_json` formatting | ECMAScript `Number.prototype.toString` (§3.2.2.3) |
//! | strings | `serde_json` escaping | only `\"`, `\\`, `\b \f \n \r \t`, `\u00xx` (lowercase) for other controls |
//!
//! The two agree on values whose keys are all in the Basic Multilingual Plane below
//! U+E000 and whose numbers are integers; they differ on keys with supplementary-plane
//! characters (e.g. emoji sort *before* U+E000–U+FFFF in UTF-16) and on floats.

use serde_json::{Number, Value};

/// Why a value has no JCS encoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JcsError {
    /// An integer beyond ±2^53. RFC 8785 models numbers as IEEE 754 doubles, whose
    /// ECMAScript text for such integers is not the integer (2^63 is written
    /// `9223372036854776000`) and would not parse back to the same value; they are
    /// refused (as I-JSON, RFC 7493, advises) rather than silently changed. Encode large
    /// values as strings.
    #[error("the integer {0} is outside ±2^53 and has no exact canonical form (RFC 8785 §3.2.2.3)")]
    IntegerOutOfRange(String),
}

/// Encodes `value` with the RFC 8785 JSON Canonicalization Scheme.
///
/// Integers up to ±2^53 are written as plain decimals (which is their ECMAScript form);
/// larger integers are refused with [`JcsError::IntegerOutOfRange`]. Floats are written
/// per ECMAScript (`1e+30`, `0.002`, `-0` as `0`).
///
/// ```
/// use serde_json::json;
/// let v = json!({"b": [1, "\u{7f}\n"], "a": null, "\u{1F600}": 1, "\u{FB33}": 2});
/// assert_eq!(
///     tierbox_attest::jcs(&v).unwrap(),
///     "{\"a\":null,\"b\":[1,\"\u{7f}\\n\"],\"\u{1F600}\":1,\"\u{FB33}\":2}"
/// );
/// ```
pub fn jcs(value: &Value) -> Result<String, JcsError> {
    let mut out = String::new();
    write_value(&mut out, value)?;
    Ok(out)
}

fn write_value(out: &mut String, value: &Value) -> Result<(), JcsError> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, n)?,
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item)?;
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, k);
                out.push(':');
                write_value(out, v)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

/// 2^53: every integer of smaller magnitude is an exact double.
const EXACT_INTEGER_LIMIT: u64 = 1 << 53;

fn write_number(out: &mut String, n: &Number) -> Result<(), JcsError> {
    if let Some(u) = n.as_u64() {
        if u > EXACT_INTEGER_LIMIT {
            return Err(JcsError::IntegerOutOfRange(u.to_string()));
        }
        out.push_str(&u.to_string());
    } else if let Some(i) = n.as_i64() {
        if i.unsigned_abs() > EXACT_INTEGER_LIMIT {
            return Err(JcsError::IntegerOutOfRange(i.to_string()));
        }
        out.push_str(&i.to_string());
    } else {
        // Not an integer: serde_json holds it as a finite f64 (JSON has no NaN or
        // infinity), so `as_f64` is always `Some`.
        out.push_str(&es_number(n.as_f64().unwrap_or(0.0)));
    }
    Ok(())
}

/// ECMAScript `Number.prototype.toString(10)` of a finite double (ECMA-262
/// Number::toString, as RFC 8785 §3.2.2.3 requires).
///
/// ECMAScript takes the fewest digits `k` that round-trip and, among `k`-digit
/// candidates, the one closest to the value. Rust's `{:e}` gives the fewest digits but
/// not always the closest candidate (0x44b52d02c7e14af7 prints as `1.0000000000000001e23`
/// where ECMAScript has `…02e+23`), so the digits are taken from the correctly rounded
/// `{:.(k-1)e}`, which is the closest `k`-digit decimal and therefore also round-trips.
fn es_number(f: f64) -> String {
    if f == 0.0 {
        return "0".to_owned(); // also -0
    }
    let shortest = format!("{:e}", f.abs()); // e.g. "1.2345e-7", "5e-324", "1e23"
    let k = shortest
        .split_once('e')
        .map_or(shortest.as_str(), |p| p.0)
        .bytes()
        .filter(u8::is_ascii_digit)
        .count();
    let sci = format!("{:.*e}", k.saturating_sub(1), f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exp: i32 = exp.parse().unwrap_or(0);
    let k = i32::try_from(digits.len()).unwrap_or(i32::MAX);
    // ECMAScript's n: the value is 0.d1d2…dk × 10^n.
    let n = exp + 1;
    let mut s = String::new();
    if f < 0.0 {
        s.push('-');
    }
    let zeros = |count: i32| "0".repeat(usize::try_from(count).unwrap_or(0));
    if k <= n && n <= 21 {
        s.push_str(&digits);
        s.push_str(&zeros(n - k));
    } else if 0 < n && n <= 21 {
        let (int, frac) = digits.split_at(usize::try_from(n).unwrap_or(0));
        s.push_str(int);
        s.push('.');
        s.push_str(frac);
    } else if -6 < n && n <= 0 {
        s.push_str("0.");
        s.push_str(&zeros(-n));
        s.push_str(&digits);
    } else {
        let (first, rest) = digits.split_at(1);
        s.push_str(first);
        if !rest.is_empty() {
            s.push('.');
            s.push_str(rest);
        }
        s.push('e');
        s.push(if n > 0 { '+' } else { '-' });
        s.push_str(&(n - 1).abs().to_string());
    }
    s
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    // Most strings (digests, names, paths) need no escape: copied whole.
    if !s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        out.push_str(s);
        out.push('"');
        return;
    }
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Lowercase hex of `bytes` (the form of every digest, key and signature here).
///
/// ```
/// assert_eq!(tierbox_attest::jcs::hex(&[0, 0xab]), "00ab");
/// ```
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    s
}

/// Largest integer magnitude JCS can carry exactly (2^53 - 1, IEEE-754 doubles).
pub const MAX_EXACT_INTEGER: u64 = (1 << 53) - 1;

/// Rewrites every integer beyond ±[`MAX_EXACT_INTEGER`] in `value` as its decimal string,
/// so that [`jcs`] accepts reports that hold large counters (byte limits, inode numbers)
/// and the digest still commits to the exact value.
///
/// ```
/// let mut v = serde_json::json!({"memory_bytes": u64::MAX, "small": 7});
/// tierbox_attest::jcs::large_integers_as_strings(&mut v);
/// assert_eq!(tierbox_attest::jcs(&v).unwrap(),
///            r#"{"memory_bytes":"18446744073709551615","small":7}"#);
/// ```
pub fn large_integers_as_strings(value: &mut Value) {
    match value {
        Value::Number(n) => {
            let too_big = n.as_u64().is_some_and(|u| u > MAX_EXACT_INTEGER)
                || n.as_i64()
                    .is_some_and(|i| i.unsigned_abs() > MAX_EXACT_INTEGER);
            if too_big {
                *value = Value::String(n.to_string());
            }
        }
        Value::Array(items) => items.iter_mut().for_each(large_integers_as_strings),
        Value::Object(map) => map.values_mut().for_each(large_integers_as_strings),
        _ => {}
    }
}

#[cfg(test)]
#[path = "jcs_tests.rs"]
mod tests;
