#![allow(clippy::unwrap_used)]
use super::*;

fn remote(last: u8) -> Peer {
    Peer::Remote(IpAddr::from([192, 0, 2, last]))
}

fn is_open(t: &Tracker, a: &Admitted) -> bool {
    t.open().conns.iter().any(|c| Arc::ptr_eq(c, &a.conn))
}

/// A connection that has been answered once and is waiting for its next request.
fn answered(a: &Admitted) {
    drop(a.conn.start().unwrap());
}

/// `app` served on a loopback port by [`serve`] with `budget` connections (each peer's
/// share the whole budget): the runtime (keep it alive), the address, and the stop signal.
fn serving(
    app: axum::Router,
    budget: usize,
) -> (tokio::runtime::Runtime, std::net::SocketAddr, Arc<Notify>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = Limits {
        total: budget,
        per_remote_peer: budget,
    };
    let stop = Arc::new(Notify::new());
    rt.spawn(serve(listener, app, limits, stop.clone()));
    (rt, addr, stop)
}

#[test]
fn at_the_budget_idle_keep_alive_goes_first_then_the_longest_without_a_head() {
    let t = Tracker::new(Limits {
        total: 3,
        per_remote_peer: 3,
    });
    let fresh_old = t.admit(Peer::Local).unwrap();
    let fresh_new = t.admit(Peer::Local).unwrap();
    let idle = t.admit(Peer::Local).unwrap();
    answered(&idle);
    // The idle keep-alive one goes first, though it has waited the shortest.
    let _a = t.admit(Peer::Local).unwrap();
    assert!(!is_open(&t, &idle) && is_open(&t, &fresh_old));
    // Then the one without a head that has waited longest.
    let _b = t.admit(Peer::Local).unwrap();
    assert!(!is_open(&t, &fresh_old) && is_open(&t, &fresh_new));
    assert_eq!(t.len(), 3);
}

#[test]
fn a_connection_with_a_request_in_progress_is_never_given_up() {
    let t = Tracker::new(Limits {
        total: 2,
        per_remote_peer: 2,
    });
    let a = t.admit(Peer::Local).unwrap();
    let b = t.admit(Peer::Local).unwrap();
    let (_run, _streamed) = (a.conn.start().unwrap(), b.conn.start().unwrap());
    assert!(t.admit(Peer::Local).is_none());
    assert!(!t.make_room());
    assert!(!a.conn.give_up());
    assert!(is_open(&t, &a) && is_open(&t, &b));
}

#[test]
fn a_given_up_connection_starts_no_request() {
    let t = Tracker::new(Limits {
        total: 1,
        per_remote_peer: 1,
    });
    let a = t.admit(Peer::Local).unwrap();
    let _b = t.admit(Peer::Local).unwrap();
    assert!(a.conn.start().is_none());
    // Given up once: not again, and not counted.
    assert!(!a.conn.give_up());
    assert_eq!(t.len(), 1);
}

/// Every local client is one "peer" by address: a per-peer cap there would be a global
/// one. Local connections fill the whole budget; a remote address is held to its share.
#[test]
fn local_clients_share_the_budget_and_a_remote_address_is_held_to_its_share() {
    let t = Tracker::new(Limits {
        total: 4,
        per_remote_peer: 2,
    });
    let locals: Vec<_> = (0..4).map(|_| t.admit(Peer::Local).unwrap()).collect();
    let busy: Vec<_> = locals.iter().map(|a| a.conn.start().unwrap()).collect();
    assert_eq!(t.len(), 4);
    drop(busy);
    drop(locals);
    let r1 = t.admit(remote(1)).unwrap();
    let r2 = t.admit(remote(1)).unwrap();
    let _busy = r2.conn.start().unwrap();
    // The peer's third pushes out its own waiting one, not another peer's.
    let other = t.admit(remote(2)).unwrap();
    let r3 = t.admit(remote(1)).unwrap();
    assert!(!is_open(&t, &r1) && is_open(&t, &other));
    // Both of the peer's busy: a fourth from it is refused while the total has room.
    let _busy3 = r3.conn.start().unwrap();
    assert!(t.admit(remote(1)).is_none());
    assert!(t.admit(Peer::Local).is_some());
}

/// One waiting connection makes room under both caps at once: a connection that fills
/// the total and its peer's share gives up one, not two.
#[test]
fn one_giving_up_serves_both_caps() {
    let t = Tracker::new(Limits {
        total: 2,
        per_remote_peer: 2,
    });
    let _first = t.admit(remote(1)).unwrap();
    let _second = t.admit(remote(1)).unwrap();
    let _third = t.admit(remote(1)).unwrap();
    assert_eq!(t.len(), 2);
}

