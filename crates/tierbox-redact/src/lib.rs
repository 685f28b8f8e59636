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
//!   (a process-wide [`LazyLock`]) for the `regex` crate, whose engines run in time linear
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
use std::sync::LazyLock;

use regex::{Regex, RegexBuilder};

pub mod bytes;
pub mod stream;

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

/// Query and fragment keys that are sensitive in URLs (compared after lower-casing and
/// mapping `-` and `.` to `_`), in addition to `x_amz_*`, `x_goog_*` and the secret keys
/// of the assignment rules. Short generic names (`key`, `sig`, `auth`, `session`) are
/// sensitive here because a URL parameter with that name is almost always a credential,
/// while `key: value` in a YAML file is not.
pub const URL_SENSITIVE_KEYS: &[&str] = &[
    "token",
    "access_token",
    "refresh_token",
    "id_token",
    "password",
    "passwd",
    "pwd",
    "secret",
    "client_secret",
    "api_key",
    "apikey",
    "key",
    "signature",
    "sig",
    "auth",
    "session",
    "sessionid",
    "session_id",
    "credential",
    "private_token",
    "jwt",
    "awsaccesskeyid",
];

/// Words before `key` that make it a secret key whatever the value looks like.
pub const STRONG_KEY_KINDS: &[&str] = &[
    "api",
    "access",
    "private",
    "secret",
    "signing",
    "encryption",
    "master",
    "auth",
    "license",
    "licence",
    "account",
    "session",
    "client",
    "hmac",
    "jwt",
    "webhook",
];

/// Words before `key` that name something that is not a secret: database and map keys,
/// public keys, cache and routing keys, translation keys.
pub const NON_SECRET_KEY_KINDS: &[&str] = &[
    "public",
    "pub",
    "primary",
    "foreign",
    "unique",
    "composite",
    "natural",
    "surrogate",
    "candidate",
    "sort",
    "partition",
    "range",
    "hash",
    "shard",
    "row",
    "column",
    "index",
    "table",
    "entity",
    "record",
    "object",
    "bucket",
    "cache",
    "lookup",
    "map",
    "dict",
    "group",
    "routing",
    "route",
    "cluster",
    "idempotency",
    "dedup",
    "dedupe",
    "host",
    "known",
    "translation",
    "i18n",
    "message",
    "hot",
    "short",
    "search",
    "order",
    "join",
    "field",
    "label",
    "cursor",
    "page",
    "state",
    "list",
    "gpg",
    "pgp",
    "registry",
];

/// Words that, anywhere in a key, make it a quantity rather than a secret
/// (`max_tokens`, `num_tokens`, `total_token_count`).
pub const QUANT_WORDS: &[&str] = &[
    "max",
    "min",
    "num",
    "n",
    "total",
    "count",
    "counts",
    "number",
    "remaining",
];

/// Words that, after the last secret word of a key, make the key metadata about a
/// secret rather than the secret (`token_type`, `password_policy`, `secret_name`,
/// `key_id`, `credential.helper`, `token_expires_at`).
pub const META_WORDS: &[&str] = &[
    "count",
    "counts",
    "type",
    "types",
    "kind",
    "policy",
    "policies",
    "length",
    "len",
    "size",
    "limit",
    "limits",
    "id",
    "ids",
    "arn",
    "name",
    "names",
    "file",
    "filename",
    "path",
    "paths",
    "dir",
    "directory",
    "url",
    "uri",
    "urls",
    "endpoint",
    "host",
    "domain",
    "env",
    "var",
    "variable",
    "helper",
    "process",
    "source",
    "hint",
    "field",
    "fields",
    "prompt",
    "label",
    "format",
    "expiry",
    "expires",
    "expiration",
    "expired",
    "ttl",
    "lifetime",
    "age",
    "used",
    "usage",
    "budget",
    "rate",
    "enabled",
    "disabled",
    "required",
    "optional",
    "set",
    "present",
    "exists",
    "provided",
    "valid",
    "strength",
    "mode",
    "version",
    "algorithm",
    "alg",
    "header",
    "location",
    "store",
    "ref",
    "reference",
    "index",
    "regex",
    "pattern",
    "scope",
    "scopes",
    "issuer",
    "audience",
    "provider",
    "manager",
    "service",
    "command",
    "cmd",
    "timeout",
    "interval",
    "retries",
    "attempts",
    "changed",
    "updated",
    "created",
    "at",
    "in",
    "stdin",
    "fd",
    "fingerprint",
    "samesite",
    "httponly",
    "secure",
    "parallelism",
    "status",
    "error",
    "errors",
    "rotation",
    "option",
    "options",
    "flag",
    "flags",
    "schema",
    "template",
];

