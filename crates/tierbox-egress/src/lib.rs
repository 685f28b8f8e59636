//! The per-run filtering egress proxy: HTTP `CONNECT`, plain HTTP and SOCKS5 on one
//! listener, matched against the policy's egress allowlist (SPEC §4).
//!
//! In `egress.mode = "strict"` with a non-empty allowlist the sandbox can reach nothing
//! but this proxy (the kernel enforces that elsewhere), so the proxy is the only way out
//! and decides which destinations are reachable. Its client, the sandboxed program, is
//! hostile.
//!
//! Invariants this crate keeps:
//! - **one decision per client connection, made once.** The request head (HTTP) or the
//!   handshake (SOCKS5) is read, the requested host is canonicalised
//!   ([`CanonicalHost::parse`](tierbox_policy::hosts::CanonicalHost::parse)) and matched
//!   against [`ProxyConfig::allow`]; after that the proxy never looks at the bytes again.
//!   A `CONNECT` written inside an allowed tunnel goes to the destination as data, so a
//!   relayed request cannot reach a second host through this proxy;
//! - **the name is resolved once and the checked address is the one dialed.** Every
//!   address a name resolves to is classified ([`special_range`]); loopback, private,
//!   link-local, cloud-metadata and the other special ranges are usable only when an
//!   allowlist entry that names *addresses* (an IP literal or CIDR) covers them, so an
//!   allowed name that resolves to `127.0.0.1` or `169.254.169.254` is refused (the
//!   DNS-rebinding defence);
//! - **every client connection is bounded**: [`MAX_REQUEST_HEAD_BYTES`] of head within
//!   [`REQUEST_HEAD_TIMEOUT_MS`], then [`ProxyConfig::connect_timeout`] per dial attempt
//!   (at most [`MAX_DIAL_ATTEMPTS`]), then a tunnel closed after
//!   [`ProxyConfig::idle_timeout`] without traffic; at most [`ProxyConfig::max_tunnels`]
//!   are served at once, and the decision log keeps at most [`MAX_DECISIONS`] entries;
//! - nothing a client sends can panic the proxy, and [`Proxy::finish`] (or dropping the
//!   [`Proxy`]) stops every task it started.
//!
//! Not covered (non-goals):
//! - the proxy does not look inside tunnels: a client allowed to reach `cdn.example:443`
//!   may speak any protocol there, and may use TLS SNI or an HTTP `Host` naming another
//!   tenant of the same front end (domain fronting). The allowlist grants reachability
//!   of hosts, not of content;
//! - it does not limit bandwidth or the total bytes moved, and it does not authenticate
//!   its clients (any process that can reach the listener can use it);
//! - answers from the system resolver are trusted as they are at the time of the check
//!   (the check is applied to them, and only they are dialed);
//! - no UDP: SOCKS5 `UDP ASSOCIATE` and `BIND` are refused, and SOCKS4 is refused;
//! - the caps protect the supervisor, not the client's own service: one proxy serves one
//!   run, so a client that fills [`ProxyConfig::max_tunnels`] with stalled connections
//!   only denies itself until [`REQUEST_HEAD_TIMEOUT_MS`] or the idle timeout frees them.
//!
//! ```
//! use std::collections::BTreeMap;
//!
//! use tierbox_egress::{Proxy, ProxyConfig};
//! use tierbox_policy::hosts::HostPattern;
//!
//! #[tokio::main(flavor = "current_thread")]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let allow = vec![HostPattern::parse("*.crates.io:443")?, HostPattern::parse("crates.io:443")?];
//!     // The supervisor binds the listener inside the sandbox's network namespace.
//!     let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
//!     let proxy = Proxy::start(listener, ProxyConfig::new(allow, BTreeMap::new()))?;
//!     println!("HTTPS_PROXY=http://{}", proxy.local_addr()?);
//!     // ... run the sandboxed program with the proxy variables set ...
//!     let log = proxy.finish().await;
//!     for decision in &log.decisions {
//!         println!("{}", decision.message);
//!     }
//!     assert!(log.decisions.is_empty() && log.dropped == 0);
//!     Ok(())
//! }
//! ```
#![forbid(unsafe_code)]

mod check;
mod http;
mod inbound;
mod log;
pub mod reach;
mod server;
mod socks;
pub mod tls;
mod tunnel;

