//! Output redaction: hide credentials in captured output before it leaves the runner.
//!
//! # Invariants
//!
//! - **Only the secret is replaced.** Each rule finds the byte range of a secret *value*
//!   and replaces it with [`REDACTED`]; the key, the URL around it, the header name and
//!   the rest of the line stay, so output remains readable. Overlapping or touching
//!   ranges are merged, so a value never turns into `[REDACTED][REDACTED]`.
//! - **Ordinary lines are never hidden.** Every rule is anchored on something a secret
//!   carries (a sensitive key, a header name, a token prefix, a URL's userinfo). Values
//!   that are plainly not secrets (placeholders, booleans, environment references, code)
//!   are left alone. Both directions are tested on a corpus
//!   (`tests/redaction/{positives,negatives}.txt`).
//! - **Linear time, no allocation on the clean path.** All patterns are compiled once
//!   (a process-wide [`LazyLock`](std::sync::LazyLock)) for the `regex` crate, whose engines run in time linear
//!   in the input. Only match *positions* are asked for (the lazy DFA; never capture
//!   groups, whose bounded backtracker was most of the cost on near-miss-heavy output):
//!   each match is taken apart by a short scan of the match itself and, for
//!   line-anchored rules, the rest of that one line (`curl -u` looks back at most
//!   [`CURL_LOOKBACK`] bytes). The run's own secrets cost one linear scan each. When
//!   nothing is found the input is returned as [`Cow::Borrowed`] and no output is built.
//!   Throughput: about 90 MB/s on ordinary output dense with near misses, 60 MB/s when
//!   one line in twenty holds a secret (`examples/redact_throughput.rs`, release build).
//! - **Idempotent.** Redacting redacted text changes nothing: a value that is exactly
//!   [`REDACTED`] is never redacted again, and passes are repeated until the text is
//!   stable (at most [`MAX_PASSES`]), so a secret that only became visible to a rule once
//!   its neighbour was replaced (an AWS key id glued to another secret) is caught too.
//!   Later passes only rescan the lines around the markers the previous pass inserted
//!   (widened by the longest secret); key blocks, which span lines, are searched in the
//!   whole text again. A line still changing after [`MAX_PASSES`] (rules whose values end
//!   at different characters taking turns, which crafted input can chain) is replaced
//!   whole by [`REDACTED`]; if the result would still change, the whole text is.
//! - **Fails closed.** If the built-in patterns could not be compiled (impossible: a test
//!   compiles them), every non-empty text is replaced by [`REDACTED`] as a whole.
//!
//! # Rules
//!
//! 1. **Private key blocks**: everything between `-----BEGIN … PRIVATE KEY-----` (also
//!    `… PRIVATE KEY BLOCK-----`, PGP) and the matching `-----END …` line; an unterminated
//!    block is hidden to the end of the text. The BEGIN/END lines stay.
//! 2. **HTTP headers** `Authorization`, `Proxy-Authorization`, `Cookie`, `Set-Cookie`,
//!    `X-Api-Key`, `Api-Key` (any case): the whole value to the end of the line when the
//!    header starts the line (after indentation and curl's `>`/`<`/`*` markers), or to the
//!    closing quote when it sits inside a quoted string (`-H "Authorization: …"`).
//! 3. **`Bearer <token>` / `Basic <base64>`** anywhere, every occurrence. To keep prose
//!    ("Basic usage", "Bearer token") visible the token must look like one: `Bearer`
//!    tokens have at least 8 characters and a digit, an inner capital letter, or 24+
//!    characters; `Basic` values must be padded base64 (length a multiple of 4, at least
//!    8) with a digit, an inner capital letter, `+`, `/` or `=`.
//! 4. **Known token formats** anywhere (whole token replaced): `sk-…`, `sk-ant-…`,
//!    `sk-proj-…` (20+ characters after the prefix, with a digit, and either a capital
//!    letter or a 16+ character run without `-`, so slugs like `sk-learn-…` survive);
//!    GitHub `ghp_ gho_ ghu_ ghs_ ghr_` + 36, `github_pat_` + 22; Slack `xox[abposr]-`;
//!    AWS key ids `AKIA`/`ASIA` + 16; Google `AIza` + 35; Stripe `sk_live_ rk_live_
//!    sk_test_ rk_test_`; JWTs `eyJ….eyJ….…`; npm `npm_` + 36; GitLab `glpat-`;
//!    Hugging Face `hf_` + 30; PyPI upload tokens.
//! 5. **URLs**: the userinfo of `scheme://user:password@host` (when it has a password,
//!    or is a lone 20+ character token with a digit — `ssh://git@host` stays); the value
//!    of a sensitive query or fragment key (after `?`, `&`, `#` or `&amp;`); the path
//!    segment after `/token/`, `/secret/`, `/key/`, `/password/`, `/credential/` or
//!    `/session/` (unless it is an endpoint word such as `new`/`refresh`, a route
//!    template such as `:id`/`{id}`, or a file such as `index.html`).
//!    URL keys are sensitive when, after lower-casing and mapping `-`/`.` to `_`, they are
//!    one of [`URL_SENSITIVE_KEYS`], start with `x_amz_` or `x_goog_`, or are secret keys
//!    by the key rules below. Only keys count: `?search=token` is not redacted.
//! 6. **Assignments** `key=value`, `key = value`, `key := value`, `KEY="value"`,
//!    `"key": "value"` / `'key': 'value'` (JSON, Python), `{\"key\": \"value\"}` (JSON
//!    escaped inside a string, as loggers print it), `key: "value"` (JS, Rust
//!    `Debug`), `key: value` at the start of a line (YAML, logs — the value is the rest of
//!    the line), `--key value` (CLI flags), `machine … login … password …` (netrc) and
//!    `curl -u user:password`. Only the value is replaced; quotes stay. An unquoted value
//!    runs to the next blank, quote, `,`, `;` or `&` (not `#`: passwords contain it, so
//!    in `?token=abc#frag` the fragment goes too), minus trailing sentence punctuation
//!    and unbalanced closing brackets (`password=abc),` hides `abc`).
//! 7. **Secrets given to [`Redactor::new`]**: every occurrence of each value, matched
//!    exactly (case-sensitive). Values shorter than [`MIN_SECRET_LEN`] bytes, and values
//!    that occur inside the marker itself (such as `ACTED`), are ignored: hiding them
//!    would hide ordinary text and could never be idempotent.
//!
//! ## Which keys name a secret (rule 5 and 6)
//!
//! The key is split into words at `_`, `-`, `.` and camelCase boundaries (`apiKey` →
//! `api key`, `OAuthToken` → `o auth token`) and compared case-insensitively.
//!
//! - **Strong** (any value that is not plainly a non-secret is redacted): a word that
//!   contains `password`, `passwd`, `passphrase`, `secret`, `credential`, `apikey`,
//!   `privatekey` or `accesskey`; a word that is `token` or ends in `token` (`authtoken`;
//!   *not* `tokens`, `tokenizer`); `pass`, `pw` or `pwd` as the last word after a
//!   service word (`db_pass`, `MYSQL_PWD` — but never `PWD` or `OLDPWD`, the working
//!   directory); `key` after one of [`STRONG_KEY_KINDS`] (`api_key`, `secret_key`,
//!   `private_key`, `access_key`, `signing_key`, …); and the whole-key header names
//!   `authorization`, `proxy_authorization`, `cookie`, `set_cookie`.
//! - **Weak**: `key` after any other word (`ssh_key`, `license_key` …) — redacted only
//!   when the value looks random (8+ characters, no spaces, not a path, and mixing
//!   letters with digits or upper with lower case). `key` after one of
//!   [`NON_SECRET_KEY_KINDS`] (`public_key`, `primary_key`, `sort_key`, `cache_key` …)
//!   and `key` alone are not secret keys.
//! - **Not a secret key**, even with a secret word: any word is a quantity from
//!   [`QUANT_WORDS`] (`max_tokens`, `num_tokens`, `total_token_count`), or a word after
//!   the last secret word is metadata from [`META_WORDS`] (`token_count`, `token_type`,
//!   `password_policy`, `password_file`, `secret_name`, `key_id`, `credential.helper`,
//!   `token_expires_at`, `password_min_length`).
//!
//! ## Which values are not secrets
//!
//! Empty; [`REDACTED`] itself; `true false yes no on off null nil none undefined …`
//! ([`NON_SECRET_VALUES`]); masks made only of `* x X . - _ #` (`****`, `xxx`);
//! `<placeholder>`; `${VAR}`, `$(cmd)`, `$VAR`, `%VAR%`, `{{ tmpl }}`, `{name}`; values
//! starting with `your`, `replace`, `placeholder`, `todo`, `fixme`; environment look-ups
//! (`process.env.X`, `os.environ[…]`, `os.getenv(…)`, `env::var(…)`, `ENV[…]`, …).
//! Unquoted values are also left alone when they are code: they start with `{`, `[` or
//! `(`, contain a call `(`, start with a keyword (`match`, `await`, `new` …, see
//! `CODE_KEYWORDS`), are a dotted reference such as `self.token` or
//! `config.api_key`, or a plain identifier equal to the key (`password=password`). The
//! rest-of-line YAML form also skips type annotations (`api_key: String,`,
//! `password: string;`, `token: Option<String>`). `changeme`, `secret` or `hunter2` are
//! redacted: they are weak, but they are passwords.
//!
//! # Bytes and streams
//!
//! Output is bytes: [`Redactor::redact_bytes`] and [`Redactor::redact_piece_bytes`]
//! redact bytes that need not be UTF-8, keeping every byte outside a secret exactly (valid
//! UTF-8 comes out as [`Redactor::redact`] makes it), and [`stream::StreamRedactor`]
//! redacts a stream as it arrives, piece by piece, a secret split across reads included.
//! No lossy decoding happens on the way: a caller that shows the result as text decodes
//! it then.
//!
//! # Not covered (documented non-goals)
//!
//! Redaction is a courtesy to the humans and models reading output, **not a boundary**: a
//! guest that knows a secret can always print it encoded (base64, hex, reversed, split
//! over lines or over two output chunks). Secrets in free prose (`the password is
//! hunter2`), mid-line `key: value` with both key and value unquoted (`INFO token: abc`),
//! multi-line values (YAML block scalars other than PEM keys), and token formats not
//! listed above pass through. A line such as `passwd: files systemd`
//! (`/etc/nsswitch.conf`) is a known false positive of the YAML form.

