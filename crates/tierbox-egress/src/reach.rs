//! The relays that carry a run's reach across its network namespace, beside the proxy:
//!
//! - a **published port** (`egress.publish`): the supervisor's listener on the host's
//!   `127.0.0.1:HOSTPORT`; each connection is joined to a connection to
//!   `127.0.0.1:SANDBOXPORT` inside the sandbox, which the [`ConnectInside`] function
//!   makes (from a thread in the sandbox's namespace);
//! - a **host port** (`egress.host_ports`): a listener inside the sandbox on
//!   `127.0.0.1:PORT`; each connection is joined to a connection to the host's
//!   `127.0.0.1:PORT`.
//!
//! Bytes are moved as they are by the proxy's tunnel (`splice` through pipes, the
//! half-close forwarded), until both sides close; a relay ends every connection when it
//! is finished. Each relay serves at
//! most [`MAX_RELAY_CONNECTIONS`] connections at once and counts what it carried
//! ([`RelayCounts`]).

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, oneshot};
use tokio::task::{JoinHandle, JoinSet};

use tierbox_policy::reach::PublishedPort;

/// Most connections one relay (one published port, one host port) serves at once;
/// another is closed at once. Bounds the supervisor's sockets and tasks per port.
pub const MAX_RELAY_CONNECTIONS: usize = 64;

/// Longest a relay waits for the connection to the other side (the host's loopback
/// port, the program's port inside): a refused one fails at once.
pub const RELAY_CONNECT_TIMEOUT_MS: u64 = 5_000;

/// Connects to `127.0.0.1:PORT` inside the sandbox: the connected stream, or why not.
pub type ConnectInside =
    Arc<dyn Fn(u16) -> oneshot::Receiver<io::Result<std::net::TcpStream>> + Send + Sync>;

/// What one relay carried.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RelayCounts {
    /// Connections accepted and joined to the other side.
    pub connections: u64,
    /// Connections accepted whose other side could not be reached (the program does not
    /// listen yet, the host port is closed), or refused over [`MAX_RELAY_CONNECTIONS`].
    pub failed: u64,
    /// Bytes from the side that connected to the side it reached.
    pub bytes_in: u64,
    /// Bytes back.
    pub bytes_out: u64,
}

/// One relay as the outcome reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RelayReport {
    /// `publish 127.0.0.1:8080:8000` or `host_port 5432`.
    pub relay: String,
    /// What it carried.
    #[serde(flatten)]
    pub counts: RelayCounts,
}

#[derive(Debug, Default)]
struct Counters {
    connections: AtomicU64,
    failed: AtomicU64,
    /// The tunnel's: `sent` is from the side that connected, `received` back.
    bytes: crate::log::Counters,
}

impl Counters {
    fn snapshot(&self) -> RelayCounts {
        RelayCounts {
            connections: self.connections.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            bytes_in: self.bytes.sent.load(Ordering::Relaxed),
            bytes_out: self.bytes.received.load(Ordering::Relaxed),
        }
    }
}

/// Where a relay's accepted connections go.
#[derive(Clone)]
enum Target {
    /// `127.0.0.1:port` inside the sandbox.
    Inside(ConnectInside, u16),
    /// `127.0.0.1:port` on the host.
    Host(u16),
}

