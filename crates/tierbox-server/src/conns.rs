//! The HTTP server's connections: admitted within a descriptor budget, timed out when
//! silent, and — when the budget is spent or the descriptor table is full — the ones with
//! no request in progress closed to make room, so that no client, however many
//! connections it holds, can lock the others out.
//!
//! Invariants:
//!
//! - **A request in progress keeps its connection.** From the moment its head has been
//!   read until its response has been fully sent — a run, a streamed run, a request
//!   waiting in the admission queue — a connection is never closed to make room. Only a
//!   *waiting* connection is: an idle keep-alive one (its last response sent) or one that
//!   has not delivered a complete request head yet (fresh, or slow-header). The check
//!   and the giving up are one step under the connection's lock; a request head that
//!   arrives on a connection already given up is answered 429 `server.busy` without
//!   running.
//! - **A newcomer gets in.** At most [`Limits::total`] connections are open: what the
//!   descriptor limit leaves after [`fd_reserve`] for runs, at most [`MAX_CONNECTIONS`].
//!   A new connection at that budget closes a waiting one — idle keep-alive ones first,
//!   then those without a complete head, the longest waiting first — and is itself
//!   closed at once only when every open connection has a request in progress.
//! - **A full descriptor table does not stall the accept loop.** When `accept` fails for
//!   want of descriptors (`EMFILE`, `ENFILE`: runs holding more than the reserve
//!   foresaw), a waiting connection is closed and `accept` retried as soon as its
//!   descriptor is free. If none is waiting, a spare descriptor kept for this is let go
//!   to accept one connection and close it at once — refused, rather than left hanging
//!   in the backlog — and taken again, and the loop pauses for
//!   [`ACCEPT_ERROR_BACKOFF`] instead of spinning.
//! - **A given-up connection's descriptor is freed at once.** hyper's graceful shutdown
//!   keeps a connection that has sent part of its first request head until the
//!   header-read timeout; such a connection has never been answered, so it is dropped
//!   outright. One that has been answered is shut down gracefully, for at most
//!   [`GIVEN_UP_FLUSH_TIMEOUT`], so the end of its last response is not cut off. Each
//!   connection's own task closes it; with [`MAX_CLOSING`] of them not closed yet the
//!   accept loop waits for one before accepting more, so a flood cannot outrun them, and
//!   the listen backlog ([`LISTEN_BACKLOG`]) holds the connections arriving meanwhile.
//! - **Stopping** closes every waiting connection at once and lets each one with a
//!   request in progress finish it.
//! - Every waiting connection is closed after [`HEADER_READ_TIMEOUT`].
//! - **An upgraded connection is a request in progress.** A request whose connection
//!   outlives its response (a term's WebSocket) keeps the connection counted and never
//!   given up, through the [`Hold`] in its extensions, until the WebSocket ends.
//!
//! **Per peer.** A remote address (served only with `--dangerously-allow-remote`) may
//! hold at most [`Limits::per_remote_peer`] connections; at that cap its own longest
//! waiting one makes room. Local clients — loopback TCP and the unix socket — are not
//! capped per peer: they are all processes of this host, which every loopback address
//! (and every unix connection, which must come from the server's own uid) lumps into one
//! "peer", so a per-address cap there would be one cap shared by every local client, and
//! one client filling it would lock out the rest. They share [`Limits::total`], where
//! giving up waiting connections keeps any of them from holding it.
//!
//! **Not covered.** A connection with a request in progress holds its descriptor for as
//! long as the request lasts — a body sent slowly (up to the 128 KiB request cap), a run
//! and its streamed output, a response the client does not read. On the authenticated
//! routes such requests are bounded by the admission limit (`--max-concurrent` plus
//! `--queue`); when that exceeds the budget, those connections can fill it and a
//! newcomer is refused until one ends.

use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::IntoResponse;
use tokio::sync::Notify;

/// How long a connection may take to send a request head, from when it opens or its
/// previous response ends (the idle timeout of a keep-alive connection).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Most connections open at once, whatever the descriptor limit allows: bounds the
/// server's memory for connections and the length of the scan for one to give up.
pub const MAX_CONNECTIONS: usize = 512;

