//! Reach across a run's network boundary other than through the egress proxy: ports the
//! program listens on inside the sandbox, published on the host's loopback
//! (`egress.publish`), and the host loopback ports the program may connect to
//! (`egress.host_ports`).
//!
//! Both need the sandbox's own network namespace (Tier C), where the supervisor relays
//! each connection across: a published port is reachable only on `127.0.0.1` of the
//! host, a host port only at `127.0.0.1:PORT` inside the sandbox — over TCP, and nothing
//! else on the host. Every key for what crosses the run's network boundary lives in
//! `[egress]`, beside the outbound rules.
//!
//! ```
//! use tierbox_policy::reach::PublishedPort;
//!
//! let p: PublishedPort = "127.0.0.1:8080:8000".parse().unwrap();
//! assert_eq!((p.host_port, p.sandbox_port), (8080, 8000));
//! assert_eq!(p.to_string(), "127.0.0.1:8080:8000");
//! assert!("0.0.0.0:8080:8000".parse::<PublishedPort>().is_err());
//! ```

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Most entries in `egress.publish`: each is a listening socket on the host held for the
/// run's life, and a relay task per connection.
pub const MAX_PUBLISHED_PORTS: usize = 16;

/// Most entries in `egress.host_ports`: each is a listener inside the sandbox and a
/// relay per connection.
pub const MAX_HOST_PORTS: usize = 16;

/// The port the egress proxy listens on inside a Tier C sandbox (`127.0.0.1`). Fixed,
/// since the namespace is private to the run; 3128 is the conventional proxy port. No
/// host port may take it inside, and it is never published: on the host's loopback every
/// local user could use the run's proxy (and its credentials).
pub const SANDBOX_PROXY_PORT: u16 = 3128;

/// The only host address a port is published on: the loopback. Another address would
/// put the program on the host's network for every machine that reaches it.
pub const PUBLISH_ADDRESS: &str = "127.0.0.1";

/// A port the program listens on inside the sandbox, reachable on the host at
/// `127.0.0.1:host_port` (written `127.0.0.1:HOSTPORT:SANDBOXPORT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PublishedPort {
    /// The port on the host's loopback.
    pub host_port: u16,
    /// The port the program listens on, at `127.0.0.1` inside the sandbox.
    pub sandbox_port: u16,
}

/// Why a `publish` entry cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    /// Not three parts.
    #[error("write it as 127.0.0.1:HOSTPORT:SANDBOXPORT")]
    Shape,
    /// A host address other than the loopback.
    #[error(
        "the host address {address:?} is not 127.0.0.1: a port is only ever published on the host's loopback"
    )]
    Address {
        /// The address given.
        address: String,
    },
    /// A port that is not 1 to 65535.
    #[error("the {which} port {value:?} is not a number from 1 to 65535")]
    Port {
        /// `host` or `sandbox`.
        which: &'static str,
        /// What was given.
        value: String,
    },
    /// The egress proxy's port inside the sandbox.
    #[error(
        "the sandbox port {SANDBOX_PROXY_PORT} is the egress proxy's, which is never published"
    )]
    ProxyPort,
}

impl FromStr for PublishedPort {
    type Err = PublishError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split(':').collect();
        let [address, host, sandbox] = parts.as_slice() else {
            return Err(PublishError::Shape);
        };
        if *address != PUBLISH_ADDRESS {
            return Err(PublishError::Address {
                address: (*address).to_owned(),
            });
        }
        let port = |which, value: &str| match value.parse::<u16>() {
            Ok(p) if p > 0 && !value.starts_with(['+', '0']) => Ok(p),
            _ => Err(PublishError::Port {
                which,
                value: value.to_owned(),
            }),
        };
        let published = PublishedPort {
            host_port: port("host", host)?,
            sandbox_port: port("sandbox", sandbox)?,
        };
        if published.sandbox_port == SANDBOX_PROXY_PORT {
            return Err(PublishError::ProxyPort);
        }
        Ok(published)
    }
}

impl fmt::Display for PublishedPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PUBLISH_ADDRESS}:{}:{}",
            self.host_port, self.sandbox_port
        )
    }
}

