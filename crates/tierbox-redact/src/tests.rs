//! Unit tests of the redactor, one group per rule.

use super::*;
use crate::assignments::trim_trailing_punctuation;
use crate::keys::{KeyClass, classify_key, key_words};
use crate::values::is_non_secret_value;
use crate::words::MAX_KEY_WORDS;

/// Redacts with the built-in rules only.
fn r(text: &str) -> String {
    Redactor::default().redact(text).0.into_owned()
}

fn unchanged(text: &str) {
    let (out, redacted) = Redactor::default().redact(text);
    assert!(!redacted, "{text:?} was redacted to {out:?}");
    assert!(matches!(out, Cow::Borrowed(_)));
}

/// `expected` uses `§` for the marker, to keep the tables short.
fn check(cases: &[(&str, &str)]) {
    for (input, expected) in cases {
        let expected = expected.replace('§', REDACTED);
        assert_eq!(r(input), expected, "input: {input:?}");
        assert_eq!(r(&expected), expected, "not idempotent: {input:?}");
    }
}

#[test]
fn every_pattern_compiles() {
    let built = Rules::build();
    assert!(built.is_ok(), "{:?}", built.err());
    assert!(RULES.is_some());
}

#[test]
fn marker_is_never_redacted_again() {
    unchanged(REDACTED);
    unchanged("password=[REDACTED]");
    unchanged("Authorization: [REDACTED]");
    unchanged("https://[REDACTED]@host/x?token=[REDACTED]");
    unchanged("-----BEGIN RSA PRIVATE KEY-----\n[REDACTED]\n-----END RSA PRIVATE KEY-----");
}

// Rule 1 ------------------------------------------------------------------------------

#[test]
fn private_key_blocks() {
    check(&[
        (
            "a\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nAAAA==\n-----END RSA PRIVATE KEY-----\nb",
            "a\n-----BEGIN RSA PRIVATE KEY-----\n§\n-----END RSA PRIVATE KEY-----\nb",
        ),
        (
            "-----BEGIN PRIVATE KEY-----\r\nMIIE\r\n-----END PRIVATE KEY-----",
            "-----BEGIN PRIVATE KEY-----\r\n§\r\n-----END PRIVATE KEY-----",
        ),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\nNzaC1\n",
            "-----BEGIN OPENSSH PRIVATE KEY-----\n§\n",
        ),
        (
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOY\n-----END PGP PRIVATE KEY BLOCK-----",
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n§\n-----END PGP PRIVATE KEY BLOCK-----",
        ),
    ]);
    unchanged("-----BEGIN PUBLIC KEY-----\nMIIBIjAN\n-----END PUBLIC KEY-----");
    unchanged("-----BEGIN CERTIFICATE-----\nMIIDdzCC\n-----END CERTIFICATE-----");
    unchanged("-----BEGIN RSA PRIVATE KEY-----\n-----END RSA PRIVATE KEY-----");
}

#[test]
fn regression_query_value_eating_the_end_line_stays_idempotent() {
    // Found by proptest: the END line became part of a `?token=` value, so a second
    // pass saw an unterminated block.
    let text = "-----BEGIN RSA PRIVATE KEY-----?token=-----END RSA PRIVATE KEY-----";
    let once = r(text);
    assert_eq!(r(&once), once);
}

// Rule 2 ------------------------------------------------------------------------------

#[test]
fn headers() {
    check(&[
        ("Authorization: Bearer abc.def-123", "Authorization: §"),
        ("> authorization: token gho_x 1", "> authorization: §"),
        ("< Set-Cookie: sid=1; Path=/", "< Set-Cookie: §"),
        ("  Cookie: a=b; c=d  ", "  Cookie: §  "),
        (
            "Proxy-Authorization: Basic Zm9vOmJhcg==",
            "Proxy-Authorization: §",
        ),
        ("X-Api-Key: 1a2b3c", "X-Api-Key: §"),
        (
            "curl -H \"Authorization: Bearer x1y2z3w4\" https://h/",
            "curl -H \"Authorization: §\" https://h/",
        ),
        ("curl -H 'Cookie: s=1' -v", "curl -H 'Cookie: §' -v"),
        (
            "{\"Authorization\": \"Token abc\"}",
            "{\"Authorization\": \"§\"}",
        ),
    ]);
    unchanged("Authorization: Bearer <token>");
    unchanged("Authorization: Bearer $TOKEN");
    unchanged("curl -H \"Authorization: Bearer ${GH_TOKEN}\" https://h/");
    unchanged("error: missing Authorization: header");
    unchanged("Authorization header missing");
    unchanged("    api_key: String,");
}

