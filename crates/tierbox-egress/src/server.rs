//! The accept loop: caps, protocol sniffing, and the tasks that serve connections.
//!
//! Every connection task lives in the accept loop's [`JoinSet`], so stopping the loop
//! (or aborting its task, which drops the set) ends every connection and tunnel.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::task::JoinSet;
use tokio::time::{Instant, timeout_at};

use tierbox_policy::hosts::CanonicalHost;

use crate::check::{Dialed, Refusal, canonical_resolve, check_and_dial};
use crate::inbound::Inbound;
use crate::log::Recorder;
use crate::{MAX_REFUSING_CONNECTIONS, ProxyConfig, REQUEST_HEAD_TIMEOUT_MS, Verdict, http, socks};

/// Pause after a failed `accept` (out of file descriptors, say) before trying again, so
/// the loop does not spin.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(50);

/// What the proxy and its connection tasks share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: ProxyConfig,
    pub(crate) log: Recorder,
}

impl Shared {
    pub(crate) fn new(mut config: ProxyConfig, max_decisions: usize) -> Self {
        config.resolve = canonical_resolve(&config.resolve);
        Self {
            config,
            log: Recorder::new(max_decisions),
        }
    }
}

/// Whether a connection is served or, over the cap, only read and refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Serve,
    Refuse,
}

fn too_many_message(config: &ProxyConfig) -> String {
    format!(
        "egress refused: the proxy is already serving {} connections, its limit; close some and retry",
        config.max_tunnels
    )
}

/// A served connection checks and dials `host:port`; one over the cap is refused with
/// [`Verdict::TooManyTunnels`], after its request was read so the decision names the host.
pub(crate) async fn dial_or_refuse(
    mode: Mode,
    config: &ProxyConfig,
    host: &CanonicalHost,
    port: u16,
) -> Result<Dialed, Refusal> {
    match mode {
        Mode::Serve => check_and_dial(config, host, port).await,
        Mode::Refuse => Err(Refusal {
            verdict: Verdict::TooManyTunnels,
            message: too_many_message(config),
            address: None,
        }),
    }
}

/// Accepts connections until `stop` fires (or its sender is dropped), then aborts every
/// connection task and waits for them to end.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop: oneshot::Receiver<()>,
) {
    let tunnels = Arc::new(Semaphore::new(
        shared.config.max_tunnels.min(Semaphore::MAX_PERMITS),
    ));
    let refusals = Arc::new(Semaphore::new(MAX_REFUSING_CONNECTIONS));
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => break,
            // Reap finished connections so the set does not grow with the run.
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let (mode, permit) = match Arc::clone(&tunnels).try_acquire_owned() {
                        Ok(permit) => (Mode::Serve, permit),
                        Err(_) => match Arc::clone(&refusals).try_acquire_owned() {
                            Ok(permit) => (Mode::Refuse, permit),
                            Err(_) => {
                                shared.log.count_dropped();
                                continue;
                            }
                        },
                    };
                    tasks.spawn(serve_connection(stream, Arc::clone(&shared), mode, permit));
                }
                Err(_) => tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await,
            },
        }
    }
    tasks.shutdown().await;
}

/// Sniffs the protocol from the first byte and serves the connection; the permit is
/// held until the connection is closed.
async fn serve_connection(
    stream: TcpStream,
    shared: Arc<Shared>,
    mode: Mode,
    _permit: OwnedSemaphorePermit,
) {
    // Latency matters more than segment count for interactive protocols; a failure here
    // only costs performance.
    let _ = stream.set_nodelay(true);
    let deadline = Instant::now()
        .checked_add(Duration::from_millis(REQUEST_HEAD_TIMEOUT_MS))
        .unwrap_or_else(Instant::now);
    let mut inbound = Inbound::new(stream);
    let first = match timeout_at(deadline, inbound.fill()).await {
        Ok(Ok(n)) if n > 0 => inbound.unread()[0],
        // Closed, broken or silent before the first byte: nothing was requested.
        _ => return,
    };
    match first {
        0x05 => socks::serve(inbound, &shared, mode, deadline).await,
        0x04 => socks::refuse_socks4(inbound, &shared).await,
        _ => http::serve(inbound, &shared, mode, deadline).await,
    }
}