/// Most connections open at once from one remote IP address (see the module docs for
/// why local clients have no such cap).
pub const MAX_CONNECTIONS_PER_REMOTE_PEER: usize = 128;

/// Descriptors kept for the server's own files whatever it runs: the runtime, the
/// listener, the state directory, signing key and audit log, the watchdog's pipe, the
/// warm run slots the sandbox keeps (at most 8, each with a landlock ruleset and cgroup
/// attach files), and the accept loop's spare descriptor and [`MAX_CLOSING`]
/// given-up connections. Measured, without the last two: about 90.
pub const SERVER_FDS: u64 = 128;

/// Connections given up to make room whose descriptors may still be open (their tasks
/// close them) before the accept loop waits for one to close: slack for a burst, taken
/// from [`SERVER_FDS`].
pub const MAX_CLOSING: usize = 8;

/// Descriptors one run holds in the server while it runs, foreground or background:
/// its stdio pipes, pidfd, cgroup and usage files, seccomp listener and spill files.
/// Measured: 18 for a Tier B or C `sleep`, 20 for a background process. Not covered:
/// the sockets of a run's egress proxy, one pair per connection the run makes through it.
pub const FDS_PER_RUN: u64 = 24;

/// Fewest connections allowed, however low the descriptor limit: below the reserve the
/// runs cannot all have their descriptors anyway, and the server must still answer.
const MIN_CONNECTIONS: usize = 8;

/// How long a given-up connection that has been answered before may take to finish
/// sending its last response before its descriptor is taken back.
pub const GIVEN_UP_FLUSH_TIMEOUT: Duration = Duration::from_millis(250);

/// Pause after a failed `accept` that closing a waiting connection could not cure, so a
/// full descriptor table does not spin the accept loop; also the longest wait for a
/// given-up connection's descriptor to be closed before the next `accept`.
pub const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(50);

/// Descriptors to keep free of connections for `runs` runs at once: [`SERVER_FDS`] plus
/// [`FDS_PER_RUN`] for each.
///
/// ```
/// use tierbox_server::conns::{FDS_PER_RUN, SERVER_FDS, fd_reserve};
/// assert_eq!(fd_reserve(32), SERVER_FDS + 32 * FDS_PER_RUN);
/// ```
pub fn fd_reserve(runs: usize) -> u64 {
    let runs = u64::try_from(runs).unwrap_or(u64::MAX);
    SERVER_FDS.saturating_add(FDS_PER_RUN.saturating_mul(runs))
}

/// The caps in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once, from every peer together.
    pub total: usize,
    /// Connections open at once from one remote IP address; local clients have no
    /// per-peer cap.
    pub per_remote_peer: usize,
}

impl Limits {
    /// The caps for a process whose descriptor limit is `nofile` and that runs up to
    /// `runs` runs at once: what `nofile` leaves after [`fd_reserve`]`(runs)`, between
    /// 8 and [`MAX_CONNECTIONS`].
    ///
    /// ```
    /// use tierbox_server::conns::Limits;
    /// // 16 foreground runs and 16 background processes: 896 descriptors kept for them.
    /// assert_eq!(Limits::for_nofile(1024, 32).total, 128);
    /// assert_eq!(Limits::for_nofile(1 << 20, 32).total, 512);
    /// assert_eq!(Limits::for_nofile(256, 32).total, 8);
    /// assert_eq!(Limits::for_nofile(1 << 20, 32).per_remote_peer, 128);
    /// ```
    pub fn for_nofile(nofile: u64, runs: usize) -> Self {
        let room = nofile.saturating_sub(fd_reserve(runs));
        let total = usize::try_from(room)
            .unwrap_or(usize::MAX)
            .clamp(MIN_CONNECTIONS, MAX_CONNECTIONS);
        Self {
            total,
            per_remote_peer: MAX_CONNECTIONS_PER_REMOTE_PEER.min(total),
        }
    }

    /// The caps for this process running up to `runs` runs at once: its soft descriptor
    /// limit is first raised to the hard limit (as servers do), then
    /// [`Limits::for_nofile`].
    pub fn for_this_process(runs: usize) -> Self {
        use rustix::process::{Resource, getrlimit, setrlimit};
        let mut lim = getrlimit(Resource::Nofile);
        if lim.current < lim.maximum {
            lim.current = lim.maximum;
            let _ = setrlimit(Resource::Nofile, lim);
        }
        Self::for_nofile(
            getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX),
            runs,
        )
    }
}

