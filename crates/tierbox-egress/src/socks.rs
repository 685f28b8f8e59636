//! SOCKS5 (RFC 1928) with no authentication and the `CONNECT` command only; SOCKS4 is
//! refused.
//!
//! Reply codes, by verdict: allowed `0x00` (with the proxy's bound address), not
//! allowlisted or special address `0x02` (connection not allowed by ruleset), resolve
//! failure `0x04` (host unreachable), connect failure `0x05` (connection refused),
//! connect timeout `0x06` (TTL expired: RFC 1928 has no timeout code, and `0x06` is the
//! one clients report as a timeout-like failure, distinct from an unreachable host),
//! too many tunnels and malformed requests `0x01` (general failure), `BIND` and
//! `UDP ASSOCIATE` `0x07`, an unknown address type `0x08`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tierbox_policy::hosts::CanonicalHost;
use tokio::io::AsyncWriteExt;
use tokio::time::{Instant, timeout_at};

use crate::inbound::{Inbound, close_gracefully};
use crate::log::Entry;
use crate::server::{Mode, Shared, dial_or_refuse};
use crate::{Protocol, REQUEST_HEAD_TIMEOUT_MS, Verdict, tunnel};

const VERSION: u8 = 0x05;
const NO_AUTHENTICATION: u8 = 0x00;
const NO_ACCEPTABLE_METHODS: u8 = 0xff;

const CMD_CONNECT: u8 = 0x01;
const CMD_BIND: u8 = 0x02;
const CMD_UDP_ASSOCIATE: u8 = 0x03;

const ATYP_IPV4: u8 = 0x01;
const ATYP_DOMAIN: u8 = 0x03;
const ATYP_IPV6: u8 = 0x04;

const REP_SUCCEEDED: u8 = 0x00;
const REP_GENERAL_FAILURE: u8 = 0x01;
const REP_NOT_ALLOWED: u8 = 0x02;
const REP_HOST_UNREACHABLE: u8 = 0x04;
const REP_CONNECTION_REFUSED: u8 = 0x05;
const REP_TTL_EXPIRED: u8 = 0x06;
const REP_COMMAND_NOT_SUPPORTED: u8 = 0x07;
const REP_ADDRESS_TYPE_NOT_SUPPORTED: u8 = 0x08;

/// The SOCKS4 "request rejected or failed" reply.
const SOCKS4_REJECTED: [u8; 8] = [0x00, 0x5b, 0, 0, 0, 0, 0, 0];

/// The reply code for a refusal.
pub(crate) fn reply_code(verdict: Verdict) -> u8 {
    match verdict {
        Verdict::Allowed => REP_SUCCEEDED,
        Verdict::NotAllowlisted | Verdict::SpecialAddress | Verdict::RequestRefused => {
            REP_NOT_ALLOWED
        }
        Verdict::ResolveFailed => REP_HOST_UNREACHABLE,
        Verdict::ConnectFailed => REP_CONNECTION_REFUSED,
        Verdict::ConnectTimeout => REP_TTL_EXPIRED,
        Verdict::UnsupportedCommand => REP_COMMAND_NOT_SUPPORTED,
        Verdict::TooManyTunnels | Verdict::BadRequest | Verdict::TlsFailed => REP_GENERAL_FAILURE,
    }
}

/// A reply: version, code, reserved, then the bound address.
fn reply(code: u8, bound: SocketAddr) -> Vec<u8> {
    let mut out = vec![VERSION, code, 0x00];
    match bound.ip() {
        IpAddr::V4(v4) => {
            out.push(ATYP_IPV4);
            out.extend_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            out.push(ATYP_IPV6);
            out.extend_from_slice(&v6.octets());
        }
    }
    out.extend_from_slice(&bound.port().to_be_bytes());
    out
}

fn unbound() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0)
}

/// A refused handshake: what to record, and the reply to send (if the handshake got
/// far enough for one).
#[derive(Debug)]
struct Refused {
    verdict: Verdict,
    host: String,
    port: u16,
    message: String,
    address: Option<SocketAddr>,
    /// `Some(0xff)` for the method selection, a reply code after the request, `None`
    /// when nothing is sent.
    answer: Option<Answer>,
}

#[derive(Debug, Clone, Copy)]
enum Answer {
    Method(u8),
    Reply(u8),
}

