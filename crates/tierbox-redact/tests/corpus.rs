//! Output redaction (`tierbox_redact`): the positive and negative corpora under
//! `tests/redaction/`, and properties of exact-secret redaction and idempotence.
//!
//! Corpus format: one case per line; lines starting with `## ` are comments; `\n` and
//! `\r` stand for a newline and a carriage return. In positives, `«…»` marks exactly the
//! text that must become [`REDACTED`].

// Test code: a malformed corpus line should panic with its error (STYLE.md rule 1 opt-out).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::borrow::Cow;

use proptest::prelude::*;
use tierbox_redact::{MIN_SECRET_LEN, REDACTED, Redactor};

const POSITIVES: &str = include_str!("redaction/positives.txt");
const NEGATIVES: &str = include_str!("redaction/negatives.txt");

/// The secrets the corpus redactor is built with (as a policy's sensitive values).
const CORPUS_SECRETS: [&str; 2] = ["s3cr3t-env-value-Q7", "hunter2-policy-pw"];

fn corpus_redactor() -> Redactor {
    let secrets: Vec<String> = CORPUS_SECRETS.iter().map(|s| s.to_string()).collect();
    Redactor::new(&secrets)
}

fn cases(corpus: &str) -> Vec<(usize, String)> {
    corpus
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.is_empty() && !line.starts_with("## "))
        .map(|(i, line)| (i + 1, line.replace("\\n", "\n").replace("\\r", "\r")))
        .collect()
}

/// Splits a positive case into (input, expected output, the marked secrets).
fn parse_positive(case: &str) -> (String, String, Vec<String>) {
    let mut input = String::new();
    let mut expected = String::new();
    let mut secrets = Vec::new();
    let mut rest = case;
    while let Some(open) = rest.find('«') {
        let (before, after) = rest.split_at(open);
        let after = &after['«'.len_utf8()..];
        let close = after.find('»').expect("unbalanced «» in positives.txt");
        input.push_str(before);
        expected.push_str(before);
        input.push_str(&after[..close]);
        expected.push_str(REDACTED);
        secrets.push(after[..close].to_string());
        rest = &after[close + '»'.len_utf8()..];
    }
    input.push_str(rest);
    expected.push_str(rest);
    (input, expected, secrets)
}

#[test]
fn corpus_sizes() {
    let positives = cases(POSITIVES).len();
    let negatives = cases(NEGATIVES).len();
    assert!(positives >= 60, "only {positives} positive cases");
    assert!(negatives >= 80, "only {negatives} negative cases");
}