/// Who is at the other end of a connection, as far as the caps are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// A process of this host: over the unix socket, or from a loopback address.
    Local,
    /// Another host.
    Remote(IpAddr),
}

impl Peer {
    /// The peer at `ip`: [`Peer::Local`] for any loopback address (IPv4-mapped too).
    ///
    /// ```
    /// use tierbox_server::conns::Peer;
    /// assert_eq!(Peer::of("127.0.0.2".parse().unwrap()), Peer::Local);
    /// assert_eq!(Peer::of("::ffff:127.0.0.1".parse().unwrap()), Peer::Local);
    /// assert!(matches!(Peer::of("192.0.2.1".parse().unwrap()), Peer::Remote(_)));
    /// ```
    pub fn of(ip: IpAddr) -> Self {
        if ip.to_canonical().is_loopback() {
            Self::Local
        } else {
            Self::Remote(ip)
        }
    }
}

/// Why a connection may be given up, in the order they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Waiting {
    /// Its last response has been sent; nothing since.
    IdleKeepAlive,
    /// It has not delivered a complete request head yet.
    NoRequestYet,
}

#[derive(Debug)]
struct ConnState {
    /// Requests whose head has been read and whose response has not been fully sent
    /// (at most one at a time over HTTP/1.1).
    requests: usize,
    /// Responses fully sent.
    served: u64,
    /// The tracker's tick when it opened or its last response ended: the smaller, the
    /// longer it has been waiting.
    since: u64,
    /// Given up by the tracker: no request starts on it any more.
    given_up: bool,
}

/// One open connection.
#[derive(Debug)]
pub struct Conn {
    peer: Peer,
    state: Mutex<ConnState>,
    ticks: Arc<AtomicU64>,
    given_up: Notify,
}

impl Conn {
    fn state(&self) -> MutexGuard<'_, ConnState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Resolves when the tracker gives this connection up to make room (or
    /// [`Conn::give_up`] did).
    pub async fn given_up(&self) {
        self.given_up.notified().await;
    }

    /// Marks a request in progress until the guard (held by its response body) is
    /// dropped; `None` if the connection has been given up (the request must not run).
    pub fn start(self: &Arc<Self>) -> Option<Busy> {
        let mut st = self.state();
        if st.given_up {
            return None;
        }
        st.requests += 1;
        Some(Busy(self.clone()))
    }

    /// Whether a response has been fully sent on it.
    pub fn has_served(&self) -> bool {
        self.state().served > 0
    }

    /// Gives this connection up if it is waiting (no request in progress): from then on
    /// no request starts on it. Whether it was.
    pub fn give_up(&self) -> bool {
        let mut st = self.state();
        if st.given_up || st.requests > 0 {
            return false;
        }
        st.given_up = true;
        self.given_up.notify_one();
        true
    }

    /// Why and since when it may be given up; `None` while a request is in progress.
    fn waiting(&self) -> Option<(Waiting, u64)> {
        let st = self.state();
        if st.given_up || st.requests > 0 {
            return None;
        }
        let why = if st.served > 0 {
            Waiting::IdleKeepAlive
        } else {
            Waiting::NoRequestYet
        };
        Some((why, st.since))
    }
}

/// A request in progress on a connection (see [`Conn::start`]).
#[derive(Debug)]
pub struct Busy(Arc<Conn>);

impl Drop for Busy {
    fn drop(&mut self) {
        let tick = self.0.ticks.fetch_add(1, Ordering::Relaxed);
        let mut st = self.0.state();
        st.requests -= 1;
        st.served += 1;
        st.since = tick;
    }
}

/// The open connections.
#[derive(Debug)]
pub struct Tracker {
    limits: Limits,
    open: Mutex<Open>,
    /// Orders connections by how long they have been waiting.
    ticks: Arc<AtomicU64>,
    /// Notified (all waiters) each time an admitted connection's descriptor is closed.
    closed: Notify,
}

#[derive(Debug, Default)]
struct Open {
    /// Connections counted against the caps.
    conns: Vec<Arc<Conn>>,
    /// Connections given up to make room whose descriptors are not closed yet.
    closing: usize,
}

