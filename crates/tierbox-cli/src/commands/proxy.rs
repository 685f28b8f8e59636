//! `tierbox proxy`: a policy's egress proxy on its own, to try an allowlist out.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};

use super::load_policy;
use crate::termination_signal;

/// How long the CA of `tierbox proxy` is valid (24 h): the proxy runs until stopped, and
/// its clients trust the CA only while they hold the bundle it wrote.
pub const PROXY_CA_LIFETIME: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

pub fn cmd_proxy(
    policy: Option<&Path>,
    listen: std::net::SocketAddr,
    ca_out: Option<&Path>,
) -> Result<ExitCode> {
    let policy = load_policy(policy)?;
    let allow = policy
        .egress
        .allow
        .iter()
        .map(|a| tierbox_policy::hosts::HostPattern::parse(a).map_err(anyhow::Error::msg))
        .collect::<Result<Vec<_>>>()?;
    if allow.is_empty() {
        anyhow::bail!("the policy's egress.allow is empty: the proxy would deny everything");
    }
    let terminate = termination(&policy, ca_out)?;
    let listener =
        std::net::TcpListener::bind(listen).with_context(|| format!("binding {listen}"))?;
    if !listen.ip().is_loopback() {
        eprintln!(
            "tierbox: WARNING: the egress proxy listens on {listen}, which is not a loopback \
             address: it has no authentication, so anyone who can reach that address can \
             use it to reach the policy's allowed hosts through this machine"
        );
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let log = rt.block_on(async {
        let mut config = tierbox_egress::ProxyConfig::new(allow, policy.egress.resolve.clone());
        config.terminate = terminate;
        let proxy = tierbox_egress::Proxy::start(listener, config)?;
        eprintln!(
            "tierbox: egress proxy on {} (HTTP, CONNECT and SOCKS5); stop with Ctrl-C",
            proxy.local_addr()?
        );
        termination_signal().await;
        Ok::<_, std::io::Error>(proxy.finish().await)
    })?;
    println!("{}", serde_json::to_string_pretty(&log)?);
    Ok(ExitCode::SUCCESS)
}

/// The proxy's termination of the policy's `egress.hosts` and `egress.credentials`, with
/// its trust bundle written to `ca_out` and the placeholders printed (never a secret);
/// `None` when the policy terminates no host.
fn termination(
    policy: &tierbox_policy::Policy,
    ca_out: Option<&Path>,
) -> Result<Option<std::sync::Arc<tierbox_egress::tls::Termination>>> {
    let hosts = tierbox_policy::plan::NetworkPlan::terminated_from(&policy.egress);
    let ca_out = match (hosts.is_empty(), ca_out) {
        (true, None) => return Ok(None),
        (true, Some(_)) => anyhow::bail!(
            "--ca-out: the policy terminates TLS for no host (no egress.hosts, no egress.credentials): there is no CA to write"
        ),
        (false, None) => anyhow::bail!(
            "the policy terminates TLS for {} host(s) (egress.hosts, egress.credentials): give --ca-out FILE, where the proxy writes the trust bundle its clients need",
            hosts.len()
        ),
        (false, Some(path)) => path,
    };
    let (termination, trust) = tierbox_runner::terminate::terminate_hosts(
        &hosts,
        &policy.egress.upstream_roots,
        &[],
        (std::time::SystemTime::now(), PROXY_CA_LIFETIME),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        // O_CREAT | O_EXCL: never an existing file, never through a final symlink.
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(ca_out)
            .with_context(|| format!("--ca-out {}: creating a new file", ca_out.display()))?;
        file.write_all(trust.bundle.as_bytes())
            .with_context(|| format!("--ca-out {}", ca_out.display()))?;
    }
    eprintln!(
        "tierbox: terminating TLS for {}; clients must trust {} (SSL_CERT_FILE, REQUESTS_CA_BUNDLE, …), valid for {} h",
        hosts.keys().cloned().collect::<Vec<_>>().join(", "),
        ca_out.display(),
        PROXY_CA_LIFETIME.as_secs() / 3600
    );
    for (var, placeholder) in &trust.placeholders {
        eprintln!("tierbox: {var}={placeholder}");
    }
    Ok(Some(std::sync::Arc::new(termination)))
}
