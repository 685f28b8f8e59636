//! The check every protocol shares: allowlist, resolve once, classify every address,
//! dial exactly a checked address.

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, SocketAddr};

use tierbox_policy::hosts::{CanonicalHost, HostPattern};
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::{MAX_DIAL_ATTEMPTS, ProxyConfig, Verdict};
use tierbox_policy::hosts::{article, special_range};

/// A connected destination.
#[derive(Debug)]
pub(crate) struct Dialed {
    pub(crate) stream: TcpStream,
    pub(crate) address: SocketAddr,
    pub(crate) message: String,
}

/// Why a request was not connected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) verdict: Verdict,
    pub(crate) message: String,
    pub(crate) address: Option<SocketAddr>,
}

/// The static resolver table with canonical keys (a key that is not a valid host name is
/// kept as written and can never match).
pub(crate) fn canonical_resolve(
    resolve: &BTreeMap<String, Vec<IpAddr>>,
) -> BTreeMap<String, Vec<IpAddr>> {
    resolve
        .iter()
        .map(|(name, ips)| {
            let key = CanonicalHost::parse(name).map_or_else(|_| name.clone(), |h| h.to_string());
            (key, ips.clone())
        })
        .collect()
}

/// Checks `host:port` against `config` and connects to the first usable address.
pub(crate) async fn check_and_dial(
    config: &ProxyConfig,
    host: &CanonicalHost,
    port: u16,
) -> Result<Dialed, Refusal> {
    check_allowlist(&config.allow, host, port)?;
    let candidates = resolve(config, host, port).await?;
    let usable = usable_addresses(&config.allow, host, &candidates)?;
    dial(config, host, port, &usable).await
}

/// Step 1: the host and port match an allowlist entry.
pub(crate) fn check_allowlist(
    allow: &[HostPattern],
    host: &CanonicalHost,
    port: u16,
) -> Result<(), Refusal> {
    if allow.iter().any(|p| p.matches_host(host, Some(port))) {
        return Ok(());
    }
    let ports: Vec<String> = allow
        .iter()
        .filter(|p| p.matches_host(host, p.port()))
        .filter_map(|p| p.port().map(|port| port.to_string()))
        .collect();
    let message = if ports.is_empty() {
        format!("egress denied: host {host} is not in the allowlist")
    } else {
        format!(
            "egress denied: host {host} is in the allowlist only for port {}, not {port}",
            ports.join(", ")
        )
    };
    Err(Refusal {
        verdict: Verdict::NotAllowlisted,
        message,
        address: None,
    })
}

/// Step 2: the addresses to consider, resolved once. IPv4-mapped IPv6 answers are
/// turned into their IPv4 address, so the classification and the dial agree.
async fn resolve(
    config: &ProxyConfig,
    host: &CanonicalHost,
    port: u16,
) -> Result<Vec<SocketAddr>, Refusal> {
    let failed = |why: String| Refusal {
        verdict: Verdict::ResolveFailed,
        message: format!("egress failed: could not resolve {host}: {why}"),
        address: None,
    };
    let name = match host {
        CanonicalHost::Ip(ip) => return Ok(vec![SocketAddr::new(ip.to_canonical(), port)]),
        CanonicalHost::Name(name) => name,
    };
    let ips: Vec<IpAddr> = if let Some(ips) = config.resolve.get(name) {
        ips.clone()
    } else {
        match timeout(
            config.connect_timeout,
            tokio::net::lookup_host((name.as_str(), port)),
        )
        .await
        {
            Err(_) => {
                return Err(failed(format!(
                    "no answer within {} ms",
                    config.connect_timeout.as_millis()
                )));
            }
            Ok(Err(e)) => return Err(failed(io_reason(&e))),
            Ok(Ok(addrs)) => addrs.map(|a| a.ip()).collect(),
        }
    };
    if ips.is_empty() {
        return Err(failed("the name has no addresses".to_owned()));
    }
    Ok(ips
        .into_iter()
        .map(|ip| SocketAddr::new(ip.to_canonical(), port))
        .collect())
}

/// Step 3: every candidate in a special range needs an allowlist entry naming it.
pub(crate) fn usable_addresses(
    allow: &[HostPattern],
    host: &CanonicalHost,
    candidates: &[SocketAddr],
) -> Result<Vec<SocketAddr>, Refusal> {
    let mut usable = Vec::with_capacity(candidates.len());
    let mut first_refused = None;
    for addr in candidates {
        let ip = addr.ip().to_canonical();
        match special_range(ip) {
            None => usable.push(*addr),
            Some(range) => {
                let as_host = CanonicalHost::Ip(ip);
                let listed = allow
                    .iter()
                    .any(|p| p.is_address() && p.matches_host(&as_host, Some(addr.port())));
                if listed {
                    usable.push(*addr);
                } else if first_refused.is_none() {
                    first_refused = Some((*addr, range));
                }
            }
        }
    }
    if !usable.is_empty() {
        return Ok(usable);
    }
    let Some((addr, range)) = first_refused else {
        return Err(Refusal {
            verdict: Verdict::ResolveFailed,
            message: format!("egress failed: could not resolve {host}: the name has no addresses"),
            address: None,
        });
    };
    let others = candidates.len() - 1;
    let also = match others {
        0 => String::new(),
        1 => " (and its other address is special too)".to_owned(),
        n => format!(" (and its {n} other addresses are special too)"),
    };
    Err(Refusal {
        verdict: Verdict::SpecialAddress,
        message: format!(
            "egress denied: {host} resolves to {ip}, {a} {range} address, which the allowlist does not list{also}",
            ip = addr.ip(),
            a = article(range),
        ),
        address: Some(addr),
    })
}