#[test]
fn positives_are_redacted_exactly() {
    let redactor = corpus_redactor();
    let mut failures = Vec::new();
    for (line, case) in cases(POSITIVES) {
        let (input, expected, secrets) = parse_positive(&case);
        assert!(!secrets.is_empty(), "positives.txt:{line} marks no secret");
        let (out, redacted) = redactor.redact(&input);
        if !redacted || out != expected {
            failures.push(format!(
                "positives.txt:{line}\n  input:    {input:?}\n  expected: {expected:?}\n  got:      {out:?} (redacted={redacted})"
            ));
            continue;
        }
        for secret in &secrets {
            if out.contains(secret.as_str()) {
                failures.push(format!(
                    "positives.txt:{line}: {secret:?} survived in {out:?}"
                ));
            }
        }
        let (again, changed) = redactor.redact(&out);
        if changed || again != out {
            failures.push(format!(
                "positives.txt:{line}: not idempotent: {out:?} -> {again:?}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn negatives_are_untouched() {
    let redactor = corpus_redactor();
    let mut failures = Vec::new();
    for (line, case) in cases(NEGATIVES) {
        let (out, redacted) = redactor.redact(&case);
        if redacted || out != case || !matches!(out, Cow::Borrowed(_)) {
            failures.push(format!(
                "negatives.txt:{line}\n  input: {case:?}\n  got:   {out:?} (redacted={redacted})"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn whole_negative_corpus_as_one_output_is_untouched() {
    let text: String = cases(NEGATIVES)
        .into_iter()
        .map(|(_, case)| case + "\n")
        .collect();
    let (out, redacted) = corpus_redactor().redact(&text);
    assert!(!redacted);
    assert!(matches!(out, Cow::Borrowed(_)));
}

#[test]
fn whole_positive_corpus_as_one_output_hides_every_secret() {
    let mut input = String::new();
    let mut secrets = Vec::new();
    for (_, case) in cases(POSITIVES) {
        let (i, _, s) = parse_positive(&case);
        // Unterminated key blocks run to the end of the text; keep them last.
        if !i.contains("PRIVATE KEY") {
            input.push_str(&i);
            input.push('\n');
            secrets.extend(s);
        }
    }
    let (out, redacted) = corpus_redactor().redact(&input);
    assert!(redacted);
    for secret in secrets {
        assert!(!out.contains(secret.as_str()), "{secret:?} survived");
    }
}

/// A line whose replacements keep uncovering new matches (here the query rule, whose
/// values end at `#`, and the assignment rule, whose values do not, take turns on
/// `k-s-key=` pairs) is hidden whole once [`tierbox_redact::MAX_PASSES`] is reached,
/// rather than left half-settled: a second redaction must change nothing. Found by the
/// `redact` fuzz target.
#[test]
fn a_line_that_does_not_settle_is_hidden_whole() {
    const UNSETTLED: &[u8] = b"{curl\xff\xff\xff-p\x1cs\x8b^\x8b\x8d\xd2sk_tr-psk_tr-pspskpn_t-s-psk_tr-pspsk--#key=\xde+#e_#k-s-key=\xde_#::\xff\xbcsBl\xff\x01;\xf4\xff\xff\xffk_troslk_trosl\xff\xff:\xf4\xff_tn-ps-psk^tr-psk_tr-pspsk_tn-ps-psk_tr-psps[REDkey=\xde+#e_#k-s-key=\xde_#::\xff\xbcsBl\xff\x01;\xf4\xff\xff\xffk_troslk_tr-ps\xff\xff\xffy=\xde+#e_w:/\xf5";
    let line = String::from_utf8_lossy(UNSETTLED);
    let text =
        format!("password=hunter2\n{line}\nok: token=ghp_abcdefghijklmnopqrstuvwxyz0123456789\n");
    let redactor = Redactor::default();
    let (once, redacted) = redactor.redact(&text);
    assert!(redacted);
    assert_eq!(
        once,
        format!("password={REDACTED}\n{REDACTED}\nok: token={REDACTED}\n"),
        "only the unsettled line is hidden whole"
    );
    let (twice, changed) = redactor.redact(&once);
    assert_eq!(twice, once);
    assert!(!changed);

    // Alone, the line is the whole text.
    let (alone, _) = redactor.redact(&line);
    assert_eq!(alone, REDACTED);
}

/// Invalid UTF-8 on lines of its own around each positive case changes nothing about
/// what is redacted: the redacted bytes, shown lossily, are the lossy text redacted, and
/// the invalid bytes come back exactly. Each invalid byte here is a sequence of its own,
/// so the lossy text has one `U+FFFD` where the bytes have one stand-in.
#[test]
fn positives_between_invalid_bytes_are_redacted_as_their_lossy_text() {
    let redactor = corpus_redactor();
    for (line, case) in cases(POSITIVES) {
        let (input, _, _) = parse_positive(&case);
        let mut bytes = b"\xff\xfe\x80\n".to_vec();
        bytes.extend_from_slice(input.as_bytes());
        bytes.extend_from_slice(b"\n\xc3(\xbf\n");
        let (out, redacted) = redactor.redact_bytes(&bytes);
        let text = String::from_utf8_lossy(&bytes);
        let (lossy, lossy_redacted) = redactor.redact(&text);
        assert!(redacted && lossy_redacted, "positives.txt:{line}");
        assert_eq!(String::from_utf8_lossy(&out), lossy, "positives.txt:{line}");
        assert!(
            out.starts_with(b"\xff\xfe\x80\n"),
            "positives.txt:{line}: {out:?}"
        );
        if !input.contains("PRIVATE KEY") {
            assert!(
                out.ends_with(b"\n\xc3(\xbf\n"),
                "positives.txt:{line}: {out:?}"
            );
        }
    }
}

#[test]
fn negatives_as_bytes_are_untouched_and_borrowed() {
    let redactor = corpus_redactor();
    for (line, case) in cases(NEGATIVES) {
        let mut bytes = case.clone().into_bytes();
        bytes.extend_from_slice(b"\n\xff\x00\xfe binary \x80\n");
        let (out, redacted) = redactor.redact_bytes(&bytes);
        assert!(!redacted, "negatives.txt:{line}: {out:?}");
        assert!(matches!(out, Cow::Borrowed(_)), "negatives.txt:{line}");
    }
}

#[test]
fn short_secrets_are_ignored() {
    let redactor = Redactor::new(&["abc".to_string(), String::new(), "ACTED".to_string()]);
    const { assert!(MIN_SECRET_LEN > 3) };
    let text = "abc abc ACTED";
    let (out, redacted) = redactor.redact(text);
    assert!(!redacted);
    assert_eq!(out, text);
}

/// Secrets: printable ASCII without the marker's brackets (a secret such as `D]ab` can be
/// re-formed across a marker, which is not a leak but is not idempotent either).
fn secret_strategy() -> impl Strategy<Value = String> {
    "[ -Z\\\\^-~]{4,40}".prop_filter("not part of the marker", |s| !REDACTED.contains(s.as_str()))
}

/// Where [`soup_strategy`] puts the secrets under test.
const SECRET_SLOT: &str = "\u{0}";
const MULTILINE_SECRET_SLOT: &str = "\u{1}";

/// Text made of fragments that trigger the rules (and [`SECRET_SLOT`]s), glued with
/// arbitrary ASCII.
fn soup_strategy() -> impl Strategy<Value = String> {
    let fragment = prop_oneof![
        Just(SECRET_SLOT.to_string()),
        Just(MULTILINE_SECRET_SLOT.to_string()),
        Just("password=".to_string()),
        Just("token: ".to_string()),
        Just("\"api_key\": \"".to_string()),
        Just("Bearer ".to_string()),
        Just("Basic ".to_string()),
        Just("Authorization: ".to_string()),
        Just("-H \"Cookie: ".to_string()),
        Just("--token ".to_string()),
        Just("machine h login u password ".to_string()),
        Just("curl -u a:".to_string()),
        Just("https://".to_string()),
        Just("u:p@".to_string()),
        Just("?token=".to_string()),
        Just("&amp;sig=".to_string()),
        Just("/token/".to_string()),
        Just("ghp_0123456789abcdefghijABCDEFGHIJ012345".to_string()),
        Just("AKIA0123456789ABCDEF".to_string()),
        Just("sk-Ab3dEf6hIj9kLm2nOp5qRs8t".to_string()),
        Just("-----BEGIN RSA PRIVATE KEY-----".to_string()),
        Just("-----END RSA PRIVATE KEY-----".to_string()),
        Just(REDACTED.to_string()),
        Just("\n".to_string()),
        Just("\"".to_string()),
        Just("'".to_string()),
        Just(" ".to_string()),
        Just("é日本🔑".to_string()),
        "[ -~]{0,12}",
        "[A-Za-z0-9]{1,24}",
    ];
    prop::collection::vec(fragment, 0..32).prop_map(|v| v.concat())
}

/// Bytes that are never part of valid UTF-8 (lone continuation bytes, `0xC0`, `0xC1`,
/// `0xF5`–`0xFF`), with blanks and newlines between them.
fn invalid_strategy() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        0x80u8..=0xBF,
        Just(0xC0u8),
        Just(0xC1u8),
        0xF5u8..=0xFF,
        Just(b'\n'),
        Just(b' '),
    ];
    prop::collection::vec(byte, 0..40)
}

/// `before`, a blank, `middle`, a blank, `after`.
fn blank_between(before: &[u8], middle: &[u8], after: &[u8]) -> Vec<u8> {
    [before, b" ", middle, b" ", after].concat()
}

proptest! {
    /// On valid UTF-8, redacting bytes is redacting the text.
    #[test]
    fn redacting_bytes_is_redacting_text_on_valid_utf8(
        soup in soup_strategy(),
        secret in secret_strategy(),
    ) {
        let text = soup.replace(SECRET_SLOT, &secret).replace(MULTILINE_SECRET_SLOT, "a\nb");
        let redactor = Redactor::new(std::slice::from_ref(&secret));
        let (as_text, text_flag) = redactor.redact(&text);
        let (as_bytes, bytes_flag) = redactor.redact_bytes(text.as_bytes());
        prop_assert_eq!(&*as_bytes, as_text.as_bytes());
        prop_assert_eq!(bytes_flag, text_flag);
        prop_assert_eq!(matches!(as_bytes, Cow::Borrowed(_)), matches!(as_text, Cow::Borrowed(_)));
    }

    /// Invalid UTF-8 around a secret is kept byte-exact; only the secret is replaced.
    #[test]
    fn invalid_bytes_around_a_secret_are_kept_exactly(
        secret in "[A-Za-z0-9]{4,40}",
        before in invalid_strategy(),
        after in invalid_strategy(),
    ) {
        let redactor = Redactor::new(std::slice::from_ref(&secret));
        let bytes = blank_between(&before, secret.as_bytes(), &after);
        let (out, redacted) = redactor.redact_bytes(&bytes);
        let want = blank_between(&before, REDACTED.as_bytes(), &after);
        prop_assert!(redacted);
        prop_assert_eq!(&*out, &want[..]);
    }

    /// A stream cut anywhere into chunks, redacted piece by piece, hides a secret the
    /// chunks split, and keeps every other byte.
    #[test]
    fn a_stream_hides_a_secret_split_across_chunks(
        secret in "[A-Za-z0-9]{4,40}",
        before in invalid_strategy(),
        after in invalid_strategy(),
        cuts in prop::collection::vec(0usize..200, 0..6),
    ) {
        let redactor = Redactor::new(std::slice::from_ref(&secret));
        let bytes = blank_between(&before, secret.as_bytes(), &after);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let mut stream = tierbox_redact::stream::StreamRedactor::default();
        let (mut out, mut last) = (Vec::new(), 0);
        for cut in cuts.into_iter().chain([bytes.len()]) {
            out.extend(stream.push(&bytes[last..cut], false, Some(&redactor)).unwrap_or_default());
            last = cut;
        }
        out.extend(stream.finish(Some(&redactor)).unwrap_or_default());
        let want = blank_between(&before, REDACTED.as_bytes(), &after);
        prop_assert_eq!(out, want);
    }

    #[test]
    fn exact_secret_never_survives(
        secret in secret_strategy(),
        before in "[ -~\n\t]{0,80}",
        after in "[ -~\n\t]{0,80}",
        repeat in 1usize..4,
    ) {
        let redactor = Redactor::new(std::slice::from_ref(&secret));
        let mut text = before.clone();
        for _ in 0..repeat {
            text.push_str(&secret);
            text.push_str(&after);
        }
        let (out, redacted) = redactor.redact(&text);
        prop_assert!(redacted);
        prop_assert!(!out.contains(secret.as_str()), "{:?} survived in {:?}", secret, out);
        let (again, changed) = redactor.redact(&out);
        prop_assert_eq!(&again, &out);
        prop_assert!(!changed);
    }

    #[test]
    fn redaction_is_idempotent(
        soup in soup_strategy(),
        secret in secret_strategy(),
        multiline in "[a-z]{2,6}\n[a-z]{2,6}",
    ) {
        let text = soup
            .replace(SECRET_SLOT, &secret)
            .replace(MULTILINE_SECRET_SLOT, &multiline);
        let redactor = Redactor::new(&[secret.clone(), multiline.clone()]);
        let (once, _) = redactor.redact(&text);
        prop_assert!(!once.contains(secret.as_str()), "{:?} survived in {:?}", secret, once);
        prop_assert!(!once.contains(multiline.as_str()), "{:?} survived in {:?}", multiline, once);
        let (twice, changed) = redactor.redact(&once);
        prop_assert_eq!(&twice, &once);
        prop_assert!(!changed, "second pass changed {:?}", once);
    }

    #[test]
    fn unredacted_text_is_borrowed(text in "[ -~\n]{0,200}") {
        let (out, redacted) = Redactor::default().redact(&text);
        prop_assert_eq!(redacted, matches!(out, Cow::Owned(_)));
        if !redacted {
            prop_assert_eq!(&out, &text);
        }
    }
}