/// A connection's place in the tracker, given back when dropped. Drop it after the
/// connection's I/O object: its drop announces that the descriptor is free.
#[derive(Debug)]
pub struct Admitted {
    tracker: Arc<Tracker>,
    /// The connection.
    pub conn: Arc<Conn>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.tracker.open();
        match open.conns.iter().position(|c| Arc::ptr_eq(c, &self.conn)) {
            Some(i) => {
                open.conns.swap_remove(i);
            }
            // Given up to make room: out of the count since then.
            None => open.closing = open.closing.saturating_sub(1),
        }
        drop(open);
        self.tracker.closed.notify_waiters();
    }
}

impl Tracker {
    /// A tracker enforcing `limits`.
    pub fn new(limits: Limits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            open: Mutex::new(Open::default()),
            ticks: Arc::new(AtomicU64::new(0)),
            closed: Notify::new(),
        })
    }

    fn open(&self) -> MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The caps.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Connections open now (not counting those given up).
    pub fn len(&self) -> usize {
        self.open().conns.len()
    }

    /// Connections given up to make room whose descriptors are not closed yet.
    pub fn closing(&self) -> usize {
        self.open().closing
    }

    /// Whether no connection is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Admits a connection from `peer`, giving up a waiting connection when a cap is
    /// reached (see the module docs); `None` when every connection in the way has a
    /// request in progress.
    pub fn admit(self: &Arc<Self>, peer: Peer) -> Option<Admitted> {
        let mut open = self.open();
        if open.conns.len() >= self.limits.total && !give_up_one(&mut open, |_| true) {
            return None;
        }
        // Counted after the total's giving up: one waiting connection of this peer
        // makes room under both caps.
        if let Peer::Remote(_) = peer {
            let same = |c: &Conn| c.peer == peer;
            let mine = open.conns.iter().filter(|c| same(c)).count();
            if mine >= self.limits.per_remote_peer && !give_up_one(&mut open, same) {
                return None;
            }
        }
        let conn = Arc::new(Conn {
            peer,
            state: Mutex::new(ConnState {
                requests: 0,
                served: 0,
                since: self.ticks.fetch_add(1, Ordering::Relaxed),
                given_up: false,
            }),
            ticks: self.ticks.clone(),
            given_up: Notify::new(),
        });
        open.conns.push(conn.clone());
        Some(Admitted {
            tracker: self.clone(),
            conn,
        })
    }

    /// Gives up one waiting connection of any peer (for a descriptor table that is
    /// full). Whether there was one.
    pub fn make_room(&self) -> bool {
        give_up_one(&mut self.open(), |_| true)
    }

    /// Resolves at the next close of an admitted connection's descriptor after this
    /// call (create it before giving one up, then await it).
    pub fn closed(&self) -> tokio::sync::futures::Notified<'_> {
        self.closed.notified()
    }
}

/// Gives up the first waiting connection among `open` that `among` picks — idle
/// keep-alive before never-answered, the longest waiting first — and takes it out of
/// the count (it is [`Open::closing`] until its descriptor is closed). Whether there was
/// one.
fn give_up_one(open: &mut Open, among: impl Fn(&Conn) -> bool) -> bool {
    // A connection may start a request between the look and the giving up (it is then
    // no longer waiting, and the next look passes it over); each retry has one
    // candidate fewer, so this ends.
    for _ in 0..open.conns.len() {
        let victim = open
            .conns
            .iter()
            .enumerate()
            .filter(|(_, c)| among(c))
            .filter_map(|(i, c)| c.waiting().map(|w| (w, i)))
            .min()
            .map(|(_, i)| i);
        let Some(i) = victim else {
            return false;
        };
        if open.conns[i].give_up() {
            open.conns.swap_remove(i);
            open.closing += 1;
            return true;
        }
    }
    false
}

/// A connection's place in the tracker, as a request sees it (in the extensions of every
/// request [`serve`] serves): a request whose connection lives on past its response (a
/// WebSocket handshake) keeps it with [`Hold::keep`].
#[derive(Debug, Clone)]
pub struct Hold(Arc<Admitted>);

