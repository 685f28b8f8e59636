//! The accept loop under hostile use: floods of denials, random bytes, silence.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tokio::io::AsyncWriteExt;

use crate::test_support::*;
use crate::{MAX_DECISIONS, Proxy, ProxyConfig, Verdict};

#[tokio::test]
async fn decisions_past_the_cap_are_counted_in_dropped() {
    let proxy = start(config(&["allowed.test"], &[]));
    let total = MAX_DECISIONS + 6;
    // A few clients at a time, each asking for a host that is not allowed.
    let mut pending = Vec::new();
    for i in 0..total {
        let addr = proxy.local_addr().unwrap();
        pending.push(tokio::spawn(async move {
            let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
            client
                .write_all(format!("CONNECT denied-{i}.test:443 HTTP/1.1\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let response = read_to_end(&mut client).await;
            assert!(response.starts_with(b"HTTP/1.1 403 "));
        }));
        if pending.len() == 16 {
            for task in pending.drain(..) {
                task.await.unwrap();
            }
        }
    }
    for task in pending {
        task.await.unwrap();
    }
    let log = proxy.finish().await;
    assert_eq!(log.decisions.len(), MAX_DECISIONS);
    assert_eq!(log.dropped, 6);
    assert!(
        log.decisions
            .iter()
            .all(|d| d.verdict == Verdict::NotAllowlisted)
    );
}

/// xorshift64*: deterministic, good enough to make junk.
struct Junk(u64);

impl Junk {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

/// Random input shaped like each protocol's beginnings, so the fuzz reaches past the
/// first byte.
fn junk_input(junk: &mut Junk) -> Vec<u8> {
    const PREFIXES: &[&[u8]] = &[
        b"",
        b"\x05",
        b"\x05\x01\x00",
        b"\x05\x01\x00\x05\x01\x00\x03",
        b"\x05\x02\x00\x02\x05\x03\x00\x01",
        b"\x04\x01",
        b"CONNECT ",
        b"CONNECT [",
        b"GET http://",
        b"GET / HTTP/1.1\r\nHost: ",
        b"POST https://",
        b"GET http://127.0.0.1:1/ HTTP/1.1\r\n",
    ];
    let mut input = PREFIXES[junk.below(PREFIXES.len())].to_vec();
    let len = junk.below(300);
    input.extend(junk.bytes(len));
    if junk.below(3) == 0 {
        input.extend_from_slice(b"\r\n\r\n");
    }
    input
}

#[tokio::test]
async fn random_bytes_never_break_the_proxy() {
    let (echo, _echo) = echo_server().await;
    let proxy = start(config(&["127.0.0.1:1"], &[]));
    let mut junk = Junk(0x9e37_79b9_7f4a_7c15);
    for _ in 0..400 {
        let input = junk_input(&mut junk);
        let mut client = connect(&proxy).await;
        // The proxy may refuse and close before reading everything; that is fine.
        let _ = client.write_all(&input).await;
        let _ = client.shutdown().await;
        let _ = read_to_end(&mut client).await;
    }
    let log = proxy.log();
    assert!(log.decisions.iter().all(|d| !d.allowed), "{log:#?}");
    assert!(
        log.decisions
            .iter()
            .all(|d| d.message.starts_with("egress ") && !d.message.contains('\n')),
        "{log:#?}"
    );
    drop(proxy);

    // And a proxy that just ate junk still serves.
    let proxy = start(config(&["127.0.0.1"], &[]));
    for _ in 0..50 {
        let mut client = connect(&proxy).await;
        let _ = client.write_all(&junk_input(&mut junk)).await;
        let _ = client.shutdown().await;
        let _ = read_to_end(&mut client).await;
    }
    let (mut client, head) = http_connect(&proxy, &echo.to_string()).await;
    assert_eq!(head, "HTTP/1.1 200 Connection established\r\n\r\n");
    client.write_all(b"alive").await.unwrap();
    assert_eq!(read_exact(&mut client, 5).await, b"alive");
    proxy.finish().await;
}

#[tokio::test]
async fn a_connection_that_sends_nothing_records_nothing() {
    let proxy = start(config(&["127.0.0.1"], &[]));
    drop(connect(&proxy).await);
    let mut client = connect(&proxy).await;
    client.shutdown().await.unwrap();
    assert_eq!(read_to_end(&mut client).await, b"");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(proxy.finish().await, crate::EgressLog::default());
}

#[tokio::test]
async fn an_incomplete_head_is_recorded_when_the_client_leaves() {
    let proxy = start(config(&["127.0.0.1"], &[]));
    let mut client = connect(&proxy).await;
    client.write_all(b"CONNECT 127.0.0.1:").await.unwrap();
    client.shutdown().await.unwrap();
    assert_eq!(read_to_end(&mut client).await, b"");
    let log = wait_for_log(&proxy, |log| !log.decisions.is_empty()).await;
    assert_eq!(log.decisions[0].verdict, Verdict::BadRequest);
    assert_eq!(log.decisions[0].protocol, crate::Protocol::Connect);
}

#[test]
fn start_outside_a_runtime_is_an_error_not_a_panic() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let config = ProxyConfig::new(allow(&["example.com"]), Default::default());
    let err = Proxy::start(listener, config).unwrap_err();
    assert!(err.to_string().contains("tokio runtime"), "{err}");
}

#[test]
fn decisions_serialize_in_snake_case() {
    let decision = crate::Decision {
        protocol: crate::Protocol::Socks5,
        host: "example.com".to_owned(),
        port: 443,
        verdict: Verdict::NotAllowlisted,
        allowed: false,
        message: "egress denied: host example.com is not in the allowlist".to_owned(),
        address: None,
        request: None,
        bytes_sent: 0,
        bytes_received: 0,
    };
    let json = serde_json::to_value(&decision).unwrap();
    assert_eq!(json["protocol"], "socks5");
    assert_eq!(json["verdict"], "not_allowlisted");
    let back: crate::Decision = serde_json::from_value(json).unwrap();
    assert_eq!(back, decision);
}

#[test]
fn the_proxy_can_move_between_threads() {
    fn is_send<T: Send>(_: &T) {}
    fn send_type<T: Send + Sync>() {}
    send_type::<Proxy>();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let proxy = start(config(&["127.0.0.1"], &[]));
        let finish = proxy.finish();
        is_send(&finish);
        assert_eq!(finish.await, crate::EgressLog::default());
    });
}