#[cfg(test)]
mod test_support;

#[cfg(test)]
mod http_tests;
#[cfg(test)]
mod server_tests;
#[cfg(test)]
mod socks_tests;
#[cfg(test)]
mod tunnel_tests;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tierbox_policy::hosts::HostPattern;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use tierbox_policy::hosts::special_range;

/// Default time allowed for one TCP connection attempt to a destination, in
/// milliseconds ([`ProxyConfig::connect_timeout`]); also bounds a system-resolver lookup.
/// Protects the tunnel slots from destinations that never answer (a black-holed
/// address holds a slot for at most this long per attempt).
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 10_000;

/// Default idle timeout of a tunnel, in milliseconds ([`ProxyConfig::idle_timeout`]): a
/// tunnel in which no byte moved in either direction for this long is closed. Protects
/// the tunnel slots from connections a client (or destination) forgot or holds open on
/// purpose; it does not bound a tunnel that keeps trickling bytes.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 300_000;

/// Default number of client connections served at once ([`ProxyConfig::max_tunnels`]),
/// from accept until close, handshake included. Protects the supervisor's memory (each
/// connection holds a [`MAX_REQUEST_HEAD_BYTES`] buffer while reading its request and
/// two [`COPY_BUFFER_BYTES`] buffers while tunnelling — on Linux two pipes of that size,
/// holding references to the sockets' pages: 32 MiB at most for a run) and file
/// descriptors.
pub const DEFAULT_MAX_TUNNELS: usize = 64;

/// Decisions kept per run, in entries. Later decisions are counted in
/// [`EgressLog::dropped`] only. Protects the supervisor's memory and the run's outcome
/// record from a client that opens connections in a loop.
pub const MAX_DECISIONS: usize = 1024;

/// Largest HTTP request head (request line, headers and the blank line), in bytes.
/// A bigger head is answered with `431 Request Header Fields Too Large`. Protects memory
/// per connection; the body is never buffered (it streams through the tunnel).
pub const MAX_REQUEST_HEAD_BYTES: usize = 32 * 1024;

/// Time a client has, from accept, to send its HTTP request head or finish the SOCKS5
/// handshake, in milliseconds; the connection is then closed. Protects the connection
/// slots from clients that connect and stall (slowloris).
pub const REQUEST_HEAD_TIMEOUT_MS: u64 = 10_000;

/// Size of each of the two buffers a tunnel moves bytes through (one per direction), in
/// bytes; allocated once per tunnel, never per chunk. On Linux they are pipes that
/// `splice(2)` fills from one socket and empties into the other, so no byte passes
/// through user space (a 10 MiB download: a third less proxy CPU than copying, 3.2–3.8
/// ms against 4.8–6.2); elsewhere, buffers that `recv`/`send` copy through. The cost is
/// almost all kernel time per call (measured: 95% of the samples), so fewer, larger
/// calls matter: 256 KiB moved a 10 MiB download 15–35% faster than 64 KiB; 1 MiB
/// gained nothing more (`bench/egress.sh`).
pub const COPY_BUFFER_BYTES: usize = 256 * 1024;

/// Addresses tried, in order, for one request when a connection attempt fails, in
/// attempts. Together with [`ProxyConfig::connect_timeout`] this bounds how long one
/// request can hold a slot while dialing (a name with twenty black-holed addresses would
/// otherwise hold it for twenty timeouts).
pub const MAX_DIAL_ATTEMPTS: usize = 4;

/// Client connections over [`ProxyConfig::max_tunnels`] that are still read (request
/// head or SOCKS5 handshake, under the same limits) so that the `503` / SOCKS `0x01`
/// refusal and its [`Decision`] name the requested host, in connections. Protects memory
/// and time from a connection flood: a connection beyond both caps is closed at once,
/// before its protocol is known, and only counted in [`EgressLog::dropped`].
pub const MAX_REFUSING_CONNECTIONS: usize = 16;

/// Time the proxy keeps reading (and discarding) from a client after refusing it, in
/// milliseconds, so that closing a socket with unread bytes does not reset the
/// connection before the client has read the refusal. Bounds how long a refused client
/// holds its slot.
pub const CLOSE_DRAIN_TIMEOUT_MS: u64 = 1_000;

