//! Network probe: no socket of the inet, inet6 or unix families, and no TCP connection.

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::sys::{self, io_errno_name};
use crate::{ProbeResult, Report};

/// How long the connect attempt may take (a local listener answers at once).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// `no-net PORT`: `socket()` fails for inet and inet6 (stream and datagram) and unix
/// (stream and datagram), and a TCP connect to `127.0.0.1:PORT` fails.
pub fn no_net(port: u16) -> ProbeResult {
    let families = [
        ("AF_INET, SOCK_STREAM", libc::AF_INET, libc::SOCK_STREAM),
        ("AF_INET, SOCK_DGRAM", libc::AF_INET, libc::SOCK_DGRAM),
        ("AF_INET6, SOCK_STREAM", libc::AF_INET6, libc::SOCK_STREAM),
        ("AF_INET6, SOCK_DGRAM", libc::AF_INET6, libc::SOCK_DGRAM),
        ("AF_UNIX, SOCK_STREAM", libc::AF_UNIX, libc::SOCK_STREAM),
        ("AF_UNIX, SOCK_DGRAM", libc::AF_UNIX, libc::SOCK_DGRAM),
    ];
    let mut broken = false;
    let mut text = Vec::new();
    for (name, domain, ty) in families {
        match sys::socket(domain, ty, name) {
            Ok(_fd) => {
                broken = true;
                text.push(format!("socket({name}): SUCCEEDED"));
            }
            Err(e) => text.push(e.to_string()),
        }
    }
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
        Ok(_stream) => {
            broken = true;
            text.push(format!("connect({addr}): SUCCEEDED"));
        }
        Err(e) => text.push(format!("connect({addr}): {}", io_errno_name(&e))),
    }
    let text = text.join("; ");
    Ok(if broken {
        Report::Broken(text)
    } else {
        Report::Holds(text)
    })
}
