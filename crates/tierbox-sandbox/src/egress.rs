//! What a sandbox needs to reach the egress proxy: where it listens and the environment
//! that points clients at it.
//!
//! The proxy itself (`tierbox-egress`) runs in the supervisor. In Tier B it listens on a
//! fresh port of the host's `127.0.0.1`, the only TCP port the child may connect to. In
//! Tier C the sandbox's network namespace has only loopback, and the listener is made
//! *inside* it on [`SANDBOX_PROXY_PORT`] by the sandbox's pid 1, then handed to the
//! supervisor (a socket stays in the namespace it was created in, so the supervisor
//! accepts connections that were made inside).

pub use tierbox_policy::reach::SANDBOX_PROXY_PORT;

/// Addresses clients reach directly, never through the proxy (the sandbox's own
/// loopback).
pub const NO_PROXY: &str = "localhost,127.0.0.1,::1";

/// The variables that point HTTP clients, package managers and git at the proxy on
/// `127.0.0.1:port`: the `*_PROXY` family in both cases, `ALL_PROXY` as SOCKS5 with remote
/// name resolution (the proxy accepts both protocols on one port), and the npm, yarn, pip
/// and cargo settings.
///
/// ```
/// let env = tierbox_sandbox::egress::proxy_env(3128);
/// assert!(env.contains(&("HTTPS_PROXY".to_owned(), "http://127.0.0.1:3128".to_owned())));
/// assert!(env.contains(&("ALL_PROXY".to_owned(), "socks5h://127.0.0.1:3128".to_owned())));
/// ```
pub fn proxy_env(port: u16) -> Vec<(String, String)> {
    let http = format!("http://127.0.0.1:{port}");
    let socks = format!("socks5h://127.0.0.1:{port}");
    let mut env = Vec::new();
    for key in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
        env.push((key.to_owned(), http.clone()));
    }
    for key in ["ALL_PROXY", "all_proxy"] {
        env.push((key.to_owned(), socks.clone()));
    }
    for key in ["NO_PROXY", "no_proxy"] {
        env.push((key.to_owned(), NO_PROXY.to_owned()));
    }
    for key in [
        "npm_config_proxy",
        "npm_config_https_proxy",
        "YARN_HTTP_PROXY",
        "YARN_HTTPS_PROXY",
        "PIP_PROXY",
        "CARGO_HTTP_PROXY",
    ] {
        env.push((key.to_owned(), http.clone()));
    }
    env
}

/// The name of the trust bundle in a run's `/tmp` (its `TMPDIR`): the host's trust
/// store plus the run's CA, for runs whose proxy terminates TLS for some hosts.
pub const CA_BUNDLE_FILE: &str = "tierbox-ca-bundle.pem";

/// The variables that point TLS clients at the bundle file (one list, the policy
/// crate's, which refuses a policy setting them too).
pub use tierbox_policy::egress_rules::CA_BUNDLE_VARS;

/// What a run whose proxy terminates TLS gets in its sandbox: the trust bundle (PEM: the
/// host's trust store, then the run's CA certificate) and the credential placeholders'
/// variables. Never a key, never a secret.
#[derive(Clone, PartialEq, Eq)]
pub struct SandboxTrust {
    /// The bundle, PEM.
    pub bundle: std::sync::Arc<str>,
    /// The placeholder variables (`GITHUB_TOKEN` = a random per-run token).
    pub placeholders: Vec<(String, String)>,
}

impl std::fmt::Debug for SandboxTrust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.placeholders.iter().map(|(k, _)| k.as_str()).collect();
        write!(
            f,
            "SandboxTrust {{ bundle: {} bytes, placeholders: {names:?} }}",
            self.bundle.len()
        )
    }
}

impl SandboxTrust {
    /// The bundle as the file a backend puts in the run's `/tmp`.
    #[cfg(target_os = "linux")]
    pub fn tmp_file(&self) -> crate::linux::mounts::TmpFile {
        crate::linux::mounts::TmpFile {
            name: CA_BUNDLE_FILE.to_owned(),
            contents: crate::linux::mounts::FileContents(self.bundle.clone()),
        }
    }
}

/// Points the [`CA_BUNDLE_VARS`] at `bundle_path` and sets the placeholders' variables in
/// `env`, replacing any value given them (a client pointed at another store would fail
/// every terminated host).
///
/// ```
/// use tierbox_sandbox::egress::{SandboxTrust, set_trust_env};
///
/// let trust = SandboxTrust {
///     bundle: "-----BEGIN CERTIFICATE-----".into(),
///     placeholders: vec![("GITHUB_TOKEN".into(), "tbx_0123".into())],
/// };
/// let mut env = vec![("SSL_CERT_FILE".to_owned(), "/elsewhere".to_owned())];
/// set_trust_env(&mut env, &trust, "/tmp/tierbox-ca-bundle.pem");
/// assert!(env.contains(&("SSL_CERT_FILE".into(), "/tmp/tierbox-ca-bundle.pem".into())));
/// assert!(env.contains(&("GITHUB_TOKEN".into(), "tbx_0123".into())));
/// assert_eq!(env.iter().filter(|(k, _)| k == "SSL_CERT_FILE").count(), 1);
/// ```
pub fn set_trust_env(env: &mut Vec<(String, String)>, trust: &SandboxTrust, bundle_path: &str) {
    env.retain(|(k, _)| {
        !CA_BUNDLE_VARS.contains(&k.as_str()) && !trust.placeholders.iter().any(|(p, _)| p == k)
    });
    for var in CA_BUNDLE_VARS {
        env.push(((*var).to_owned(), bundle_path.to_owned()));
    }
    env.extend(trust.placeholders.iter().cloned());
}

/// Sets [`proxy_env`] in `env`, replacing any value a policy or request gave those
/// variables (a client pointed elsewhere would only fail; this keeps the run usable).
pub fn set_proxy_env(env: &mut Vec<(String, String)>, port: u16) {
    let vars = proxy_env(port);
    env.retain(|(k, _)| !vars.iter().any(|(v, _)| v == k));
    env.extend(vars);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_proxy_env_replaces_existing_values_once() {
        let mut env = vec![
            ("PATH".to_owned(), "/usr/bin".to_owned()),
            ("https_proxy".to_owned(), "http://elsewhere:1".to_owned()),
        ];
        set_proxy_env(&mut env, 4000);
        let https: Vec<_> = env.iter().filter(|(k, _)| k == "https_proxy").collect();
        assert_eq!(https.len(), 1);
        assert_eq!(https[0].1, "http://127.0.0.1:4000");
        assert!(env.iter().any(|(k, v)| k == "PATH" && v == "/usr/bin"));
        assert!(env.iter().any(|(k, v)| k == "NO_PROXY" && v == NO_PROXY));
    }

    /// Every variable the runner sets to reach the proxy is one a request may not set:
    /// the two lists cannot drift apart.
    #[test]
    fn every_proxy_variable_is_denied_to_requests() {
        for (name, _) in proxy_env(3128) {
            assert!(
                tierbox_policy::validate::is_denied_env_name(&name).is_some(),
                "{name} is set by the runner but a request may set it too"
            );
        }
    }
}
