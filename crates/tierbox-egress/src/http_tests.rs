//! HTTP proxy tests: head parsing and routing (pure), then end to end on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tierbox_policy::hosts::CanonicalHost;
use tokio::io::AsyncWriteExt;

use crate::http::{BadRequest, Route, find_head_end, route, status};
use crate::test_support::*;
use crate::{MAX_REQUEST_HEAD_BYTES, Protocol, Verdict};

fn host(h: &str) -> CanonicalHost {
    CanonicalHost::parse(h).unwrap()
}

fn forwarded(head: &str) -> (CanonicalHost, u16, String) {
    match route(head.as_bytes()) {
        Ok(Route::Forward {
            host,
            port,
            request,
        }) => (host, port, String::from_utf8(request).unwrap()),
        other => panic!("{head:?}: {other:?}"),
    }
}

fn bad(head: &str) -> BadRequest {
    match route(head.as_bytes()) {
        Err(bad) => bad,
        Ok(r) => panic!("{head:?} routed: {r:?}"),
    }
}

#[test]
fn the_head_ends_at_the_first_blank_line() {
    assert_eq!(find_head_end(b"GET / HTTP/1.1\r\n\r\nbody", 0), Some(18));
    assert_eq!(find_head_end(b"GET / HTTP/1.1\n\nbody", 0), Some(16));
    assert_eq!(find_head_end(b"GET / HTTP/1.1\r\nA: b\r\n", 0), None);
    assert_eq!(
        find_head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\n", 20),
        Some(24)
    );
    assert_eq!(find_head_end(b"", 0), None);
    assert_eq!(find_head_end(b"\n", 5), None);
}

