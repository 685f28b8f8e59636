//! TLS termination for the hosts whose rules need to see requests (credential injection,
//! method/path rules): the proxy is the TLS server the sandboxed client talks to (a leaf
//! of the run's [`RunCa`]) and a verifying TLS client of the real upstream, with HTTP/1.1
//! in between ([`relay`]). Every other allowed host stays a plain `CONNECT` tunnel whose
//! bytes the proxy never reads.
//!
//! Invariants:
//!
//! - **The upstream is verified before a byte of the request goes to it**, against the
//!   host's trust store ([`Upstream::from_system`]) plus the anchors a policy names for a
//!   test upstream — never against the run's CA, whose certificates only the sandbox
//!   trusts. A failed verification ends the connection with a typed
//!   [`TerminateError::Upstream`] and nothing is sent.
//! - **The sandbox holds no key.** The CA's and the leaves' keys live in the supervisor's
//!   memory for the run only; the sandbox gets the CA certificate.
//! - **Bounded.** The client's handshake must finish within [`HANDSHAKE_TIMEOUT`], and
//!   so must the upstream's.

pub mod ca;
pub mod relay;
mod serve;

pub(crate) use serve::{Counting, serve_terminated};

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tierbox_policy::hosts::CanonicalHost;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::{TlsAcceptor, TlsConnector};

pub use ca::{CaError, RunCa};

/// What a run's proxy terminates: the hosts and their rules, the run's CA, and how
/// upstreams are verified.
///
/// ```
/// use std::collections::BTreeMap;
/// use std::time::{Duration, SystemTime};
///
/// use tierbox_egress::tls::relay::{HostRules, RequestRule};
/// use tierbox_egress::tls::{RunCa, Termination, Upstream};
/// use tierbox_policy::hosts::CanonicalHost;
///
/// let host = CanonicalHost::parse("api.github.com").unwrap();
/// let rules = HostRules { allow: vec![RequestRule::parse("GET /repos/*").unwrap()], credentials: vec![] };
/// let t = Termination::new(
///     BTreeMap::from([(host, rules)]),
///     SystemTime::now(),
///     Duration::from_secs(600),
///     Upstream::from_system(&[]).unwrap(),
/// )
/// .unwrap();
/// assert!(t.ca().cert_pem().contains("BEGIN CERTIFICATE"));
/// ```
#[derive(Debug)]
pub struct Termination {
    hosts: std::collections::BTreeMap<CanonicalHost, relay::HostRules>,
    ca: RunCa,
    trust: Upstream,
    /// Each host's TLS server configuration, made on first use and kept for the run: one
    /// session cache per host, so a client's next connection resumes instead of a full
    /// handshake.
    servers: std::sync::Mutex<std::collections::HashMap<CanonicalHost, Arc<rustls::ServerConfig>>>,
}

impl Termination {
    /// Terminates `hosts` with their rules, with a CA made `now` for a run of `lifetime`,
    /// verifying upstreams with `trust`.
    pub fn new(
        hosts: std::collections::BTreeMap<CanonicalHost, relay::HostRules>,
        now: std::time::SystemTime,
        lifetime: Duration,
        trust: Upstream,
    ) -> Result<Self, CaError> {
        let names: Vec<CanonicalHost> = hosts.keys().cloned().collect();
        let ca = RunCa::new(&names, now, lifetime)?;
        Ok(Self {
            hosts,
            ca,
            trust,
            servers: std::sync::Mutex::new(std::collections::HashMap::new()),
        })
    }

    /// The TLS server configuration the proxy shows `host`'s clients (its leaf of the
    /// run's CA), made once per host.
    pub(crate) fn server_config(
        &self,
        host: &CanonicalHost,
    ) -> Result<Arc<rustls::ServerConfig>, TerminateError> {
        let mut servers = self
            .servers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(config) = servers.get(host) {
            return Ok(config.clone());
        }
        let config = server_config(&self.ca, host)?;
        servers.insert(host.clone(), config.clone());
        Ok(config)
    }

    /// The run's CA (its certificate goes into the sandbox's trust bundle).
    pub fn ca(&self) -> &RunCa {
        &self.ca
    }

    /// The rules of `host`, when the proxy terminates it.
    pub fn rules(&self, host: &CanonicalHost) -> Option<&relay::HostRules> {
        self.hosts.get(host)
    }
}

/// Longest a TLS handshake may take, each side (10 s): a client or an upstream that
/// stalls in it holds a connection and a task.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the host's trust store is looked for, in order (Debian/Ubuntu, Fedora/RHEL,
/// openSUSE, Alpine share the first).
pub const SYSTEM_TRUST_STORES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// Most bytes a trust-store file may have (4 MiB; a distribution bundle is about 200 KiB).
pub const MAX_TRUST_STORE_BYTES: u64 = 4 * 1024 * 1024;

