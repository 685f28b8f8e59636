//! Egress allowlist patterns.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{CanonicalHost, HostError, split_host_port};

/// Second-level labels that registries use under country-code TLDs (`co.uk`, `com.au`,
/// `ac.jp`, …). Without a public suffix list we cannot know every public suffix, so
/// `*.<one of these>.<two letters>` is refused as a whole registry, and anything
/// broader than a single registrable name must be listed name by name. This can refuse
/// a wildcard under a real two-label domain such as `co.de`; list its names instead.
const REGISTRY_SECOND_LEVELS: &[&str] = &[
    "ac", "co", "com", "edu", "gob", "gov", "go", "govt", "ltd", "mil", "ne", "net", "nic", "or",
    "org", "plc", "sch",
];

/// One egress allowlist entry.
///
/// Forms (all case-insensitive; names go through IDNA, see [`CanonicalHost`]):
/// - `example.com` — exactly that host;
/// - `*.example.com` — any name *under* `example.com` on a label boundary
///   (`a.example.com`, `a.b.example.com`), not `example.com` itself and not
///   `badexample.com`. The suffix must have at least two labels, and a country-code
///   registry suffix such as `*.co.uk` is refused; `*` alone is refused (the policy's
///   `egress.mode = "allow_all"` is the loud way to allow everything);
/// - any of the above with `:port` (`example.com:443`, `*.x.org:22`); without a port the
///   pattern matches every port, with one it matches only hosts found with that port;
/// - IP literals, IPv6 with or without brackets (`10.0.0.1`, `::1`, `[::1]:8080`);
/// - CIDR blocks (`10.0.0.0/8`, `fd00::/8`; no port, no host bits set), which match
///   IP literal hosts inside them and never a host name.
///
/// Serialised as its canonical string.
///
/// ```
/// use tierbox_policy::hosts::HostPattern;
///
/// let p = HostPattern::parse("*.Example.com").unwrap();
/// assert!(p.matches("a.example.com", None));
/// assert!(p.matches("a.b.example.com", Some(443)));
/// assert!(!p.matches("example.com", None));
/// assert!(!p.matches("badexample.com", None));
///
/// let p = HostPattern::parse("[::1]:8080").unwrap();
/// assert!(p.matches("::1", Some(8080)) && !p.matches("::1", Some(80)) && !p.matches("::1", None));
///
/// assert!(HostPattern::parse("10.0.0.0/8").unwrap().matches("10.1.2.3", None));
/// assert!(HostPattern::parse("*.com").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct HostPattern {
    target: Target,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Target {
    /// A canonical name, matched exactly.
    Name(String),
    /// A canonical name; matches names that end with `.` + this.
    Suffix(String),
    /// A canonical address, matched exactly.
    Ip(IpAddr),
    /// A network address (host bits clear) and prefix length.
    Cidr(IpAddr, u8),
}

impl HostPattern {
    /// Parses an allowlist entry (the same as [`str::parse`]). The error's variant names
    /// the rule the entry breaks and carries the entry; its message is a lowercase
    /// sentence naming the entry.
    ///
    /// ```
    /// use tierbox_policy::hosts::{HostPattern, PatternError};
    ///
    /// let err = HostPattern::parse("*.com").unwrap_err();
    /// assert!(matches!(&err, PatternError::SuffixTooBroad { pattern } if pattern == "*.com"));
    /// assert!(err.to_string().starts_with("pattern \"*.com\" covers a whole top-level domain"));
    /// ```
    pub fn parse(raw: &str) -> Result<Self, PatternError> {
        raw.parse::<Self>()
    }

    /// The port this pattern requires, if any.
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// Whether `host` (any form [`CanonicalHost::parse`] accepts) reached on `port`
    /// matches. A host that does not parse matches nothing.
    pub fn matches(&self, host: &str, port: Option<u16>) -> bool {
        CanonicalHost::parse(host).is_ok_and(|h| self.matches_host(&h, port))
    }

    /// Whether this entry names addresses (an IP literal or a CIDR block) rather than
    /// host names. Such an entry is what lets the egress proxy dial an address in a
    /// special range (loopback, private, link-local, …) that an allowed name resolves to.
    ///
    /// ```
    /// use tierbox_policy::hosts::HostPattern;
    /// assert!(HostPattern::parse("10.0.0.0/8").unwrap().is_address());
    /// assert!(!HostPattern::parse("registry.example").unwrap().is_address());
    /// ```
    pub fn is_address(&self) -> bool {
        matches!(self.target, Target::Ip(_) | Target::Cidr(..))
    }

