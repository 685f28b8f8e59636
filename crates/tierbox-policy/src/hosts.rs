//! Host names: the canonical form, egress allowlist patterns, and host extraction from
//! a request's arguments.
//!
//! Invariants this module keeps:
//! - every host it compares is in **canonical form** ([`CanonicalHost`]): lowercase,
//!   without a trailing dot, internationalised names converted to ASCII (`xn--…`) by the
//!   `url` crate's IDNA processing, only letters, digits and `-` in labels of 1–63 bytes,
//!   at most [`MAX_HOST_BYTES`] in all; IP literals parsed and printed canonically (IPv6
//!   without brackets, IPv4-mapped IPv6 as the IPv4 address), so `[::1]` and `::1` are
//!   the same host and `::ffff:10.0.0.1` is `10.0.0.1`;
//! - matching never resolves names: a pattern names hosts, a CIDR names IP literals, and
//!   a host name never matches a CIDR (DNS answers are the runtime proxy's business,
//!   SPEC §4);
//! - extraction ([`extract_hosts`], [`extract_hosts_for`]) is a best-effort scan of argv
//!   text. It is the advisory preflight layer: it does not see hosts inside config
//!   files, scripts, stdin, the environment or free text, and a program may compute a
//!   host at runtime. In `strict` mode the runtime proxy is the boundary.

mod extract;
mod pattern;
mod special;

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

pub use extract::{
    FoundHost, HOST_HINT_SEGMENTS, NETWORK_CLIENTS, extract_hosts, extract_hosts_for,
};
pub use pattern::{HostPattern, PatternError};
pub use special::{article, special_range};

pub use crate::request::MAX_HOST_BYTES;

/// Longest DNS label, in bytes (RFC 1035 §2.3.4).
pub const MAX_LABEL_BYTES: usize = 63;

/// Longest input the host parser looks at, in bytes. IDNA can shrink its input (a
/// Unicode label becomes shorter punycode only rarely, but mapping can drop characters),
/// so the name limit is checked after conversion; this cap only bounds the work done on
/// hostile input before that.
const MAX_HOST_INPUT_BYTES: usize = 4 * MAX_HOST_BYTES;

/// A host in canonical form: a DNS name or an IP address.
///
/// ```
/// use tierbox_policy::hosts::CanonicalHost;
///
/// assert_eq!(CanonicalHost::parse("Bücher.Example.").unwrap().to_string(), "xn--bcher-kva.example");
/// assert_eq!(CanonicalHost::parse("[::1]").unwrap(), CanonicalHost::parse("::1").unwrap());
/// assert!(CanonicalHost::parse("bad_name.example").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CanonicalHost {
    /// A DNS name: lowercase ASCII letter-digit-hyphen labels, no trailing dot.
    Name(String),
    /// An IP address (IPv4-mapped IPv6 addresses are stored as IPv4).
    Ip(IpAddr),
}

impl CanonicalHost {
    /// Parses a host name or IP literal (IPv6 with or without brackets) into canonical
    /// form.
    ///
    /// IPv4 follows the URL standard's host parser, as browsers and curl do, so
    /// `127.1` and `2130706433` are `127.0.0.1`.
    pub fn parse(raw: &str) -> Result<Self, HostError> {
        let host = || raw.to_owned();
        if raw.is_empty() {
            return Err(HostError::Empty);
        }
        if raw.len() > MAX_HOST_INPUT_BYTES {
            return Err(HostError::TooLong {
                host: host(),
                len: raw.len(),
            });
        }
        if let Some(inner) = raw.strip_prefix('[') {
            let inner = inner
                .strip_suffix(']')
                .ok_or_else(|| HostError::InvalidIpv6 { host: host() })?;
            return parse_ipv6(inner).ok_or_else(|| HostError::InvalidIpv6 { host: host() });
        }
        if raw.contains(':') {
            return parse_ipv6(raw).ok_or_else(|| HostError::InvalidIpv6 { host: host() });
        }
        let name = raw.strip_suffix('.').unwrap_or(raw);
        if name.is_empty() {
            return Err(HostError::EmptyLabel { host: host() });
        }
        match url::Host::parse(name) {
            Ok(url::Host::Domain(ascii)) => {
                check_ldh(raw, &ascii)?;
                Ok(Self::Name(ascii))
            }
            Ok(url::Host::Ipv4(v4)) => Ok(Self::Ip(IpAddr::V4(v4))),
            Ok(url::Host::Ipv6(v6)) => Ok(Self::Ip(IpAddr::V6(v6).to_canonical())),
            Err(e) => Err(HostError::Idna {
                host: host(),
                reason: e.to_string(),
            }),
        }
    }