struct Relay {
    name: String,
    counters: Arc<Counters>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

/// The run's relays, serving until [`Relays::finish`] (or drop, which aborts them).
pub struct Relays {
    relays: Vec<Relay>,
}

impl std::fmt::Debug for Relays {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relays")
            .field(
                "relays",
                &self.relays.iter().map(|r| &r.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Relays {
    /// Starts a relay for each published port (its host listener, already bound) and each
    /// host port (its listener inside the sandbox). Must be called inside a tokio runtime.
    /// A published port without `inside` is an error.
    pub fn start(
        published: Vec<(PublishedPort, std::net::TcpListener)>,
        inside: Option<ConnectInside>,
        host_ports: Vec<(u16, std::net::TcpListener)>,
    ) -> io::Result<Relays> {
        let mut relays = Vec::with_capacity(published.len() + host_ports.len());
        for (port, listener) in published {
            let Some(inside) = inside.clone() else {
                return Err(io::Error::other(format!(
                    "publish {port}: nothing connects inside the sandbox"
                )));
            };
            let target = Target::Inside(inside, port.sandbox_port);
            relays.push(Relay::start(format!("publish {port}"), listener, target)?);
        }
        for (port, listener) in host_ports {
            relays.push(Relay::start(
                format!("host_port {port}"),
                listener,
                Target::Host(port),
            )?);
        }
        Ok(Relays { relays })
    }

    /// Stops every relay, ends its connections, and reports what each carried.
    pub async fn finish(mut self) -> Vec<RelayReport> {
        let mut out = Vec::with_capacity(self.relays.len());
        for relay in &mut self.relays {
            if let Some(stop) = relay.stop.take() {
                let _ = stop.send(());
            }
            if let Some(task) = relay.task.take() {
                let _ = task.await;
            }
            out.push(RelayReport {
                relay: relay.name.clone(),
                counts: relay.counters.snapshot(),
            });
        }
        out
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Relay {
    fn start(name: String, listener: std::net::TcpListener, target: Target) -> io::Result<Relay> {
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let counters = Arc::new(Counters::default());
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(accept_loop(
            listener,
            target,
            Arc::clone(&counters),
            stopped,
        ));
        Ok(Relay {
            name,
            counters,
            stop: Some(stop),
            task: Some(task),
        })
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: Target,
    counters: Arc<Counters>,
    mut stop: oneshot::Receiver<()>,
) {
    let permits = Arc::new(Semaphore::new(MAX_RELAY_CONNECTIONS));
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
                        counters.failed.fetch_add(1, Ordering::Relaxed);
                        drop(client);
                        continue;
                    };
                    let (target, counters) = (target.clone(), Arc::clone(&counters));
                    tasks.spawn(async move {
                        relay_one(client, target, &counters).await;
                        drop(permit);
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            },
        }
    }
    tasks.shutdown().await;
}

/// Joins `client` to a connection to the target, or closes it when there is none.
async fn relay_one(client: TcpStream, target: Target, counters: &Counters) {
    let timeout = Duration::from_millis(RELAY_CONNECT_TIMEOUT_MS);
    let upstream = match target {
        Target::Host(port) => {
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
                Ok(Ok(s)) => Some(s),
                _ => None,
            }
        }
        Target::Inside(connect, port) => match tokio::time::timeout(timeout, connect(port)).await {
            Ok(Ok(Ok(s))) => s
                .set_nonblocking(true)
                .ok()
                .and_then(|()| TcpStream::from_std(s).ok()),
            _ => None,
        },
    };
    let Some(upstream) = upstream else {
        counters.failed.fetch_add(1, Ordering::Relaxed);
        return;
    };
    counters.connections.fetch_add(1, Ordering::Relaxed);
    let (mut client, mut upstream) = (client, upstream);
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    // The proxy's tunnel (splice through pipes, half-close), with no idle limit: a
    // database connection may sit idle for as long as the run lasts.
    crate::tunnel::run(
        &mut client,
        &mut upstream,
        &[],
        &counters.bytes,
        Duration::MAX,
        crate::tunnel::Ending::WhenBothEnd,
        crate::tunnel::pipes(),
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn loopback() -> std::net::TcpListener {
        std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap()
    }

    /// A host port relay joins a connection to the host's port, both ways, with the
    /// half-close forwarded and the bytes counted; a closed host port is a failure.
    #[tokio::test]
    async fn a_host_port_relay_carries_bytes_both_ways_and_counts_them() {
        let upstream = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let port = upstream.local_addr().unwrap().port();
        let echo = tokio::spawn(async move {
            let (mut s, _) = upstream.accept().await.unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            s.write_all(&got).await.unwrap();
            s.write_all(b"!").await.unwrap();
        });
        let inside = loopback();
        let inside_addr = inside.local_addr().unwrap();
        let relays = Relays::start(Vec::new(), None, vec![(port, inside)]).unwrap();
        let mut c = TcpStream::connect(inside_addr).await.unwrap();
        c.write_all(b"hello").await.unwrap();
        c.shutdown().await.unwrap();
        let mut back = Vec::new();
        c.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, b"hello!");
        echo.await.unwrap();
        let report = relays.finish().await;
        assert_eq!(report[0].relay, format!("host_port {port}"));
        assert_eq!(
            report[0].counts,
            RelayCounts {
                connections: 1,
                failed: 0,
                bytes_in: 5,
                bytes_out: 6,
            }
        );

        // Nothing listens on the host port any more: the connection is closed, counted.
        let inside = loopback();
        let inside_addr = inside.local_addr().unwrap();
        let relays = Relays::start(Vec::new(), None, vec![(port, inside)]).unwrap();
        let mut c = TcpStream::connect(inside_addr).await.unwrap();
        let mut back = Vec::new();
        let _ = c.read_to_end(&mut back).await;
        assert!(back.is_empty());
        let report = relays.finish().await;
        assert_eq!(report[0].counts.failed, 1);
        assert_eq!(report[0].counts.connections, 0);
    }

    /// A published port's connections go where the connect-inside function says, to the
    /// sandbox port of the entry; finishing the relay closes its listener.
    #[tokio::test]
    async fn a_published_port_connects_inside_and_is_gone_when_finished() {
        let program = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let program_port = program.local_addr().unwrap().port();
        let served = std::thread::spawn(move || {
            use std::io::{Read, Write};
            let (mut s, _) = program.accept().unwrap();
            let mut b = [0u8; 4];
            s.read_exact(&mut b).unwrap();
            s.write_all(&b).unwrap();
        });
        let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let asked_too = Arc::clone(&asked);
        let inside: ConnectInside = Arc::new(move |port| {
            asked_too.lock().unwrap().push(port);
            let (tx, rx) = oneshot::channel();
            let _ = tx.send(std::net::TcpStream::connect((
                Ipv4Addr::LOCALHOST,
                program_port,
            )));
            rx
        });
        let host = loopback();
        let host_addr = host.local_addr().unwrap();
        let entry = PublishedPort {
            host_port: host_addr.port(),
            sandbox_port: 8000,
        };
        let relays = Relays::start(vec![(entry, host)], Some(inside), Vec::new()).unwrap();
        let mut c = TcpStream::connect(host_addr).await.unwrap();
        c.write_all(b"ping").await.unwrap();
        let mut b = [0u8; 4];
        c.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"ping");
        served.join().unwrap();
        assert_eq!(*asked.lock().unwrap(), [8000]);
        let report = relays.finish().await;
        assert_eq!(report[0].counts.connections, 1);
        assert!(TcpStream::connect(host_addr).await.is_err());
        assert!(Relays::start(vec![(entry, loopback())], None, Vec::new()).is_err());
    }
}
