//! The `[egress]` section: network egress.

use std::collections::BTreeMap;
use std::net::IpAddr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Egress mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EgressMode {
    /// No network at all (default).
    #[default]
    BlockAll,
    /// Hosts named in the request are checked against the allowlist before spawning;
    /// nothing is enforced at runtime. Advisory only.
    Preflight,
    /// Preflight plus runtime enforcement: only allowlisted hosts are reachable; an empty
    /// allowlist means no network at all.
    Strict,
    /// No restriction at all.
    AllowAll,
}

impl EgressMode {
    /// The name the policy and the wire use (`block_all`, `preflight`, `strict`,
    /// `allow_all`).
    ///
    /// ```
    /// use tierbox_policy::EgressMode;
    /// assert_eq!(EgressMode::BlockAll.as_str(), "block_all");
    /// for mode in [EgressMode::BlockAll, EgressMode::Preflight, EgressMode::Strict, EgressMode::AllowAll] {
    ///     assert_eq!(serde_json::to_value(mode).unwrap(), mode.as_str());
    /// }
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::BlockAll => "block_all",
            Self::Preflight => "preflight",
            Self::Strict => "strict",
            Self::AllowAll => "allow_all",
        }
    }
}

/// Network egress.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct EgressPolicy {
    /// The mode; default `block_all`.
    pub mode: EgressMode,
    /// Allowlist: `host`, `*.suffix` (label boundary; a bare `*.com` is refused), with an
    /// optional `:port`; IP literals and CIDR blocks. In `strict` mode, the egress proxy
    /// dials an address in a special range (loopback, private, link-local, cloud metadata,
    /// multicast, …) only when an IP or CIDR entry here covers it, even for an allowed name.
    pub allow: Vec<String>,
    /// Fixed addresses for host names, used by the egress proxy instead of DNS (like
    /// `curl --resolve`): for registries on a private network without DNS, or to pin a
    /// name. Keys are host names (not addresses); at most [`MAX_EGRESS_RESOLVE`](super::MAX_EGRESS_RESOLVE) entries
    /// of at most [`MAX_EGRESS_RESOLVE_ADDRS`](super::MAX_EGRESS_RESOLVE_ADDRS) addresses each.
    pub resolve: BTreeMap<String, Vec<IpAddr>>,
    /// Hosts whose requests are held to rules: the egress proxy terminates their TLS (a
    /// per-run CA the sandbox trusts) and forwards only the requests `allow` lists. Keys
    /// are host names in canonical form; each must also be allowed by `allow`.
    pub hosts: BTreeMap<String, EgressHostPolicy>,
    /// Credentials the proxy injects: the sandbox holds a per-run placeholder in a
    /// variable, the proxy swaps it for the secret only in the named header or query
    /// parameter of requests to the named host (over TLS it terminated and verified),
    /// and swaps the secret back out of responses. At most
    /// [`MAX_CREDENTIALS`](crate::egress_rules::MAX_CREDENTIALS).
    pub credentials: Vec<CredentialPolicy>,
    /// More trust anchors for the upstreams of terminated hosts, beside the host's trust
    /// store: absolute paths of PEM files (a private registry's CA, a test upstream's).
    /// At most [`MAX_UPSTREAM_ROOTS`](crate::egress_rules::MAX_UPSTREAM_ROOTS).
    pub upstream_roots: Vec<std::path::PathBuf>,
    /// Ports a run may publish from the sandbox on the host's loopback, each
    /// `"127.0.0.1:HOSTPORT:SANDBOXPORT"`: a run publishes the ones its request names
    /// (`tierbox run --publish`, the request's `publish`), never another. Tier C only.
    /// At most [`MAX_PUBLISHED_PORTS`](crate::reach::MAX_PUBLISHED_PORTS).
    pub publish: Vec<String>,
    /// Host loopback ports the program may connect to, at `127.0.0.1:PORT` inside the
    /// sandbox (a database, a model server on the host): TCP, and nothing else on the host.
    /// Tier C only. At most [`MAX_HOST_PORTS`](crate::reach::MAX_HOST_PORTS).
    pub host_ports: Vec<u16>,
    /// Host unix sockets the program may connect to: absolute paths, or variables of the
    /// environment Tierbox runs in (`"$SSH_AUTH_SOCK"`, `"${XDG_RUNTIME_DIR}/bus"`: the
    /// CLI's own, a server's as started — never a request's). Each must be an existing
    /// socket; Tier C binds it read-only into the sandbox at its resolved path. Tier C
    /// only. At most [`MAX_UNIX_SOCKETS`](crate::unix_sockets::MAX_UNIX_SOCKETS).
    pub unix_sockets: Vec<String>,
    /// Lets `unix_sockets` name a socket whose peer controls the host (a container
    /// engine's, systemd's, the system bus:
    /// [`PRIVILEGED_SOCKETS`](crate::unix_sockets::PRIVILEGED_SOCKETS)). Whoever
    /// connects to one can run anything as root; `check` and the outcome warn.
    pub danger_privileged_sockets: bool,
}

/// The rules of one terminated host (`[egress.hosts."api.github.com"]`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct EgressHostPolicy {
    /// The requests allowed: `"GET /repos/*"`, `"POST /graphql"`, `"* /health"` (any
    /// method); a trailing `*` is a prefix. Empty: every request (the host is terminated
    /// for its credentials only). At most
    /// [`MAX_REQUEST_RULES`](crate::egress_rules::MAX_REQUEST_RULES).
    pub allow: Vec<String>,
}

/// One injected credential (`[[egress.credentials]]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CredentialPolicy {
    /// Its name in reports and the attestation (`[A-Za-z0-9_-]`, 1 to 64, unique).
    pub name: String,
    /// The host it is sent to (canonical form; must be allowed by `egress.allow`).
    pub host: String,
    /// The request header whose value carries it (`Authorization`, `X-Api-Key`); also
    /// found inside `Basic` credentials. Give `header` or `query`.
    #[serde(default)]
    pub header: Option<String>,
    /// The query parameter whose value carries it. Give `header` or `query`.
    #[serde(default)]
    pub query: Option<String>,
    /// The variable the program sees, holding the placeholder (`GITHUB_TOKEN`).
    pub env: String,
    /// Where the supervisor reads the secret: its own environment or a file. Never the
    /// request's, never the sandbox's.
    pub secret: SecretSource,
}

/// Where a secret comes from: exactly one of `env` and `file`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SecretSource {
    /// A variable of the supervisor's (the server's or the CLI's) environment.
    pub env: Option<String>,
    /// An absolute path of a file the supervisor reads (its content, one trailing newline
    /// removed).
    pub file: Option<std::path::PathBuf>,
}
