//! HTTP/1.x proxy requests: `CONNECT host:port`, absolute-form `GET http://host/path`,
//! and origin-form `GET /path` with a `Host` header.
//!
//! The head is parsed strictly (RFC 9112): a request line of three parts separated by
//! single spaces, header names that are tokens, no line folding, no control characters
//! in values. Anything else is a `400`: a proxy that guesses at malformed heads is one
//! that a client can make disagree with the destination about where a request goes.
//! Only the request head is parsed; the body and anything after it stream through
//! untouched, so one client connection carries one request (`Connection: close` is
//! sent to the destination, and its end of stream ends the exchange).

use tierbox_policy::hosts::{CanonicalHost, split_host_port};
use tokio::io::AsyncWriteExt;
use tokio::time::{Instant, timeout_at};

use crate::inbound::{Inbound, close_gracefully};
use crate::log::Entry;
use crate::server::{Mode, Shared, dial_or_refuse};
use crate::{MAX_REQUEST_HEAD_BYTES, Protocol, REQUEST_HEAD_TIMEOUT_MS, Verdict, tunnel};

/// Headers that describe one hop and are not forwarded (RFC 9110 §7.6.1), plus `Host`,
/// which is replaced by the authority the request is routed by.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
    "host",
];

/// Headers that frame the body. A `Connection` header naming them is not obeyed: the
/// body streams through as sent, so its framing must reach the destination intact.
const FRAMING: &[&str] = &["content-length", "transfer-encoding"];

/// Where a parsed request goes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// `CONNECT host:port`: answer `200`, then tunnel.
    Connect { host: CanonicalHost, port: u16 },
    /// A plain request: send `request` (the rewritten head), then tunnel.
    Forward {
        host: CanonicalHost,
        port: u16,
        request: Vec<u8>,
    },
}

/// A request the proxy refuses before any check.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BadRequest {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) message: String,
}

impl BadRequest {
    fn new(message: impl Into<String>) -> Self {
        Self {
            host: String::new(),
            port: 0,
            message: format!("egress denied: {}", message.into()),
        }
    }
}

/// The end of the head in `buf` (the index after the blank line), searching from
/// `from`. Lines end in CRLF or a bare LF.
pub(crate) fn find_head_end(buf: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i < buf.len() {
        if buf[i] == b'\n' {
            match buf.get(i + 1..) {
                Some([b'\n', ..]) => return Some(i + 2),
                Some([b'\r', b'\n', ..]) => return Some(i + 3),
                _ => {}
            }
        }
        i += 1;
    }
    None
}

/// The request's protocol as far as it can be told from its first bytes.
pub(crate) fn protocol_of(head: &[u8]) -> Protocol {
    if head.starts_with(b"CONNECT ") {
        Protocol::Connect
    } else {
        Protocol::Http
    }
}

struct Head<'a> {
    method: &'a str,
    target: &'a str,
    version: &'a str,
    headers: Vec<(&'a str, &'a [u8])>,
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|b| is_tchar(*b))
}

/// A short, escaped excerpt of client bytes for a message.
fn excerpt(bytes: &[u8]) -> String {
    const MAX_CHARS: usize = 80;
    let text = String::from_utf8_lossy(bytes);
    let mut short: String = text.chars().take(MAX_CHARS).collect();
    if text.chars().count() > MAX_CHARS {
        short.push('…');
    }
    format!("{short:?}")
}

fn parse_head(head: &[u8]) -> Result<Head<'_>, BadRequest> {
    let mut lines = head.split(|b| *b == b'\n').map(|line| match line {
        [rest @ .., b'\r'] => rest,
        line => line,
    });
    let request_line = lines.next().unwrap_or_default();
    let bad_line = || {
        BadRequest::new(format!(
            "malformed request line {}; expected \"CONNECT host:port HTTP/1.1\" or \"GET http://host/path HTTP/1.1\"",
            excerpt(request_line)
        ))
    };
    if !request_line
        .iter()
        .all(|b| (0x21..=0x7e).contains(b) || *b == b' ')
    {
        return Err(bad_line());
    }
    let text = std::str::from_utf8(request_line).map_err(|_| bad_line())?;
    let mut parts = text.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad_line());
    };
    if !is_token(method.as_bytes()) || target.is_empty() {
        return Err(bad_line());
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(BadRequest::new(format!(
            "unsupported http version {}; the proxy speaks HTTP/1.0 and HTTP/1.1",
            excerpt(version.as_bytes())
        )));
    }
    let mut headers = Vec::new();
    for line in lines {
        if line.is_empty() {
            break;
        }
        let bad_header = || BadRequest::new(format!("malformed header line {}", excerpt(line)));
        let colon = line
            .iter()
            .position(|b| *b == b':')
            .ok_or_else(bad_header)?;
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        // A name with whitespace around it, or a line starting with whitespace (the
        // obsolete line folding), is refused rather than guessed at.
        if !is_token(name) {
            return Err(bad_header());
        }
        let value = value.trim_ascii();
        if !value
            .iter()
            .all(|b| *b == b'\t' || (0x20..=0x7e).contains(b) || *b >= 0x80)
        {
            return Err(bad_header());
        }
        let name = std::str::from_utf8(name).map_err(|_| bad_header())?;
        headers.push((name, value));
    }
    Ok(Head {
        method,
        target,
        version,
        headers,
    })
}