/// Bytes the proxy reads and discards from a refused client before closing, at most
/// (see [`CLOSE_DRAIN_TIMEOUT_MS`]).
pub const CLOSE_DRAIN_BYTES: usize = 64 * 1024;

/// What the proxy allows and how long it waits.
///
/// [`ProxyConfig::new`] gives the defaults: nothing but `allow` is reachable, special
/// addresses (see [`special_range`]) only through allowlist entries that name addresses,
/// [`DEFAULT_CONNECT_TIMEOUT_MS`], [`DEFAULT_IDLE_TIMEOUT_MS`] and
/// [`DEFAULT_MAX_TUNNELS`].
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The egress allowlist. A request is allowed when its host and port match an entry;
    /// an address in a special range is dialed only when an entry that names addresses
    /// ([`HostPattern::is_address`]) matches it.
    pub allow: Vec<HostPattern>,
    /// Static name → addresses (like curl `--resolve`); keys are canonical host names
    /// (lowercase, no trailing dot). Names not here go through the system resolver
    /// ([`tokio::net::lookup_host`]). Addresses from here are checked like any other.
    pub resolve: BTreeMap<String, Vec<IpAddr>>,
    /// Time allowed for one connection attempt, and for one system-resolver lookup.
    pub connect_timeout: Duration,
    /// A tunnel with no bytes moving in either direction for this long is closed.
    pub idle_timeout: Duration,
    /// Client connections served at once; more are refused without waiting
    /// ([`Verdict::TooManyTunnels`]).
    pub max_tunnels: usize,
    /// The hosts whose TLS the proxy terminates (their credential and request rules), and
    /// the run's CA and upstream trust; `None`: every allowed host is a plain tunnel.
    pub terminate: Option<Arc<tls::Termination>>,
}

impl ProxyConfig {
    /// A configuration allowing exactly `allow`, with `resolve` as the static resolver
    /// table and the default timeouts and cap ([`DEFAULT_CONNECT_TIMEOUT_MS`],
    /// [`DEFAULT_IDLE_TIMEOUT_MS`], [`DEFAULT_MAX_TUNNELS`]).
    pub fn new(allow: Vec<HostPattern>, resolve: BTreeMap<String, Vec<IpAddr>>) -> Self {
        Self {
            allow,
            resolve,
            connect_timeout: Duration::from_millis(DEFAULT_CONNECT_TIMEOUT_MS),
            idle_timeout: Duration::from_millis(DEFAULT_IDLE_TIMEOUT_MS),
            max_tunnels: DEFAULT_MAX_TUNNELS,
            terminate: None,
        }
    }
}

/// How a client asked for a destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// HTTP `CONNECT host:port` (a tunnel, typically for TLS).
    Connect,
    /// A plain HTTP request forwarded by the proxy (absolute-form or origin-form).
    Http,
    /// SOCKS5 `CONNECT` (SOCKS4 attempts are recorded here too, as refused).
    Socks5,
}

/// The outcome of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Connected; bytes flowed (or could flow) to the destination.
    Allowed,
    /// The host (and port) matches no allowlist entry.
    NotAllowlisted,
    /// Every address the host resolved to is in a special range that no address entry
    /// of the allowlist covers.
    SpecialAddress,
    /// The host name did not resolve (or resolved to nothing).
    ResolveFailed,
    /// Every connection attempt failed.
    ConnectFailed,
    /// Every connection attempt timed out.
    ConnectTimeout,
    /// The proxy was already serving [`ProxyConfig::max_tunnels`] connections.
    TooManyTunnels,
    /// The request could not be parsed or is not one the proxy serves (malformed or
    /// incomplete head, `https://` without `CONNECT`, SOCKS4, no acceptable SOCKS5
    /// authentication method).
    BadRequest,
    /// A SOCKS5 command other than `CONNECT` (`BIND`, `UDP ASSOCIATE`).
    UnsupportedCommand,
    /// A request to a host whose TLS the proxy terminates was refused: the host's
    /// request rules do not allow its method and path, or it came as plain HTTP (a host
    /// with rules is reached over TLS only).
    RequestRefused,
    /// The TLS of a terminated connection failed: the upstream's certificate did not
    /// verify for the host (fail closed: nothing was sent), or the client's handshake
    /// failed (it does not trust the run's CA).
    TlsFailed,
}

