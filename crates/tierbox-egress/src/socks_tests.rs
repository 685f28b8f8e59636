//! SOCKS5 (and refused SOCKS4) end to end on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::socks::reply_code;
use crate::test_support::*;
use crate::{Protocol, Proxy, Verdict};

/// Greets with "no authentication" and checks the method reply.
async fn greet(proxy: &Proxy) -> TcpStream {
    let mut client = connect(proxy).await;
    client.write_all(&[5, 1, 0]).await.unwrap();
    assert_eq!(read_exact(&mut client, 2).await, [5, 0]);
    client
}

fn domain_request(command: u8, name: &str, port: u16) -> Vec<u8> {
    let mut out = vec![5, command, 0, 3, u8::try_from(name.len()).unwrap()];
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&port.to_be_bytes());
    out
}

fn address_request(command: u8, addr: SocketAddr) -> Vec<u8> {
    let mut out = vec![5, command, 0];
    match addr {
        SocketAddr::V4(v4) => {
            out.push(1);
            out.extend_from_slice(&v4.ip().octets());
        }
        SocketAddr::V6(v6) => {
            out.push(4);
            out.extend_from_slice(&v6.ip().octets());
        }
    }
    out.extend_from_slice(&addr.port().to_be_bytes());
    out
}

/// Reads a reply with an IPv4 or IPv6 bound address; returns the code and the address.
async fn read_reply(client: &mut TcpStream) -> (u8, SocketAddr) {
    let head = read_exact(client, 4).await;
    assert_eq!((head[0], head[2]), (5, 0), "{head:?}");
    let (ip, port): (std::net::IpAddr, _) = match head[3] {
        1 => {
            let b = read_exact(client, 6).await;
            (
                std::net::Ipv4Addr::new(b[0], b[1], b[2], b[3]).into(),
                u16::from_be_bytes([b[4], b[5]]),
            )
        }
        4 => {
            let b = read_exact(client, 18).await;
            let octets: [u8; 16] = b[..16].try_into().unwrap();
            (
                std::net::Ipv6Addr::from(octets).into(),
                u16::from_be_bytes([b[16], b[17]]),
            )
        }
        other => panic!("address type {other}"),
    };
    (head[1], SocketAddr::new(ip, port))
}

async fn round_trip(client: &mut TcpStream) {
    client.write_all(b"socks hello").await.unwrap();
    assert_eq!(read_exact(client, 11).await, b"socks hello");
}

#[tokio::test]
async fn socks5_domain_request_is_resolved_by_the_proxy() {
    let (echo, _echo) = echo_server().await;
    let proxy = start(config(
        &["echo.test", "127.0.0.0/8"],
        &[("echo.test", "127.0.0.1")],
    ));
    let mut client = greet(&proxy).await;
    client
        .write_all(&domain_request(1, "Echo.Test", echo.port()))
        .await
        .unwrap();
    let (code, bound) = read_reply(&mut client).await;
    assert_eq!(code, 0);
    assert!(bound.ip().is_loopback() && bound.port() != 0, "{bound}");
    round_trip(&mut client).await;
    drop(client);
    let log = proxy.finish().await;
    let d = &log.decisions[0];
    assert_eq!(
        (d.protocol, d.verdict, d.host.as_str(), d.port),
        (Protocol::Socks5, Verdict::Allowed, "echo.test", echo.port())
    );
    assert_eq!((d.bytes_sent, d.bytes_received), (11, 11));
}

#[tokio::test]
async fn socks5_ipv4_request() {
    let (echo, _echo) = echo_server().await;
    let proxy = start(config(&["127.0.0.1"], &[]));
    let mut client = greet(&proxy).await;
    client.write_all(&address_request(1, echo)).await.unwrap();
    assert_eq!(read_reply(&mut client).await.0, 0);
    round_trip(&mut client).await;
    let log = proxy.finish().await;
    assert_eq!(log.decisions[0].host, "127.0.0.1");
    assert_eq!(log.decisions[0].address, Some(echo));
}

#[tokio::test]
async fn socks5_ipv6_request() {
    let Ok(listener) = tokio::net::TcpListener::bind("[::1]:0").await else {
        tierbox_test_support::skip_optional_here("no ipv6 loopback here");
        return;
    };
    let echo = listener.local_addr().unwrap();
    let _server = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let (mut r, mut w) = stream.split();
        let _ = tokio::io::copy(&mut r, &mut w).await;
    });
    let proxy = start(config(&["::1"], &[]));
    let mut client = greet(&proxy).await;
    client.write_all(&address_request(1, echo)).await.unwrap();
    let (code, bound) = read_reply(&mut client).await;
    assert_eq!(code, 0);
    assert_eq!(bound.ip(), "::1".parse::<std::net::IpAddr>().unwrap());
    round_trip(&mut client).await;
    let log = proxy.finish().await;
    assert_eq!(log.decisions[0].host, "::1");
    assert_eq!(log.decisions[0].verdict, Verdict::Allowed);
}

#[tokio::test]
async fn socks5_optimistic_data_is_forwarded() {
    let (echo, _echo) = echo_server().await;
    let proxy = start(config(&["127.0.0.1"], &[]));
    let mut client = connect(&proxy).await;
    // Greeting, request and data in one write, before any reply.
    let mut all = vec![5, 1, 0];
    all.extend_from_slice(&address_request(1, echo));
    all.extend_from_slice(b"early");
    client.write_all(&all).await.unwrap();
    assert_eq!(read_exact(&mut client, 2).await, [5, 0]);
    assert_eq!(read_reply(&mut client).await.0, 0);
    assert_eq!(read_exact(&mut client, 5).await, b"early");
    proxy.finish().await;
}