/// Values that are plainly not secrets (compared case-insensitively).
pub const NON_SECRET_VALUES: &[&str] = &[
    "true",
    "false",
    "yes",
    "no",
    "on",
    "off",
    "null",
    "nil",
    "none",
    "undefined",
    "unset",
    "empty",
    "n/a",
    "required",
    "optional",
    "hidden",
    "redacted",
    "masked",
    "omitted",
    "filtered",
    "value",
    "string",
    "~",
    "|",
    ">",
    "|-",
    ">-",
];

/// Service words after which `pass`, `pw` and `pwd` are password keys (`db_pass`,
/// `MYSQL_PWD`, `SMTP_PASS`). Alone, `PWD` is the working directory and `pass` a test
/// result.
const PASS_OWNERS: &[&str] = &[
    "db", "database", "smtp", "mail", "email", "mysql", "pg", "postgres", "redis", "admin", "root",
    "user", "ftp", "sftp", "ldap", "proxy", "http", "rabbitmq", "amqp", "mq", "app", "sudo",
    "login", "account", "wifi", "vnc", "keystore", "key", "store",
];

/// Dotted references whose first segment is one of these are code, not values
/// (`self.token`, `config.api_key`, `args.password`).
const CODE_RECEIVERS: &[&str] = &[
    "self",
    "this",
    "config",
    "cfg",
    "conf",
    "settings",
    "args",
    "opts",
    "options",
    "env",
    "os",
    "process",
    "request",
    "req",
    "ctx",
    "context",
    "params",
    "creds",
    "credentials",
    "secrets",
    "vars",
    "props",
    "state",
    "data",
    "form",
    "user",
    "auth",
    "app",
    "input",
];

/// Prefixes of values that read a secret from somewhere else instead of containing it.
const ENV_REFERENCES: &[&str] = &[
    "process.env",
    "os.environ",
    "os.getenv",
    "getenv(",
    "std::env::var",
    "env::var",
    "ENV[",
    "ENV.fetch",
    "Deno.env",
    "import.meta.env",
    "System.getenv",
    "Environment.GetEnvironmentVariable",
    "secrets.",
    "vault:",
];

/// Words that start an expression in code, not a value (`let secret = match …`,
/// `token = await fetch()`, `key = new Key()`).
const CODE_KEYWORDS: &[&str] = &[
    "match", "if", "await", "new", "function", "lambda", "not", "yield", "async", "typeof",
    "unsafe", "loop", "return", "static", "const", "let", "var", "self", "this", "super", "crate",
    "std",
];

/// Type names that follow a field name in code (`password: String,`).
const TYPE_WORDS: &[&str] = &[
    "str",
    "string",
    "bytes",
    "int",
    "bool",
    "any",
    "unknown",
    "object",
    "secretstring",
    "secret",
    "securestring",
];

/// Path words after `/token/`, `/session/` … that are endpoints, not credentials.
const SEGMENT_WORDS: &[&str] = &[
    "new",
    "edit",
    "create",
    "delete",
    "list",
    "index",
    "latest",
    "refresh",
    "revoke",
    "verify",
    "validate",
    "rotate",
    "introspect",
    "info",
    "status",
    "data",
    "metadata",
    "current",
    "me",
    "exchange",
];

/// File extensions that mark a path segment as a document, not a credential.
const SEGMENT_EXTENSIONS: &[&str] = &[
    "html", "htm", "md", "txt", "css", "js", "json", "png", "svg", "jpg", "gif", "ico", "xml",
    "rs", "py",
];

/// Most words a key is split into; longer keys are not treated as secret keys.
const MAX_KEY_WORDS: usize = 16;