#![forbid(unsafe_code)]

use std::borrow::Cow;

use regex::{Regex, RegexBuilder};

mod assignments;
pub mod bytes;
mod keys;
mod patterns;
mod rules;
pub mod stream;
mod values;
mod words;

use assignments::assignments;
use patterns::{RULES, Rules};
use rules::{PIECE_KEY_BEGIN, auth_schemes, ends_in_key_block, known_tokens, pem_blocks, urls};
pub use words::{
    META_WORDS, NON_SECRET_KEY_KINDS, NON_SECRET_VALUES, QUANT_WORDS, STRONG_KEY_KINDS,
    URL_SENSITIVE_KEYS,
};

/// The text that replaces every redacted value.
///
/// It is ASCII, contains no character that any rule accepts inside an unquoted secret
/// token (`[` and `]` end them), and is never itself redacted, so redaction is idempotent.
pub const REDACTED: &str = "[REDACTED]";

/// Secrets given to [`Redactor::new`] shorter than this many bytes are ignored.
///
/// A 1–3 byte "secret" (`ab`, `dev`, `1`) occurs by chance in ordinary text; hiding every
/// occurrence would make output unreadable while protecting nothing (such a value can be
/// guessed). Policies should mark only real credentials as sensitive.
pub const MIN_SECRET_LEN: usize = 4;

