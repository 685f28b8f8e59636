//! Fuzzes output redaction: it never panics, it is idempotent, a policy secret never
//! survives it, and text it leaves unchanged comes back borrowed; redacting the bytes
//! themselves is redacting the text when they are UTF-8, hides the secret too, and
//! changes nothing it does not say it changed.
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
    let raw = text;
    let text = String::from_utf8_lossy(raw);
    let secret = std::str::from_utf8(secret)
        .ok()
        .filter(|s| {
            s.len() >= 8
                && s.bytes()
                    .all(|b| b.is_ascii_graphic() && b != b'[' && b != b']')
        })
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
    let (bytes, bytes_changed) = redactor.redact_bytes(raw);
    if let Ok(valid) = std::str::from_utf8(raw) {
        let (as_text, text_changed) = redactor.redact(valid);
        assert_eq!(
            &*bytes,
            as_text.as_bytes(),
            "bytes and text redact differently"
        );
        assert_eq!(bytes_changed, text_changed);
    }
    if !bytes_changed {
        assert_eq!(&*bytes, raw, "bytes changed without saying so");
    }
    if let Some(s) = &secret {
        assert!(
            !bytes.windows(s.len()).any(|w| w == s.as_bytes()),
            "secret survived redaction of the bytes"
        );
    }
});