/// How far back, in bytes, `-u user:password` looks for `curl`/`wget` on its line (the
/// rule only applies to curl and wget: `docker run -u 1000:1000` is not a password).
/// Bounding the look-back keeps many `-u a:b` on one huge line linear; a `curl` more than
/// this far back on the same line is not seen.
pub const CURL_LOOKBACK: usize = 1024;

/// Key characters with one of the stems every secret key contains. Keeping the stem in
/// the pattern means ordinary `a=b` pairs never reach the code that inspects matches.
// Every case-insensitive part of these patterns is ASCII-only (`(?i-u:…)`): matches are
// taken apart by byte scanners that expect ASCII where the pattern says letters, and
// Unicode case folding would let e.g. U+212A KELVIN SIGN stand for `k` (three bytes where
// the scanner expects one), which split a character and panicked.
const KEY: &str = r"(?:[A-Za-z_][A-Za-z0-9_.\-]*)?(?i-u:pass|pwd|pw|secret|token|key|cred|auth|cookie)[A-Za-z0-9_.\-]*";

/// A double- or single-quoted string on one line, with backslash escapes.
const QUOTED: &str = r#""(?:[^"\\\r\n]|\\.)*"|'(?:[^'\\\r\n]|\\.)*'"#;

/// A string quoted with escaped quotes, as JSON inside a JSON string: `\"abc\"`.
const ESCAPED_QUOTED: &str = r#"\\"(?:[^"\\\r\n]|\\[^"\r\n])*\\""#;

/// The compiled rule patterns. Patterns with several forms share one regex where they
/// can, so the text is scanned as few times as possible.
#[derive(Debug)]
struct Rules {
    pem_begin: Regex,
    pem_end: Regex,
    auth_scheme: Regex,
    tokens: Regex,
    url: Regex,
    url_userinfo: Regex,
    url_segment: Regex,
    query: Regex,
    /// `key=value`, `key := value`, `"key": value`, `key: value` and `Header: value`.
    kv: Regex,
    cli_flag: Regex,
    netrc: Regex,
    curl_user: Regex,
}