/// How many times the rules are applied at most, until the text stops changing.
///
/// The second pass exists for secrets a rule can only see once a neighbour has been
/// replaced (a word-boundary rule next to a redacted value); ordinary output never needs
/// a third. Crafted input can chain replacements further (each one ending a value another
/// rule then reads past); the lines still changing after this many passes are hidden
/// whole. The cap bounds the work at `MAX_PASSES + 2` linear scans.
pub const MAX_PASSES: usize = 4;

/// How far back, in bytes, `-u user:password` looks for `curl`/`wget` on its line (the
/// rule only applies to curl and wget: `docker run -u 1000:1000` is not a password).
/// Bounding the look-back keeps many `-u a:b` on one huge line linear; a `curl` more than
/// this far back on the same line is not seen.
pub const CURL_LOOKBACK: usize = 1024;

/// Redacts credentials from captured output.
///
/// Built once per run (compiling only the run's own secrets; the built-in patterns are
/// shared by the process) and applied to whole outputs. See the [module
/// documentation](self) for the rules, the key and value lists, and what is not covered.
///
/// [`Redactor::default()`] applies the built-in rules only.
///
/// ```
/// use std::borrow::Cow;
///
/// use tierbox_redact::{REDACTED, Redactor};
///
/// let redactor = Redactor::new(&["db-pass-4f9a".to_string()]);
///
/// let (out, redacted) =
///     redactor.redact("connect https://admin:hunter2@db.internal/app with db-pass-4f9a\n");
/// assert!(redacted);
/// assert_eq!(out, format!("connect https://{REDACTED}@db.internal/app with {REDACTED}\n"));
///
/// let (out, redacted) = redactor.redact("export OPENAI_API_KEY=\"sk-not-a-real-key-0123456789\"");
/// assert!(redacted);
/// assert_eq!(out, format!("export OPENAI_API_KEY=\"{REDACTED}\""));
///
/// // Ordinary output comes back untouched and unallocated.
/// let (out, redacted) = redactor.redact("test result: ok. 12 passed; max_tokens=256\n");
/// assert!(!redacted);
/// assert!(matches!(out, Cow::Borrowed(_)));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// The run's secrets: at least [`MIN_SECRET_LEN`] bytes, not inside [`REDACTED`],
    /// deduplicated, longest first.
    secrets: Vec<String>,
    /// One regex matching any of `secrets`, used to skip the per-secret scans when none
    /// occurs. `None` when there are no secrets, or when the alternation was too large to
    /// compile (then every secret is scanned for directly).
    prefilter: Option<Regex>,
    /// Length of the longest secret, in bytes (0 without secrets).
    max_secret_len: usize,
}

