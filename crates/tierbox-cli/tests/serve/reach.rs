//! A background dev server with a published port, over the HTTP API: the host's
//! `127.0.0.1:HOSTPORT` reaches it while it runs and not after it is killed, and its
//! ended status (and attestation) says what the port carried.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::bg;
use crate::support::*;

/// Serves `served from inside` on `127.0.0.1:PORT` (argv[1]) inside the sandbox.
const SERVER: &str = include_str!("../egress/http_server.py");

fn get(addr: SocketAddr) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET / HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut got = String::new();
    s.read_to_string(&mut got)?;
    Ok(got)
}

#[test]
fn a_background_server_is_published_for_its_life() {
    if !tier_c_available("a_background_server_is_published_for_its_life") {
        return;
    }
    let host_port = {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        l.local_addr().unwrap().port()
    };
    let entry = format!("127.0.0.1:{host_port}:8000");
    let policy = format!(
        "version = 1\n[exec]\nallowed_executables = [\"python3\"]\nallow_interpreters = true\n\
         [tier]\noptional_layers = [\"cgroup\", \"protected_paths\"]\n[egress]\npublish = [\"{entry}\"]\n"
    );
    let s = Server::start(&[], Some(&policy));
    std::fs::write(s.ws.path().join("server.py"), SERVER).unwrap();
    let h = bg(
        "dev",
        &s,
        &["python3", "server.py", "8000"],
        json!({ "tier": "c", "publish": [entry] }),
    );
    assert_eq!(h["status"]["state"], "running", "{h}");
    let id = h["status"]["id"].as_str().unwrap().to_owned();
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, host_port));
    let until = Instant::now() + Duration::from_secs(20);
    let answer = loop {
        match get(addr) {
            Ok(a) if a.contains("200") => break a,
            _ if Instant::now() > until => panic!("{addr} never answered"),
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    assert!(answer.ends_with("served from inside\n"), "{answer}");
    let (status, st) = s.call_in("dev", "POST", &format!("/v1/process/{id}/kill"), None);
    assert_eq!(status, 200, "{st}");
    let st = if st["status"].is_object() {
        st["status"].clone()
    } else {
        st
    };
    assert_eq!(st["state"], "killed", "{st}");
    let relay = &st["reach"][0];
    assert_eq!(relay["relay"], format!("publish {entry}"), "{st}");
    assert!(relay["connections"].as_u64().unwrap_or(0) >= 1, "{st}");
    assert!(
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err(),
        "{addr} still answers after the process ended"
    );
    assert!(s.stop().success());
}