/// Splits `host[:port]` and canonicalises the host; `default_port` when none is given.
fn parse_authority(
    authority: &str,
    default_port: Option<u16>,
) -> Result<(CanonicalHost, u16, bool), BadRequest> {
    let bad =
        |why: String| BadRequest::new(format!("bad host {}: {why}", excerpt(authority.as_bytes())));
    if authority.contains('@') {
        return Err(bad(
            "user information in the authority is not supported".to_owned()
        ));
    }
    let (host, port) = split_host_port(authority).map_err(|e| bad(e.to_string()))?;
    let explicit = port.is_some();
    let port = port
        .or(default_port)
        .ok_or_else(|| bad("a port is required (host:port)".to_owned()))?;
    let host = CanonicalHost::parse(host).map_err(|e| bad(e.to_string()))?;
    Ok((host, port, explicit))
}

/// The `Host` header value for a canonical host: IPv6 always in brackets, the port only
/// when the request named one.
fn host_header(host: &CanonicalHost, port: u16, explicit: bool) -> String {
    let name = match host {
        CanonicalHost::Ip(std::net::IpAddr::V6(v6)) => format!("[{v6}]"),
        other => other.to_string(),
    };
    if explicit {
        format!("{name}:{port}")
    } else {
        name
    }
}

/// Parses a complete request head (up to and including the blank line) into a route.
pub(crate) fn route(head: &[u8]) -> Result<Route, BadRequest> {
    let parsed = parse_head(head)?;
    let with_host = |mut bad: BadRequest, host: &CanonicalHost, port: u16| {
        bad.host = host.to_string();
        bad.port = port;
        bad
    };
    if parsed.method == "CONNECT" {
        let (host, port, _) = parse_authority(parsed.target, None)?;
        return Ok(Route::Connect { host, port });
    }
    let (host, port, explicit, path) = if parsed.target.starts_with('/') {
        // Origin-form, as a proxy-unaware client sends it: routed by the Host header.
        let mut hosts = parsed
            .headers
            .iter()
            .filter(|(name, _)| name.eq_ignore_ascii_case("host"));
        let (Some((_, value)), None) = (hosts.next(), hosts.next()) else {
            return Err(BadRequest::new(
                "a request with a path only (origin-form) needs exactly one Host header",
            ));
        };
        let value = std::str::from_utf8(value)
            .map_err(|_| BadRequest::new("the Host header is not ascii"))?;
        let (host, port, explicit) = parse_authority(value, Some(80))?;
        (host, port, explicit, parsed.target.to_owned())
    } else if let Some((scheme, rest)) = parsed.target.split_once("://") {
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        if scheme.eq_ignore_ascii_case("https") {
            let (host, port, _) = parse_authority(authority, Some(443))?;
            return Err(with_host(
                BadRequest::new(format!(
                    "the proxy does not fetch https:// urls; send CONNECT {} (use the proxy as HTTPS_PROXY so the client tunnels tls)",
                    host.with_port(Some(port))
                )),
                &host,
                port,
            ));
        }
        if !scheme.eq_ignore_ascii_case("http") {
            return Err(BadRequest::new(format!(
                "the proxy forwards only http:// urls (and tunnels others with CONNECT), not {}",
                excerpt(scheme.as_bytes())
            )));
        }
        if authority.is_empty() {
            return Err(BadRequest::new(format!(
                "the url {} has no host",
                excerpt(parsed.target.as_bytes())
            )));
        }
        let (host, port, explicit) = parse_authority(authority, Some(80))?;
        let path = path.split_once('#').map_or(path, |(before, _)| before);
        let path = match path.chars().next() {
            None => "/".to_owned(),
            Some('?') => format!("/{path}"),
            Some(_) => path.to_owned(),
        };
        (host, port, explicit, path)
    } else {
        return Err(BadRequest::new(format!(
            "the request target {} is neither an http:// url nor a path; use CONNECT host:port for tunnels",
            excerpt(parsed.target.as_bytes())
        )));
    };
    Ok(Route::Forward {
        request: rewrite(&parsed, &path, &host_header(&host, port, explicit)),
        host,
        port,
    })
}

