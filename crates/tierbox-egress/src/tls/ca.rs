//! The per-run certificate authority the proxy terminates TLS with.
//!
//! One CA per run: its key is made in the supervisor's memory when the run starts and
//! never written anywhere; its certificate goes into the sandbox's trust bundle. It is
//! **name-constrained** to the hosts the run's rules terminate (RFC 5280 permitted DNS
//! subtrees, critical), so even a stolen key signs nothing a client would accept for
//! another name, and it is valid only from a minute before the run to the run's deadline
//! plus [`CA_VALIDITY_MARGIN`]. A leaf is issued for each terminated host on first use and
//! kept for the run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
    GeneralSubtree, IsCa, KeyPair, KeyUsagePurpose, NameConstraints, SanType,
};
use rustls::sign::CertifiedKey;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tierbox_policy::hosts::CanonicalHost;

/// How long past the run's deadline the CA and its leaves stay valid: room for a clock
/// that runs a little fast, not for reuse.
pub const CA_VALIDITY_MARGIN: Duration = Duration::from_secs(5 * 60);

/// How long before the run starts they are valid from: a clock a little behind.
const CLOCK_SKEW: Duration = Duration::from_secs(60);

pub use tierbox_policy::egress_rules::MAX_TERMINATED_HOSTS;

/// Why a CA or a leaf could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// No host to constrain the CA to.
    #[error("a TLS-terminating CA needs at least one host to be constrained to")]
    NoHosts,
    /// More hosts than [`MAX_TERMINATED_HOSTS`].
    #[error("{count} hosts to terminate TLS for, the most is {max}")]
    TooManyHosts {
        /// Hosts asked for.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A host the CA was not constrained to.
    #[error("{host} is not a host this run's CA terminates TLS for")]
    NotConstrained {
        /// The host.
        host: String,
    },
    /// A host that is an IP address: the constraints name DNS names only.
    #[error("{host} is an IP address: TLS is terminated only for host names")]
    Address {
        /// The host.
        host: String,
    },
    /// The certificate library failed.
    #[error("making a certificate: {0}")]
    Rcgen(#[from] rcgen::Error),
    /// The TLS library refused the key.
    #[error("loading a certificate's key: {0}")]
    Rustls(#[from] rustls::Error),
}

/// A run's CA: the key (in memory only), its certificate, and the leaves issued so far.
pub struct RunCa {
    key: KeyPair,
    cert: rcgen::Certificate,
    hosts: Vec<String>,
    not_before: time::OffsetDateTime,
    not_after: time::OffsetDateTime,
    leaves: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

impl std::fmt::Debug for RunCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("RunCa")
            .field("hosts", &self.hosts)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

fn offset(t: SystemTime) -> time::OffsetDateTime {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    time::OffsetDateTime::from_unix_timestamp(secs).unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

fn dns_name(host: &CanonicalHost) -> Result<String, CaError> {
    match host {
        CanonicalHost::Name(name) => Ok(name.clone()),
        CanonicalHost::Ip(ip) => Err(CaError::Address {
            host: ip.to_string(),
        }),
    }
}

impl RunCa {
    /// A CA for `hosts`, valid from a minute before `now` to `now + lifetime +`
    /// [`CA_VALIDITY_MARGIN`].
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    ///
    /// use tierbox_egress::tls::RunCa;
    /// use tierbox_policy::hosts::CanonicalHost;
    ///
    /// let host = CanonicalHost::parse("api.github.com").unwrap();
    /// let ca = RunCa::new(&[host.clone()], SystemTime::now(), Duration::from_secs(600)).unwrap();
    /// assert!(ca.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
    /// assert!(ca.leaf(&host).is_ok());
    /// assert!(ca.leaf(&CanonicalHost::parse("example.com").unwrap()).is_err());
    /// ```
    pub fn new(
        hosts: &[CanonicalHost],
        now: SystemTime,
        lifetime: Duration,
    ) -> Result<Self, CaError> {
        if hosts.is_empty() {
            return Err(CaError::NoHosts);
        }
        if hosts.len() > MAX_TERMINATED_HOSTS {
            return Err(CaError::TooManyHosts {
                count: hosts.len(),
                max: MAX_TERMINATED_HOSTS,
            });
        }
        let names = hosts.iter().map(dns_name).collect::<Result<Vec<_>, _>>()?;
        let not_before = offset(now.checked_sub(CLOCK_SKEW).unwrap_or(UNIX_EPOCH));
        let not_after = offset(now + lifetime + CA_VALIDITY_MARGIN);
        let mut params = CertificateParams::default();
        params.not_before = not_before;
        params.not_after = not_after;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "Tierbox per-run egress CA");
        dn.push(DnType::OrganizationName, "Tierbox");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.name_constraints = Some(NameConstraints {
            permitted_subtrees: names.iter().cloned().map(GeneralSubtree::DnsName).collect(),
            excluded_subtrees: Vec::new(),
        });
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(Self {
            key,
            cert,
            hosts: names,
            not_before,
            not_after,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA's certificate, PEM: what goes into the sandbox's trust bundle.
    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    /// The CA's certificate, DER.
    pub fn cert_der(&self) -> CertificateDer<'static> {
        self.cert.der().clone()
    }

    /// The hosts it is constrained to.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// The certificate and key the proxy shows a client for `host`, issued on first use.
    pub fn leaf(&self, host: &CanonicalHost) -> Result<Arc<CertifiedKey>, CaError> {
        let name = dns_name(host)?;
        if !self.hosts.contains(&name) {
            return Err(CaError::NotConstrained { host: name });
        }
        let mut leaves = self.leaves.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(leaf) = leaves.get(&name) {
            return Ok(leaf.clone());
        }
        let mut params = CertificateParams::default();
        params.not_before = self.not_before;
        params.not_after = self.not_after;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name.as_str());
        params.distinguished_name = dn;
        params.subject_alt_names = vec![SanType::DnsName(name.as_str().try_into()?)];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.cert, &self.key)?;
        let der_key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signing = rustls::crypto::ring::sign::any_supported_type(&der_key)?;
        let leaf = Arc::new(CertifiedKey::new(
            vec![cert.der().clone(), self.cert.der().clone()],
            signing,
        ));
        leaves.insert(name, leaf.clone());
        Ok(leaf)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn host(s: &str) -> CanonicalHost {
        CanonicalHost::parse(s).unwrap()
    }

    #[test]
    fn a_ca_is_made_only_for_named_hosts_within_the_cap() {
        let now = SystemTime::now();
        let hour = Duration::from_secs(3600);
        assert!(matches!(RunCa::new(&[], now, hour), Err(CaError::NoHosts)));
        let many: Vec<_> = (0..=MAX_TERMINATED_HOSTS)
            .map(|i| host(&format!("h{i}.example")))
            .collect();
        assert!(matches!(
            RunCa::new(&many, now, hour),
            Err(CaError::TooManyHosts { .. })
        ));
        assert!(matches!(
            RunCa::new(&[host("127.0.0.1")], now, hour),
            Err(CaError::Address { .. })
        ));
        let ca = RunCa::new(&[host("api.test")], now, hour).unwrap();
        // The same leaf for the same host, none for another.
        let a = ca.leaf(&host("api.test")).unwrap();
        let b = ca.leaf(&host("api.test")).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(matches!(
            ca.leaf(&host("other.test")),
            Err(CaError::NotConstrained { .. })
        ));
        // The key never shows in the debug form.
        assert!(!format!("{ca:?}").contains("PRIVATE"));
    }

    /// Even a certificate the CA's own key signs for another name (as if the key had
    /// leaked) is refused by a verifying client: the CA is name-constrained to its hosts.
    #[test]
    fn the_name_constraints_make_a_leaf_for_another_host_worthless() {
        use rustls::client::danger::ServerCertVerifier;
        use rustls_pki_types::{ServerName, UnixTime};

        let ca = RunCa::new(
            &[host("api.test")],
            SystemTime::now(),
            Duration::from_secs(600),
        )
        .unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.cert_der()).unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            crate::tls::provider(),
        )
        .build()
        .unwrap();
        let verify = |cert: &CertificateDer<'_>, name: &'static str| {
            verifier.verify_server_cert(
                cert,
                &[],
                &ServerName::try_from(name).unwrap(),
                &[],
                UnixTime::now(),
            )
        };
        let good = ca.leaf(&host("api.test")).unwrap();
        assert!(verify(&good.cert[0], "api.test").is_ok());
        // Signed by the CA's key, for a name outside its constraints.
        let key = KeyPair::generate().unwrap();
        let evil = CertificateParams::new(vec!["evil.test".to_owned()])
            .unwrap()
            .signed_by(&key, &ca.cert, &ca.key)
            .unwrap();
        let refused = verify(evil.der(), "evil.test").unwrap_err();
        assert!(
            format!("{refused:?}").contains("NameConstraintViolation"),
            "{refused:?}"
        );
    }
}