/// Why the upstream's trust could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// No trust store found at any of [`SYSTEM_TRUST_STORES`].
    #[error(
        "no trust store at any of {tried}: the upstream of a terminated host cannot be verified"
    )]
    NoStore {
        /// The paths tried.
        tried: String,
    },
    /// A trust-store file could not be read.
    #[error("reading the trust store {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A file over [`MAX_TRUST_STORE_BYTES`].
    #[error("the trust store {path} has {bytes} bytes, the most read is {max}")]
    TooLarge {
        /// The file.
        path: String,
        /// Its size.
        bytes: u64,
        /// The limit.
        max: u64,
    },
    /// The TLS library refused the configuration.
    #[error("setting up TLS toward upstreams: {0}")]
    Tls(rustls::Error),
    /// A PEM anchor that holds no certificate, or one rustls refuses.
    #[error("the trust anchor {what} holds no usable certificate: {reason}")]
    BadAnchor {
        /// Which (a path, or `policy anchor N`).
        what: String,
        /// Why.
        reason: String,
    },
}

/// How the proxy verifies terminated hosts' upstreams: the host's trust store and any
/// anchors added for a test upstream.
#[derive(Debug, Clone)]
pub struct Upstream {
    config: Arc<rustls::ClientConfig>,
    anchors: usize,
}

/// The crypto provider: *ring* (aws-lc-rs, which rustls now prefers for its post-quantum
/// key exchange, needs cmake and a longer build). A terminated connection is between the
/// proxy and the sandbox's client on one host, or the proxy and an upstream the host
/// would reach directly: classical key exchange is what a client without the proxy gets
/// from most servers today.
#[expect(
    deprecated,
    reason = "ring has no post-quantum key exchange; see above"
)]
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_store(path: &Path) -> Result<Vec<u8>, TrustError> {
    let err = |source| TrustError::Read {
        path: path.display().to_string(),
        source,
    };
    let bytes = std::fs::metadata(path).map_err(err)?.len();
    if bytes > MAX_TRUST_STORE_BYTES {
        return Err(TrustError::TooLarge {
            path: path.display().to_string(),
            bytes,
            max: MAX_TRUST_STORE_BYTES,
        });
    }
    std::fs::read(path).map_err(err)
}

fn add_pem(roots: &mut rustls::RootCertStore, pem: &[u8], what: &str) -> Result<usize, TrustError> {
    let bad = |reason: String| TrustError::BadAnchor {
        what: what.to_owned(),
        reason,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("no PEM CERTIFICATE block".to_owned()));
    }
    let (added, _ignored) = roots.add_parsable_certificates(certs);
    match added {
        0 => Err(bad(
            "no certificate in it parses as a trust anchor".to_owned()
        )),
        n => Ok(n),
    }
}

/// The host's trust store: the first of [`SYSTEM_TRUST_STORES`] that exists.
pub fn system_store() -> Result<&'static Path, TrustError> {
    SYSTEM_TRUST_STORES
        .iter()
        .map(Path::new)
        .find(|p| p.is_file())
        .ok_or_else(|| TrustError::NoStore {
            tried: SYSTEM_TRUST_STORES.join(", "),
        })
}

/// The trust bundle a run's sandbox gets: the host's trust store (its clients still reach
/// every tunnelled host, whose certificates the proxy never touches), then the run's CA
/// (for the hosts the proxy terminates). PEM.
pub fn sandbox_bundle(ca: &RunCa) -> Result<String, TrustError> {
    let store = system_store()?;
    let pem = read_store(store)?;
    let mut bundle = String::from_utf8(pem).map_err(|_| TrustError::BadAnchor {
        what: store.display().to_string(),
        reason: "the trust store is not text".to_owned(),
    })?;
    if !bundle.ends_with('\n') {
        bundle.push('\n');
    }
    bundle.push_str("# The Tierbox run's CA (the hosts its egress proxy terminates)\n");
    bundle.push_str(&ca.cert_pem());
    Ok(bundle)
}

/// A PEM trust anchor file a policy names for a test upstream (`egress.upstream_roots`),
/// read whole (at most [`MAX_TRUST_STORE_BYTES`]).
pub fn read_anchor(path: &Path) -> Result<String, TrustError> {
    let pem = read_store(path)?;
    String::from_utf8(pem).map_err(|_| TrustError::BadAnchor {
        what: path.display().to_string(),
        reason: "not PEM text".to_owned(),
    })
}

impl Upstream {
    /// The host's trust store ([`system_store`]) plus `extra` PEM anchors (a test
    /// upstream's CA, named by the policy).
    pub fn from_system(extra: &[String]) -> Result<Self, TrustError> {
        Self::from_store(system_store()?, extra)
    }

    /// The trust store at `store` plus `extra` PEM anchors.
    pub fn from_store(store: &Path, extra: &[String]) -> Result<Self, TrustError> {
        let mut roots = rustls::RootCertStore::empty();
        let pem = read_store(store)?;
        let mut anchors = add_pem(&mut roots, &pem, &store.display().to_string())?;
        anchors += Self::add_extra(&mut roots, extra)?;
        Self::with_roots(roots, anchors)
    }