impl Refused {
    fn bad(message: String, answer: Option<Answer>) -> Self {
        Self {
            verdict: Verdict::BadRequest,
            host: String::new(),
            port: 0,
            message: format!("egress denied: {message}"),
            address: None,
            answer,
        }
    }
}

/// A parsed `CONNECT` request.
#[derive(Debug)]
struct Request {
    host: CanonicalHost,
    port: u16,
}

/// Reads the greeting, answers it, and reads the request.
async fn handshake(inbound: &mut Inbound) -> Result<Request, Refused> {
    let io_bad = |what: &str| {
        Refused::bad(
            format!("the socks5 {what} ended early or could not be read"),
            None,
        )
    };
    // Greeting: VER NMETHODS METHODS...
    let head = inbound.need(2).await.map_err(|_| io_bad("greeting"))?;
    let methods_len = usize::from(head[1]);
    let greeting = inbound
        .need(2 + methods_len)
        .await
        .map_err(|_| io_bad("greeting"))?;
    let no_auth = greeting[2..].contains(&NO_AUTHENTICATION);
    inbound.consume(2 + methods_len);
    if !no_auth {
        return Err(Refused::bad(
            "the socks5 client offered no acceptable authentication method; the proxy accepts only \"no authentication\"".to_owned(),
            Some(Answer::Method(NO_ACCEPTABLE_METHODS)),
        ));
    }
    inbound
        .stream
        .write_all(&[VERSION, NO_AUTHENTICATION])
        .await
        .map_err(|_| io_bad("greeting"))?;

    // Request: VER CMD RSV ATYP DST.ADDR DST.PORT
    let fixed = inbound.need(4).await.map_err(|_| io_bad("request"))?;
    let (version, command, address_type) = (fixed[0], fixed[1], fixed[3]);
    if version != VERSION {
        return Err(Refused::bad(
            format!("the socks5 request has version {version}, not 5"),
            Some(Answer::Reply(REP_GENERAL_FAILURE)),
        ));
    }
    let (address_len, skip) = match address_type {
        ATYP_IPV4 => (4, 4),
        ATYP_IPV6 => (16, 4),
        ATYP_DOMAIN => {
            let len = inbound.need(5).await.map_err(|_| io_bad("request"))?[4];
            (usize::from(len), 5)
        }
        other => {
            return Err(Refused::bad(
                format!("socks5 address type {other:#04x} is not supported"),
                Some(Answer::Reply(REP_ADDRESS_TYPE_NOT_SUPPORTED)),
            ));
        }
    };
    let request = inbound
        .need(skip + address_len + 2)
        .await
        .map_err(|_| io_bad("request"))?;
    let address = &request[skip..skip + address_len];
    let port = u16::from_be_bytes([request[skip + address_len], request[skip + address_len + 1]]);
    let host = match address_type {
        ATYP_IPV4 => <[u8; 4]>::try_from(address)
            .map(|o| CanonicalHost::Ip(IpAddr::V4(Ipv4Addr::from(o))))
            .map_err(|_| io_bad("request")),
        ATYP_IPV6 => <[u8; 16]>::try_from(address)
            .map(|o| CanonicalHost::Ip(IpAddr::V6(Ipv6Addr::from(o)).to_canonical()))
            .map_err(|_| io_bad("request")),
        _ => std::str::from_utf8(address)
            .ok()
            .and_then(|name| CanonicalHost::parse(name).ok())
            .ok_or_else(|| {
                Refused::bad(
                    format!(
                        "the socks5 request names an invalid host {:?}",
                        String::from_utf8_lossy(address)
                    ),
                    Some(Answer::Reply(REP_GENERAL_FAILURE)),
                )
            }),
    };
    let consumed = skip + address_len + 2;
    inbound.consume(consumed);
    let host = host?;
    if command != CMD_CONNECT {
        let name = match command {
            CMD_BIND => "bind".to_owned(),
            CMD_UDP_ASSOCIATE => "udp associate".to_owned(),
            other => format!("{other:#04x}"),
        };
        return Err(Refused {
            verdict: Verdict::UnsupportedCommand,
            host: host.to_string(),
            port,
            message: format!(
                "egress denied: socks5 command {name} is not supported; only connect is"
            ),
            address: None,
            answer: Some(Answer::Reply(REP_COMMAND_NOT_SUPPORTED)),
        });
    }
    if port == 0 {
        return Err(Refused {
            port,
            host: host.to_string(),
            ..Refused::bad(
                "the socks5 request asks for port 0".to_owned(),
                Some(Answer::Reply(REP_GENERAL_FAILURE)),
            )
        });
    }
    Ok(Request { host, port })
}

