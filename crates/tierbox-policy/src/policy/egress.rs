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
}
