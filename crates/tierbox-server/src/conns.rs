//! The HTTP server's connections: accepted under a cap, timed out when silent, and the
//! idle ones given up first when the cap is reached.
//!
//! - A connection must send a complete request head within [`HEADER_READ_TIMEOUT`] of
//!   opening, and of the end of its previous response (hyper's header-read timer also
//!   runs while a keep-alive connection waits for its next request): a slow-header or
//!   idle client holds a descriptor for at most that long.
//! - At most [`Limits::total`] connections are open (below the process's descriptor
//!   limit, leaving [`FD_HEADROOM`] for runs), at most [`Limits::per_peer`] from one IP
//!   address. When a cap is reached, the connection idle the longest (no request in
//!   flight — its response fully sent) is closed to make room; if every one is busy the
//!   new connection is closed at once. So a flood of idle connections cannot keep
//!   `/v1/health` (or anything else) from being answered.

use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use tokio::sync::Notify;

/// How long a connection may take to send a request head, from when it opens or its
/// previous response ends (the idle timeout of a keep-alive connection).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Most connections open at once, whatever the descriptor limit allows.
pub const MAX_CONNECTIONS: usize = 512;

/// Most connections open at once from one IP address.
pub const MAX_CONNECTIONS_PER_PEER: usize = 128;

/// Descriptors kept free of connections for runs (pipes, pidfds, cgroup and namespace
/// files) and the server's own files.
pub const FD_HEADROOM: u64 = 128;

/// Fewest connections allowed, however low the descriptor limit.
const MIN_CONNECTIONS: usize = 8;

/// The caps in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once.
    pub total: usize,
    /// Connections open at once from one IP address.
    pub per_peer: usize,
}

impl Limits {
    /// The caps for a process whose descriptor limit is `nofile`: [`MAX_CONNECTIONS`],
    /// or what `nofile` leaves after [`FD_HEADROOM`] when that is less.
    ///
    /// ```
    /// use tierbox_server::conns::Limits;
    /// assert_eq!(Limits::for_nofile(256).total, 128);
    /// assert_eq!(Limits::for_nofile(1 << 20).total, 512);
    /// assert_eq!(Limits::for_nofile(256).per_peer, 128);
    /// ```
    pub fn for_nofile(nofile: u64) -> Self {
        let room = usize::try_from(nofile.saturating_sub(FD_HEADROOM)).unwrap_or(usize::MAX);
        let total = room.clamp(MIN_CONNECTIONS, MAX_CONNECTIONS);
        Self {
            total,
            per_peer: MAX_CONNECTIONS_PER_PEER.min(total),
        }
    }

    /// The caps for this process: its soft descriptor limit is first raised to the hard
    /// limit (as servers do), then [`Limits::for_nofile`].
    pub fn for_this_process() -> Self {
        use rustix::process::{Resource, getrlimit, setrlimit};
        let mut lim = getrlimit(Resource::Nofile);
        if lim.current < lim.maximum {
            lim.current = lim.maximum;
            let _ = setrlimit(Resource::Nofile, lim);
        }
        Self::for_nofile(getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX))
    }
}

/// One open connection.
#[derive(Debug)]
pub struct Conn {
    peer: Option<IpAddr>,
    in_flight: AtomicUsize,
    idle_since: Mutex<Instant>,
    evicted: Notify,
}

impl Conn {
    /// Resolves when the tracker gives this connection up to make room.
    pub async fn evicted(&self) {
        self.evicted.notified().await;
    }

    /// Marks a request in flight until the guard (held by its response body) is dropped.
    pub fn busy(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        Busy(self.clone())
    }

    fn idle_for(&self) -> Option<Duration> {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        self.idle_since.lock().ok().map(|t| t.elapsed())
    }
}

/// A request in flight on a connection (see [`Conn::busy`]).
#[derive(Debug)]
pub struct Busy(Arc<Conn>);