/// Serves one SOCKS5 client connection whose first byte (`0x05`) is in `inbound`.
pub(crate) async fn serve(mut inbound: Inbound, shared: &Shared, mode: Mode, deadline: Instant) {
    let request = match timeout_at(deadline, handshake(&mut inbound)).await {
        Ok(Ok(request)) => request,
        Ok(Err(refused)) => return refuse(&mut inbound, shared, refused).await,
        Err(_elapsed) => {
            let refused = Refused::bad(
                format!(
                    "the socks5 handshake was not complete within {REQUEST_HEAD_TIMEOUT_MS} ms"
                ),
                None,
            );
            return refuse(&mut inbound, shared, refused).await;
        }
    };
    let outcome = dial_or_refuse(mode, &shared.config, &request.host, request.port).await;
    let mut dialed = match outcome {
        Ok(dialed) => dialed,
        Err(refusal) => {
            let refused = Refused {
                verdict: refusal.verdict,
                host: request.host.to_string(),
                port: request.port,
                message: refusal.message,
                address: refusal.address,
                answer: Some(Answer::Reply(reply_code(refusal.verdict))),
            };
            return refuse(&mut inbound, shared, refused).await;
        }
    };
    let counters = shared.log.record(Entry {
        protocol: Protocol::Socks5,
        host: request.host.to_string(),
        port: request.port,
        verdict: Verdict::Allowed,
        message: dialed.message,
        address: Some(dialed.address),
        request: None,
    });
    let bound = dialed.stream.local_addr().unwrap_or_else(|_| unbound());
    if inbound
        .stream
        .write_all(&reply(REP_SUCCEEDED, bound))
        .await
        .is_err()
    {
        return;
    }
    // Bytes a client sent before the reply (optimistic data) go to the destination.
    let initial = inbound.unread().to_vec();
    let terminated = shared.config.terminate.clone();
    if let Some(t) = terminated.filter(|t| t.rules(&request.host).is_some()) {
        let endpoint = (Protocol::Socks5, &request.host, request.port);
        let (client, upstream) = (inbound.stream, dialed.stream);
        let upstream = crate::tls::Counting::new(upstream, counters);
        return crate::tls::serve_terminated(shared, &t, endpoint, initial, client, upstream).await;
    }
    tunnel::run(
        &mut inbound.stream,
        &mut dialed.stream,
        &initial,
        &counters,
        shared.config.idle_timeout,
        tunnel::Ending::WhenBothEnd,
        tunnel::pipes(),
    )
    .await;
}

async fn refuse(inbound: &mut Inbound, shared: &Shared, refused: Refused) {
    shared.log.record(Entry {
        protocol: Protocol::Socks5,
        host: refused.host,
        port: refused.port,
        verdict: refused.verdict,
        message: refused.message,
        address: refused.address,
        request: None,
    });
    let answer = match refused.answer {
        Some(Answer::Method(method)) => vec![VERSION, method],
        Some(Answer::Reply(code)) => reply(code, unbound()),
        None => Vec::new(),
    };
    if !answer.is_empty() {
        let _ = inbound.stream.write_all(&answer).await;
    }
    close_gracefully(&mut inbound.stream).await;
}

/// Refuses a SOCKS4 connection (first byte `0x04`) with the SOCKS4 rejection reply.
pub(crate) async fn refuse_socks4(mut inbound: Inbound, shared: &Shared) {
    shared.log.record(Entry {
        protocol: Protocol::Socks5,
        host: String::new(),
        port: 0,
        verdict: Verdict::BadRequest,
        message: "egress denied: socks4 is not supported; use socks5 (socks5h:// to let the proxy resolve names) or the http proxy".to_owned(),
        address: None,
        request: None,
    });
    let _ = inbound.stream.write_all(&SOCKS4_REJECTED).await;
    close_gracefully(&mut inbound.stream).await;
}