    /// Only `extra` PEM anchors (no system store): what a test upstream with its own CA
    /// is verified against.
    pub fn only(extra: &[String]) -> Result<Self, TrustError> {
        let mut roots = rustls::RootCertStore::empty();
        let anchors = Self::add_extra(&mut roots, extra)?;
        Self::with_roots(roots, anchors)
    }

    fn add_extra(roots: &mut rustls::RootCertStore, extra: &[String]) -> Result<usize, TrustError> {
        let mut n = 0;
        for (i, pem) in extra.iter().enumerate() {
            n += add_pem(roots, pem.as_bytes(), &format!("policy anchor {}", i + 1))?;
        }
        Ok(n)
    }

    fn with_roots(roots: rustls::RootCertStore, anchors: usize) -> Result<Self, TrustError> {
        let mut config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(TrustError::Tls)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            config: Arc::new(config),
            anchors,
        })
    }

    /// How many trust anchors it holds.
    pub fn anchors(&self) -> usize {
        self.anchors
    }
}

/// Why a terminated connection could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TerminateError {
    /// The sandbox's client did not complete its handshake (it does not trust the run's
    /// CA, it spoke something else, or it stalled).
    #[error("the client's TLS handshake for {host} failed: {reason}")]
    Client {
        /// The host.
        host: String,
        /// Why.
        reason: String,
    },
    /// The upstream's handshake failed: its certificate did not verify for the host
    /// (fail closed: nothing was sent), or it stalled.
    #[error("the upstream {host} failed TLS verification or its handshake: {reason}")]
    Upstream {
        /// The host.
        host: String,
        /// Why.
        reason: String,
    },
    /// No leaf for the host.
    #[error(transparent)]
    Ca(#[from] CaError),
}

/// The two TLS streams of a terminated connection: toward the sandbox's client, and
/// toward the verified upstream.
#[derive(Debug)]
pub struct Terminated<C, U> {
    /// The client's side (the proxy is its server).
    pub client: tokio_rustls::server::TlsStream<C>,
    /// The upstream's side (the proxy is its client, verified for the host).
    pub upstream: tokio_rustls::client::TlsStream<U>,
}

/// Terminates `client`'s TLS for `host` with the run's leaf, then opens TLS to
/// `upstream` verified for `host` against `trust`. The upstream is verified before the
/// client's handshake completes its first request; on either failure nothing of the
/// client's reaches the upstream.
pub async fn terminate<C, U>(
    ca: &RunCa,
    trust: &Upstream,
    host: &CanonicalHost,
    client: C,
    upstream: U,
) -> Result<Terminated<C, U>, TerminateError>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let server = server_config(ca, host)?;
    terminate_with(server, trust, host, client, upstream).await
}

/// The server configuration of `host`'s terminated connections: its leaf of `ca`,
/// HTTP/1.1.
fn server_config(
    ca: &RunCa,
    host: &CanonicalHost,
) -> Result<Arc<rustls::ServerConfig>, TerminateError> {
    let leaf = ca.leaf(host)?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TerminateError::Client {
            host: host.to_string(),
            reason: e.to_string(),
        })?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Single(leaf)));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// [`terminate`] with `host`'s server configuration made already
/// ([`Termination::server_config`]).
pub(crate) async fn terminate_with<C, U>(
    server: Arc<rustls::ServerConfig>,
    trust: &Upstream,
    host: &CanonicalHost,
    client: C,
    upstream: U,
) -> Result<Terminated<C, U>, TerminateError>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let name = host.to_string();
    // The upstream first: a host whose certificate does not verify gets no client
    // handshake answered either (the client sees the connection closed).
    let upstream_failed = |reason: String| TerminateError::Upstream {
        host: name.clone(),
        reason,
    };
    let client_failed = |reason: String| TerminateError::Client {
        host: name.clone(),
        reason,
    };
    let server_name =
        ServerName::try_from(name.clone()).map_err(|e| upstream_failed(e.to_string()))?;
    let connector = TlsConnector::from(trust.config.clone());
    let upstream = bounded(connector.connect(server_name, upstream), upstream_failed).await?;
    let acceptor = TlsAcceptor::from(server);
    let client = bounded(acceptor.accept(client), client_failed).await?;
    Ok(Terminated { client, upstream })
}

/// `handshake`, within [`HANDSHAKE_TIMEOUT`]; a failure or the timeout is `failed(why)`.
async fn bounded<T>(
    handshake: impl std::future::Future<Output = std::io::Result<T>>,
    failed: impl Fn(String) -> TerminateError,
) -> Result<T, TerminateError> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(failed(e.to_string())),
        Err(_) => Err(failed(format!(
            "no handshake within {} s",
            HANDSHAKE_TIMEOUT.as_secs()
        ))),
    }
}

/// The one leaf a terminated connection shows, whatever SNI the client sent (the host was
/// decided by its `CONNECT`; a client naming another host in SNI gets this host's
/// certificate and refuses it).
#[derive(Debug)]
struct Single(Arc<rustls::sign::CertifiedKey>);

impl rustls::server::ResolvesServerCert for Single {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.clone())
    }
}

#[cfg(test)]
mod tests;