    /// The IP address, if this host is one.
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Self::Ip(ip) => Some(*ip),
            Self::Name(_) => None,
        }
    }

    /// `host` or `host:port`, with IPv6 in brackets when a port follows.
    pub fn with_port(&self, port: Option<u16>) -> String {
        host_with_port(&self.to_string(), port)
    }
}

impl fmt::Display for CanonicalHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(name) => f.write_str(name),
            Self::Ip(ip) => ip.fmt(f),
        }
    }
}

/// The canonical form of `raw` as a string (see [`CanonicalHost`]).
///
/// ```
/// use tierbox_policy::hosts::canonical_host;
///
/// assert_eq!(canonical_host("GitHub.COM.").unwrap(), "github.com");
/// assert_eq!(canonical_host("[0:0::1]").unwrap(), "::1");
/// ```
pub fn canonical_host(raw: &str) -> Result<String, HostError> {
    CanonicalHost::parse(raw).map(|h| h.to_string())
}

/// Splits `host`, `host:port`, `[v6]`, `[v6]:port` or a bare IPv6 literal into the host
/// text and the port, without checking the host.
pub fn split_host_port(raw: &str) -> Result<(&str, Option<u16>), HostError> {
    let port_of = |text: &str| {
        parse_port(text).ok_or_else(|| HostError::InvalidPort {
            host: raw.to_owned(),
            port: text.to_owned(),
        })
    };
    if raw.starts_with('[') {
        let Some(close) = raw.find(']') else {
            return Err(HostError::InvalidIpv6 {
                host: raw.to_owned(),
            });
        };
        let (host, rest) = raw.split_at(close + 1);
        return match rest.strip_prefix(':') {
            None if rest.is_empty() => Ok((host, None)),
            None => Err(HostError::InvalidIpv6 {
                host: raw.to_owned(),
            }),
            Some(port) => Ok((host, Some(port_of(port)?))),
        };
    }
    match raw.matches(':').count() {
        0 => Ok((raw, None)),
        1 => {
            let (host, port) = raw.split_once(':').unwrap_or((raw, ""));
            Ok((host, Some(port_of(port)?)))
        }
        // Two or more colons: a bare IPv6 literal, which cannot carry a port.
        _ => Ok((raw, None)),
    }
}

/// Parses `host[:port]` (see [`split_host_port`]) into a canonical host and a port.
///
/// ```
/// use tierbox_policy::hosts::{parse_host_and_port, CanonicalHost};
///
/// let (host, port) = parse_host_and_port("[::1]:8080").unwrap();
/// assert_eq!((host.to_string(), port), ("::1".to_owned(), Some(8080)));
/// assert!(parse_host_and_port("example.com:0").is_err());
/// ```
pub fn parse_host_and_port(raw: &str) -> Result<(CanonicalHost, Option<u16>), HostError> {
    let (host, port) = split_host_port(raw)?;
    Ok((CanonicalHost::parse(host)?, port))
}

/// A TCP/UDP port: 1–5 ASCII digits with a value in 1–65535.
pub(crate) fn parse_port(text: &str) -> Option<u16> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u16>().ok().filter(|p| *p != 0)
}

/// `host` or `host:port`; a host containing `:` (IPv6) is bracketed when a port follows.
///
/// ```
/// assert_eq!(tierbox_policy::hosts::host_with_port("::1", Some(80)), "[::1]:80");
/// ```
pub fn host_with_port(host: &str, port: Option<u16>) -> String {
    match port {
        None => host.to_owned(),
        Some(p) if host.contains(':') => format!("[{host}]:{p}"),
        Some(p) => format!("{host}:{p}"),
    }
}

fn parse_ipv6(text: &str) -> Option<CanonicalHost> {
    // Zone identifiers (`fe80::1%eth0`) are refused by the std parser, which is what we
    // want: they name an interface, not a host.
    let v6: Ipv6Addr = text.parse().ok()?;
    Some(CanonicalHost::Ip(IpAddr::V6(v6).to_canonical()))
}

