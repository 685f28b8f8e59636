//! The egress proxy's rules for hosts whose TLS it terminates: request rules
//! (`METHOD /path`, `METHOD /prefix/*`, `* /path`) and the caps on them. Parsed here so a
//! policy is checked when it is loaded; the proxy (`tierbox-egress`) enforces them.

/// Most hosts a run's proxy terminates TLS for (`egress.hosts` and the hosts of
/// `egress.credentials` together): each is a name constraint of the run's CA and a leaf
/// certificate the supervisor signs and keeps for the run.
pub const MAX_TERMINATED_HOSTS: usize = 64;

/// Most credential rules (`egress.credentials`).
pub const MAX_CREDENTIALS: usize = 64;

/// Most upstream trust-anchor files (`egress.upstream_roots`).
pub const MAX_UPSTREAM_ROOTS: usize = 16;

/// Most request rules one host may have.
pub const MAX_REQUEST_RULES: usize = 256;

/// The variables a run whose proxy terminates TLS has pointed at its trust bundle (the
/// host's roots plus the run's CA). Most of them *replace* a client's trust store, hence
/// a bundle rather than the CA alone; `NODE_EXTRA_CA_CERTS` adds to node's own, and
/// `npm_config_cafile` overrides a `cafile` an npmrc of the host names (Debian's points npm
/// at the host's store alone). The runner owns them in such a run: a policy that sets
/// them too is refused.
pub const CA_BUNDLE_VARS: &[&str] = &[
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
    "CARGO_HTTP_CAINFO",
    "npm_config_cafile",
];

/// Most bytes of a request rule (`METHOD /path/*`).
pub const MAX_REQUEST_RULE_BYTES: usize = 1024;

/// A request rule: `METHOD /path`, `METHOD /prefix/*`, or `* …` for any method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRule {
    text: String,
    method: Option<String>,
    path: String,
    prefix: bool,
}

/// A request rule that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "request rule {rule:?}: {reason} (write \"GET /repos/*\", \"POST /graphql\" or \"* /health\")"
)]
pub struct RuleError {
    /// The rule as written (cut to [`MAX_REQUEST_RULE_BYTES`]).
    pub rule: String,
    /// What is wrong.
    pub reason: &'static str,
}

impl RequestRule {
    /// Parses `METHOD PATH`: an HTTP method token or `*`, one space, a path starting with
    /// `/` that may end in `*` (a prefix).
    ///
    /// ```
    /// use tierbox_policy::egress_rules::RequestRule;
    ///
    /// let r = RequestRule::parse("GET /repos/*").unwrap();
    /// assert!(r.allows("GET", "/repos/a/b"));
    /// assert!(!r.allows("POST", "/repos/a/b"));
    /// assert!(!r.allows("GET", "/user"));
    /// assert!(RequestRule::parse("GET repos").is_err());
    /// ```
    pub fn parse(rule: &str) -> Result<Self, RuleError> {
        let bad = |reason| RuleError {
            rule: rule.chars().take(MAX_REQUEST_RULE_BYTES).collect(),
            reason,
        };
        if rule.len() > MAX_REQUEST_RULE_BYTES {
            return Err(bad("longer than 1024 bytes"));
        }
        let (method, path) = rule
            .split_once(' ')
            .ok_or_else(|| bad("no space between the method and the path"))?;
        let method = match method {
            "*" => None,
            m if !m.is_empty() && m.bytes().all(|b| b.is_ascii_uppercase()) => Some(m.to_owned()),
            _ => return Err(bad("the method is neither an upper-case HTTP method nor *")),
        };
        if !path.starts_with('/')
            || path
                .bytes()
                .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return Err(bad(
                "the path does not start with / or has spaces or control characters",
            ));
        }
        let (path, prefix) = match path.strip_suffix('*') {
            Some(p) => (p, true),
            None => (path, false),
        };
        if path.contains('*') {
            return Err(bad("* may only end the path"));
        }
        Ok(Self {
            text: rule.to_owned(),
            method,
            path: path.to_owned(),
            prefix,
        })
    }

    /// Whether it allows `method` on `path` (the request's path, without its query).
    pub fn allows(&self, method: &str, path: &str) -> bool {
        let method_ok = self.method.as_deref().is_none_or(|m| m == method);
        let path_ok = match self.prefix {
            true => path.starts_with(&self.path),
            false => path == self.path,
        };
        method_ok && path_ok
    }

    /// The rule as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}