// Rule 3 ------------------------------------------------------------------------------

#[test]
fn bearer_and_basic_anywhere() {
    check(&[
        (
            "Bearer abcd1234 and bearer EFGH5678",
            "Bearer § and bearer §",
        ),
        ("x=Bearer eyJhbGciOi.x.y, done", "x=Bearer §, done"),
        ("use BASIC dXNlcjpwYXNz now", "use BASIC § now"),
        ("Basic Zm9vOmJhcg==.", "Basic §."),
        ("Bearer abcdefghijklmnopqrstuvwxyz", "Bearer §"),
    ]);
    unchanged("Basic usage: run the tool");
    unchanged("Basic Authentication is disabled");
    unchanged("Basic examples follow");
    unchanged("Bearer token required");
    unchanged("Bearer authentication");
    unchanged("the bearer of bad news");
    unchanged("need: Basic realm=\"GitHub\"");
}

// Rule 4 ------------------------------------------------------------------------------

#[test]
fn known_token_formats() {
    let tokens = [
        "sk-Ab3dEf6hIj9kLm2nOp5qRs8tUvWx",
        "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t",
        "sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2",
        "sk-test1234567890abcdefghij",
        "ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5",
        "gho_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5",
        "ghu_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5",
        "ghs_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5",
        "ghr_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5",
        "github_pat_11ABCDEFG0123456789abcdef",
        "xoxb-123456789012-abcdefABCDEF",
        "xoxp-1234567890-abc",
        "AKIAIOSFODNN7EXAMPLE",
        "ASIAQ3EXAMPLE4567890",
        "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
        "sk_live_51H8abcdEFGhijKLmnop",
        "rk_live_51H8zyxwVUTsrqPO",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig_nature",
        "npm_Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8",
        "glpat-ABCDEFGHIJ1234567890",
        "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
    ];
    for token in tokens {
        assert_eq!(
            r(&format!("got {token} here")),
            format!("got {REDACTED} here")
        );
    }
    unchanged("branch sk-learn-compatible-estimator-v2");
    unchanged("risk-assessment-framework-version-2");
    unchanged("AKIAIOSFODNN7EXAMPLEX is too long");
    unchanged("xAKIAIOSFODNN7EXAMPLE");
    unchanged("ghp_short");
}

#[test]
fn token_glued_to_a_secret_is_caught_by_the_second_pass() {
    let redactor = Redactor::new(&["s3cr3tv4lue".to_string()]);
    let (out, _) = redactor.redact("s3cr3tv4lueAKIAIOSFODNN7EXAMPLE end");
    assert_eq!(out, format!("{REDACTED} end"));
}

// Rule 5 ------------------------------------------------------------------------------

#[test]
fn url_userinfo() {
    check(&[
        ("https://u:p4ss@host/x", "https://§@host/x"),
        ("redis://:pw@cache:6379", "redis://§@cache:6379"),
        ("https://a:b@c@host/", "https://§@host/"),
        (
            "https://ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5@github.com/o/r",
            "https://§@github.com/o/r",
        ),
    ]);
    unchanged("ssh://git@github.com/o/r.git");
    unchanged("https://alice@example.com/");
    unchanged("git@github.com:o/r.git");
    unchanged("http://localhost:3000/@vite/client");
    unchanged("postgres://${USER}:${PASS}@db/app");
    unchanged("https://u:@host/");
}