impl Redactor {
    /// A redactor applying the built-in rules and also hiding every occurrence of each of
    /// `secrets` (matched exactly). Secrets shorter than [`MIN_SECRET_LEN`] bytes, and
    /// substrings of [`REDACTED`], are ignored.
    pub fn new(secrets: &[String]) -> Self {
        let mut kept: Vec<String> = secrets
            .iter()
            .filter(|s| s.len() >= MIN_SECRET_LEN && !REDACTED.contains(s.as_str()))
            .cloned()
            .collect();
        kept.sort_unstable_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        kept.dedup();
        let prefilter = if kept.is_empty() {
            None
        } else {
            let alternation: Vec<String> = kept.iter().map(|s| regex::escape(s)).collect();
            RegexBuilder::new(&alternation.join("|"))
                .size_limit(64 << 20)
                .build()
                .ok()
        };
        Self {
            max_secret_len: kept.first().map_or(0, String::len),
            secrets: kept,
            prefilter,
        }
    }

    /// Returns `text` with every secret replaced by [`REDACTED`], and whether anything
    /// was replaced. When nothing is, the result borrows `text`.
    pub fn redact<'a>(&self, text: &'a str) -> (Cow<'a, str>, bool) {
        if text.is_empty() {
            return (Cow::Borrowed(text), false);
        }
        let Some(rules) = RULES.as_ref() else {
            // Fail closed: without the built-in rules nothing can be shown safely.
            return (Cow::Owned(REDACTED.to_owned()), true);
        };
        let mut spans = Vec::new();
        self.collect(rules, text, 0, true, &mut spans);
        merge(text, &mut spans);
        if spans.is_empty() {
            return (Cow::Borrowed(text), false);
        }
        let (mut out, mut markers) = replace_spans(text, &spans);
        // Later passes: a match that did not exist before must touch a new marker, and
        // every rule except key blocks and the run's secrets stays within one line, so
        // only the lines around the new markers (widened by the longest secret) are
        // scanned again. Key blocks span lines (a redacted value may have eaten an END
        // line), so they are searched in the whole text again; their literal prefix
        // makes that nearly free.
        for pass in 1..=MAX_PASSES {
            spans.clear();
            pem_blocks(
                rules,
                &mut Sink {
                    text: &out,
                    offset: 0,
                    spans: &mut spans,
                },
            );
            for (ws, we) in self.windows(&out, &markers) {
                self.collect(rules, &out[ws..we], ws, false, &mut spans);
            }
            if spans.is_empty() {
                break;
            }
            // A new span next to a marker absorbs it (`[REDACTED]` rather than
            // `[REDACTED][REDACTED]`); a marker touching nothing new is dropped by `merge`.
            spans.extend_from_slice(&markers);
            merge(&out, &mut spans);
            if spans.is_empty() {
                break;
            }
            if pass == MAX_PASSES {
                // Still changing: each replacement keeps uncovering a new match (values
                // of different rules end at different characters, and a marker can join
                // them). Hide the unsettled lines whole instead of going on.
                out = self.settle(rules, &out, &spans);
                break;
            }
            (out, markers) = replace_spans(&out, &spans);
        }
        (Cow::Owned(out), true)
    }

    /// Ends a redaction that did not settle within [`MAX_PASSES`]: every line holding one
    /// of `spans` (the matches the last pass still found) is replaced by one marker, and
    /// the result is checked the way a later [`Redactor::redact`] would see it (all rules,
    /// the whole text). If even that finds something, the whole text is hidden: failing
    /// closed keeps redaction idempotent.
    fn settle(&self, rules: &Rules, text: &str, spans: &[(usize, usize)]) -> String {
        let b = text.as_bytes();
        let mut lines: Vec<(usize, usize)> = spans
            .iter()
            .map(|&(s, e)| {
                let start = b[..s]
                    .iter()
                    .rposition(|&c| c == b'\n')
                    .map_or(0, |p| p + 1);
                let end = b[e..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(b.len(), |p| e + p);
                (start, end)
            })
            .collect();
        merge(text, &mut lines);
        let (out, _) = replace_spans(text, &lines);
        let mut check = Vec::new();
        self.collect(rules, &out, 0, true, &mut check);
        if check.is_empty() {
            out
        } else {
            REDACTED.to_owned()
        }
    }

    /// Redacts one piece of a stream that is shown piece by piece (a line or a batch of
    /// lines at a time), where a private key block can span pieces: `in_key` says that an
    /// earlier piece ended inside a key block, so this piece is hidden up to the block's
    /// `-----END …` line as if the `-----BEGIN …` line were in it. Returns the redacted
    /// piece, whether anything was redacted, and whether the piece ends inside a key block
    /// (the next piece's `in_key`).
    ///
    /// ```
    /// use tierbox_redact::{Redactor, REDACTED};
    ///
    /// let r = Redactor::default();
    /// let (first, _, open) = r.redact_piece("-----BEGIN PRIVATE KEY-----\n", false);
    /// assert_eq!(first, "-----BEGIN PRIVATE KEY-----\n");
    /// assert!(open);
    /// let (body, redacted, open) = r.redact_piece("MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n", open);
    /// assert!(redacted && open && !body.contains("MIIEvQ"), "{body}");
    /// let (end, _, open) = r.redact_piece("-----END PRIVATE KEY-----\nok\n", open);
    /// assert_eq!(end, "-----END PRIVATE KEY-----\nok\n");
    /// assert!(!open);
    /// # let _ = REDACTED;
    /// ```
    pub fn redact_piece<'a>(&self, text: &'a str, in_key: bool) -> (Cow<'a, str>, bool, bool) {
        let Some(rules) = RULES.as_ref() else {
            return (Cow::Owned(REDACTED.to_owned()), true, in_key);
        };
        let open = ends_in_key_block(rules, text, in_key);
        if !in_key {
            let (out, redacted) = self.redact(text);
            return (out, redacted, open);
        }
        let mut joined = String::with_capacity(PIECE_KEY_BEGIN.len() + text.len());
        joined.push_str(PIECE_KEY_BEGIN);
        joined.push_str(text);
        let (out, _) = self.redact(&joined);
        match out.strip_prefix(PIECE_KEY_BEGIN) {
            Some(rest) => (Cow::Owned(rest.to_owned()), true, open),
            // The stand-in BEGIN line did not survive: fail closed.
            None => (Cow::Owned(REDACTED.to_owned()), true, open),
        }
    }

    /// Pushes the byte ranges (plus `offset`) to replace in `text` onto `spans`. Key
    /// blocks are looked for only in a `first_pass` over the whole text.
    fn collect(
        &self,
        rules: &Rules,
        text: &str,
        offset: usize,
        first_pass: bool,
        spans: &mut Vec<(usize, usize)>,
    ) {
        let mut sink = Sink {
            text,
            offset,
            spans,
        };
        if first_pass {
            pem_blocks(rules, &mut sink);
        }
        auth_schemes(rules, &mut sink);
        known_tokens(rules, &mut sink);
        urls(rules, &mut sink);
        assignments(rules, &mut sink);
        self.exact_secrets(&mut sink);
    }

    /// Whole-line windows of `text` around each marker, widened by the longest secret,
    /// merged when they overlap. Every byte is scanned at most once while computing them.
    fn windows(&self, text: &str, markers: &[(usize, usize)]) -> Vec<(usize, usize)> {
        let b = text.as_bytes();
        let line_end = |at: usize| {
            b[at..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| at + p)
        };
        let mut out: Vec<(usize, usize)> = Vec::new();
        for &(ms, me) in markers {
            let from = ms.saturating_sub(self.max_secret_len);
            let to = (me + self.max_secret_len).min(b.len());
            match out.last_mut() {
                Some(last) if from <= last.1 => {
                    if to > last.1 {
                        last.1 = line_end(to);
                    }
                }
                _ => {
                    let floor = out.last().map_or(0, |last| last.1);
                    let start = b[floor..from]
                        .iter()
                        .rposition(|&c| c == b'\n')
                        .map_or(floor, |p| floor + p + 1);
                    out.push((start, line_end(to)));
                }
            }
        }
        out
    }

    fn exact_secrets(&self, sink: &mut Sink<'_, '_>) {
        if self.secrets.is_empty() {
            return;
        }
        if let Some(pre) = &self.prefilter
            && !pre.is_match(sink.text)
        {
            return;
        }
        // One scan per secret rather than one alternation: the alternation reports
        // non-overlapping matches only, and a secret overlapping another one would keep
        // its tail. `str::match_indices` is linear in the text for each secret.
        for secret in &self.secrets {
            for (start, m) in sink.text.match_indices(secret.as_str()) {
                sink.push(start, start + m.len());
            }
        }
    }
}