impl Drop for Busy {
    fn drop(&mut self) {
        if let Ok(mut t) = self.0.idle_since.lock() {
            *t = Instant::now();
        }
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The open connections.
#[derive(Debug)]
pub struct Tracker {
    limits: Limits,
    open: Mutex<Vec<Arc<Conn>>>,
}

/// A connection's place in the tracker, given back when dropped.
#[derive(Debug)]
pub struct Admitted {
    tracker: Arc<Tracker>,
    /// The connection.
    pub conn: Arc<Conn>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Ok(mut open) = self.tracker.open.lock() {
            open.retain(|c| !Arc::ptr_eq(c, &self.conn));
        }
    }
}

impl Tracker {
    /// A tracker enforcing `limits`.
    pub fn new(limits: Limits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            open: Mutex::new(Vec::new()),
        })
    }

    /// The caps.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.lock().map(|o| o.len()).unwrap_or(0)
    }

    /// Admits a connection from `peer` (`None`: a unix socket), closing the longest-idle
    /// connection when a cap is reached; `None` when every connection in the way is busy.
    pub fn admit(self: &Arc<Self>, peer: Option<IpAddr>) -> Option<Admitted> {
        let mut open = self.open.lock().ok()?;
        let from_peer = |c: &Arc<Conn>| peer.is_some() && c.peer == peer;
        // The total cap first, then the peer's, each counted after the previous eviction.
        for same_peer in [false, true] {
            let full = if same_peer {
                open.iter().filter(|c| from_peer(c)).count() >= self.limits.per_peer
            } else {
                open.len() >= self.limits.total
            };
            if !full {
                continue;
            }
            let victim = open
                .iter()
                .enumerate()
                .filter(|(_, c)| !same_peer || from_peer(c))
                .filter_map(|(i, c)| c.idle_for().map(|d| (i, d)))
                .max_by_key(|(_, d)| *d)
                .map(|(i, _)| i)?;
            let gone = open.remove(victim);
            gone.evicted.notify_one();
        }
        let conn = Arc::new(Conn {
            peer,
            in_flight: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
            evicted: Notify::new(),
        });
        open.push(conn.clone());
        Some(Admitted {
            tracker: self.clone(),
            conn,
        })
    }
}

/// A response body that keeps its request marked in flight until it is dropped (fully
/// sent, or abandoned with its connection).
#[derive(Debug)]
pub struct BusyBody {
    inner: Body,
    _busy: Busy,
}

impl BusyBody {
    /// `inner`, holding `busy`.
    pub fn new(inner: Body, busy: Busy) -> Self {
        Self { inner, _busy: busy }
    }
}

impl http_body::Body for BusyBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Pause after a failed `accept` (e.g. `EMFILE`), so a full descriptor table does not
/// spin the accept loop.
pub const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(50);

/// A listener the server accepts connections from.
pub trait Accept: Send + 'static {
    /// A connection.
    type Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static;
    /// The next connection and its peer's IP address (`None` for a unix socket).
    fn accept(
        &mut self,
    ) -> impl std::future::Future<Output = std::io::Result<(Self::Io, Option<IpAddr>)>> + Send;
}

impl Accept for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;
    async fn accept(&mut self) -> std::io::Result<(Self::Io, Option<IpAddr>)> {
        let (io, peer) = tokio::net::TcpListener::accept(self).await?;
        Ok((io, Some(peer.ip())))
    }
}

/// A unix socket accepts only connections of processes running as the server's own
/// effective uid (`SO_PEERCRED`); any other is closed unanswered. The socket's mode (0600)
/// keeps other users out already; this holds even if the mode is loosened, and against
/// root's processes of another uid.
impl Accept for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;
    async fn accept(&mut self) -> std::io::Result<(Self::Io, Option<IpAddr>)> {
        let own = rustix::process::geteuid().as_raw();
        loop {
            let (io, _) = tokio::net::UnixListener::accept(self).await?;
            match io.peer_cred() {
                Ok(cred) if cred.uid() == own => return Ok((io, None)),
                _ => drop(io),
            }
        }
    }
}

