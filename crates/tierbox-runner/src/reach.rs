//! A run's reach across its network namespace besides the egress proxy, from the
//! supervisor's side: the published ports' host listeners, bound before anything runs
//! ([`bind_published`]: a port another process holds refuses the run), and the relays
//! that serve them and the host ports once the sandbox runs ([`start`]).

use std::net::{Ipv4Addr, TcpListener};
use std::sync::Arc;

use tierbox_egress::reach::{ConnectInside, RelayReport, Relays};
use tierbox_egress::{EgressLog, Proxy};
use tierbox_policy::plan::Plan;
use tierbox_policy::reach::PublishedPort;
use tierbox_policy::rejection::Rejection;
use tierbox_sandbox::contract::RunningSandbox;

use crate::supervisor::RunError;

/// The host listeners of the ports `plan` publishes, each on `127.0.0.1:HOSTPORT`, bound
/// now so that a port another process holds refuses the run before it starts
/// (`egress.port_unavailable`).
pub(crate) fn bind_published(plan: &Plan) -> Result<Vec<(PublishedPort, TcpListener)>, Rejection> {
    plan.network
        .publish
        .iter()
        .map(
            |&p| match TcpListener::bind((Ipv4Addr::LOCALHOST, p.host_port)) {
                Ok(listener) => Ok((p, listener)),
                Err(e) => Err(Rejection::PortUnavailable {
                    key: format!("publish {p}: host port"),
                    port: p.host_port,
                    reason: match e.kind() {
                        std::io::ErrorKind::AddrInUse => {
                            "another process listens on it (address in use)".to_owned()
                        }
                        _ => format!("cannot listen on 127.0.0.1:{}: {e}", p.host_port),
                    },
                }),
            },
        )
        .collect()
}

/// Starts the relays of a launched run: the published ports' (`published`, from
/// [`bind_published`]) and the host ports' listeners the backend made inside the
/// sandbox. `None` when the plan has no reach. Must run inside the supervisor's runtime.
pub(crate) fn start(
    plan: &Plan,
    launched: &mut RunningSandbox,
    published: Vec<(PublishedPort, TcpListener)>,
) -> Result<Option<Relays>, RunError> {
    if !plan.network.has_reach() {
        return Ok(None);
    }
    let backend = launched.enforcement().backend;
    let missing = || {
        RunError::Launch(format!(
            "the plan has egress.publish or egress.host_ports, and the {backend} backend handed over nothing for them"
        ))
    };
    let reach = take_reach(launched).ok_or_else(missing)?;
    if reach.host_ports.len() != plan.network.host_ports.len()
        || (!published.is_empty() && reach.inside.is_none())
    {
        return Err(missing());
    }
    let inside = reach.inside.map(|connector| {
        let connector = Arc::new(connector);
        let connect: ConnectInside = Arc::new(move |port| {
            let (tx, rx) = tokio::sync::oneshot::channel();
            connector.connect(
                port,
                Box::new(move |result| {
                    let _ = tx.send(result);
                }),
            );
            rx
        });
        connect
    });
    Relays::start(published, inside, reach.host_ports)
        .map(Some)
        .map_err(|source| RunError::Io {
            what: "start the published-port and host-port relays",
            source,
        })
}

fn take_reach(launched: &mut RunningSandbox) -> Option<tierbox_sandbox::contract::SandboxReach> {
    launched.take_reach()
}

/// What a run's traffic crosses besides its own loopback: the egress proxy and the
/// relays, finished together once every process of the run is gone.
#[derive(Debug, Default)]
pub(crate) struct Edge {
    pub(crate) proxy: Option<Proxy>,
    pub(crate) relays: Option<Relays>,
}

impl Edge {
    /// Stops both; the proxy's decisions and what each relay carried.
    pub(crate) async fn finish(self) -> (Option<EgressLog>, Vec<RelayReport>) {
        let egress = match self.proxy {
            Some(p) => Some(p.finish().await),
            None => None,
        };
        let reach = match self.relays {
            Some(r) => r.finish().await,
            None => Vec::new(),
        };
        (egress, reach)
    }
}