impl Hold {
    /// Keeps the connection counted against the caps and marked as having a request in
    /// progress (so never given up to make room) until the guard is dropped; drop it
    /// after the connection's I/O object. `None` if it has been given up.
    pub fn keep(&self) -> Option<Kept> {
        let busy = self.0.conn.start()?;
        Some(Kept {
            _busy: busy,
            _admitted: self.0.clone(),
        })
    }
}

/// A connection kept by [`Hold::keep`]: marked busy, then counted, until dropped (in
/// that order).
#[derive(Debug)]
pub struct Kept {
    _busy: Busy,
    _admitted: Arc<Admitted>,
}

/// A response body that keeps its request marked in progress until it is dropped
/// (fully sent, or abandoned with its connection).
#[derive(Debug)]
pub struct BusyBody {
    inner: Body,
    _busy: Option<Busy>,
}

impl BusyBody {
    /// `inner`, holding `busy`.
    pub fn new(inner: Body, busy: Option<Busy>) -> Self {
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

/// A listener the server accepts connections from.
pub trait Accept: Send + 'static {
    /// A connection.
    type Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static;
    /// The next connection and its peer.
    fn accept(
        &mut self,
    ) -> impl std::future::Future<Output = std::io::Result<(Self::Io, Peer)>> + Send;
}

impl Accept for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;
    async fn accept(&mut self) -> std::io::Result<(Self::Io, Peer)> {
        let (io, peer) = tokio::net::TcpListener::accept(self).await?;
        Ok((io, Peer::of(peer.ip())))
    }
}

/// A unix socket accepts only connections of processes running as the server's own
/// effective uid (`SO_PEERCRED`); any other is closed unanswered. The socket's mode (0600)
/// keeps other users out already; this holds even if the mode is loosened, and against
/// root's processes of another uid.
impl Accept for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;
    async fn accept(&mut self) -> std::io::Result<(Self::Io, Peer)> {
        let own = rustix::process::geteuid().as_raw();
        loop {
            let (io, _) = tokio::net::UnixListener::accept(self).await?;
            match io.peer_cred() {
                Ok(cred) if cred.uid() == own => return Ok((io, Peer::Local)),
                _ => drop(io),
            }
        }
    }
}

/// Whether `accept` failed for want of a descriptor (or the memory for one).
fn out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Whether `accept` failed for the connection at hand only (it went away first): the
/// next one can be accepted at once.
fn this_connection_only(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::Interrupted
    ) || e.raw_os_error() == Some(libc::EPROTO)
}

/// A descriptor held in reserve, let go only to accept a connection and close it when
/// the descriptor table is full and no connection can be given up.
fn spare_descriptor() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

/// Connections the kernel queues, handshake complete, before the server accepts them
/// (Linux caps it at `net.core.somaxconn`). Past it a TCP client's `connect` stalls for a
/// SYN retransmit (a second) and a unix client's blocks: deep enough to absorb a burst of
/// connections while the accept loop waits for given-up ones to close.
pub const LISTEN_BACKLOG: i32 = 1024;

/// Accepts one connection on the spare descriptor and closes it at once.
async fn turn_away<A: Accept>(listener: &mut A, spare: &mut Option<std::fs::File>) {
    if spare.take().is_some()
        && let Ok(Ok((io, _))) = tokio::time::timeout(ACCEPT_ERROR_BACKOFF, listener.accept()).await
    {
        drop(io);
    }
    *spare = spare_descriptor();
}