#[test]
fn url_query_and_fragment_keys() {
    check(&[
        ("https://h/?token=abc&x=1", "https://h/?token=§&x=1"),
        // The assignment rule's value runs to a blank, quote, `,`, `;` or `&` (passwords
        // contain `#`), so it takes the fragment along.
        ("/api?Access_Token=abc#frag", "/api?Access_Token=§"),
        (
            "https://h/#id_token=abc&state=s",
            "https://h/#id_token=§&state=s",
        ),
        (
            "https://h/?X-Amz-Date=20240101&X-Amz-Expires=60",
            "https://h/?X-Amz-Date=§&X-Amz-Expires=§",
        ),
        (
            "https://h/?x-goog-credential=abc",
            "https://h/?x-goog-credential=§",
        ),
        ("https://h/?sig=abc&sv=1", "https://h/?sig=§&sv=1"),
        ("https://h/?key=abc", "https://h/?key=§"),
        ("https://h/?auth=abc", "https://h/?auth=§"),
        ("https://h/?sessionid=abc", "https://h/?sessionid=§"),
        ("https://h/?github_token=abc", "https://h/?github_token=§"),
        (
            "<a href=\"/d?f=1&amp;token=abc\">",
            "<a href=\"/d?f=1&amp;token=§\">",
        ),
        ("see (https://h/?token=abc).", "see (https://h/?token=§)."),
    ]);
    unchanged("https://docs.rs/tokio/latest/tokio/?search=token");
    unchanged("https://github.com/search?q=password&type=code");
    unchanged("https://h/?max_tokens=256&token_type=bearer");
    unchanged("https://h/?token={token}&key=<KEY>");
    unchanged("https://h/?token=&auth=true");
    unchanged("https://h/?tokens=3");
}

#[test]
fn url_path_segments() {
    check(&[
        ("https://h/v1/token/abc123/x", "https://h/v1/token/§/x"),
        ("https://h/secret/s3?x=1", "https://h/secret/§?x=1"),
        ("https://h/KEY/k-1", "https://h/KEY/§"),
        ("https://h/password/p#f", "https://h/password/§#f"),
        ("https://h/credential/c", "https://h/credential/§"),
        ("https://h/session/9f8e", "https://h/session/§"),
    ]);
    unchanged("https://h/token/refresh");
    unchanged("https://h/session/new");
    unchanged("https://h/users/:id/session/:sid");
    unchanged("https://h/session/{session_id}");
    unchanged("https://docs.rs/x/latest/x/key/index.html");
    unchanged("see src/token/abc.rs and /secret/x outside a URL");
}

// Rule 6 ------------------------------------------------------------------------------

#[test]
fn assignment_forms() {
    check(&[
        ("password=hunter2", "password=§"),
        ("export API_KEY=\"abc\"", "export API_KEY=\"§\""),
        ("DB_PASSWORD='x y'", "DB_PASSWORD='§'"),
        ("token := \"abc\"", "token := \"§\""),
        ("secret = abc", "secret = §"),
        ("--password=abc --user=bob", "--password=§ --user=bob"),
        ("--api-key abc123 --region eu", "--api-key § --region eu"),
        (
            "{\"password\":\"p\",\"x\":1}",
            "{\"password\":\"§\",\"x\":1}",
        ),
        ("{'token': 'abc'}", "{'token': '§'}"),
        ("\"pin_password\": 1234,", "\"pin_password\": §,"),
        ("Config { token: \"abc\" }", "Config { token: \"§\" }"),
        ("token: Some(\"abc\")", "token: Some(\"§\")"),
        ("  password: two words", "  password: §"),
        ("- client_secret: abc # rotated", "- client_secret: §"),
        ("User{name=bob, password=pw1}", "User{name=bob, password=§}"),
        ("a;Password=p;b=c", "a;Password=§;b=c"),
        ("self = <C token='abc'>", "self = <C token='§'>"),
        (
            "machine h login u password p4ss",
            "machine h login u password §",
        ),
        (
            "curl -s -u admin:p4ss https://h/",
            "curl -s -u admin:§ https://h/",
        ),
        ("npm set //r/:_authToken=abc", "npm set //r/:_authToken=§"),
        (
            r#"{"b": "{\"password\": \"p1\"}"}"#,
            r#"{"b": "{\"password\": \"§\"}"}"#,
        ),
    ]);
    unchanged("let secret = match x {");
    unchanged("last_secret = Some(i);");
    unchanged("const token = await getToken();");
    unchanged("see `curl -u user:password`.");
    unchanged("curl then docker run -u 1000:1000 app");
    unchanged("docker run -u 1000:1000 image");
    unchanged("INFO token: abc (mid-line unquoted key: value is not covered)");
    unchanged("sha256:abc token.rs:12:5 host:port");
    unchanged("if password == \"\":");
    unchanged("token != expected");
    unchanged("let token = Token::new();");
    unchanged("9password=abc");
}