/// Serves `app` on every connection of `listener` until `stop` is notified; then stops
/// accepting, lets each connection finish its request in flight, and returns when all
/// have closed. Connections are admitted by a [`Tracker`] with
/// [`Limits::for_this_process`], each with [`HEADER_READ_TIMEOUT`].
pub async fn serve<A: Accept>(
    mut listener: A,
    app: axum::Router,
    stop: Arc<Notify>,
) -> std::io::Result<()> {
    let tracker = Tracker::new(Limits::for_this_process());
    let (down_tx, down_rx) = tokio::sync::watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            () = stop.notified() => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((io, peer)) => {
                    // Over the caps with every connection busy: closed at once.
                    if let Some(admitted) = tracker.admit(peer) {
                        tasks.spawn(serve_one(io, admitted, app.clone(), down_rx.clone()));
                    }
                }
                Err(_) => tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await,
            },
        }
    }
    let _ = down_tx.send(true);
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// One connection: HTTP/1.1 with the header-read timeout, until it closes, is evicted,
/// or the server stops (then its request in flight is finished first).
async fn serve_one<S>(
    io: S,
    admitted: Admitted,
    app: axum::Router,
    mut down: tokio::sync::watch::Receiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let conn = admitted.conn.clone();
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let mut app = app.clone();
        let busy = conn.busy();
        async move {
            std::future::poll_fn(|cx| {
                <axum::Router as tower_service::Service<axum::extract::Request>>::poll_ready(
                    &mut app, cx,
                )
            })
            .await?;
            let resp = tower_service::Service::call(&mut app, req.map(Body::new)).await?;
            Ok::<_, std::convert::Infallible>(resp.map(|b| BusyBody::new(b, busy)))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .keep_alive(true);
    let http = builder.serve_connection(hyper_util::rt::TokioIo::new(io), svc);
    tokio::pin!(http);
    tokio::select! {
        _ = http.as_mut() => return,
        () = admitted.conn.evicted() => {}
        _ = down.wait_for(|d| *d) => {}
    }
    http.as_mut().graceful_shutdown();
    let _ = http.await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_longest_idle_connection_makes_room_and_busy_ones_stay() {
        let t = Tracker::new(Limits {
            total: 3,
            per_peer: 2,
        });
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let first = t.admit(Some(a)).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let second = t.admit(Some(a)).unwrap();
        // Per peer: the third from `a` pushes out the longest idle, `first`.
        let third = t.admit(Some(a)).unwrap();
        assert_eq!(t.open(), 2);
        assert!(
            !t.open
                .lock()
                .unwrap()
                .iter()
                .any(|c| Arc::ptr_eq(c, &first.conn))
        );
        // Busy connections are never given up: both of `a`'s busy, a fourth is refused.
        let (_x, _y) = (second.conn.busy(), third.conn.busy());
        assert!(t.admit(Some(a)).is_none());
        // Another peer still gets in (total 3), then the total cap holds.
        let other = t.admit(Some(b)).unwrap();
        assert_eq!(t.open(), 3);
        let _z = other.conn.busy();
        assert!(t.admit(None).is_none());
        drop(other);
        assert!(t.admit(None).is_some());
    }

    /// One eviction makes room under both caps at once: a connection that fills the
    /// total and its peer's share pushes out one idle connection, not two.
    #[test]
    fn one_eviction_serves_both_caps() {
        let t = Tracker::new(Limits {
            total: 2,
            per_peer: 2,
        });
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let _first = t.admit(Some(a)).unwrap();
        let _second = t.admit(Some(a)).unwrap();
        let _third = t.admit(Some(a)).unwrap();
        assert_eq!(t.open(), 2);
    }

    #[test]
    fn limits_leave_headroom_below_the_descriptor_limit() {
        assert_eq!(Limits::for_nofile(0).total, MIN_CONNECTIONS);
        assert_eq!(Limits::for_nofile(FD_HEADROOM + 100).total, 100);
        assert_eq!(Limits::for_nofile(u64::MAX).total, MAX_CONNECTIONS);
    }
}