/// Step 4: connect to the checked addresses in order, never re-resolving.
async fn dial(
    config: &ProxyConfig,
    host: &CanonicalHost,
    port: u16,
    usable: &[SocketAddr],
) -> Result<Dialed, Refusal> {
    let mut last_error = None;
    let mut all_timed_out = true;
    let tried = usable.len().min(MAX_DIAL_ATTEMPTS);
    for addr in usable.iter().take(MAX_DIAL_ATTEMPTS) {
        match timeout(config.connect_timeout, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                // Latency matters more than segment count for interactive protocols;
                // a failure here only costs performance.
                let _ = stream.set_nodelay(true);
                return Ok(Dialed {
                    stream,
                    address: *addr,
                    message: format!(
                        "egress allowed: {} via {}",
                        host.with_port(Some(port)),
                        addr.ip()
                    ),
                });
            }
            Ok(Err(e)) => {
                all_timed_out = false;
                last_error = Some((*addr, io_reason(&e)));
            }
            Err(_) => {
                last_error = Some((
                    *addr,
                    format!(
                        "no connection within {} ms",
                        config.connect_timeout.as_millis()
                    ),
                ));
            }
        }
    }
    let (addr, why) = last_error.unwrap_or_else(|| {
        (
            SocketAddr::new(IpAddr::from([0, 0, 0, 0]), port),
            "no address to try".to_owned(),
        )
    });
    let attempts = if tried < usable.len() {
        format!(" (tried {tried} of {} addresses)", usable.len())
    } else if tried > 1 {
        format!(" (tried {tried} addresses)")
    } else {
        String::new()
    };
    Err(Refusal {
        verdict: if all_timed_out {
            Verdict::ConnectTimeout
        } else {
            Verdict::ConnectFailed
        },
        message: format!(
            "egress failed: could not connect to {} at {addr}: {why}{attempts}",
            host.with_port(Some(port))
        ),
        address: Some(addr),
    })
}

/// The error's message starting lowercase ("connection refused (os error 111)"), to sit
/// inside a sentence.
pub(crate) fn io_reason(e: &io::Error) -> String {
    let text = e.to_string();
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => format!("{:?}", e.kind()).to_lowercase(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn allow(patterns: &[&str]) -> Vec<HostPattern> {
        patterns
            .iter()
            .map(|p| HostPattern::parse(p).unwrap())
            .collect()
    }

    fn host(h: &str) -> CanonicalHost {
        CanonicalHost::parse(h).unwrap()
    }

    fn addrs(list: &[&str]) -> Vec<SocketAddr> {
        list.iter().map(|a| a.parse().unwrap()).collect()
    }

    #[test]
    fn the_allowlist_is_matched_with_the_port() {
        let allow = allow(&["example.com:443", "*.example.org"]);
        assert!(check_allowlist(&allow, &host("example.com"), 443).is_ok());
        assert!(check_allowlist(&allow, &host("a.example.org"), 22).is_ok());
        let refusal = check_allowlist(&allow, &host("example.com"), 80).unwrap_err();
        assert_eq!(refusal.verdict, Verdict::NotAllowlisted);
        assert_eq!(
            refusal.message,
            "egress denied: host example.com is in the allowlist only for port 443, not 80"
        );
        let refusal = check_allowlist(&allow, &host("example.org"), 443).unwrap_err();
        assert_eq!(
            refusal.message,
            "egress denied: host example.org is not in the allowlist"
        );
    }

    #[test]
    fn special_addresses_need_an_address_entry() {
        let name = host("app.test");
        let names_only = allow(&["app.test"]);
        let refusal = usable_addresses(&names_only, &name, &addrs(&["127.0.0.1:443"])).unwrap_err();
        assert_eq!(refusal.verdict, Verdict::SpecialAddress);
        assert_eq!(
            refusal.message,
            "egress denied: app.test resolves to 127.0.0.1, a loopback address, which the allowlist does not list"
        );
        assert_eq!(refusal.address, Some("127.0.0.1:443".parse().unwrap()));

        let with_cidr = allow(&["app.test", "127.0.0.0/8"]);
        assert_eq!(
            usable_addresses(&with_cidr, &name, &addrs(&["127.0.0.1:443"])).unwrap(),
            addrs(&["127.0.0.1:443"])
        );
        let with_port = allow(&["app.test", "127.0.0.1:8443"]);
        assert!(usable_addresses(&with_port, &name, &addrs(&["127.0.0.1:443"])).is_err());
    }

    #[test]
    fn special_addresses_are_skipped_and_public_ones_kept_in_order() {
        let candidates = addrs(&["10.0.0.1:80", "93.184.215.14:80", "[::1]:80", "1.1.1.1:80"]);
        let usable =
            usable_addresses(&allow(&["app.test"]), &host("app.test"), &candidates).unwrap();
        assert_eq!(usable, addrs(&["93.184.215.14:80", "1.1.1.1:80"]));
    }

    #[test]
    fn all_special_names_the_first_refused() {
        let candidates = addrs(&["169.254.169.254:80", "[fd00:ec2::254]:80"]);
        let refusal =
            usable_addresses(&allow(&["meta.test"]), &host("meta.test"), &candidates).unwrap_err();
        assert_eq!(
            refusal.message,
            "egress denied: meta.test resolves to 169.254.169.254, a cloud metadata address, which the allowlist does not list (and its other address is special too)"
        );
    }

    #[test]
    fn io_reasons_start_lowercase() {
        let e = io::Error::from(io::ErrorKind::ConnectionRefused);
        assert_eq!(io_reason(&e), "connection refused");
        assert_eq!(io_reason(&io::Error::other("Boom")), "boom");
    }
}