#[test]
fn make_room_gives_up_a_waiting_connection_and_its_close_is_announced() {
    let t = Tracker::new(Limits {
        total: 8,
        per_remote_peer: 8,
    });
    let busy = t.admit(Peer::Local).unwrap();
    let _run = busy.conn.start().unwrap();
    let waiting = t.admit(Peer::Local).unwrap();
    let closed = t.closed();
    assert!(t.make_room());
    assert!(!is_open(&t, &waiting) && is_open(&t, &busy));
    assert!(!t.make_room());
    drop(waiting);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Already notified: resolves at once.
    rt.block_on(closed);
}

#[test]
fn the_budget_leaves_the_reserve_for_runs() {
    assert_eq!(Limits::for_nofile(0, 0).total, MIN_CONNECTIONS);
    assert_eq!(Limits::for_nofile(SERVER_FDS + 100, 0).total, 100);
    assert_eq!(
        Limits::for_nofile(SERVER_FDS + 4 * FDS_PER_RUN + 100, 4).total,
        100
    );
    assert_eq!(
        Limits::for_nofile(u64::MAX, usize::MAX).total,
        MIN_CONNECTIONS
    );
    assert_eq!(Limits::for_nofile(u64::MAX, 32).total, MAX_CONNECTIONS);
    assert_eq!(Limits::for_nofile(SERVER_FDS + 20, 0).per_remote_peer, 20);
}

/// An upgraded connection (a WebSocket) whose handler keeps its [`Hold`] stays counted
/// and is never given up: at a budget of one, a newcomer is turned away while the
/// WebSocket is open and answered once it has closed. Without the hold, the connection
/// left the count when its 101 was sent, and the WebSocket's descriptor was not counted.
#[test]
fn an_upgraded_connection_keeps_its_place_while_it_lives() {
    use std::io::{Read, Write};

    use axum::extract::ws::WebSocketUpgrade;
    use axum::routing::get;

    async fn upgrade(
        axum::Extension(hold): axum::Extension<Hold>,
        ws: WebSocketUpgrade,
    ) -> axum::response::Response {
        let kept = hold.keep();
        ws.on_upgrade(move |mut socket| async move {
            while let Some(Ok(_)) = socket.recv().await {}
            drop(socket);
            drop(kept);
        })
    }
    let app = axum::Router::new()
        .route("/ws", get(upgrade))
        .route("/health", get(|| async { "ok" }));
    let (_rt, addr, stop) = serving(app, 1);
    let connect = || {
        let s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    };
    let mut ws = connect();
    ws.write_all(
        b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
          Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    )
    .unwrap();
    let mut head = [0u8; 12];
    ws.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 101");
    let health = || {
        let mut c = connect();
        // The server may close a turned-away connection before the request is written.
        let _ = c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let mut answer = Vec::new();
        let _ = c.read_to_end(&mut answer);
        String::from_utf8_lossy(&answer).into_owned()
    };
    // The WebSocket holds the one place: the newcomer is closed unanswered.
    assert_eq!(health(), "");
    drop(ws);
    let mut answered = String::new();
    for _ in 0..100 {
        answered = health();
        if !answered.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered:?}");
    stop.notify_one();
}

/// A request target one byte over the documented limit is answered 414 before any route
/// sees it, and one at the limit is routed: the limit the OpenAPI document states is the
/// one the HTTP layer keeps.
#[test]
fn a_request_target_over_the_documented_limit_is_answered_414() {
    use std::io::{Read, Write};

    use crate::openapi::MAX_REQUEST_TARGET_BYTES;
    use axum::routing::get;

    let app = axum::Router::new().route("/health", get(|| async { "ok" }));
    let (_rt, addr, stop) = serving(app, 4);
    let status = |target_len: usize| {
        let prefix = "/health?q=";
        let target = format!("{prefix}{}", "a".repeat(target_len - prefix.len()));
        assert_eq!(target.len(), target_len);
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let request = format!("GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        // The server may answer and close before the whole request is written.
        let _ = c.write_all(request.as_bytes());
        let mut answer = Vec::new();
        let _ = c.read_to_end(&mut answer);
        String::from_utf8_lossy(&answer)
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(status(MAX_REQUEST_TARGET_BYTES), "HTTP/1.1 200 OK");
    assert!(
        status(MAX_REQUEST_TARGET_BYTES + 1).starts_with("HTTP/1.1 414"),
        "over the limit"
    );
    stop.notify_one();
}
