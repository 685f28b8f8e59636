//! Tunnel behaviour end to end: blindness to content, half-close, idle timeout, the
//! tunnel cap, and closing on finish.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::test_support::*;
use crate::{Protocol, Verdict};

const ESTABLISHED: &str = "HTTP/1.1 200 Connection established\r\n\r\n";

#[tokio::test]
async fn a_connect_inside_a_tunnel_reaches_the_destination_as_data() {
    // Relaying is harmless because the proxy never parses tunnel bytes: the inner
    // CONNECT is the destination's business, and no decision is made for its host.
    let (dest, mut received, _dest) = capture_server(b"").await;
    let proxy = start(config(&["127.0.0.1", "inner.example"], &[]));
    let (mut client, head) = http_connect(&proxy, &dest.to_string()).await;
    assert_eq!(head, ESTABLISHED);
    let inner = b"CONNECT inner.example:443 HTTP/1.1\r\nHost: inner.example:443\r\n\r\n";
    client.write_all(inner).await.unwrap();
    client.shutdown().await.unwrap();
    assert_eq!(received.recv().await.unwrap(), inner);
    assert_eq!(read_to_end(&mut client).await, b"");
    let log = proxy.finish().await;
    assert_eq!(log.decisions.len(), 1, "{log:#?}");
    assert_eq!(log.decisions[0].host, "127.0.0.1");
    assert_eq!(log.decisions[0].bytes_sent, inner.len() as u64);
}

#[tokio::test]
async fn half_close_keeps_the_other_direction_open() {
    let (dest, mut received, _dest) = capture_server(b"reply").await;
    let proxy = start(config(&["127.0.0.1"], &[]));
    let (mut client, head) = http_connect(&proxy, &dest.to_string()).await;
    assert_eq!(head, ESTABLISHED);
    client.write_all(b"request").await.unwrap();
    client.shutdown().await.unwrap();
    assert_eq!(received.recv().await.unwrap(), b"request");
    assert_eq!(read_to_end(&mut client).await, b"reply");
    let log = wait_for_log(&proxy, |log| log.decisions[0].bytes_received == 5).await;
    assert_eq!(log.decisions[0].bytes_sent, 7);
}