#[test]
fn key_classes() {
    use KeyClass::{Plain, Strong, Weak};
    let cases = [
        ("password", Strong),
        ("PASSWORD", Strong),
        ("DB_PASSWORD", Strong),
        ("PGPASSWORD", Strong),
        ("passwd", Strong),
        ("passphrase", Strong),
        ("secret", Strong),
        ("client_secret", Strong),
        ("clientSecret", Strong),
        ("token", Strong),
        ("access_token", Strong),
        ("accessToken", Strong),
        ("OAuthToken", Strong),
        ("_authToken", Strong),
        ("GITHUB_TOKEN", Strong),
        ("authtoken", Strong),
        ("credentials", Strong),
        ("api_key", Strong),
        ("apiKey", Strong),
        ("APIKey", Strong),
        ("x-api-key", Strong),
        ("apikey", Strong),
        ("private_key", Strong),
        ("privateKey", Strong),
        ("access_key", Strong),
        ("secret_key", Strong),
        ("signing_key", Strong),
        ("AWS_SECRET_ACCESS_KEY", Strong),
        ("SMTP_PASS", Strong),
        ("MYSQL_PWD", Strong),
        ("db_pw", Strong),
        ("Authorization", Strong),
        ("Set-Cookie", Strong),
        ("password_hash", Strong),
        ("password_confirmation", Strong),
        ("ssh_key", Weak),
        ("license_key", Strong),
        ("storage_key", Weak),
        ("key", Plain),
        ("public_key", Plain),
        ("publicKey", Plain),
        ("primary_key", Plain),
        ("sort_key", Plain),
        ("cache_key", Plain),
        ("idempotency_key", Plain),
        ("key_id", Plain),
        ("api_key_id", Plain),
        ("aws_access_key_id", Plain),
        ("max_tokens", Plain),
        ("num_tokens", Plain),
        ("total_token_count", Plain),
        ("tokens", Plain),
        ("tokenizer", Plain),
        ("TOKENIZERS_PARALLELISM", Plain),
        ("token_count", Plain),
        ("token_type", Plain),
        ("token_expires_at", Plain),
        ("token_url", Plain),
        ("password_policy", Plain),
        ("password_min_length", Plain),
        ("password_file", Plain),
        ("secret_name", Plain),
        ("secretKeyRef", Plain),
        ("credential.helper", Plain),
        ("PWD", Plain),
        ("OLDPWD", Plain),
        ("pass", Plain),
        ("pass_remarks", Plain),
        ("first_pass", Plain),
        ("auth", Plain),
        ("author", Plain),
        ("monkey", Plain),
        ("keyboard", Plain),
        ("user.signingkey", Plain),
    ];
    for (key, class) in cases {
        assert_eq!(classify_key(key), class, "key {key:?}");
    }
}

#[test]
fn key_words_split_at_separators_and_camel_case() {
    let mut buf = [""; MAX_KEY_WORDS];
    let n = key_words("OAuthToken.api-KEY_x2Secret", &mut buf).unwrap();
    assert_eq!(
        &buf[..n],
        ["O", "Auth", "Token", "api", "KEY", "x2", "Secret"]
    );
    let long = "a_".repeat(MAX_KEY_WORDS + 1);
    assert!(key_words(&long, &mut buf).is_none());
    assert_eq!(classify_key(&format!("{long}password")), KeyClass::Plain);
}

