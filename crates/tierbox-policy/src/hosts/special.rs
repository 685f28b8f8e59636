//! Special-purpose address ranges: the addresses an allowed *name* must not lead to
//! unless the allowlist names the address itself.
//!
//! The table follows the IANA special-purpose registries (RFC 6890 and successors) and
//! the cloud metadata endpoints. It errs towards listing: an ordinary public address is
//! one that is in none of these ranges.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// AWS, GCP, Azure, OpenStack and most others serve instance metadata (often with
/// credentials) here.
const METADATA_V4: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);
/// Alibaba Cloud's metadata endpoint.
const METADATA_V4_ALIBABA: Ipv4Addr = Ipv4Addr::new(100, 100, 100, 200);
/// AWS's IPv6 metadata endpoint (inside the unique-local range, so checked first).
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);

/// IPv4 ranges in the order they are checked (a single address before the block that
/// contains it): network, prefix length, name.
const V4_RANGES: &[(Ipv4Addr, u8, &str)] = &[
    (Ipv4Addr::new(0, 0, 0, 0), 8, "unspecified/this network"),
    (Ipv4Addr::new(10, 0, 0, 0), 8, "private"),
    (METADATA_V4_ALIBABA, 32, "cloud metadata"),
    (
        Ipv4Addr::new(100, 64, 0, 0),
        10,
        "shared (carrier-grade nat)",
    ),
    (Ipv4Addr::new(127, 0, 0, 0), 8, "loopback"),
    (METADATA_V4, 32, "cloud metadata"),
    (Ipv4Addr::new(169, 254, 0, 0), 16, "link-local"),
    (Ipv4Addr::new(172, 16, 0, 0), 12, "private"),
    (Ipv4Addr::new(192, 0, 0, 0), 24, "ietf protocol assignments"),
    (Ipv4Addr::new(192, 0, 2, 0), 24, "documentation"),
    (Ipv4Addr::new(192, 168, 0, 0), 16, "private"),
    (Ipv4Addr::new(198, 18, 0, 0), 15, "benchmarking"),
    (Ipv4Addr::new(198, 51, 100, 0), 24, "documentation"),
    (Ipv4Addr::new(203, 0, 113, 0), 24, "documentation"),
    (Ipv4Addr::new(224, 0, 0, 0), 4, "multicast"),
    (Ipv4Addr::BROADCAST, 32, "broadcast"),
    (Ipv4Addr::new(240, 0, 0, 0), 4, "reserved"),
];

/// IPv6 ranges in the order they are checked; the two ranges that embed an IPv4 address
/// (`::ffff:0:0/96`, `64:ff9b::/96`) are handled before this table.
const V6_RANGES: &[(Ipv6Addr, u8, &str)] = &[
    (Ipv6Addr::UNSPECIFIED, 128, "unspecified"),
    (Ipv6Addr::LOCALHOST, 128, "loopback"),
    // Deprecated IPv4-compatible addresses (`::a.b.c.d`, RFC 4291 §2.5.5.1); nothing
    // public lives here.
    (Ipv6Addr::UNSPECIFIED, 96, "ipv4-compatible (deprecated)"),
    (Ipv6Addr::new(0x0100, 0, 0, 0, 0, 0, 0, 0), 64, "discard"),
    (
        Ipv6Addr::new(0x2001, 0x0db8, 0, 0, 0, 0, 0, 0),
        32,
        "documentation",
    ),
    (METADATA_V6, 128, "cloud metadata"),
    (
        Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0),
        7,
        "unique local (private)",
    ),
    (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10, "link-local"),
    // Deprecated site-local addresses (RFC 3879), still routed privately by some hosts.
    (
        Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0),
        10,
        "site-local (deprecated)",
    ),
    (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8, "multicast"),
];

/// The NAT64 well-known prefix `64:ff9b::/96` (RFC 6052): the last 32 bits are an IPv4
/// address that a translator reaches on the client's behalf.
const NAT64_PREFIX: Ipv6Addr = Ipv6Addr::new(0x0064, 0xff9b, 0, 0, 0, 0, 0, 0);

/// The special range an address falls in, or `None` for an ordinary public address.
///
/// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) are classified as their IPv4 address;
/// a NAT64 address (`64:ff9b::a.b.c.d`) is special when its embedded IPv4 address is.
///
/// ```
/// use tierbox_policy::hosts::special_range;
///
/// assert_eq!(special_range("127.0.0.1".parse().unwrap()), Some("loopback"));
/// assert_eq!(special_range("169.254.169.254".parse().unwrap()), Some("cloud metadata"));
/// assert_eq!(special_range("::ffff:10.0.0.1".parse().unwrap()), Some("private"));
/// assert_eq!(special_range("93.184.215.14".parse().unwrap()), None);
/// ```
pub fn special_range(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

fn special_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let bits = u32::from(ip);
    V4_RANGES.iter().find_map(|(net, len, name)| {
        let mask = u32::MAX.checked_shl(32 - u32::from(*len)).unwrap_or(0);
        (bits & mask == u32::from(*net)).then_some(*name)
    })
}

