//! `tierbox proxy`: a policy's egress proxy on its own, to try an allowlist out.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};

use super::load_policy;
use crate::termination_signal;

pub fn cmd_proxy(policy: Option<&Path>, listen: std::net::SocketAddr) -> Result<ExitCode> {
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
        let config = tierbox_egress::ProxyConfig::new(allow, policy.egress.resolve.clone());
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