/// The head sent to the destination: origin-form target, `Host` set to the routed
/// authority, hop-by-hop headers (and those the client's `Connection` header names)
/// removed, `Connection: close` added.
fn rewrite(head: &Head<'_>, path: &str, host: &str) -> Vec<u8> {
    let connection_options: Vec<&[u8]> = head
        .headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("connection"))
        .flat_map(|(_, value)| value.split(|b| *b == b','))
        .map(<[u8]>::trim_ascii)
        .collect();
    let dropped = |name: &str| {
        HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h))
            || (!FRAMING.iter().any(|h| name.eq_ignore_ascii_case(h))
                && connection_options
                    .iter()
                    .any(|option| option.eq_ignore_ascii_case(name.as_bytes())))
    };
    let mut out = Vec::new();
    for part in [
        head.method,
        " ",
        path,
        " ",
        head.version,
        "\r\nHost: ",
        host,
        "\r\n",
    ] {
        out.extend_from_slice(part.as_bytes());
    }
    for (name, value) in head.headers.iter().filter(|(name, _)| !dropped(name)) {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

/// The status line for a refusal.
pub(crate) fn status(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::NotAllowlisted | Verdict::SpecialAddress | Verdict::RequestRefused => {
            "403 Forbidden"
        }
        Verdict::TlsFailed => "502 Bad Gateway",
        Verdict::ResolveFailed | Verdict::ConnectFailed => "502 Bad Gateway",
        Verdict::ConnectTimeout => "504 Gateway Timeout",
        Verdict::TooManyTunnels => "503 Service Unavailable",
        Verdict::BadRequest | Verdict::UnsupportedCommand | Verdict::Allowed => "400 Bad Request",
    }
}

/// Snake-case verdict name for the `X-Tierbox-Verdict` header.
fn verdict_name(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Allowed => "allowed",
        Verdict::NotAllowlisted => "not_allowlisted",
        Verdict::SpecialAddress => "special_address",
        Verdict::ResolveFailed => "resolve_failed",
        Verdict::ConnectFailed => "connect_failed",
        Verdict::ConnectTimeout => "connect_timeout",
        Verdict::TooManyTunnels => "too_many_tunnels",
        Verdict::BadRequest => "bad_request",
        Verdict::UnsupportedCommand => "unsupported_command",
        Verdict::RequestRefused => "request_refused",
        Verdict::TlsFailed => "tls_failed",
    }
}

/// The response to a refused request: the status, `X-Tierbox-Egress: denied`, the
/// verdict, and the decision's message as a plain-text body.
pub(crate) fn refusal_response(status_line: &str, verdict: Verdict, message: &str) -> Vec<u8> {
    let body = format!("{message}\n");
    format!(
        "HTTP/1.1 {status_line}\r\nX-Tierbox-Egress: denied\r\nX-Tierbox-Verdict: {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        verdict_name(verdict),
        body.len()
    )
    .into_bytes()
}

/// A refusal on its way to the log (and, unless the client is gone, to the client).
struct Refused {
    verdict: Verdict,
    host: String,
    port: u16,
    message: String,
    address: Option<std::net::SocketAddr>,
}

impl Refused {
    fn bad_request(bad: BadRequest) -> Self {
        Self {
            verdict: Verdict::BadRequest,
            host: bad.host,
            port: bad.port,
            message: bad.message,
            address: None,
        }
    }
}