    /// [`HostPattern::matches`] for a host already in canonical form.
    pub fn matches_host(&self, host: &CanonicalHost, port: Option<u16>) -> bool {
        if self.port.is_some() && self.port != port {
            return false;
        }
        match (&self.target, host) {
            (Target::Name(name), CanonicalHost::Name(h)) => name == h,
            (Target::Suffix(suffix), CanonicalHost::Name(h)) => h
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            (Target::Ip(ip), CanonicalHost::Ip(h)) => ip == h,
            (Target::Cidr(net, len), CanonicalHost::Ip(h)) => cidr_contains(*net, *len, *h),
            _ => false,
        }
    }
}

impl FromStr for HostPattern {
    type Err = PatternError;

    fn from_str(raw: &str) -> Result<Self, PatternError> {
        let pattern = || raw.to_owned();
        let host_err = |source: HostError| PatternError::Host {
            pattern: pattern(),
            source,
        };
        if raw.is_empty() {
            return Err(PatternError::Empty);
        }
        if raw == "*" {
            return Err(PatternError::AllHosts { pattern: pattern() });
        }
        if raw.contains('/') {
            let (net, len) = parse_cidr(raw)?;
            return Ok(Self {
                target: Target::Cidr(net, len),
                port: None,
            });
        }
        let (host, port) = split_host_port(raw).map_err(host_err)?;
        if let Some(suffix) = host.strip_prefix("*.") {
            if suffix.contains('*') {
                return Err(PatternError::MisplacedWildcard { pattern: pattern() });
            }
            let name = match CanonicalHost::parse(suffix).map_err(host_err)? {
                CanonicalHost::Name(name) => name,
                CanonicalHost::Ip(_) => {
                    return Err(PatternError::WildcardOnAddress { pattern: pattern() });
                }
            };
            let labels: Vec<&str> = name.split('.').collect();
            if labels.len() < 2 {
                return Err(PatternError::SuffixTooBroad { pattern: pattern() });
            }
            if let [second, cc] = labels.as_slice()
                && cc.len() == 2
                && REGISTRY_SECOND_LEVELS.contains(second)
            {
                return Err(PatternError::RegistrySuffix {
                    pattern: pattern(),
                    suffix: name.clone(),
                });
            }
            return Ok(Self {
                target: Target::Suffix(name),
                port,
            });
        }
        if host.contains('*') {
            return Err(PatternError::MisplacedWildcard { pattern: pattern() });
        }
        if let Some(rest) = host.strip_prefix('.') {
            return Err(PatternError::LeadingDot {
                pattern: pattern(),
                suggestion: format!("*.{rest}"),
            });
        }
        let target = match CanonicalHost::parse(host).map_err(host_err)? {
            CanonicalHost::Name(name) => Target::Name(name),
            CanonicalHost::Ip(ip) => Target::Ip(ip),
        };
        Ok(Self { target, port })
    }
}

fn parse_cidr(raw: &str) -> Result<(IpAddr, u8), PatternError> {
    let pattern = || raw.to_owned();
    let (addr, len) = raw.split_once('/').unwrap_or((raw, ""));
    if len.contains(':') || len.contains(']') {
        return Err(PatternError::CidrWithPort { pattern: pattern() });
    }
    let addr = addr
        .strip_prefix('[')
        .and_then(|a| a.strip_suffix(']'))
        .unwrap_or(addr);
    // Strict std parsing: a CIDR is written by an administrator, not guessed from argv.
    let net: IpAddr = addr
        .parse()
        .map_err(|_| PatternError::CidrAddress { pattern: pattern() })?;
    let max = if net.is_ipv4() { 32 } else { 128 };
    let len: u8 = len
        .parse()
        .ok()
        .filter(|l| *l <= max && !len.starts_with('+'))
        .ok_or_else(|| PatternError::CidrPrefix {
            pattern: pattern(),
            max,
        })?;
    if masked(net, len) != net {
        return Err(PatternError::CidrHostBits {
            pattern: pattern(),
            network: format!("{}/{len}", masked(net, len)),
        });
    }
    // Hosts are canonicalised with IPv4-mapped IPv6 as IPv4, so do the same to a
    // network that lies entirely inside ::ffff:0:0/96.
    if let IpAddr::V6(v6) = net
        && len >= 96
        && let Some(v4) = v6.to_ipv4_mapped()
    {
        return Ok((IpAddr::V4(v4), len - 96));
    }
    Ok((net, len))
}

fn masked(ip: IpAddr, len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask))
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
        }
    }
}