#[test]
fn non_secret_values() {
    let plain = [
        "",
        "true",
        "False",
        "null",
        "None",
        "~",
        "****",
        "xxx",
        "XXXXXXXX",
        "...",
        "<token>",
        "<your api key>",
        "${TOKEN}",
        "$(cat f)",
        "$TOKEN",
        "%TOKEN%",
        "{{ token }}",
        "{token}",
        "your_token_here",
        "REPLACE_ME",
        "process.env.TOKEN",
        "os.environ[\"X\"]",
        "os.getenv(\"X\")",
        "env::var(\"X\")",
        REDACTED,
    ];
    for v in plain {
        assert!(is_non_secret_value(v, "token", true), "{v:?}");
    }
    let code = [
        "{",
        "[1, 2]",
        "get_token()",
        "self.token",
        "config.api_key",
        "token",
    ];
    for v in code {
        assert!(is_non_secret_value(v, "token", false), "{v:?} unquoted");
        assert!(v == "{" || v == "[1, 2]" || !is_non_secret_value(v, "x", true) || v.contains('('));
    }
    for v in [
        "hunter2",
        "changeme",
        "secret",
        "abc.def",
        "pa55w0rd!",
        "1234",
    ] {
        assert!(!is_non_secret_value(v, "password", false), "{v:?}");
    }
}

#[test]
fn weak_keys_need_random_values() {
    check(&[
        ("ssh_key: AAAAB3NzaC1yc2E", "ssh_key: §"),
        ("storage_key=Zm9vYmFy", "storage_key=§"),
    ]);
    unchanged("ssh_key: ~/.ssh/id_ed25519");
    unchanged("ssh_key: id_rsa.pub");
    unchanged("storage_key=uploads");
    unchanged("translation_key: home.title");
}

#[test]
fn code_annotations_are_not_values() {
    unchanged("    api_key: String,");
    unchanged("  password: string;");
    unchanged("  token: Option<String>,");
    unchanged("  password: str");
    unchanged("    token: &'a str,");
    unchanged("password = getpass.getpass(\"Password: \")");
    unchanged("client = Client(token=token)");
    unchanged("self.password = password");
    unchanged("def login(user, password=None):");
}

#[test]
fn trailing_punctuation() {
    assert_eq!(trim_trailing_punctuation("abc),"), "abc");
    assert_eq!(trim_trailing_punctuation("f(x)"), "f(x)");
    assert_eq!(trim_trailing_punctuation("[REDACTED]"), "[REDACTED]");
    assert_eq!(trim_trailing_punctuation("a]]"), "a");
    assert_eq!(trim_trailing_punctuation("..."), "");
}

// Rule 7 ------------------------------------------------------------------------------

#[test]
fn exact_secrets() {
    let redactor = Redactor::new(&[
        "abcdef".to_string(),
        "defghi".to_string(),
        "ab".to_string(),
        "REDACTED".to_string(),
        "multi\nline".to_string(),
    ]);
    let (out, redacted) = redactor.redact("x abcdefghi y ab multi\nline z");
    assert!(redacted);
    // Overlapping secrets are hidden together; short ones and marker text are ignored.
    assert_eq!(out, format!("x {REDACTED} y ab {REDACTED} z"));
    let (out, redacted) = redactor.redact("REDACTED ab");
    assert!(!redacted);
    assert_eq!(out, "REDACTED ab");
}

#[test]
fn secrets_are_deduplicated_longest_first() {
    let redactor = Redactor::new(&["aaaa".into(), "aaaaaa".into(), "aaaa".into(), "".into()]);
    assert_eq!(redactor.secrets, ["aaaaaa", "aaaa"]);
    assert_eq!(redactor.max_secret_len, 6);
    assert!(redactor.prefilter.is_some());
    assert!(Redactor::new(&[]).prefilter.is_none());
}

// Machinery ---------------------------------------------------------------------------

#[test]
fn merge_joins_overlapping_and_touching_spans() {
    let text = "0123456789abcdef";
    let mut spans = vec![(5, 7), (0, 2), (2, 3), (6, 9), (12, 13)];
    merge(text, &mut spans);
    assert_eq!(spans, [(0, 3), (5, 9), (12, 13)]);
    let text = "x[REDACTED]y";
    let mut spans = vec![(1, 6), (6, 11)];
    merge(text, &mut spans);
    assert!(spans.is_empty());
}

#[test]
fn windows_cover_whole_lines_around_markers() {
    let redactor = Redactor::new(&["s3cr".to_string()]);
    let text = "aaa\nbb [REDACTED] cc\ndd\neeeeeeeeeeeeeeeeeeeeee\nff [REDACTED]\ngg";
    let markers: Vec<(usize, usize)> = text
        .match_indices(REDACTED)
        .map(|(i, m)| (i, i + m.len()))
        .collect();
    let windows = redactor.windows(text, &markers);
    let lines: Vec<&str> = windows.iter().map(|&(s, e)| &text[s..e]).collect();
    // Widened by the 4-byte secret, each marker reaches into the neighbouring lines.
    assert_eq!(
        lines,
        [
            "aaa\nbb [REDACTED] cc\ndd",
            "eeeeeeeeeeeeeeeeeeeeee\nff [REDACTED]\ngg"
        ]
    );
}