/// Why an `egress.host_ports` list cannot be used: the first bad entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostPortError {
    /// Port 0.
    #[error("0 is not a port")]
    Zero,
    /// The egress proxy's port inside the sandbox.
    #[error("{SANDBOX_PROXY_PORT} is the egress proxy's port inside the sandbox")]
    ProxyPort,
    /// Listed twice.
    #[error("{0} is listed twice")]
    Duplicate(u16),
    /// Too many.
    #[error("{0} entries, the limit is {MAX_HOST_PORTS}")]
    TooMany(usize),
}

/// Checks an `egress.host_ports` list.
///
/// ```
/// use tierbox_policy::reach::check_host_ports;
/// assert!(check_host_ports(&[5432, 11434]).is_ok());
/// assert!(check_host_ports(&[5432, 5432]).is_err());
/// assert!(check_host_ports(&[3128]).is_err());
/// ```
pub fn check_host_ports(ports: &[u16]) -> Result<(), HostPortError> {
    if ports.len() > MAX_HOST_PORTS {
        return Err(HostPortError::TooMany(ports.len()));
    }
    for (i, &p) in ports.iter().enumerate() {
        match p {
            0 => return Err(HostPortError::Zero),
            SANDBOX_PROXY_PORT => return Err(HostPortError::ProxyPort),
            _ if ports[..i].contains(&p) => return Err(HostPortError::Duplicate(p)),
            _ => {}
        }
    }
    Ok(())
}

/// Parses a list of `publish` entries: each well formed, no host port or sandbox port
/// twice, at most [`MAX_PUBLISHED_PORTS`]. The error names the entry.
///
/// ```
/// use tierbox_policy::reach::parse_published;
/// let ports = parse_published(&["127.0.0.1:8080:8000".to_owned()]).unwrap();
/// assert_eq!(ports[0].sandbox_port, 8000);
/// let twice = ["127.0.0.1:8080:8000".to_owned(), "127.0.0.1:8080:9000".to_owned()];
/// assert!(parse_published(&twice).is_err());
/// ```
pub fn parse_published(entries: &[String]) -> Result<Vec<PublishedPort>, (String, String)> {
    if entries.len() > MAX_PUBLISHED_PORTS {
        return Err((
            format!("{} entries", entries.len()),
            format!("the limit is {MAX_PUBLISHED_PORTS}"),
        ));
    }
    let mut out: Vec<PublishedPort> = Vec::with_capacity(entries.len());
    for entry in entries {
        let p: PublishedPort = entry
            .parse()
            .map_err(|e: PublishError| (entry.clone(), e.to_string()))?;
        if let Some(other) = out
            .iter()
            .find(|o| o.host_port == p.host_port || o.sandbox_port == p.sandbox_port)
        {
            return Err((
                entry.clone(),
                format!("it shares a port with {other}: each port is published once"),
            ));
        }
        out.push(p);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_entries_are_loopback_only_with_real_ports() {
        for bad in [
            "8080:8000",
            "127.0.0.1:8080",
            "127.0.0.1:8080:8000:1",
            "0.0.0.0:8080:8000",
            "localhost:8080:8000",
            "127.0.0.2:8080:8000",
            "[::1]:8080:8000",
            "127.0.0.1:0:8000",
            "127.0.0.1:8080:0",
            "127.0.0.1:65536:8000",
            "127.0.0.1:+80:8000",
            "127.0.0.1:080:8000",
            "127.0.0.1: 80:8000",
            "127.0.0.1:8080:3128",
            "",
        ] {
            assert!(bad.parse::<PublishedPort>().is_err(), "{bad:?}");
        }
        let p: PublishedPort = "127.0.0.1:1:65535".parse().unwrap();
        assert_eq!((p.host_port, p.sandbox_port), (1, 65535));
        let e = "0.0.0.0:1:2".parse::<PublishedPort>().unwrap_err();
        assert!(e.to_string().contains("loopback"), "{e}");
    }

    #[test]
    fn host_ports_are_bounded_unique_and_not_the_proxy() {
        assert_eq!(check_host_ports(&[0]), Err(HostPortError::Zero));
        assert_eq!(
            check_host_ports(&[1, 2, 1]),
            Err(HostPortError::Duplicate(1))
        );
        let many: Vec<u16> = (1..=17).collect();
        assert_eq!(check_host_ports(&many), Err(HostPortError::TooMany(17)));
        assert!(check_host_ports(&many[..16]).is_ok());
    }
}