#[tokio::test]
async fn socks5_denials_use_the_ruleset_code() {
    let proxy = start(config(&["app.test"], &[("app.test", "127.0.0.1")]));
    let mut client = greet(&proxy).await;
    client
        .write_all(&domain_request(1, "other.test", 443))
        .await
        .unwrap();
    assert_eq!(read_reply(&mut client).await.0, 2);
    assert_eq!(read_to_end(&mut client).await, b"");

    let mut client = greet(&proxy).await;
    client
        .write_all(&domain_request(1, "app.test", 443))
        .await
        .unwrap();
    assert_eq!(read_reply(&mut client).await.0, 2);

    let log = proxy.finish().await;
    let verdicts: Vec<_> = log.decisions.iter().map(|d| d.verdict).collect();
    assert_eq!(verdicts, [Verdict::NotAllowlisted, Verdict::SpecialAddress]);
    assert_eq!(log.decisions[0].host, "other.test");
}

#[tokio::test]
async fn socks5_connect_failure_is_0x05() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let proxy = start(config(&["127.0.0.1"], &[]));
    let mut client = greet(&proxy).await;
    client.write_all(&address_request(1, closed)).await.unwrap();
    assert_eq!(read_reply(&mut client).await.0, 5);
    assert_eq!(
        proxy.finish().await.decisions[0].verdict,
        Verdict::ConnectFailed
    );
}

#[tokio::test]
async fn socks5_udp_associate_and_bind_are_0x07() {
    let proxy = start(config(&["127.0.0.1"], &[]));
    for command in [3u8, 2] {
        let mut client = greet(&proxy).await;
        client
            .write_all(&address_request(command, "127.0.0.1:53".parse().unwrap()))
            .await
            .unwrap();
        assert_eq!(read_reply(&mut client).await.0, 7);
        assert_eq!(read_to_end(&mut client).await, b"");
    }
    let log = proxy.finish().await;
    assert_eq!(log.decisions.len(), 2);
    for d in &log.decisions {
        assert_eq!(d.verdict, Verdict::UnsupportedCommand);
        assert_eq!((d.host.as_str(), d.port), ("127.0.0.1", 53));
        assert!(!d.allowed);
    }
    assert!(log.decisions[0].message.contains("udp associate"));
    assert!(log.decisions[1].message.contains("bind"));
}

#[tokio::test]
async fn socks5_username_password_only_is_0xff() {
    let proxy = start(config(&["127.0.0.1"], &[]));
    let mut client = connect(&proxy).await;
    client.write_all(&[5, 1, 2]).await.unwrap();
    assert_eq!(read_to_end(&mut client).await, [5, 0xff]);
    let log = proxy.finish().await;
    assert_eq!(log.decisions[0].verdict, Verdict::BadRequest);
    assert_eq!(log.decisions[0].protocol, Protocol::Socks5);
}

#[tokio::test]
async fn socks5_unknown_address_type_is_0x08() {
    let proxy = start(config(&["127.0.0.1"], &[]));
    let mut client = greet(&proxy).await;
    client.write_all(&[5, 1, 0, 9, 1, 2, 3, 4]).await.unwrap();
    assert_eq!(read_reply(&mut client).await.0, 8);
    assert_eq!(
        proxy.finish().await.decisions[0].verdict,
        Verdict::BadRequest
    );
}

#[tokio::test]
async fn socks5_invalid_domain_is_refused() {
    let proxy = start(config(&["127.0.0.1"], &[]));
    let mut client = greet(&proxy).await;
    client
        .write_all(&domain_request(1, "bad_name\u{1b}.test", 80))
        .await
        .unwrap();
    assert_eq!(read_reply(&mut client).await.0, 1);
    let log = proxy.finish().await;
    assert_eq!(log.decisions[0].verdict, Verdict::BadRequest);
    assert_eq!(log.decisions[0].host, "");
    assert!(
        log.decisions[0].message.contains("\\u{1b}"),
        "control characters are escaped: {}",
        log.decisions[0].message
    );
}

#[tokio::test]
async fn socks4_is_refused_and_closed() {
    let proxy = start(config(&["127.0.0.1"], &[]));
    let mut client = connect(&proxy).await;
    client
        .write_all(&[4, 1, 0, 80, 127, 0, 0, 1, b'u', 0])
        .await
        .unwrap();
    assert_eq!(read_to_end(&mut client).await, [0, 0x5b, 0, 0, 0, 0, 0, 0]);
    let log = proxy.finish().await;
    assert_eq!(log.decisions.len(), 1);
    assert_eq!(log.decisions[0].verdict, Verdict::BadRequest);
    assert!(log.decisions[0].message.contains("socks4 is not supported"));
}

#[test]
fn refusals_map_to_reply_codes() {
    let cases = [
        (Verdict::Allowed, 0x00),
        (Verdict::NotAllowlisted, 0x02),
        (Verdict::SpecialAddress, 0x02),
        (Verdict::ResolveFailed, 0x04),
        (Verdict::ConnectFailed, 0x05),
        (Verdict::ConnectTimeout, 0x06),
        (Verdict::TooManyTunnels, 0x01),
        (Verdict::BadRequest, 0x01),
        (Verdict::UnsupportedCommand, 0x07),
    ];
    for (verdict, code) in cases {
        assert_eq!(reply_code(verdict), code, "{verdict:?}");
    }
}