/// Checks an IDNA-converted name against the DNS letter-digit-hyphen rules.
fn check_ldh(raw: &str, ascii: &str) -> Result<(), HostError> {
    let host = || raw.to_owned();
    if ascii.len() > MAX_HOST_BYTES {
        return Err(HostError::TooLong {
            host: host(),
            len: ascii.len(),
        });
    }
    for label in ascii.split('.') {
        if label.is_empty() {
            return Err(HostError::EmptyLabel { host: host() });
        }
        if label.len() > MAX_LABEL_BYTES {
            return Err(HostError::LabelTooLong {
                host: host(),
                label: label.to_owned(),
                len: label.len(),
            });
        }
        if let Some(ch) = label
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
        {
            return Err(HostError::InvalidChar { host: host(), ch });
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(HostError::HyphenAtLabelEdge {
                host: host(),
                label: label.to_owned(),
            });
        }
    }
    Ok(())
}

/// A host name or address that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// The host is the empty string.
    #[error("host is empty")]
    Empty,
    /// The name is longer than [`MAX_HOST_BYTES`] (after IDNA conversion).
    #[error("host {host:?} is {len} bytes, more than {MAX_HOST_BYTES}")]
    TooLong { host: String, len: usize },
    /// Two dots in a row, or a lone dot.
    #[error("host {host:?} has an empty label")]
    EmptyLabel { host: String },
    /// A label is longer than [`MAX_LABEL_BYTES`].
    #[error("host {host:?} has a label of {len} bytes, more than {MAX_LABEL_BYTES}: {label:?}")]
    LabelTooLong {
        host: String,
        label: String,
        len: usize,
    },
    /// A character other than a letter, digit or `-` (after IDNA conversion).
    #[error("host {host:?} has the character {ch:?}; labels may hold only letters, digits and '-'")]
    InvalidChar { host: String, ch: char },
    /// A label starts or ends with `-`.
    #[error("host {host:?} has a label starting or ending with '-': {label:?}")]
    HyphenAtLabelEdge { host: String, label: String },
    /// The text has a `:` or brackets but is not an IPv6 address.
    #[error("host {host:?} is not a valid ipv6 address")]
    InvalidIpv6 { host: String },
    /// IDNA conversion (or the URL host parser) refused the name.
    #[error("host {host:?} is not a valid domain name: {reason}")]
    Idna { host: String, reason: String },
    /// The port after `:` is not a number in 1–65535.
    #[error("host {host:?} has an invalid port {port:?} (expected 1-65535)")]
    InvalidPort { host: String, port: String },
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// An input and a check on the error it must give.
    type Refusal<'a> = (&'a str, fn(&HostError) -> bool);

    fn canon(s: &str) -> String {
        canonical_host(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    #[test]
    fn names_are_lowercased_and_lose_the_trailing_dot() {
        assert_eq!(canon("Example.COM"), "example.com");
        assert_eq!(canon("example.com."), "example.com");
        assert_eq!(canon("localhost"), "localhost");
        assert_eq!(canon("a-b.c0.example"), "a-b.c0.example");
    }

    #[test]
    fn idna_names_become_ascii() {
        assert_eq!(canon("Bücher.example"), "xn--bcher-kva.example");
        assert_eq!(canon("bücher.example"), canon("xn--bcher-kva.example"));
        // Full-width dot is a label separator under UTS 46.
        assert_eq!(canon("bücher\u{3002}example"), "xn--bcher-kva.example");
    }

    #[test]
    fn ip_literals_are_canonical() {
        assert_eq!(canon("10.0.0.1"), "10.0.0.1");
        assert_eq!(canon("[::1]"), "::1");
        assert_eq!(canon("::1"), "::1");
        assert_eq!(canon("[FD00:0:0::1]"), "fd00::1");
        assert_eq!(canon("::ffff:10.0.0.1"), "10.0.0.1");
        // The URL standard's IPv4 forms, which curl and inet_aton accept too.
        assert_eq!(canon("127.1"), "127.0.0.1");
        assert_eq!(canon("2130706433"), "127.0.0.1");
        assert_eq!(canon("0x7f.0.0.1"), "127.0.0.1");
        assert_eq!(
            CanonicalHost::parse("[::1]").ok(),
            CanonicalHost::parse("::1").ok()
        );
    }

    #[test]
    fn bad_names_are_refused() {
        let long_label = format!("{}.example", "a".repeat(64));
        let long_name = format!("{}example", "abcdefghi.".repeat(25));
        let cases: &[Refusal<'_>] = &[
            ("", |e| matches!(e, HostError::Empty)),
            (".", |e| matches!(e, HostError::EmptyLabel { .. })),
            ("a..b", |e| matches!(e, HostError::EmptyLabel { .. })),
            (".a.b", |e| matches!(e, HostError::EmptyLabel { .. })),
            ("a.b..", |e| matches!(e, HostError::EmptyLabel { .. })),
            (&long_label, |e| {
                matches!(e, HostError::LabelTooLong { len: 64, .. })
            }),
            (&long_name, |e| matches!(e, HostError::TooLong { .. })),
            ("bad_name.example", |e| {
                matches!(e, HostError::InvalidChar { ch: '_', .. })
            }),
            ("-a.example", |e| {
                matches!(e, HostError::HyphenAtLabelEdge { .. })
            }),
            ("a-.example", |e| {
                matches!(e, HostError::HyphenAtLabelEdge { .. })
            }),
            ("[::1", |e| matches!(e, HostError::InvalidIpv6 { .. })),
            ("std::io", |e| matches!(e, HostError::InvalidIpv6 { .. })),
            ("fe80::1%eth0", |e| {
                matches!(e, HostError::InvalidIpv6 { .. })
            }),
            ("a b.example", |e| {
                matches!(e, HostError::Idna { .. } | HostError::InvalidChar { .. })
            }),
            ("a/b.example", |e| {
                matches!(e, HostError::Idna { .. } | HostError::InvalidChar { .. })
            }),
            ("1.2.3.4.5", |e| matches!(e, HostError::Idna { .. })),
        ];
        for (input, expected) in cases {
            match CanonicalHost::parse(input) {
                Ok(h) => panic!("{input:?} parsed as {h}"),
                Err(e) => assert!(expected(&e), "{input:?}: unexpected error {e:?}"),
            }
        }
    }

    #[test]
    fn the_name_limit_is_253_bytes_and_the_label_limit_63() {
        let label63 = "a".repeat(63);
        assert!(canonical_host(&format!("{label63}.example")).is_ok());
        // 4 × 63 + 3 dots = 255 > 253; 3 × 63 + 61 + 3 = 253.
        let at_limit = format!("{label63}.{label63}.{label63}.{}", "b".repeat(61));
        assert_eq!(at_limit.len(), 253);
        assert!(canonical_host(&at_limit).is_ok());
        assert!(
            canonical_host(&format!("{at_limit}.")).is_ok(),
            "the trailing dot does not count"
        );
        assert!(canonical_host(&format!("c{at_limit}")).is_err());
    }

    #[test]
    fn errors_name_the_value() {
        let e = canonical_host("bad_name.example").unwrap_err().to_string();
        assert!(e.contains("\"bad_name.example\""), "{e}");
        assert_eq!(e, e.to_lowercase(), "messages are lowercase");
    }

    #[test]
    fn host_and_port_split() {
        let ok = |s: &str| {
            parse_host_and_port(s)
                .map(|(h, p)| (h.to_string(), p))
                .unwrap_or_else(|e| panic!("{s:?}: {e}"))
        };
        assert_eq!(ok("example.com"), ("example.com".into(), None));
        assert_eq!(ok("example.com:443"), ("example.com".into(), Some(443)));
        assert_eq!(ok("[::1]:8080"), ("::1".into(), Some(8080)));
        assert_eq!(ok("[::1]"), ("::1".into(), None));
        assert_eq!(ok("fd00::1"), ("fd00::1".into(), None));
        for bad in [
            "example.com:",
            "example.com:0",
            "example.com:65536",
            "example.com:+80",
            "example.com:http",
            "[::1]x",
        ] {
            assert!(parse_host_and_port(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn with_port_brackets_ipv6() {
        let v6 = CanonicalHost::parse("::1").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v6.with_port(Some(80)), "[::1]:80");
        assert_eq!(v6.with_port(None), "::1");
        assert_eq!(host_with_port("a.example", Some(22)), "a.example:22");
    }
}