#[test]
fn connect_targets_need_a_port() {
    assert_eq!(
        route(b"CONNECT Example.COM:443 HTTP/1.1\r\n\r\n").unwrap(),
        Route::Connect {
            host: host("example.com"),
            port: 443
        }
    );
    assert_eq!(
        route(b"CONNECT [::1]:8443 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap(),
        Route::Connect {
            host: host("::1"),
            port: 8443
        }
    );
    for head in [
        "CONNECT example.com HTTP/1.1\r\n\r\n",
        "CONNECT example.com:0 HTTP/1.1\r\n\r\n",
        "CONNECT example.com:99999 HTTP/1.1\r\n\r\n",
        "CONNECT ::1:443 HTTP/1.1\r\n\r\n",
        "CONNECT bad_host:443 HTTP/1.1\r\n\r\n",
        "CONNECT user@example.com:443 HTTP/1.1\r\n\r\n",
        "CONNECT http://example.com:443/ HTTP/1.1\r\n\r\n",
    ] {
        let refused = bad(head);
        assert_eq!(refused.host, "", "{head:?}");
        assert!(refused.message.starts_with("egress denied: "), "{head:?}");
    }
}

#[test]
fn absolute_form_is_rewritten_to_origin_form() {
    let (h, port, request) = forwarded(
        "GET http://Example.com:8080/a/b?q=1#frag HTTP/1.1\r\nHost: evil.example\r\nProxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\nKeep-Alive: 5\r\nTE: trailers\r\nTrailer: x\r\nUpgrade: h2c\r\nProxy-Authenticate: y\r\nAccept:   */*  \r\n\r\n",
    );
    assert_eq!((h, port), (host("example.com"), 8080));
    assert_eq!(
        request,
        "GET /a/b?q=1 HTTP/1.1\r\nHost: example.com:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
}

#[test]
fn absolute_form_defaults() {
    let (h, port, request) = forwarded("POST http://example.com HTTP/1.0\r\n\r\n");
    assert_eq!((h, port), (host("example.com"), 80));
    assert_eq!(
        request,
        "POST / HTTP/1.0\r\nHost: example.com\r\nConnection: close\r\n\r\n"
    );
    let (_, _, request) = forwarded("GET HTTP://[::1]?x HTTP/1.1\n\n");
    assert!(
        request.starts_with("GET /?x HTTP/1.1\r\nHost: [::1]\r\n"),
        "{request}"
    );
}

#[test]
fn connection_options_are_removed_but_not_the_body_framing() {
    let (_, _, request) = forwarded(
        "POST http://example.com/ HTTP/1.1\r\nConnection: X-A, Content-Length, transfer-encoding\r\nX-A: 1\r\nX-B: 2\r\nContent-Length: 3\r\n\r\n",
    );
    assert_eq!(
        request,
        "POST / HTTP/1.1\r\nHost: example.com\r\nX-B: 2\r\nContent-Length: 3\r\nConnection: close\r\n\r\n"
    );
}

#[test]
fn origin_form_is_routed_by_the_host_header() {
    let (h, port, request) =
        forwarded("GET /index.html HTTP/1.1\r\nhost: WWW.Example.com:8000\r\nX-A: b\r\n\r\n");
    assert_eq!((h, port), (host("www.example.com"), 8000));
    assert_eq!(
        request,
        "GET /index.html HTTP/1.1\r\nHost: www.example.com:8000\r\nX-A: b\r\nConnection: close\r\n\r\n"
    );
    let (_, port, _) = forwarded("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n");
    assert_eq!(port, 80);
    bad("GET / HTTP/1.1\r\n\r\n");
    bad("GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n");
}

#[test]
fn https_urls_are_refused_with_a_pointer_to_connect() {
    let refused = bad("GET https://example.com/x HTTP/1.1\r\n\r\n");
    assert_eq!((refused.host.as_str(), refused.port), ("example.com", 443));
    assert!(
        refused.message.contains("CONNECT example.com:443"),
        "{}",
        refused.message
    );
    let refused = bad("GET ftp://example.com/x HTTP/1.1\r\n\r\n");
    assert!(
        refused.message.contains("only http://"),
        "{}",
        refused.message
    );
}

#[test]
fn malformed_heads_are_refused() {
    for head in [
        "\r\n\r\n",
        "GET\r\n\r\n",
        "GET  / HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1 extra\r\n\r\n",
        "GET / HTTP/2\r\nHost: a\r\n\r\n",
        "G(T / HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET / HTTP/1.1\r\nHost : a\r\n\r\n",
        "GET / HTTP/1.1\r\n Host: a\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nX: \x00\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nNo colon\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n",
        "GET example.com HTTP/1.1\r\n\r\n",
        "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET http:///path HTTP/1.1\r\n\r\n",
        "GET http://user:pw@example.com/ HTTP/1.1\r\n\r\n",
    ] {
        let refused = bad(head);
        assert!(refused.message.starts_with("egress denied: "), "{head:?}");
    }
}

#[tokio::test]
async fn connect_allowed_round_trip_with_pipelined_bytes_and_counts() {
    let (echo, _echo) = echo_server().await;
    let proxy = start(config(&["127.0.0.1"], &[]));
    let mut client = connect(&proxy).await;
    // The head and the first bytes of the tunnel in one write: the bytes after the head
    // must reach the destination.
    client
        .write_all(format!("CONNECT {echo} HTTP/1.1\r\nHost: {echo}\r\n\r\nhello").as_bytes())
        .await
        .unwrap();
    let head = read_head(&mut client).await;
    assert_eq!(head, "HTTP/1.1 200 Connection established\r\n\r\n");
    assert_eq!(read_exact(&mut client, 5).await, b"hello");
    client.write_all(b" world").await.unwrap();
    assert_eq!(read_exact(&mut client, 6).await, b" world");

    let log = wait_for_log(&proxy, |log| {
        log.decisions
            .first()
            .is_some_and(|d| d.bytes_sent == 11 && d.bytes_received == 11)
    })
    .await;
    assert_eq!(log.decisions.len(), 1);
    let d = &log.decisions[0];
    assert_eq!(d.protocol, Protocol::Connect);
    assert_eq!(d.verdict, Verdict::Allowed);
    assert!(d.allowed);
    assert_eq!(d.host, "127.0.0.1");
    assert_eq!(d.port, echo.port());
    assert_eq!(d.address, Some(echo));
    assert_eq!(
        d.message,
        format!("egress allowed: 127.0.0.1:{} via 127.0.0.1", echo.port())
    );
    drop(client);
    let log = proxy.finish().await;
    assert_eq!(
        (log.decisions[0].bytes_sent, log.decisions[0].bytes_received),
        (11, 11)
    );
}

#[tokio::test]
async fn connect_to_a_name_not_in_the_allowlist_is_403() {
    let proxy = start(config(&["allowed.test"], &[]));
    let (mut client, head) = http_connect(&proxy, "example.org:443").await;
    assert!(head.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{head}");
    assert!(head.contains("\r\nX-Tierbox-Egress: denied\r\n"), "{head}");
    assert!(
        head.contains("\r\nX-Tierbox-Verdict: not_allowlisted\r\n"),
        "{head}"
    );
    assert!(head.contains("\r\nContent-Type: text/plain\r\n"), "{head}");
    assert!(head.contains("\r\nConnection: close\r\n"), "{head}");
    let body = read_to_end(&mut client).await;
    let message = "egress denied: host example.org is not in the allowlist";
    assert_eq!(String::from_utf8(body).unwrap(), format!("{message}\n"));

    let log = proxy.finish().await;
    assert_eq!(log.decisions.len(), 1);
    let d = &log.decisions[0];
    assert_eq!(
        (d.protocol, d.verdict, d.allowed, d.host.as_str(), d.port),
        (
            Protocol::Connect,
            Verdict::NotAllowlisted,
            false,
            "example.org",
            443
        )
    );
    assert_eq!(d.message, message);
    assert_eq!(d.address, None);
}

#[tokio::test]
async fn an_allowed_name_resolving_to_loopback_is_refused() {
    // The DNS-rebinding defence: the name is allowed, the address it resolves to is not.
    let (echo, _echo) = echo_server().await;
    let proxy = start(config(&["app.test"], &[("app.test", "127.0.0.1")]));
    let (mut client, head) = http_connect(&proxy, &format!("app.test:{}", echo.port())).await;
    assert!(head.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{head}");
    let body = String::from_utf8(read_to_end(&mut client).await).unwrap();
    assert_eq!(
        body,
        "egress denied: app.test resolves to 127.0.0.1, a loopback address, which the allowlist does not list\n"
    );
    let log = proxy.finish().await;
    let d = &log.decisions[0];
    assert_eq!(d.verdict, Verdict::SpecialAddress);
    assert_eq!(d.host, "app.test");
    assert_eq!(d.address, Some(echo));
}

#[tokio::test]
async fn an_allowed_name_resolving_to_a_listed_range_is_allowed() {
    let (echo, _echo) = echo_server().await;
    let proxy = start(config(
        &["app.test", "127.0.0.0/8"],
        &[("App.Test.", "127.0.0.1")],
    ));
    let (mut client, head) = http_connect(&proxy, &format!("APP.test:{}", echo.port())).await;
    assert_eq!(head, "HTTP/1.1 200 Connection established\r\n\r\n");
    client.write_all(b"ping").await.unwrap();
    assert_eq!(read_exact(&mut client, 4).await, b"ping");
    let log = proxy.finish().await;
    let d = &log.decisions[0];
    assert_eq!((d.verdict, d.host.as_str()), (Verdict::Allowed, "app.test"));
    assert_eq!(
        d.message,
        format!("egress allowed: app.test:{} via 127.0.0.1", echo.port())
    );
}

#[tokio::test]
async fn cloud_metadata_behind_an_allowed_name_is_refused() {
    let proxy = start(config(
        &["metadata.test"],
        &[("metadata.test", "169.254.169.254")],
    ));
    let (mut client, head) = http_connect(&proxy, "metadata.test:80").await;
    assert!(head.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{head}");
    let body = String::from_utf8(read_to_end(&mut client).await).unwrap();
    assert!(
        body.contains("169.254.169.254, a cloud metadata address"),
        "{body}"
    );
    let log = proxy.finish().await;
    assert_eq!(log.decisions[0].verdict, Verdict::SpecialAddress);
    assert_eq!(
        log.decisions[0].address,
        Some("169.254.169.254:80".parse().unwrap())
    );
}

#[tokio::test]
async fn absolute_form_get_is_forwarded_in_origin_form() {
    let (origin, mut heads, _origin) = http_origin().await;
    let proxy = start(config(
        &["origin.test", "127.0.0.0/8"],
        &[("origin.test", "127.0.0.1")],
    ));
    let mut client = connect(&proxy).await;
    let port = origin.port();
    client
        .write_all(
            format!(
                "GET http://origin.test:{port}/path?q=1 HTTP/1.1\r\nHost: wrong.example\r\nProxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\nUser-Agent: test\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let response = String::from_utf8(read_to_end(&mut client).await).unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.ends_with("\r\n\r\nok"), "{response}");
    let head = heads.recv().await.unwrap();
    assert_eq!(
        head,
        format!(
            "GET /path?q=1 HTTP/1.1\r\nHost: origin.test:{port}\r\nUser-Agent: test\r\nConnection: close\r\n\r\n"
        )
    );
    let log = proxy.finish().await;
    let d = &log.decisions[0];
    assert_eq!((d.protocol, d.verdict), (Protocol::Http, Verdict::Allowed));
    assert_eq!((d.host.as_str(), d.port), ("origin.test", port));
    assert_eq!(d.bytes_sent, head.len() as u64);
    assert_eq!(d.bytes_received, response.len() as u64);
}

#[tokio::test]
async fn origin_form_is_routed_by_host() {
    let (origin, mut heads, _origin) = http_origin().await;
    let proxy = start(config(&["127.0.0.1"], &[]));
    let mut client = connect(&proxy).await;
    client
        .write_all(format!("GET /x HTTP/1.1\r\nHost: {origin}\r\nAccept: */*\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let response = String::from_utf8(read_to_end(&mut client).await).unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert_eq!(
        heads.recv().await.unwrap(),
        format!("GET /x HTTP/1.1\r\nHost: {origin}\r\nAccept: */*\r\nConnection: close\r\n\r\n")
    );
    let log = proxy.finish().await;
    assert_eq!(log.decisions[0].verdict, Verdict::Allowed);
    assert_eq!(log.decisions[0].protocol, Protocol::Http);
}

#[tokio::test]
async fn a_request_body_streams_through() {
    let (dest, mut received, _dest) = capture_server(b"").await;
    let proxy = start(config(&["127.0.0.1"], &[]));
    let mut client = connect(&proxy).await;
    let body = vec![b'x'; 200_000];
    let head = format!(
        "POST http://{dest}/upload HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes()).await.unwrap();
    client.write_all(&body).await.unwrap();
    client.shutdown().await.unwrap();
    let got = received.recv().await.unwrap();
    let expected_head = format!(
        "POST /upload HTTP/1.1\r\nHost: {dest}\r\nContent-Length: 200000\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(&got[..expected_head.len()], expected_head.as_bytes());
    assert_eq!(&got[expected_head.len()..], &body[..]);
    assert_eq!(read_to_end(&mut client).await, b"");
    let log = proxy.finish().await;
    assert_eq!(log.decisions[0].bytes_sent, got.len() as u64);
}

#[tokio::test]
async fn https_absolute_form_is_400() {
    let proxy = start(config(&["example.com"], &[]));
    let mut client = connect(&proxy).await;
    client
        .write_all(b"GET https://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n")
        .await
        .unwrap();
    let response = String::from_utf8(read_to_end(&mut client).await).unwrap();
    assert!(
        response.starts_with("HTTP/1.1 400 Bad Request\r\n"),
        "{response}"
    );
    assert!(
        response.contains("send CONNECT example.com:443"),
        "{response}"
    );
    let log = proxy.finish().await;
    let d = &log.decisions[0];
    assert_eq!(
        (d.protocol, d.verdict, d.host.as_str(), d.port),
        (Protocol::Http, Verdict::BadRequest, "example.com", 443)
    );
}

#[tokio::test]
async fn a_malformed_head_is_400_with_an_empty_host() {
    let proxy = start(config(&["example.com"], &[]));
    let mut client = connect(&proxy).await;
    client.write_all(b"HELLO THERE\r\n\r\n").await.unwrap();
    let response = String::from_utf8(read_to_end(&mut client).await).unwrap();
    assert!(
        response.starts_with("HTTP/1.1 400 Bad Request\r\n"),
        "{response}"
    );
    let log = proxy.finish().await;
    let d = &log.decisions[0];
    assert_eq!(
        (d.verdict, d.host.as_str(), d.port),
        (Verdict::BadRequest, "", 0)
    );
}

#[tokio::test]
async fn a_head_over_the_limit_is_431() {
    let proxy = start(config(&["example.com"], &[]));
    let mut client = connect(&proxy).await;
    let mut head = b"GET http://example.com/ HTTP/1.1\r\n".to_vec();
    while head.len() <= MAX_REQUEST_HEAD_BYTES {
        head.extend_from_slice(b"X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    head.extend_from_slice(b"\r\n");
    client.write_all(&head).await.unwrap();
    let response = String::from_utf8(read_to_end(&mut client).await).unwrap();
    assert!(
        response.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
        "{response}"
    );
    let log = proxy.finish().await;
    assert_eq!(log.decisions[0].verdict, Verdict::BadRequest);
}

#[tokio::test]
async fn a_refused_connection_is_502() {
    // A port nobody listens on: bind, note it, close.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let proxy = start(config(&["127.0.0.1"], &[]));
    let (mut client, head) = http_connect(&proxy, &closed.to_string()).await;
    assert!(head.starts_with("HTTP/1.1 502 Bad Gateway\r\n"), "{head}");
    assert!(head.contains("X-Tierbox-Verdict: connect_failed"), "{head}");
    let body = String::from_utf8(read_to_end(&mut client).await).unwrap();
    assert!(
        body.starts_with(&format!(
            "egress failed: could not connect to {closed} at {closed}: connection refused"
        )),
        "{body}"
    );
    let log = proxy.finish().await;
    assert_eq!(log.decisions[0].verdict, Verdict::ConnectFailed);
    assert_eq!(log.decisions[0].address, Some(closed));
}

#[tokio::test]
async fn an_empty_static_resolve_entry_is_502() {
    let mut config = config(&["nowhere.test"], &[]);
    config.resolve.insert("nowhere.test".to_owned(), Vec::new());
    let proxy = start(config);
    let (_client, head) = http_connect(&proxy, "nowhere.test:443").await;
    assert!(head.starts_with("HTTP/1.1 502 Bad Gateway\r\n"), "{head}");
    let log = proxy.finish().await;
    assert_eq!(log.decisions[0].verdict, Verdict::ResolveFailed);
    assert_eq!(
        log.decisions[0].message,
        "egress failed: could not resolve nowhere.test: the name has no addresses"
    );
}

#[tokio::test]
async fn a_forwarded_request_ends_when_the_destination_closes() {
    // With one slot, a second request is served only if the first exchange ended when
    // the origin closed, although its client keeps the connection open.
    let (origin, mut heads, _origin) = http_origin().await;
    let mut config = config(&["127.0.0.1"], &[]);
    config.max_tunnels = 1;
    let proxy = start(config);
    let request = format!("GET http://{origin}/ HTTP/1.1\r\n\r\n");
    let mut kept_open = connect(&proxy).await;
    kept_open.write_all(request.as_bytes()).await.unwrap();
    let response = read_to_end(&mut kept_open).await;
    assert!(response.starts_with(b"HTTP/1.1 200 OK\r\n"));
    heads.recv().await.unwrap();

    let give_up = std::time::Instant::now() + PATIENCE;
    loop {
        let mut client = connect(&proxy).await;
        client.write_all(request.as_bytes()).await.unwrap();
        // A client that shuts down its write side after the request still gets the
        // response.
        client.shutdown().await.unwrap();
        let response = read_to_end(&mut client).await;
        if response.starts_with(b"HTTP/1.1 200 OK\r\n") {
            break;
        }
        assert!(response.starts_with(b"HTTP/1.1 503 "));
        assert!(
            std::time::Instant::now() < give_up,
            "the slot was never released"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    drop(kept_open);
    let log = proxy.finish().await;
    assert_eq!(log.decisions.last().unwrap().verdict, Verdict::Allowed);
}

#[test]
fn refusals_map_to_statuses() {
    let cases = [
        (Verdict::NotAllowlisted, "403 Forbidden"),
        (Verdict::SpecialAddress, "403 Forbidden"),
        (Verdict::ResolveFailed, "502 Bad Gateway"),
        (Verdict::ConnectFailed, "502 Bad Gateway"),
        (Verdict::ConnectTimeout, "504 Gateway Timeout"),
        (Verdict::TooManyTunnels, "503 Service Unavailable"),
        (Verdict::BadRequest, "400 Bad Request"),
    ];
    for (verdict, expected) in cases {
        assert_eq!(status(verdict), expected, "{verdict:?}");
    }
}