impl Rules {
    fn build() -> Result<Self, regex::Error> {
        Ok(Self {
            pem_begin: Regex::new(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")?,
            pem_end: Regex::new(r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")?,
            auth_scheme: Regex::new(r"(?-u:\b)(?i-u:bearer|basic)[ \t]+[A-Za-z0-9\-._~+/]+=*")?,
            tokens: Regex::new(concat!(
                r"(?-u:\b)(?:",
                r"sk-(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
                r"|gh[pousr]_[A-Za-z0-9]{36,}",
                r"|github_pat_[A-Za-z0-9_]{22,}",
                r"|xox[abposr]-[A-Za-z0-9\-]{10,}",
                r"|(?:AKIA|ASIA)[A-Z0-9]{16}(?-u:\b)",
                r"|AIza[A-Za-z0-9_\-]{35,}",
                r"|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",
                r"|eyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*",
                r"|npm_[A-Za-z0-9]{36,}",
                r"|glpat-[A-Za-z0-9_\-]{20,}",
                r"|hf_[A-Za-z0-9]{30,}",
                r"|pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{30,}",
                r")",
            ))?,
            url: Regex::new(r"(?-u:\b)[A-Za-z][A-Za-z0-9+.\-]*://[^\s\x22'<>`\\]+")?,
            url_userinfo: Regex::new(r"(?-u:\b)[A-Za-z][A-Za-z0-9+.\-]*://[^\s/?#\x22'<>`\\]+@")?,
            url_segment: Regex::new(
                r"/(?i-u:token|secret|key|password|credential|session)/[^/?#&\s\x22'<>`\\]+",
            )?,
            query: Regex::new(r"(?:[?&#]|&amp;)[A-Za-z_][A-Za-z0-9_.\-]*=[^&#\s\x22'<>`\\]+")?,
            // The character before the key is checked in code (no look-behind here).
            kv: Regex::new(&format!(
                r"(?:\\?[\x22'])?{KEY}(?:\\?[\x22'])?[ \t]*(?::?=|:)[ \t]*(?:{ESCAPED_QUOTED}|(?:Some\()?(?:{QUOTED})|[^\s\x22'`,;&=>~:{{\[(\\][^\s\x22'`,;&]*)"
            ))?,
            // The character before `--` is checked in code, so `--` is a literal prefix.
            cli_flag: Regex::new(&format!(
                r"--{KEY}[ \t]+(?:{QUOTED}|[^\s\x22'`\-][^\s\x22'`]*)"
            ))?,
            netrc: Regex::new(
                r"machine[ \t]+[^ \t\r\n]+(?:[ \t]+login[ \t]+[^ \t\r\n]+)?[ \t]+password[ \t]+[^ \t\r\n]+",
            )?,
            curl_user: Regex::new(r#"(?:-u|--user|--proxy-user)[ \t]*["']?[^\s:"'@]+:[^\s"']+"#)?,
        })
    }
}

/// The built-in rules, compiled on first use. `None` only if a constant pattern failed
/// to compile, which a unit test rules out; [`Redactor::redact`] then fails closed.
static RULES: LazyLock<Option<Rules>> = LazyLock::new(|| Rules::build().ok());

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

/// Characters of a key (`[A-Za-z0-9_.-]`), as in the [`KEY`] pattern.
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

// ---------------------------------------------------------------------------------------
// Rule 1: private key blocks.

/// The `-----BEGIN …` line [`Redactor::redact_piece`] puts before a piece that continues
/// a key block (it stays in the redacted text, and is taken off again).
const PIECE_KEY_BEGIN: &str = "-----BEGIN PRIVATE KEY-----\n";

/// Whether `text` ends inside a private key block, given whether it starts inside one.
fn ends_in_key_block(rules: &Rules, text: &str, starts_inside: bool) -> bool {
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

fn pem_blocks(rules: &Rules, sink: &mut Sink<'_, '_>) {
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
fn strip_auth_scheme(value: &str) -> &str {
    for scheme in ["bearer ", "basic ", "token ", "digest "] {
        if value.len() > scheme.len()
            && value.as_bytes()[..scheme.len()].eq_ignore_ascii_case(scheme.as_bytes())
        {
            return value[scheme.len()..].trim_start();
        }
    }
    value
}

fn auth_schemes(rules: &Rules, sink: &mut Sink<'_, '_>) {
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

fn known_tokens(rules: &Rules, sink: &mut Sink<'_, '_>) {
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

fn urls(rules: &Rules, sink: &mut Sink<'_, '_>) {
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
fn normalized_eq(key: &str, target: &str) -> bool {
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

// ---------------------------------------------------------------------------------------
// Rule 6: assignments.

fn assignments(rules: &Rules, sink: &mut Sink<'_, '_>) {
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

fn accepts_value(class: KeyClass, key: &str, value: &str, quoted: bool) -> bool {
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
fn trim_trailing_punctuation(value: &str) -> &str {
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

// ---------------------------------------------------------------------------------------
// Key classification.

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum KeyClass {
    /// Not a secret key.
    Plain,
    /// `*_key`: redacted only when the value looks random.
    Weak,
    /// Redacted unless the value is plainly not a secret.
    Strong,
}

/// Splits `key` at `_ - .` and camelCase boundaries into `out`; `None` if there are more
/// than [`MAX_KEY_WORDS`] words. Allocation-free.
fn key_words<'k>(key: &'k str, out: &mut [&'k str; MAX_KEY_WORDS]) -> Option<usize> {
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

fn classify_key(key: &str) -> KeyClass {
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

// ---------------------------------------------------------------------------------------
// Value classification.

/// Values that are plainly not secrets (see the module docs). `quoted` values were
/// written as strings; unquoted ones may also be code.
fn is_non_secret_value(value: &str, key: &str, quoted: bool) -> bool {
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
fn looks_random(v: &str) -> bool {
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

fn in_list(word: &str, list: &[&str]) -> bool {
    list.iter().any(|w| w.eq_ignore_ascii_case(word))
}

fn contains_ignore_case(hay: &str, needle: &str) -> bool {
    hay.as_bytes()
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

fn starts_with_ignore_case(hay: &str, prefix: &str) -> bool {
    hay.len() >= prefix.len()
        && hay.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

fn ends_with_ignore_case(hay: &str, suffix: &str) -> bool {
    hay.len() >= suffix.len()
        && hay.as_bytes()[hay.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