/// Serves `app` on every connection of `listener` until `stop` is notified; then stops
/// accepting, closes the waiting connections, lets each other finish its request in
/// progress, and returns when all have closed. Connections are admitted by a
/// [`Tracker`] with `limits`, each with [`HEADER_READ_TIMEOUT`].
pub async fn serve<A: Accept>(
    mut listener: A,
    app: axum::Router,
    limits: Limits,
    stop: Arc<Notify>,
) -> std::io::Result<()> {
    let tracker = Tracker::new(limits);
    let mut spare = spare_descriptor();
    let (down_tx, down_rx) = tokio::sync::watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            () = stop.notified() => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((io, peer)) => {
                    let closed = tracker.closed();
                    // Over the caps with every connection busy: closed at once.
                    if let Some(admitted) = tracker.admit(peer) {
                        tasks.spawn(serve_one(io, admitted, app.clone(), down_rx.clone()));
                    }
                    if spare.is_none() {
                        spare = spare_descriptor();
                    }
                    // A given-up connection's descriptor is closed by its own task: under
                    // a flood, accepting waits for that past a few, or the descriptors of
                    // connections accepted faster than their tasks run would fill the
                    // table.
                    if tracker.closing() >= MAX_CLOSING {
                        let _ = tokio::time::timeout(ACCEPT_ERROR_BACKOFF, closed).await;
                    }
                }
                Err(e) if out_of_descriptors(&e) => {
                    let closed = tracker.closed();
                    if tracker.make_room() || tracker.closing() > 0 {
                        // A descriptor is free once a given-up connection's task has
                        // dropped it.
                        let _ = tokio::time::timeout(ACCEPT_ERROR_BACKOFF, closed).await;
                    } else {
                        drop(closed);
                        turn_away(&mut listener, &mut spare).await;
                        tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                    }
                }
                Err(e) if this_connection_only(&e) => {}
                Err(_) => tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await,
            },
        }
    }
    let _ = down_tx.send(true);
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// The answer to a request head read on a connection already given up: it did not run.
fn given_up_response() -> axum::response::Response {
    let mut resp = crate::http::ApiError(crate::service::ServiceError::new(
        "server.busy",
        "this connection was closed to make room for others before the request started; \
         send it again on a new connection",
    ))
    .into_response();
    resp.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    resp
}

/// One connection: HTTP/1.1 with the header-read timeout, until it closes, is given up,
/// or the server stops (then a request in progress is finished first).
async fn serve_one<S>(
    io: S,
    admitted: Admitted,
    app: axum::Router,
    mut down: tokio::sync::watch::Receiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let conn = admitted.conn.clone();
    // Shared with the requests: an upgraded connection's place outlives this task.
    let admitted = Arc::new(admitted);
    let hold = Hold(admitted.clone());
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let mut app = app.clone();
        let mut req = req.map(Body::new);
        req.extensions_mut().insert(hold.clone());
        // Synchronously, as hyper hands over the request head: from here on the
        // connection is not given up, or the request does not run.
        let busy = conn.start();
        async move {
            let Some(busy) = busy else {
                return Ok(given_up_response().map(|b| BusyBody::new(b, None)));
            };
            std::future::poll_fn(|cx| {
                <axum::Router as tower_service::Service<axum::extract::Request>>::poll_ready(
                    &mut app, cx,
                )
            })
            .await?;
            let resp = tower_service::Service::call(&mut app, req).await?;
            Ok::<_, std::convert::Infallible>(resp.map(|b| BusyBody::new(b, Some(busy))))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .keep_alive(true);
    // Boxed, not pinned on the stack, so it can be dropped (closing the descriptor)
    // before the tracker is told.
    let mut http = Box::pin(
        builder
            .serve_connection(hyper_util::rt::TokioIo::new(io), svc)
            .with_upgrades(),
    );
    let conn = &admitted.conn;
    let end = tokio::select! {
        _ = http.as_mut() => End::Closed,
        () = conn.given_up() => End::GivenUp,
        // Stopping: a waiting connection is closed now, one with a request in progress
        // finishes it first.
        _ = down.wait_for(|d| *d) => if conn.give_up() { End::GivenUp } else { End::Stop },
    };
    match end {
        End::Closed => {}
        // No request in progress, and none can start. Never answered: nothing to flush,
        // and hyper's graceful shutdown would keep a half-sent head until the
        // header-read timeout, so it is dropped at once. Answered before: the end of
        // the last response may still be in hyper's buffer.
        End::GivenUp => {
            if conn.has_served() {
                http.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(GIVEN_UP_FLUSH_TIMEOUT, http.as_mut()).await;
            }
        }
        End::Stop => {
            http.as_mut().graceful_shutdown();
            let _ = http.as_mut().await;
        }
    }
    drop(http);
    drop(admitted);
}

/// How [`serve_one`]'s connection came to an end.
enum End {
    /// The client closed it, the header-read timeout did, or it failed.
    Closed,
    /// Given up, to make room or because the server stops.
    GivenUp,
    /// The server stops while a request is in progress.
    Stop,
}

#[cfg(test)]
#[path = "conns_tests.rs"]
mod tests;