/// Serves one HTTP client connection whose first byte is already in `inbound`.
pub(crate) async fn serve(mut inbound: Inbound, shared: &Shared, mode: Mode, deadline: Instant) {
    let head_len = match timeout_at(deadline, read_head(&mut inbound)).await {
        Ok(Ok(HeadRead::Complete(len))) => len,
        Ok(Ok(HeadRead::TooLarge)) => {
            let bad = BadRequest::new(format!(
                "the request head is larger than {MAX_REQUEST_HEAD_BYTES} bytes"
            ));
            let protocol = protocol_of(inbound.received());
            let status_line = "431 Request Header Fields Too Large";
            let refused = Refused::bad_request(bad);
            return refuse(&mut inbound, shared, protocol, status_line, refused).await;
        }
        Ok(Ok(HeadRead::Ended) | Err(_)) => {
            // The client is gone (or broke the connection): nothing to answer.
            let bad = BadRequest::new("the connection ended before the request head was complete");
            return record(
                shared,
                protocol_of(inbound.received()),
                &Refused::bad_request(bad),
            );
        }
        Err(_elapsed) => {
            let bad = BadRequest::new(format!(
                "the request head was not complete within {REQUEST_HEAD_TIMEOUT_MS} ms"
            ));
            record(
                shared,
                protocol_of(inbound.received()),
                &Refused::bad_request(bad),
            );
            return close_gracefully(&mut inbound.stream).await;
        }
    };
    let protocol = protocol_of(inbound.received());
    let route = route(&inbound.received()[..head_len]);
    inbound.consume(head_len);
    let (host, port, request) = match route {
        Ok(Route::Connect { host, port }) => (host, port, None),
        Ok(Route::Forward {
            host,
            port,
            request,
        }) => (host, port, Some(request)),
        Err(bad) => {
            let refused = Refused::bad_request(bad);
            return refuse(&mut inbound, shared, protocol, "400 Bad Request", refused).await;
        }
    };
    let terminated = shared
        .config
        .terminate
        .clone()
        .filter(|t| t.rules(&host).is_some());
    if request.is_some() && terminated.is_some() {
        // Rules need to see a request and a secret never goes out in clear text.
        let refused = Refused {
            verdict: Verdict::RequestRefused,
            host: host.to_string(),
            port,
            message: format!(
                "egress denied: {host} has credential or request rules, so it is reached over https only (the proxy terminates its TLS); use https://{host}/…"
            ),
            address: None,
        };
        return refuse(&mut inbound, shared, protocol, "403 Forbidden", refused).await;
    }
    let outcome = dial_or_refuse(mode, &shared.config, &host, port).await;
    let mut dialed = match outcome {
        Ok(dialed) => dialed,
        Err(refusal) => {
            let status_line = status(refusal.verdict);
            let refused = Refused {
                verdict: refusal.verdict,
                host: host.to_string(),
                port,
                message: refusal.message,
                address: refusal.address,
            };
            return refuse(&mut inbound, shared, protocol, status_line, refused).await;
        }
    };
    let counters = shared.log.record(Entry {
        protocol,
        host: host.to_string(),
        port,
        verdict: Verdict::Allowed,
        message: dialed.message,
        address: Some(dialed.address),
        request: None,
    });
    let ending = match request {
        None => tunnel::Ending::WhenBothEnd,
        Some(_) => tunnel::Ending::WhenDestinationEnds,
    };
    let initial = match request {
        None => {
            let established = b"HTTP/1.1 200 Connection established\r\n\r\n";
            if inbound.stream.write_all(established).await.is_err() {
                return;
            }
            if let Some(t) = terminated {
                let ahead = inbound.unread().to_vec();
                let endpoint = (protocol, &host, port);
                let (client, upstream) = (inbound.stream, dialed.stream);
                let upstream = crate::tls::Counting::new(upstream, counters);
                return crate::tls::serve_terminated(shared, &t, endpoint, ahead, client, upstream)
                    .await;
            }
            inbound.unread().to_vec()
        }
        Some(mut request) => {
            request.extend_from_slice(inbound.unread());
            request
        }
    };
    tunnel::run(
        &mut inbound.stream,
        &mut dialed.stream,
        &initial,
        &counters,
        shared.config.idle_timeout,
        ending,
        tunnel::pipes(),
    )
    .await;
}

fn record(shared: &Shared, protocol: Protocol, refused: &Refused) {
    shared.log.record(Entry {
        protocol,
        host: refused.host.clone(),
        port: refused.port,
        verdict: refused.verdict,
        message: refused.message.clone(),
        address: refused.address,
        request: None,
    });
}

/// Records a refusal, answers it and closes the connection.
async fn refuse(
    inbound: &mut Inbound,
    shared: &Shared,
    protocol: Protocol,
    status_line: &str,
    refused: Refused,
) {
    record(shared, protocol, &refused);
    let response = refusal_response(status_line, refused.verdict, &refused.message);
    let _ = inbound.stream.write_all(&response).await;
    close_gracefully(&mut inbound.stream).await;
}

enum HeadRead {
    /// The head is the first this many bytes.
    Complete(usize),
    /// [`MAX_REQUEST_HEAD_BYTES`] read without the end of the head.
    TooLarge,
    /// The client closed before the head was complete.
    Ended,
}

async fn read_head(inbound: &mut Inbound) -> std::io::Result<HeadRead> {
    let mut scanned = 0;
    loop {
        let received = inbound.received();
        if let Some(end) = find_head_end(received, scanned) {
            return Ok(HeadRead::Complete(end));
        }
        // The terminator is at most 3 bytes; rescan the tail in case it was split.
        scanned = received.len().saturating_sub(3);
        if inbound.is_full() {
            return Ok(HeadRead::TooLarge);
        }
        if inbound.fill().await? == 0 {
            return Ok(HeadRead::Ended);
        }
    }
}