#[test]
fn clean_text_is_borrowed_and_redacted_text_owned() {
    let (out, redacted) = Redactor::default().redact("cargo test: 3 passed");
    assert!(!redacted && matches!(out, Cow::Borrowed(_)));
    let (out, redacted) = Redactor::default().redact("password=x");
    assert!(redacted && matches!(out, Cow::Owned(_)));
    let (out, redacted) = Redactor::default().redact("");
    assert!(!redacted && out.is_empty());
}

/// Regression (found by the fuzzer): Unicode case folding let U+212A KELVIN SIGN match
/// `k` in a key, the byte scanner split the character, and redaction panicked.
#[test]
fn non_ascii_lookalikes_in_keys_neither_panic_nor_match() {
    let r = Redactor::default();
    for text in [
        ":b\u{212a}EY=Y:r\u{fffd}\u{fffd}",
        "\u{212a}ey=hunter2hunter2",
        "to\u{212a}en: abc",
        "pa\u{17f}\u{17f}word=hunter2",
        "bearer\u{212a} x",
    ] {
        let (out, _) = r.redact(text);
        let (twice, _) = r.redact(&out);
        assert_eq!(twice, out, "{text:?}");
    }
    // ASCII keys are still matched case-insensitively.
    assert!(r.redact("PASSWORD=hunter2hunter2").1);
    assert!(r.redact("Authorization: BEARER abcdefghijklmnop123").1);
}

#[test]
fn regression_fuzz_cookie_values_after_replacement_characters_stay_idempotent() {
    let text = "\u{fffd}\"cookiE:\u{fffd}\u{fffd}v$\u{fffd}*\u{fffd}*#:ttttttttttttttdtttttt\"cookiE:\u{fffd}\u{fffd}\u{fffd}ttdtttttt\"cookiE:\u{fffd}\u{fffd}\u{fffd}\u{fffd}aEpW:tdtttttt\"cookiE:\u{fffd}\u{fffd}\u{fffd}ttdtttttt\"cookiE:\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}?\u{fffd}\u{fffd}\u{fffd}\u{fffd}";
    let once = r(text);
    assert_eq!(r(&once), once, "from {text:?}");
}

/// A key block shown piece by piece is hidden from its BEGIN line to its END line
/// whichever pieces they are in; what follows the END line is redacted as usual.
#[test]
fn a_key_block_split_across_pieces_is_hidden_to_its_end() {
    let r = Redactor::default();
    let pieces = [
        "log line\n-----BEGIN RSA PRIVATE KEY-----\n",
        "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n",
        "BKcwggSjAgEAAoIBAQC7\n",
        "-----END RSA PRIVATE KEY-----\nafter sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789\n",
        "MIIEvQ is just text again\n",
    ];
    let mut open = false;
    let mut shown = String::new();
    for piece in pieces {
        let (out, _, now_open) = r.redact_piece(piece, open);
        shown.push_str(&out);
        open = now_open;
    }
    assert!(!open);
    assert!(
        shown.starts_with("log line\n-----BEGIN RSA PRIVATE KEY-----\n"),
        "{shown}"
    );
    assert!(
        !shown.contains("MIIEvQIBAD") && !shown.contains("BKcwgg"),
        "{shown}"
    );
    assert!(
        shown.contains("-----END RSA PRIVATE KEY-----\nafter "),
        "{shown}"
    );
    assert!(!shown.contains("abcdefghijklmnop"), "{shown}");
    assert!(shown.ends_with("MIIEvQ is just text again\n"), "{shown}");
    // A piece that opens and closes a block leaves nothing open; one that only opens does.
    let whole = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
    assert!(!r.redact_piece(whole, false).2);
    assert!(
        r.redact_piece("x -----BEGIN PRIVATE KEY-----\nAAAA", false)
            .2
    );
}