fn cidr_contains(net: IpAddr, len: u8, ip: IpAddr) -> bool {
    net.is_ipv4() == ip.is_ipv4() && masked(ip, len) == net
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            Target::Name(name) => f.write_str(name)?,
            Target::Suffix(suffix) => write!(f, "*.{suffix}")?,
            Target::Ip(IpAddr::V6(v6)) if self.port.is_some() => write!(f, "[{v6}]")?,
            Target::Ip(ip) => write!(f, "{ip}")?,
            Target::Cidr(net, len) => write!(f, "{net}/{len}")?,
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

impl TryFrom<String> for HostPattern {
    type Error = PatternError;
    fn try_from(s: String) -> Result<Self, PatternError> {
        Self::parse(&s)
    }
}

impl From<HostPattern> for String {
    fn from(p: HostPattern) -> String {
        p.to_string()
    }
}

/// An allowlist entry that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PatternError {
    /// The entry is the empty string.
    #[error("pattern is empty")]
    Empty,
    /// `*` alone.
    #[error(
        "pattern {pattern:?} would allow every host; set egress.mode = \"allow_all\" to do that"
    )]
    AllHosts { pattern: String },
    /// `*.com`: a wildcard over a single label.
    #[error(
        "pattern {pattern:?} covers a whole top-level domain; a wildcard needs at least two labels after \"*.\""
    )]
    SuffixTooBroad { pattern: String },
    /// `*.co.uk`: a wildcard over a country-code registry.
    #[error(
        "pattern {pattern:?} covers the registry suffix {suffix:?}; list the names under it instead"
    )]
    RegistrySuffix { pattern: String, suffix: String },
    /// `a.*.com`, `*example.com`, `**.x.y`.
    #[error("pattern {pattern:?} has a '*' that is not a leading \"*.\" label")]
    MisplacedWildcard { pattern: String },
    /// `*.10.0.0.1`.
    #[error("pattern {pattern:?} puts a wildcard on an ip address; use a cidr such as 10.0.0.0/8")]
    WildcardOnAddress { pattern: String },
    /// `.example.com` (the `NO_PROXY` spelling), which is ambiguous here.
    #[error(
        "pattern {pattern:?} starts with '.'; write {suggestion:?} to match the names under it"
    )]
    LeadingDot { pattern: String, suggestion: String },
    /// The host or port part is invalid.
    #[error("pattern {pattern:?}: {source}")]
    Host {
        pattern: String,
        #[source]
        source: HostError,
    },
    /// A CIDR whose address is not an IP literal.
    #[error("pattern {pattern:?} is not a cidr block: the part before '/' must be an ip address")]
    CidrAddress { pattern: String },
    /// A CIDR whose prefix length is not a number in range.
    #[error("pattern {pattern:?} has an invalid prefix length (expected 0-{max})")]
    CidrPrefix { pattern: String, max: u8 },
    /// A CIDR with host bits set, such as `10.0.0.1/8`.
    #[error("pattern {pattern:?} has host bits set; did you mean {network:?}?")]
    CidrHostBits { pattern: String, network: String },
    /// A CIDR followed by a port.
    #[error("pattern {pattern:?} puts a port on a cidr block, which is not supported")]
    CidrWithPort { pattern: String },
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// An input and a check on the error it must give.
    type Refusal = (&'static str, fn(&PatternError) -> bool);

    fn pat(s: &str) -> HostPattern {
        HostPattern::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    #[test]
    fn wildcards_match_on_a_label_boundary() {
        let p = pat("*.example.com");
        for yes in [
            "a.example.com",
            "a.b.example.com",
            "A.Example.COM.",
            "xn--bcher-kva.example.com",
            "bücher.example.com",
        ] {
            assert!(p.matches(yes, None), "{yes}");
            assert!(p.matches(yes, Some(443)), "{yes} with a port");
        }
        for no in [
            "example.com",
            "badexample.com",
            "a.badexample.com",
            "example.com.evil",
            "com",
            ".example.com",
            "10.0.0.1",
        ] {
            assert!(!p.matches(no, None), "{no}");
        }
    }

    #[test]
    fn exact_names_match_only_themselves() {
        let p = pat("Example.com.");
        assert_eq!(p.to_string(), "example.com");
        assert!(p.matches("example.com", None));
        assert!(p.matches("EXAMPLE.COM.", Some(22)));
        assert!(!p.matches("a.example.com", None));
        assert!(!p.matches("example.co", None));
        assert!(!p.matches("not a host", None));
    }

    #[test]
    fn ports_are_required_only_when_given() {
        let p = pat("example.com:443");
        assert!(p.matches("example.com", Some(443)));
        assert!(!p.matches("example.com", Some(80)));
        assert!(
            !p.matches("example.com", None),
            "an unknown port does not satisfy a port rule"
        );
        let p = pat("*.x.org:22");
        assert!(p.matches("git.x.org", Some(22)));
        assert!(!p.matches("git.x.org", Some(2222)));
        assert_eq!(p.port(), Some(22));
    }

    #[test]
    fn idna_patterns() {
        let p = pat("*.Bücher.example");
        assert_eq!(p.to_string(), "*.xn--bcher-kva.example");
        assert!(p.matches("www.bücher.example", None));
        assert!(p.matches("www.xn--bcher-kva.example", None));
    }

    #[test]
    fn ip_patterns() {
        let p = pat("[::1]:8080");
        assert_eq!(p.to_string(), "[::1]:8080");
        assert!(p.matches("::1", Some(8080)));
        assert!(p.matches("[::1]", Some(8080)));
        assert!(!p.matches("::1", Some(8081)));
        let p = pat("::1");
        assert!(p.matches("[0::1]", None));
        assert!(pat("10.0.0.1").matches("10.0.0.1", Some(22)));
        assert!(
            pat("10.0.0.1").matches("::ffff:10.0.0.1", None),
            "ipv4-mapped ipv6 is the ipv4 address"
        );
        assert!(!pat("10.0.0.1").matches("10.0.0.2", None));
    }

    #[test]
    fn cidr_patterns_match_addresses_only() {
        let p = pat("10.0.0.0/8");
        assert!(p.matches("10.0.0.1", None));
        assert!(p.matches("10.255.255.255", Some(22)));
        assert!(p.matches("[::ffff:10.1.1.1]", None));
        assert!(!p.matches("11.0.0.1", None));
        assert!(!p.matches("fd00::1", None));
        assert!(!p.matches("ten.example", None), "names never match a cidr");
        let p = pat("fd00::/8");
        assert!(p.matches("fd00::1", None));
        assert!(p.matches("[fdff::1]", None));
        assert!(!p.matches("fe00::1", None));
        assert!(!p.matches("10.0.0.1", None));
        assert!(pat("0.0.0.0/0").matches("1.2.3.4", None));
        assert!(pat("10.0.0.1/32").matches("10.0.0.1", None));
        assert!(pat("::ffff:10.0.0.0/104").matches("10.9.9.9", None));
        assert_eq!(pat("::ffff:10.0.0.0/104").to_string(), "10.0.0.0/8");
    }

    #[test]
    fn refused_patterns() {
        let cases: &[Refusal] = &[
            ("", |e| matches!(e, PatternError::Empty)),
            ("*", |e| matches!(e, PatternError::AllHosts { .. })),
            ("*.com", |e| {
                matches!(e, PatternError::SuffixTooBroad { .. })
            }),
            ("*.COM.", |e| {
                matches!(e, PatternError::SuffixTooBroad { .. })
            }),
            ("*.co.uk", |e| {
                matches!(e, PatternError::RegistrySuffix { .. })
            }),
            ("*.com.au", |e| {
                matches!(e, PatternError::RegistrySuffix { .. })
            }),
            ("*.", |e| matches!(e, PatternError::Host { .. })),
            ("*.*.example.com", |e| {
                matches!(e, PatternError::MisplacedWildcard { .. })
            }),
            ("a.*.example.com", |e| {
                matches!(e, PatternError::MisplacedWildcard { .. })
            }),
            ("*example.com", |e| {
                matches!(e, PatternError::MisplacedWildcard { .. })
            }),
            ("*.10.0.0.1", |e| {
                matches!(e, PatternError::WildcardOnAddress { .. })
            }),
            (".example.com", |e| {
                matches!(e, PatternError::LeadingDot { .. })
            }),
            ("example.com:0", |e| {
                matches!(
                    e,
                    PatternError::Host {
                        source: HostError::InvalidPort { .. },
                        ..
                    }
                )
            }),
            ("example.com:99999", |e| {
                matches!(e, PatternError::Host { .. })
            }),
            ("example.com:", |e| matches!(e, PatternError::Host { .. })),
            ("bad_name.example", |e| {
                matches!(e, PatternError::Host { .. })
            }),
            ("a b.example", |e| matches!(e, PatternError::Host { .. })),
            ("10.0.0.0/33", |e| {
                matches!(e, PatternError::CidrPrefix { max: 32, .. })
            }),
            ("fd00::/129", |e| {
                matches!(e, PatternError::CidrPrefix { max: 128, .. })
            }),
            ("10.0.0.1/8", |e| {
                matches!(e, PatternError::CidrHostBits { .. })
            }),
            ("example.com/8", |e| {
                matches!(e, PatternError::CidrAddress { .. })
            }),
            ("10.0.0.0/8:22", |e| {
                matches!(e, PatternError::CidrWithPort { .. })
            }),
            ("10.0.0.0/", |e| {
                matches!(e, PatternError::CidrPrefix { .. })
            }),
        ];
        for (input, expected) in cases {
            match input.parse::<HostPattern>() {
                Ok(p) => panic!("{input:?} parsed as {p}"),
                Err(e) => assert!(expected(&e), "{input:?}: unexpected error {e:?}"),
            }
        }
    }

    #[test]
    fn two_label_suffixes_that_are_not_registries_are_accepted() {
        assert!(pat("*.example.com").matches("a.example.com", None));
        assert!(pat("*.github.io").matches("me.github.io", None));
        assert!(pat("*.example.uk").matches("a.example.uk", None));
    }

    #[test]
    fn display_round_trips_and_serde_is_a_string() {
        for s in [
            "example.com",
            "*.example.com:443",
            "10.0.0.1",
            "10.0.0.1:22",
            "::1",
            "[::1]:8080",
            "10.0.0.0/8",
            "fd00::/8",
            "localhost",
        ] {
            let p = pat(s);
            assert_eq!(p.to_string(), s);
            assert_eq!(pat(&p.to_string()), p);
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, format!("{s:?}"));
            assert_eq!(serde_json::from_str::<HostPattern>(&json).unwrap(), p);
        }
        assert!(serde_json::from_str::<HostPattern>("\"*.com\"").is_err());
    }

    #[test]
    fn errors_are_lowercase_and_name_the_pattern() {
        let e = HostPattern::parse("*.com").unwrap_err().to_string();
        assert!(e.contains("\"*.com\""), "{e}");
        assert!(
            !e.starts_with(char::is_uppercase) && !e.ends_with('.'),
            "{e}"
        );
    }

    /// `HostPattern::parse` returns the typed error: each refusal names its rule and the
    /// entry, and the message is the one the string error used to carry.
    #[test]
    fn parse_refusals_are_typed_and_keep_their_messages() {
        // An input, a check on the refusal's variant, and its message.
        type Case = (&'static str, fn(&PatternError) -> bool, &'static str);
        let cases: [Case; 6] = [
            ("", |e| matches!(e, PatternError::Empty), "pattern is empty"),
            (
                "*",
                |e| matches!(e, PatternError::AllHosts { pattern } if pattern == "*"),
                "pattern \"*\" would allow every host; set egress.mode = \"allow_all\" to do that",
            ),
            (
                "*.co.uk",
                |e| {
                    matches!(e, PatternError::RegistrySuffix { pattern, suffix }
                        if pattern == "*.co.uk" && suffix == "co.uk")
                },
                "pattern \"*.co.uk\" covers the registry suffix \"co.uk\"; list the names under it instead",
            ),
            (
                ".example.com",
                |e| {
                    matches!(e, PatternError::LeadingDot { pattern, suggestion }
                        if pattern == ".example.com" && suggestion == "*.example.com")
                },
                "pattern \".example.com\" starts with '.'; write \"*.example.com\" to match the names under it",
            ),
            (
                "10.0.0.1/8",
                |e| {
                    matches!(e, PatternError::CidrHostBits { pattern, network }
                        if pattern == "10.0.0.1/8" && network == "10.0.0.0/8")
                },
                "pattern \"10.0.0.1/8\" has host bits set; did you mean \"10.0.0.0/8\"?",
            ),
            (
                "example.com:0",
                |e| matches!(e, PatternError::Host { pattern, .. } if pattern == "example.com:0"),
                "pattern \"example.com:0\": ",
            ),
        ];
        for (raw, is_rule, message) in cases {
            let err = HostPattern::parse(raw).unwrap_err();
            assert!(is_rule(&err), "{raw:?}: {err:?}");
            // The host error's own text follows a `Host` refusal's prefix.
            if message.ends_with(": ") {
                assert!(err.to_string().starts_with(message), "{raw:?}: {err}");
            } else {
                assert_eq!(err.to_string(), message, "{raw:?}");
            }
            assert_eq!(
                serde_json::from_value::<HostPattern>(serde_json::json!(raw))
                    .unwrap_err()
                    .to_string(),
                err.to_string(),
                "{raw:?}: serde gives the same message"
            );
        }
    }
}