/// Where rules report the byte ranges they want hidden.
struct Sink<'t, 's> {
    /// The text the rules scan: the whole output, or a window of it.
    text: &'t str,
    /// Where `text` starts in the output.
    offset: usize,
    spans: &'s mut Vec<(usize, usize)>,
}

impl Sink<'_, '_> {
    /// Records `text[start..end]` unless it is empty or already exactly the marker.
    fn push(&mut self, start: usize, end: usize) {
        if start < end && self.text.get(start..end).is_some_and(|s| s != REDACTED) {
            self.spans.push((start + self.offset, end + self.offset));
        }
    }

    /// Records a value given by its range, trimmed of surrounding ASCII whitespace.
    fn push_trimmed(&mut self, start: usize, end: usize) {
        let (s, e) = trim_range(self.text, start, end);
        self.push(s, e);
    }
}

/// Sorts and merges overlapping or touching ranges; drops a merged range that is exactly
/// the marker (two rules agreeing on an already redacted value).
fn merge(text: &str, spans: &mut Vec<(usize, usize)>) {
    if spans.is_empty() {
        return;
    }
    spans.sort_unstable();
    let mut out = 0;
    for i in 1..spans.len() {
        let (s, e) = spans[i];
        if s <= spans[out].1 {
            spans[out].1 = spans[out].1.max(e);
        } else {
            out += 1;
            spans[out] = (s, e);
        }
    }
    spans.truncate(out + 1);
    spans.retain(|&(s, e)| &text[s..e] != REDACTED);
}

