//! The compiled rule patterns, shared by the process.

use std::sync::LazyLock;

use regex::Regex;

/// Key characters with one of the stems every secret key contains. Keeping the stem in
/// the pattern means ordinary `a=b` pairs never reach the code that inspects matches.
// Every case-insensitive part of these patterns is ASCII-only (`(?i-u:…)`): matches are
// taken apart by byte scanners that expect ASCII where the pattern says letters, and
// Unicode case folding would let e.g. U+212A KELVIN SIGN stand for `k` (three bytes where
// the scanner expects one), which split a character and panicked.
pub(crate) const KEY: &str = r"(?:[A-Za-z_][A-Za-z0-9_.\-]*)?(?i-u:pass|pwd|pw|secret|token|key|cred|auth|cookie)[A-Za-z0-9_.\-]*";

/// A double- or single-quoted string on one line, with backslash escapes.
const QUOTED: &str = r#""(?:[^"\\\r\n]|\\.)*"|'(?:[^'\\\r\n]|\\.)*'"#;

/// A string quoted with escaped quotes, as JSON inside a JSON string: `\"abc\"`.
const ESCAPED_QUOTED: &str = r#"\\"(?:[^"\\\r\n]|\\[^"\r\n])*\\""#;

/// The compiled rule patterns. Patterns with several forms share one regex where they
/// can, so the text is scanned as few times as possible.
#[derive(Debug)]
pub(crate) struct Rules {
    pub(crate) pem_begin: Regex,
    pub(crate) pem_end: Regex,
    pub(crate) auth_scheme: Regex,
    pub(crate) tokens: Regex,
    pub(crate) url: Regex,
    pub(crate) url_userinfo: Regex,
    pub(crate) url_segment: Regex,
    pub(crate) query: Regex,
    /// `key=value`, `key := value`, `"key": value`, `key: value` and `Header: value`.
    pub(crate) kv: Regex,
    pub(crate) cli_flag: Regex,
    pub(crate) netrc: Regex,
    pub(crate) curl_user: Regex,
}

impl Rules {
    pub(crate) fn build() -> Result<Self, regex::Error> {
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
/// to compile, which a unit test rules out; [`Redactor::redact`](crate::Redactor::redact) then fails closed.
pub(crate) static RULES: LazyLock<Option<Rules>> = LazyLock::new(|| Rules::build().ok());
