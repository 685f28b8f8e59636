//! Fuzzes output redaction: it never panics, it is idempotent, a policy secret never
//! survives it, and text it leaves unchanged comes back borrowed.
#![no_main]

use std::borrow::Cow;

use libfuzzer_sys::fuzz_target;
use tierbox_redact::Redactor;

fuzz_target!(|data: &[u8]| {
    // Input: a secret (up to the first NUL, when it is at least 8 bytes of printable
    // ASCII without brackets) and the text to redact.
    let (secret, text) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&b""[..], data),
    };
    let text = String::from_utf8_lossy(text);
    let secret = std::str::from_utf8(secret)
        .ok()
        .filter(|s| s.len() >= 8 && s.bytes().all(|b| b.is_ascii_graphic() && b != b'[' && b != b']'))
        // A secret inside the marker itself cannot be hidden by it (documented).
        .filter(|s| !tierbox_redact::REDACTED.contains(&s[..]))
        .map(str::to_owned);
    let redactor = match &secret {
        Some(s) => Redactor::new(std::slice::from_ref(s)),
        None => Redactor::default(),
    };
    let (once, changed) = redactor.redact(&text);
    if !changed {
        assert!(matches!(once, Cow::Borrowed(_)));
        assert_eq!(once, text);
    }
    if let Some(s) = &secret {
        assert!(!once.contains(s.as_str()), "secret survived redaction");
    }
    let (twice, _) = redactor.redact(&once);
    assert_eq!(twice, once, "redaction is not idempotent");
});
