//! Network probe: no socket of the inet, inet6 or unix families, and no TCP connection.

use std::net::{SocketAddr, TcpStream, UdpSocket};
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

/// What `no-reach` sends to the UDP port; the test's echo server sends it back.
const UDP_PING: &[u8] = b"tierbox-probe ping";

/// How long `no-reach` waits for the UDP echo (a refused port answers at once).
const UDP_WAIT: Duration = Duration::from_secs(2);

/// `no-reach TCP_PORT UDP_PORT ABSTRACT_NAME`: listeners of the host cannot be reached: a
/// TCP connect to `127.0.0.1:TCP_PORT`, a UDP datagram to `127.0.0.1:UDP_PORT` that the
/// host echoes back (reached = the echo arrives), and a connect to the abstract unix
/// socket `@ABSTRACT_NAME`. Unlike `no-net`, creating sockets is allowed (Tier C gives
/// the run its own network namespace, with only its own loopback).
pub fn no_reach(tcp_port: u16, udp_port: u16, abstract_name: &str) -> ProbeResult {
    let mut reached = Vec::new();
    let mut text = Vec::new();

    let tcp = SocketAddr::from(([127, 0, 0, 1], tcp_port));
    match TcpStream::connect_timeout(&tcp, CONNECT_TIMEOUT) {
        Ok(_stream) => reached.push(format!("tcp connect({tcp}): SUCCEEDED")),
        Err(e) => text.push(format!("tcp connect({tcp}): {}", io_errno_name(&e))),
    }

    let udp = SocketAddr::from(([127, 0, 0, 1], udp_port));
    match udp_echo(udp) {
        Ok(n) => reached.push(format!("udp {udp}: echo of {n} bytes RECEIVED")),
        Err(e) => text.push(format!("udp {udp}: {e}")),
    }

    match abstract_connect(abstract_name) {
        Ok(()) => reached.push(format!("unix connect(@{abstract_name}): SUCCEEDED")),
        Err(e) => text.push(format!("unix connect(@{abstract_name}): {e}")),
    }

    let broken = !reached.is_empty();
    reached.extend(text);
    let text = reached.join("; ");
    Ok(if broken {
        Report::Broken(text)
    } else {
        Report::Holds(text)
    })
}

/// Sends [`UDP_PING`] to `addr` and waits for it to come back; `Ok` with the size of the
/// echo, or the step that failed and its errno.
fn udp_echo(addr: SocketAddr) -> Result<usize, String> {
    let socket =
        UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("bind {}", io_errno_name(&e)))?;
    socket
        .connect(addr)
        .map_err(|e| format!("connect {}", io_errno_name(&e)))?;
    socket
        .set_read_timeout(Some(UDP_WAIT))
        .map_err(|e| format!("SO_RCVTIMEO {}", io_errno_name(&e)))?;
    socket
        .send(UDP_PING)
        .map_err(|e| format!("send {}", io_errno_name(&e)))?;
    let mut buf = [0u8; 64];
    match socket.recv(&mut buf) {
        Ok(n) if &buf[..n] == UDP_PING => Ok(n),
        Ok(n) => Err(format!("received {n} bytes that are not the echo")),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            Err(format!("no echo within {} ms", UDP_WAIT.as_millis()))
        }
        Err(e) => Err(format!("recv {}", io_errno_name(&e))),
    }
}

/// Connects a unix stream socket to the abstract address `@name`.
fn abstract_connect(name: &str) -> Result<(), String> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
        .map_err(|e| format!("address: {e}"))?;
    std::os::unix::net::UnixStream::connect_addr(&addr)
        .map(drop)
        .map_err(|e| io_errno_name(&e))
}
