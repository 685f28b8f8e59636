//! Local servers and clients for the proxy tests (all on loopback).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tierbox_policy::hosts::HostPattern;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::timeout;

use crate::{EgressLog, Proxy, ProxyConfig};

/// How long a test waits for anything before failing.
pub(crate) const PATIENCE: Duration = Duration::from_secs(10);

pub(crate) fn allow(patterns: &[&str]) -> Vec<HostPattern> {
    patterns
        .iter()
        .map(|p| HostPattern::parse(p).unwrap())
        .collect()
}

pub(crate) fn config(patterns: &[&str], resolve: &[(&str, &str)]) -> ProxyConfig {
    let resolve: BTreeMap<String, Vec<IpAddr>> = resolve
        .iter()
        .map(|(name, ip)| ((*name).to_owned(), vec![ip.parse().unwrap()]))
        .collect();
    ProxyConfig::new(allow(patterns), resolve)
}

pub(crate) fn start(config: ProxyConfig) -> Proxy {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    Proxy::start(listener, config).unwrap()
}

pub(crate) async fn connect(proxy: &Proxy) -> TcpStream {
    TcpStream::connect(proxy.local_addr().unwrap())
        .await
        .unwrap()
}

/// A server that echoes every connection until the client closes.
pub(crate) async fn echo_server() -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let (mut r, mut w) = stream.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    (addr, task)
}

/// A server that, for each connection, sends `reply`, reads until the client's end of
/// stream, and reports what it received.
pub(crate) async fn capture_server(
    reply: &'static [u8],
) -> (SocketAddr, mpsc::UnboundedReceiver<Vec<u8>>, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let _ = stream.write_all(reply).await;
                let mut got = Vec::new();
                let _ = stream.read_to_end(&mut got).await;
                let _ = tx.send(got);
            });
        }
    });
    (addr, rx, task)
}

/// An HTTP origin that reads one request head, reports it, answers `200 ok` and closes.
pub(crate) async fn http_origin() -> (SocketAddr, mpsc::UnboundedReceiver<String>, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let head = read_head(&mut stream).await;
                let _ = tx.send(head);
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
    (addr, rx, task)
}

/// Reads a response or request head, byte by byte, up to and including the blank line.
pub(crate) async fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = timeout(PATIENCE, stream.read(&mut byte))
            .await
            .expect("head in time")
            .unwrap_or(0);
        if n == 0 {
            break;
        }
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// Reads until end of stream (or a reset), within [`PATIENCE`].
pub(crate) async fn read_to_end(stream: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match timeout(PATIENCE, stream.read(&mut buf))
            .await
            .expect("end of stream in time")
        {
            Ok(0) | Err(_) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
}

pub(crate) async fn read_exact(stream: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    timeout(PATIENCE, stream.read_exact(&mut buf))
        .await
        .expect("bytes in time")
        .unwrap();
    buf
}

/// Sends `CONNECT target` and returns the stream and the response head.
pub(crate) async fn http_connect(proxy: &Proxy, target: &str) -> (TcpStream, String) {
    let mut stream = connect(proxy).await;
    stream
        .write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let head = read_head(&mut stream).await;
    (stream, head)
}

/// Polls the proxy's log until `done` holds.
pub(crate) async fn wait_for_log(proxy: &Proxy, done: impl Fn(&EgressLog) -> bool) -> EgressLog {
    let give_up = tokio::time::Instant::now() + PATIENCE;
    loop {
        let log = proxy.log();
        if done(&log) {
            return log;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "log never got there: {log:#?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