impl Verdict {
    /// Whether the request was allowed and connected.
    pub fn is_allowed(self) -> bool {
        matches!(self, Self::Allowed)
    }
}

/// One allow or deny, as recorded in the run's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Decision {
    /// How the client asked.
    pub protocol: Protocol,
    /// The requested host in canonical form (a name, or an IP literal without brackets);
    /// `""` when the request was unparseable.
    pub host: String,
    /// The requested port; `0` when the request was unparseable.
    pub port: u16,
    /// The outcome.
    pub verdict: Verdict,
    /// Equal to `verdict.is_allowed()`.
    pub allowed: bool,
    /// One sentence the agent can act on. It starts with `egress allowed:`, `egress
    /// denied:` (the allowlist, a special address, a request the proxy does not serve, or
    /// one a terminated host's rules refuse), `egress failed:` (resolution, connection, or
    /// a terminated connection's TLS) or `egress refused:` (the
    /// tunnel cap), e.g. `egress denied: host example.org is not in the allowlist`.
    /// Client-supplied text in it is escaped and shortened.
    pub message: String,
    /// The address dialed, or the one refused (special range, connect failure).
    pub address: Option<SocketAddr>,
    /// The request (`METHOD /path`) a terminated host's request rules refused
    /// ([`Verdict::RequestRefused`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// Bytes written to the destination for this client (for plain HTTP, the rewritten
    /// request head included), counted live.
    pub bytes_sent: u64,
    /// Bytes written to the client from the destination, counted live (the proxy's own
    /// responses are not counted).
    pub bytes_received: u64,
}

/// The decisions of one run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EgressLog {
    /// The first [`MAX_DECISIONS`] decisions, in the order they were made.
    pub decisions: Vec<Decision>,
    /// Decisions not kept: those past [`MAX_DECISIONS`], and connections closed at
    /// accept because both [`ProxyConfig::max_tunnels`] and
    /// [`MAX_REFUSING_CONNECTIONS`] were in use (their request was never read).
    pub dropped: u64,
    /// Per credential rule (its name), how many requests had its placeholder replaced
    /// with the secret. Names and counts, never a value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub credentials_used: BTreeMap<String, u64>,
}

/// A running proxy. Dropping it aborts every task it started; [`Proxy::finish`] does the
/// same and returns the log.
#[derive(Debug)]
pub struct Proxy {
    local_addr: SocketAddr,
    shared: Arc<server::Shared>,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Starts serving `listener`, an already bound and listening socket (it may live in
    /// another network namespace, so it is never re-bound), and sets it non-blocking.
    ///
    /// Must be called inside a tokio runtime with IO and time enabled; outside one it
    /// returns an error.
    pub fn start(listener: std::net::TcpListener, config: ProxyConfig) -> std::io::Result<Proxy> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(std::io::Error::other(
                "the egress proxy must be started inside a tokio runtime",
            ));
        }
        let local_addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let shared = Arc::new(server::Shared::new(config, MAX_DECISIONS));
        let (shutdown, stop) = oneshot::channel();
        let server = tokio::spawn(server::accept_loop(listener, Arc::clone(&shared), stop));
        Ok(Proxy {
            local_addr,
            shared,
            shutdown: Some(shutdown),
            server: Some(server),
        })
    }

    /// The address the proxy listens on.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local_addr)
    }

    /// A snapshot of the log so far, with live byte counts for open tunnels.
    pub fn log(&self) -> EgressLog {
        self.shared.log.snapshot()
    }

    /// Stops accepting, closes every client connection and tunnel, waits for their tasks
    /// to end, and returns the final log (byte counts included for tunnels that were
    /// still open).
    pub async fn finish(mut self) -> EgressLog {
        if let Some(shutdown) = self.shutdown.take() {
            // An error means the server task is gone already; either way it stops.
            let _ = shutdown.send(());
        }
        if let Some(server) = self.server.as_mut() {
            // A join error (a panic or an abort) still means the task and the connection
            // tasks it owned are gone.
            let _ = server.await;
            self.server = None;
        }
        self.shared.log.snapshot()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // Aborting the server task drops its `JoinSet`, which aborts every connection.
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}