/// Replaces each (sorted, disjoint) span by the marker; returns the new text and where
/// the markers are in it.
fn replace_spans(text: &str, spans: &[(usize, usize)]) -> (String, Vec<(usize, usize)>) {
    let mut out = String::with_capacity(text.len());
    let mut markers = Vec::with_capacity(spans.len());
    let mut last = 0;
    for &(s, e) in spans {
        out.push_str(&text[last..s]);
        markers.push((out.len(), out.len() + REDACTED.len()));
        out.push_str(REDACTED);
        last = e;
    }
    out.push_str(&text[last..]);
    (out, markers)
}

/// Characters of a key (`[A-Za-z0-9_.-]`), as in the [`KEY`](patterns::KEY) pattern.
fn is_key_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-')
}

/// The first index at or after `i` (before `end`) whose byte is not a space or tab.
fn skip_blanks(b: &[u8], mut i: usize, end: usize) -> usize {
    while i < end && matches!(b[i], b' ' | b'\t') {
        i += 1;
    }
    i
}

/// The byte before `at` cannot continue a key (`9password=` and `.token:` are not keys).
fn key_boundary(text: &str, at: usize) -> bool {
    at == 0 || {
        let c = text.as_bytes()[at - 1];
        !(c.is_ascii_alphanumeric() || c == b'_' || c == b'.')
    }
}

fn trim_range(text: &str, mut start: usize, mut end: usize) -> (usize, usize) {
    let b = text.as_bytes();
    while start < end && b[start].is_ascii_whitespace() {
        start += 1;
    }
    while end > start && b[end - 1].is_ascii_whitespace() {
        end -= 1;
    }
    (start, end)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