fn special_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return special_v4(v4);
    }
    let bits = u128::from(ip);
    let nat64_mask = u128::MAX << 32;
    if bits & nat64_mask == u128::from(NAT64_PREFIX) {
        // Truncation keeps exactly the embedded address (the low 32 bits).
        return special_v4(Ipv4Addr::from(bits as u32));
    }
    V6_RANGES.iter().find_map(|(net, len, name)| {
        let mask = u128::MAX.checked_shl(128 - u32::from(*len)).unwrap_or(0);
        (bits & mask == u128::from(*net)).then_some(*name)
    })
}

/// `a` or `an` before a range name, for messages ("a loopback address", "an
/// unspecified/this network address").
pub fn article(range: &str) -> &'static str {
    let vowel = range.starts_with(['a', 'e', 'i', 'o', 'u']);
    // "unique" starts with a consonant sound.
    if vowel && !range.starts_with("uni") {
        "an"
    } else {
        "a"
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn range(ip: &str) -> Option<&'static str> {
        special_range(ip.parse().unwrap_or_else(|e| panic!("{ip}: {e}")))
    }

    #[test]
    fn ipv4_ranges() {
        let cases = [
            ("0.0.0.0", "unspecified/this network"),
            ("0.255.1.2", "unspecified/this network"),
            ("10.0.0.1", "private"),
            ("10.255.255.255", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("169.254.169.254", "cloud metadata"),
            ("169.254.0.1", "link-local"),
            ("169.254.169.253", "link-local"),
            ("100.100.100.200", "cloud metadata"),
            ("100.64.0.1", "shared (carrier-grade nat)"),
            ("100.127.255.255", "shared (carrier-grade nat)"),
            ("192.0.0.8", "ietf protocol assignments"),
            ("192.0.2.1", "documentation"),
            ("198.51.100.7", "documentation"),
            ("203.0.113.255", "documentation"),
            ("198.18.0.1", "benchmarking"),
            ("198.19.255.255", "benchmarking"),
            ("224.0.0.1", "multicast"),
            ("239.255.255.250", "multicast"),
            ("240.0.0.1", "reserved"),
            ("254.1.1.1", "reserved"),
            ("255.255.255.255", "broadcast"),
        ];
        for (ip, expected) in cases {
            assert_eq!(range(ip), Some(expected), "{ip}");
        }
    }

    #[test]
    fn ordinary_ipv4_addresses_are_not_special() {
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.215.14",
            "9.255.255.255",
            "11.0.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "126.255.255.255",
            "128.0.0.0",
            "169.253.255.255",
            "169.255.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "192.0.1.0",
            "192.0.3.0",
            "192.167.255.255",
            "192.169.0.0",
            "198.17.255.255",
            "198.20.0.0",
            "198.51.101.0",
            "203.0.114.0",
            "223.255.255.255",
        ] {
            assert_eq!(range(ip), None, "{ip}");
        }
    }

    #[test]
    fn ipv6_ranges() {
        let cases = [
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("fd00:ec2::254", "cloud metadata"),
            ("fd00:ec2::253", "unique local (private)"),
            ("fc00::1", "unique local (private)"),
            ("fdff:ffff::1", "unique local (private)"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("fec0::1", "site-local (deprecated)"),
            ("feff::1", "site-local (deprecated)"),
            ("ff02::1", "multicast"),
            ("ff0e::1", "multicast"),
            ("2001:db8::1", "documentation"),
            ("2001:db8:ffff::1", "documentation"),
            ("100::1", "discard"),
            ("100::ffff:ffff:ffff:ffff", "discard"),
            ("::7f00:1", "ipv4-compatible (deprecated)"),
        ];
        for (ip, expected) in cases {
            assert_eq!(range(ip), Some(expected), "{ip}");
        }
    }

    #[test]
    fn ipv6_addresses_embedding_ipv4_are_classified_by_the_ipv4_address() {
        assert_eq!(range("::ffff:127.0.0.1"), Some("loopback"));
        assert_eq!(range("::ffff:169.254.169.254"), Some("cloud metadata"));
        assert_eq!(range("::ffff:192.168.0.1"), Some("private"));
        assert_eq!(range("::ffff:8.8.8.8"), None);
        assert_eq!(range("64:ff9b::127.0.0.1"), Some("loopback"));
        assert_eq!(range("64:ff9b::10.1.2.3"), Some("private"));
        assert_eq!(range("64:ff9b::169.254.169.254"), Some("cloud metadata"));
        assert_eq!(
            range("64:ff9b::8.8.8.8"),
            None,
            "nat64 of a public address is public"
        );
    }

    #[test]
    fn ordinary_ipv6_addresses_are_not_special() {
        for ip in [
            "2606:4700:4700::1111",
            "2a00:1450:4001::1",
            "2001:db9::1",
            "2001:db7::1",
            "101::1",
            "100:0:0:1::1",
            "fbff::1",
            "fe00::1",
            "fe7f::1",
            "64:ff9b:1::1",
            "::1:0:0:1",
        ] {
            assert_eq!(range(ip), None, "{ip}");
        }
    }

    #[test]
    fn articles() {
        assert_eq!(article("loopback"), "a");
        assert_eq!(article("unspecified/this network"), "an");
        assert_eq!(article("ietf protocol assignments"), "an");
        assert_eq!(article("unique local (private)"), "a");
    }
}
