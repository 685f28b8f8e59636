//! `tierbox serve`: MCP over stdio, or the HTTP API on a loopback address or a unix
//! socket, over one long-lived runner.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use tierbox_runner::Runner;

use crate::{harden_supervisor, termination_signal};

/// How `serve` talks to its agents.
pub enum Transport {
    Mcp,
    Http(tierbox_server::serve::Bind),
}

/// The transport `--mcp`, `--http ADDR` or `--unix PATH` names.
pub fn transport(
    mcp: bool,
    http: Option<std::net::SocketAddr>,
    unix: Option<PathBuf>,
    allow_remote: bool,
) -> Result<Transport> {
    Ok(match (mcp, http, unix) {
        (true, _, _) => Transport::Mcp,
        (_, Some(addr), _) => {
            Transport::Http(tierbox_server::serve::Bind::Tcp { addr, allow_remote })
        }
        (_, _, Some(path)) => Transport::Http(tierbox_server::serve::Bind::Unix(path)),
        _ => anyhow::bail!("give one of --mcp, --http ADDR, --unix PATH"),
    })
}

/// The WebSocket of terms as `--ws-origin` (each an origin) and `--ws-ticket-ttl-ms` say.
pub fn ws_config(
    origins: &[String],
    ticket_ttl_ms: Option<u64>,
) -> Result<tierbox_server::term_ws::WsConfig> {
    let mut ws = tierbox_server::term_ws::WsConfig::default();
    for origin in origins {
        ws = ws.allow_origin(origin)?;
    }
    if let Some(ms) = ticket_ttl_ms {
        ws = ws.ticket_ttl(std::time::Duration::from_millis(ms));
    }
    Ok(ws)
}

pub fn cmd_serve(
    runner: Runner,
    transport: Transport,
    token_file: Option<PathBuf>,
    max_concurrent: usize,
    queue: usize,
    ws: tierbox_server::term_ws::WsConfig,
) -> Result<ExitCode> {
    use tierbox_server::serve;
    harden_supervisor();
    // Fail at start, not at the first call: the workspace and the policy's grants as a run
    // resolves them, then the state directory, the signing key and the audit log.
    if let Err(rej) = runner.check_grants() {
        anyhow::bail!(
            "cannot serve workspace {}: {} [{}]",
            runner.workspace().display(),
            rej,
            rej.code()
        );
    }
    runner
        .auditor()
        .map_err(|e| anyhow::anyhow!("cannot serve: {e}"))?;
    // A process that kills what this server's runs leave in
    // their cgroups if the server is killed outright (SIGKILL).
    if let Err(e) = tierbox_runner::host::start_watchdog() {
        eprintln!("tierbox: warning: no watchdog: {e}");
    }
    // A long-lived supervisor keeps per-run resources (cgroups, directories) warm between
    // runs; they are destroyed when it exits.
    tierbox_runner::host::set_pooling(true);
    let state_dir = runner.options().state_dir.clone();
    let service = tierbox_server::service::Service::new(runner);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let shutdown = async {
        let sig = termination_signal().await;
        eprintln!("tierbox: received signal {sig}; shutting down");
    };
    let result = match transport {
        Transport::Mcp => rt.block_on(serve::serve_mcp_stdio(service, shutdown)),
        Transport::Http(bind) => (|| {
            serve::check_bind(&bind)?;
            if let serve::Bind::Tcp {
                addr,
                allow_remote: true,
            } = &bind
                && !addr.ip().is_loopback()
            {
                eprintln!(
                    "tierbox: WARNING: serving on non-loopback {addr}: anyone who can reach it \
                     with the token can run commands on this host"
                );
            }
            let token = serve::load_token(token_file.as_deref(), &state_dir)?;
            if let Some(path) = &token.created {
                eprintln!(
                    "tierbox: generated the HTTP bearer token (shown once; also in {}):\n{}",
                    path.display(),
                    token.value
                );
            }
            let config = tierbox_server::http::HttpConfig {
                token: token.value,
                max_concurrent,
                queue,
                ws,
            };
            rt.block_on(serve::serve_http(service, bind, config, shutdown, |at| {
                eprintln!("tierbox: serving the HTTP API on {at} (OpenAPI: /v1/openapi.json)");
            }))
        })(),
    };
    // Every sandbox has ended: destroy the idle slots (their cgroups and directories).
    tierbox_runner::host::set_pooling(false);
    result?;
    Ok(ExitCode::SUCCESS)
}
