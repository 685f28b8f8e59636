//! Egress tests: the private internet they run against (`netlab`), proved here to work
//! on its own before any proxy is put in front of it.
//!
//! The `lab_*` self-checks connect from the lab's self-check source addresses, so that
//! `saw_tcp`/`saw_udp` keep meaning "something under test got there" for the proxy tests
//! sharing the lab (see `netlab`'s module docs).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod netlab;
mod reach;
mod strict;
mod terminate;
mod terminate_tools;
mod unix_sockets;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use netlab::{LabEvent, NetLab, curl, raw_tcp_exchange};

/// The event `lab` logged for something arriving on `local` from `peer_ip` with
/// `detail`, if any.
fn logged(lab: &NetLab, proto: &str, local: SocketAddr, peer_ip: IpAddr, detail: &str) -> bool {
    let found = |e: &LabEvent| {
        e.proto == proto && e.local == local && e.peer.ip() == peer_ip && e.detail == detail
    };
    lab.log().iter().any(found)
}

#[test]
fn lab_http_over_ipv4_answers_as_allowed() {
    let Some(lab) = NetLab::shared("lab_http_over_ipv4_answers_as_allowed") else {
        return;
    };
    let allowed = lab.host("allowed");
    let source = lab.self_check().v4.to_string();
    let url = format!("http://{}/", allowed.v4);
    let out = curl(&["-sS", "--max-time", "5", "--interface", &source, &url]);
    assert!(out.status.success(), "curl {url}: {out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello from allowed\n");
    let local = SocketAddr::new(IpAddr::V4(allowed.v4), 80);
    let from = IpAddr::V4(lab.self_check().v4);
    assert!(logged(lab, "tcp", local, from, ""), "{:#?}", lab.log());
    assert!(
        logged(lab, "tcp", local, from, "GET / HTTP/1.1"),
        "{:#?}",
        lab.log()
    );
}

#[test]
fn lab_https_verifies_against_the_lab_certificate() {
    let Some(lab) = NetLab::shared("lab_https_verifies_against_the_lab_certificate") else {
        return;
    };
    let allowed = lab.host("allowed");
    let source = lab.self_check().v4.to_string();
    let resolve = format!("allowed.test:443:{}", allowed.v4);
    let ca = lab.ca_cert().to_str().unwrap();
    let out = curl(&[
        "-sS",
        "--max-time",
        "5",
        "--interface",
        &source,
        "--cacert",
        ca,
        "--resolve",
        &resolve,
        "https://allowed.test/",
    ]);
    assert!(out.status.success(), "curl https://allowed.test/: {out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello from allowed\n");
    let local = SocketAddr::new(IpAddr::V4(allowed.v4), 443);
    let from = IpAddr::V4(lab.self_check().v4);
    assert!(
        logged(lab, "tcp", local, from, "GET / HTTP/1.1"),
        "{:#?}",
        lab.log()
    );
}

#[test]
fn lab_http_over_ipv6_answers_as_blocked_unseen_by_saw_tcp() {
    let test = "lab_http_over_ipv6_answers_as_blocked_unseen_by_saw_tcp";
    let Some(lab) = NetLab::shared(test) else {
        return;
    };
    let blocked = lab.host("blocked");
    let source = lab.self_check().v6.to_string();
    let url = format!("http://[{}]/", blocked.v6);
    let out = curl(&["-sS", "-g", "--max-time", "5", "--interface", &source, &url]);
    assert!(out.status.success(), "curl {url}: {out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello from blocked\n");
    let local = SocketAddr::new(IpAddr::V6(blocked.v6), 80);
    let from = IpAddr::V6(lab.self_check().v6);
    assert!(
        logged(lab, "tcp", local, from, "GET / HTTP/1.1"),
        "{:#?}",
        lab.log()
    );
    // Nothing under test may reach "blocked"; a self-check does not count.
    assert!(!lab.saw_tcp(IpAddr::V6(blocked.v6), 80), "{:#?}", lab.log());
}

#[test]
fn lab_udp_53_echoes_and_logs() {
    let Some(lab) = NetLab::shared("lab_udp_53_echoes_and_logs") else {
        return;
    };
    for name in ["allowed", "blocked"] {
        let target = SocketAddr::new(IpAddr::V4(lab.host(name).v4), 53);
        let sock = UdpSocket::bind((lab.self_check().v4, 0)).unwrap();
        sock.connect(target).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        sock.send(b"lab udp probe").unwrap();
        let mut buf = [0u8; 64];
        let len = sock
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("no echo from {target}: {e}: {:#?}", lab.log()));
        assert_eq!(&buf[..len], b"lab udp probe", "echo from {target}");
        let me = sock.local_addr().unwrap();
        assert!(
            lab.log()
                .iter()
                .any(|e| e.proto == "udp" && e.local == target && e.peer == me),
            "{:#?}",
            lab.log()
        );
    }
    // Nothing under test may reach "blocked"; a self-check does not count.
    assert!(!lab.saw_udp(IpAddr::V4(lab.host("blocked").v4), 53));
}

#[test]
fn lab_bytes_endpoint_returns_exactly_one_mebibyte() {
    let Some(lab) = NetLab::shared("lab_bytes_endpoint_returns_exactly_one_mebibyte") else {
        return;
    };
    let source = lab.self_check().v4.to_string();
    let url = format!("http://{}/bytes/1048576", lab.host("allowed").v4);
    let out = curl(&["-sS", "--max-time", "60", "--interface", &source, &url]);
    assert!(out.status.success(), "curl {url}: {:?}", out.status);
    assert_eq!(out.stdout.len(), 1_048_576);
    assert!(out.stdout.starts_with(b"0123456789abcdef0123"));
}

#[test]
fn lab_connect_to_a_lab_server_is_refused_there_and_logged() {
    let Some(lab) = NetLab::shared("lab_connect_to_a_lab_server_is_refused_there_and_logged")
    else {
        return;
    };
    let allowed = SocketAddr::new(IpAddr::V4(lab.host("allowed").v4), 80);
    let from = IpAddr::V4(lab.self_check().v4);
    let request = b"CONNECT blocked.test:80 HTTP/1.1\r\n\r\n";
    let reply = raw_tcp_exchange(from, allowed, request);
    assert!(reply.starts_with("HTTP/1.1 405 "), "{reply:?}");
    assert!(
        reply.ends_with("\r\n\r\nlab: method CONNECT not allowed\n"),
        "{reply:?}"
    );
    let detail = "CONNECT blocked.test:80 HTTP/1.1";
    assert!(
        logged(lab, "tcp", allowed, from, detail),
        "{:#?}",
        lab.log()
    );
}
