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

/// A request rule: `METHOD /path`, `METHOD /prefix/*`, or `* …` for any method; a path
/// segment that is `*` alone matches any one segment (`POST /*/*/git-upload-pack`).
///
/// Rules judge a path in normal form only: a request whose path has a `.` or `..`
/// segment, an empty segment, a backslash, or a percent-encoded `.`, `/`, `\`, `%` or NUL
/// is refused before any rule is asked ([`path_in_normal_form`]), since the upstream may
/// resolve it to a path no rule allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRule {
    text: String,
    method: Option<String>,
    /// The path's segments (the first is the empty one before the leading `/`); `None`
    /// is a `*` segment.
    segments: Vec<Option<String>>,
    /// The last segment is a prefix and more segments may follow (a trailing `*`).
    prefix: bool,
}

/// Why a request path is not in the normal form rules judge, or `None` when it is.
///
/// ```
/// use tierbox_policy::egress_rules::path_in_normal_form;
/// assert_eq!(path_in_normal_form("/repos/o/r"), None);
/// assert_eq!(path_in_normal_form("/"), None);
/// assert!(path_in_normal_form("/repos/../admin").is_some());
/// assert!(path_in_normal_form("/repos/%2e%2e/admin").is_some());
/// assert!(path_in_normal_form("/repos//x").is_some());
/// ```
pub fn path_in_normal_form(path: &str) -> Option<&'static str> {
    if !path.starts_with('/') {
        return Some("it does not start with /");
    }
    if path.contains('\\') {
        return Some("it holds a backslash");
    }
    let lower = path.to_ascii_lowercase();
    if ["%2e", "%2f", "%5c", "%25", "%00"]
        .iter()
        .any(|e| lower.contains(e))
    {
        return Some("it percent-encodes a dot, a slash, a backslash, a percent sign or NUL");
    }
    if path == "/" {
        return None;
    }
    let body = path.strip_suffix('/').unwrap_or(path);
    for seg in body.split('/').skip(1) {
        match seg {
            "" => return Some("it has an empty segment (//)"),
            "." | ".." => return Some("it has a . or .. segment"),
            _ => {}
        }
    }
    None
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
            // `/a/*` is a prefix; so is `/a*`; a lone final `/*` segment is both.
            Some(p) => (p, true),
            None => (path, false),
        };
        let mut segments = Vec::new();
        for seg in path.split('/') {
            match seg {
                "*" => segments.push(None),
                s if s.contains('*') => {
                    return Err(bad(
                        "* may only be a whole segment (/*/) or end the path (/prefix*)",
                    ));
                }
                "." | ".." => return Err(bad("the path has a . or .. segment")),
                s => segments.push(Some(s.to_owned())),
            }
        }
        Ok(Self {
            text: rule.to_owned(),
            method,
            segments,
            prefix,
        })
    }

    /// Whether it allows `method` on `path` (the request's path, without its query).
    pub fn allows(&self, method: &str, path: &str) -> bool {
        let method_ok = self.method.as_deref().is_none_or(|m| m == method);
        method_ok && path_in_normal_form(path).is_none() && self.path_matches(path)
    }

    fn path_matches(&self, path: &str) -> bool {
        let got: Vec<&str> = path.split('/').collect();
        let Some((last, head)) = self.segments.split_last() else {
            return false;
        };
        let enough = match self.prefix {
            true => got.len() >= self.segments.len(),
            false => got.len() == self.segments.len(),
        };
        let one = |want: &Option<String>, seg: &str| match want {
            None => !seg.is_empty(),
            Some(w) => w == seg,
        };
        enough
            && head.iter().zip(&got).all(|(w, g)| one(w, g))
            && match (last, self.prefix) {
                (Some(w), true) => got[head.len()].starts_with(w.as_str()),
                (w, _) => one(w, got[head.len()]),
            }
    }

    /// The rule as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `*` segment matches one non-empty segment; a trailing `*` is a prefix of the
    /// rest; a path outside normal form matches no rule.
    #[test]
    fn segment_wildcards_match_one_segment_and_a_trailing_star_the_rest() {
        let pack = RequestRule::parse("POST /*/*/git-upload-pack").unwrap();
        assert!(pack.allows("POST", "/owner/repo.git/git-upload-pack"));
        assert!(!pack.allows("POST", "/owner/repo.git/git-receive-pack"));
        assert!(!pack.allows("POST", "/a/b/c/git-upload-pack"));
        assert!(!pack.allows("POST", "//repo.git/git-upload-pack"));
        let all = RequestRule::parse("GET /*").unwrap();
        for p in ["/", "/x", "/x/y/z", "/x/"] {
            assert!(all.allows("GET", p), "{p}");
        }
        let repos = RequestRule::parse("GET /repos/*").unwrap();
        assert!(repos.allows("GET", "/repos/o/r") && repos.allows("GET", "/repos/"));
        assert!(!repos.allows("GET", "/repos") && !repos.allows("GET", "/reposx/y"));
        assert!(!repos.allows("GET", "/repos/../admin"));
        assert!(!repos.allows("GET", "/repos/%2e%2e/admin"));
        let starts = RequestRule::parse("GET /v1/files*").unwrap();
        assert!(starts.allows("GET", "/v1/files") && starts.allows("GET", "/v1/files-x/y"));
        let mid = RequestRule::parse("GET /repos/*/pulls").unwrap();
        assert!(mid.allows("GET", "/repos/o/pulls") && !mid.allows("GET", "/repos/o/r/pulls"));
        for bad in ["GET /a*b/c", "GET /a/../b", "GET /*x"] {
            assert!(RequestRule::parse(bad).is_err(), "{bad}");
        }
    }
}