#[tokio::test]
async fn large_transfers_arrive_intact() {
    let (echo, _echo) = echo_server().await;
    let proxy = start(config(&["127.0.0.1"], &[]));
    let (client, head) = http_connect(&proxy, &echo.to_string()).await;
    assert_eq!(head, ESTABLISHED);
    let data: Vec<u8> = (0..8 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let (mut reader, mut writer) = client.into_split();
    let expected = data.clone();
    let write = tokio::spawn(async move {
        writer.write_all(&data).await.unwrap();
        writer.shutdown().await.unwrap();
    });
    let mut got = Vec::new();
    tokio::time::timeout(PATIENCE, reader.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    write.await.unwrap();
    assert!(got == expected, "the echo differs from what was sent");
    let log = proxy.finish().await;
    let len = expected.len() as u64;
    assert_eq!(
        (log.decisions[0].bytes_sent, log.decisions[0].bytes_received),
        (len, len)
    );
}

#[tokio::test]
async fn over_the_tunnel_cap_is_503_without_waiting() {
    let (echo, _echo) = echo_server().await;
    let mut config = config(&["127.0.0.1"], &[]);
    config.max_tunnels = 1;
    let proxy = start(config);
    let (mut first, head) = http_connect(&proxy, &echo.to_string()).await;
    assert_eq!(head, ESTABLISHED);

    let (mut second, head) = http_connect(&proxy, &echo.to_string()).await;
    assert!(
        head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
        "{head}"
    );
    assert!(
        head.contains("X-Tierbox-Verdict: too_many_tunnels"),
        "{head}"
    );
    let body = String::from_utf8(read_to_end(&mut second).await).unwrap();
    assert!(body.contains("already serving 1 connections"), "{body}");

    // The first tunnel still works, and once it closes its slot is free again.
    first.write_all(b"still here").await.unwrap();
    assert_eq!(read_exact(&mut first, 10).await, b"still here");
    drop(first);
    let give_up = Instant::now() + PATIENCE;
    loop {
        let (_third, head) = http_connect(&proxy, &echo.to_string()).await;
        if head == ESTABLISHED {
            break;
        }
        assert!(
            Instant::now() < give_up,
            "the slot was never released: {head}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let log = proxy.finish().await;
    let d = &log.decisions[1];
    assert_eq!(
        (d.protocol, d.verdict, d.host.as_str(), d.port),
        (
            Protocol::Connect,
            Verdict::TooManyTunnels,
            "127.0.0.1",
            echo.port()
        )
    );
}

#[tokio::test]
async fn an_idle_tunnel_is_closed() {
    let (echo, _echo) = echo_server().await;
    let mut config = config(&["127.0.0.1"], &[]);
    config.idle_timeout = Duration::from_millis(200);
    let proxy = start(config);
    let (mut client, head) = http_connect(&proxy, &echo.to_string()).await;
    assert_eq!(head, ESTABLISHED);
    // Traffic keeps it open past the timeout...
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        client.write_all(b"tick").await.unwrap();
        assert_eq!(read_exact(&mut client, 4).await, b"tick");
    }
    // ...silence closes it.
    let quiet = Instant::now();
    assert_eq!(read_to_end(&mut client).await, b"");
    let waited = quiet.elapsed();
    assert!(
        waited >= Duration::from_millis(150),
        "closed after {waited:?}"
    );
    let log = proxy.finish().await;
    assert_eq!(log.decisions[0].bytes_sent, 16);
}

#[tokio::test]
async fn finish_closes_open_tunnels_and_reports_their_bytes() {
    let (echo, _echo) = echo_server().await;
    let proxy = start(config(&["127.0.0.1"], &[]));
    let (mut client, head) = http_connect(&proxy, &echo.to_string()).await;
    assert_eq!(head, ESTABLISHED);
    client.write_all(b"12345").await.unwrap();
    assert_eq!(read_exact(&mut client, 5).await, b"12345");
    wait_for_log(&proxy, |log| log.decisions[0].bytes_received == 5).await;
    let log = proxy.finish().await;
    assert_eq!(
        (log.decisions[0].bytes_sent, log.decisions[0].bytes_received),
        (5, 5)
    );
    // The tunnel is gone: the client sees the end of the stream (or a reset).
    assert_eq!(read_to_end(&mut client).await, b"");
}

#[tokio::test]
async fn dropping_the_proxy_closes_open_tunnels() {
    let (echo, _echo) = echo_server().await;
    let proxy = start(config(&["127.0.0.1"], &[]));
    let addr = proxy.local_addr().unwrap();
    let (mut client, head) = http_connect(&proxy, &echo.to_string()).await;
    assert_eq!(head, ESTABLISHED);
    drop(proxy);
    assert_eq!(read_to_end(&mut client).await, b"");
    // The listener is closed too (give the aborted task a moment to be dropped).
    let give_up = Instant::now() + PATIENCE;
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        assert!(Instant::now() < give_up, "still accepting after drop");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Two connected sockets: (the application's end, the proxy's end).
async fn socket_pair() -> (tokio::net::TcpStream, tokio::net::TcpStream) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let app = tokio::net::TcpStream::connect(listener.local_addr().unwrap());
    let (app, accepted) = tokio::join!(app, listener.accept());
    (app.unwrap(), accepted.unwrap().0)
}

/// Sends `data` on `stream` and then its end of stream, while reading everything the
/// other end sends until its end of stream.
async fn exchange(stream: &mut tokio::net::TcpStream, data: &[u8]) -> Vec<u8> {
    let (mut r, mut w) = stream.split();
    let send = async {
        w.write_all(data).await.unwrap();
        w.shutdown().await.unwrap();
    };
    let mut got = Vec::new();
    tokio::join!(send, async { r.read_to_end(&mut got).await.unwrap() });
    got
}

/// Both ways of moving bytes (`splice` through pipes on Linux, a buffer elsewhere or
/// when no pipe can be made), driven directly: 6 MiB each way at once, the initial
/// bytes first, each direction's end of stream passed on as a half-close, and every byte
/// counted.
async fn both_directions_intact(spliced: bool) {
    use std::sync::atomic::Ordering;
    let (mut client_app, mut client_end) = socket_pair().await;
    let (mut dest_end, mut dest_app) = socket_pair().await;
    let up: Vec<u8> = (0..6 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let down: Vec<u8> = (0..6 * 1024 * 1024u32).map(|i| (i % 241) as u8).collect();
    let counters = crate::log::Counters::default();
    let tunnel = async {
        #[cfg(target_os = "linux")]
        let pipes = spliced.then(|| {
            let pipe = || crate::tunnel::spliced::Pipe::new().unwrap();
            (pipe(), pipe())
        });
        #[cfg(not(target_os = "linux"))]
        let pipes = None;
        let (idle, ending) = (Duration::from_secs(30), crate::tunnel::Ending::WhenBothEnd);
        let (client, dest) = (&mut client_end, &mut dest_end);
        crate::tunnel::run(client, dest, b"hello ", &counters, idle, ending, pipes).await;
    };
    let client = exchange(&mut client_app, &up);
    let dest = exchange(&mut dest_app, &down);
    let ((), at_client, at_dest) =
        tokio::time::timeout(PATIENCE, async { tokio::join!(tunnel, client, dest) })
            .await
            .expect("the tunnel finished");
    assert!(
        at_dest.starts_with(b"hello "),
        "the initial bytes come first"
    );
    assert!(at_dest[6..] == up[..], "client to destination differs");
    assert!(at_client == down, "destination to client differs");
    assert_eq!(counters.sent.load(Ordering::Relaxed), up.len() as u64 + 6);
    assert_eq!(counters.received.load(Ordering::Relaxed), down.len() as u64);
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn spliced_tunnel_moves_both_directions_intact() {
    both_directions_intact(true).await;
}

#[tokio::test]
async fn copied_tunnel_moves_both_directions_intact() {
    both_directions_intact(false).await;
}
