//! HTTP/1.1 between a terminated client and its verified upstream: each request is held
//! to the host's method/path rules, has its credential placeholders replaced with the
//! secrets at the places the rules name, and its response has the secrets replaced back
//! with the placeholders, headers and body.
//!
//! What the sandbox holds is a **placeholder**: a random per-run token standing for the
//! secret. The relay replaces it only
//!
//! - for this host (the relay serves one terminated connection, whose upstream was
//!   verified for the host before anything was sent),
//! - in the one header the rule names (its value as sent, or inside `Basic`
//!   credentials: `base64(user:PLACEHOLDER)` is decoded, replaced and encoded again, as
//!   git, pip and npm send tokens), or the one query parameter it names,
//! - for requests the host's rules allow.
//!
//! Never in a body, another header, or a request the rules refuse. A placeholder anywhere
//! else goes out as it is: it is worth nothing to whoever reads it.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use base64::Engine;
use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

pub use tierbox_policy::egress_rules::{
    MAX_REQUEST_RULE_BYTES, MAX_REQUEST_RULES, RequestRule, RuleError,
};

/// Where a credential's placeholder is replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// In this request header's value (also inside `Basic` credentials).
    Header(HeaderName),
    /// In this query parameter's value.
    Query(String),
}

impl Place {
    /// The request header `name`; `None` when it is not a header name.
    ///
    /// ```
    /// use tierbox_egress::tls::relay::Place;
    /// assert!(Place::header("Authorization").is_some());
    /// assert!(Place::header("bad header").is_none());
    /// ```
    pub fn header(name: &str) -> Option<Self> {
        HeaderName::from_bytes(name.as_bytes())
            .ok()
            .map(Self::Header)
    }
}

/// A secret: its bytes never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// A secret of `value`.
    pub fn new(value: String) -> Self {
        Self(value)
    }

    fn get(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

/// One credential rule for a host: its name (in reports), where its placeholder is
/// replaced, the placeholder the sandbox holds, and the secret.
#[derive(Debug, Clone)]
pub struct Credential {
    /// Its name (the policy's), in reports and the attestation.
    pub name: String,
    /// Where.
    pub place: Place,
    /// What the sandbox holds instead of the secret.
    pub placeholder: String,
    /// The secret.
    pub secret: Secret,
}

/// What a terminated host's requests are held to.
#[derive(Debug, Clone, Default)]
pub struct HostRules {
    /// Requests allowed (none: every request).
    pub allow: Vec<RequestRule>,
    /// Credentials injected.
    pub credentials: Vec<Credential>,
}

/// A request the relay refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// Its method.
    pub method: String,
    /// Its path (without the query).
    pub path: String,
    /// The rule that would allow it (`METHOD /path`); `None` when no rule can: its `Host`
    /// names another host, or its path is not in the normal form rules judge.
    pub would_allow: Option<String>,
    /// Why, when no rule can allow it.
    pub reason: Option<String>,
}

impl Refused {
    /// What the client is answered and the run's log records: the request, the host, and
    /// the rule that would allow it or why none would.
    pub fn message(&self, host: &tierbox_policy::hosts::CanonicalHost) -> String {
        let (method, path) = (&self.method, &self.path);
        match (&self.would_allow, &self.reason) {
            (Some(rule), _) => format!(
                "egress denied: {method} {path} to {host} is not allowed by its request rules; to allow: add \"{rule}\" to egress.hosts.\"{host}\".allow"
            ),
            (None, reason) => format!(
                "egress denied: {method} {path} to {host}: {}",
                reason.as_deref().unwrap_or("refused")
            ),
        }
    }
}

/// The host and port a terminated connection was made to (its `CONNECT`): every request
/// on it must name that host, in its `Host` header and in an absolute-form target.
/// Otherwise a server that hosts several names on one address (a CDN) could route a
/// request carrying the secret to another of its names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    /// The host.
    pub host: tierbox_policy::hosts::CanonicalHost,
    /// The port.
    pub port: u16,
}

impl Authority {
    /// Whether `value` (a `Host` header or a target's authority) names this host: the
    /// name, with this port or none.
    ///
    /// ```
    /// use tierbox_egress::tls::relay::Authority;
    /// use tierbox_policy::hosts::CanonicalHost;
    ///
    /// let a = Authority { host: CanonicalHost::parse("api.test").unwrap(), port: 8443 };
    /// assert!(a.accepts("api.test:8443") && a.accepts("API.test") && !a.accepts("api.test:443"));
    /// assert!(!a.accepts("other.test:8443") && !a.accepts("user@api.test"));
    /// ```
    pub fn accepts(&self, value: &str) -> bool {
        let (name, port) = match value.rsplit_once(':') {
            Some((name, port)) => match port.parse::<u16>() {
                Ok(p) => (name, Some(p)),
                Err(_) => return false,
            },
            None => (value, None),
        };
        port.is_none_or(|p| p == self.port)
            && !name.contains('@')
            && tierbox_policy::hosts::CanonicalHost::parse(name).is_ok_and(|h| h == self.host)
    }
}

/// What went through a terminated connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelayReport {
    /// Requests forwarded.
    pub forwarded: u64,
    /// Requests refused, in order (the first [`MAX_REPORTED_REFUSALS`]).
    pub refused: Vec<Refused>,
    /// Refusals past [`MAX_REPORTED_REFUSALS`], counted.
    pub refused_unreported: u64,
    /// Per credential rule, how many requests had its placeholder replaced.
    pub injected: BTreeMap<String, u64>,
}

/// Most refusals a report lists; more are counted.
pub const MAX_REPORTED_REFUSALS: usize = 64;

type Reply = Response<BoxBody<Bytes, hyper::Error>>;

fn refusal(status: StatusCode, message: String) -> Reply {
    let body = Full::new(Bytes::from(message + "\n"))
        .map_err(|never: Infallible| match never {})
        .boxed();
    let mut reply = Response::new(body);
    *reply.status_mut() = status;
    reply.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    reply
}

/// `value` with `placeholder` replaced by `secret`, directly or inside `Basic`
/// credentials; `None` when it holds no placeholder.
fn inject_header(value: &HeaderValue, placeholder: &str, secret: &str) -> Option<HeaderValue> {
    let text = value.to_str().ok()?;
    if text.contains(placeholder) {
        return HeaderValue::from_str(&text.replace(placeholder, secret)).ok();
    }
    let (scheme, encoded) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let engine = base64::engine::general_purpose::STANDARD;
    let decoded = String::from_utf8(engine.decode(encoded.trim()).ok()?).ok()?;
    if !decoded.contains(placeholder) {
        return None;
    }
    let replaced = engine.encode(decoded.replace(placeholder, secret));
    HeaderValue::from_str(&format!("{scheme} {replaced}")).ok()
}

/// `query` with `placeholder` replaced by `secret` in parameter `param`'s value.
fn inject_query(query: &str, param: &str, placeholder: &str, secret: &str) -> Option<String> {
    let mut changed = false;
    let parts: Vec<String> = query
        .split('&')
        .map(|part| match part.split_once('=') {
            Some((k, v)) if k == param && v.contains(placeholder) => {
                changed = true;
                format!("{k}={}", v.replace(placeholder, secret))
            }
            _ => part.to_owned(),
        })
        .collect();
    changed.then(|| parts.join("&"))
}

/// Replaces each credential's placeholder at its place in `req`; the names of those used.
fn inject(req: &mut Request<Incoming>, credentials: &[Credential]) -> Vec<String> {
    let mut used = Vec::new();
    for c in credentials {
        let secret = c.secret.get();
        let done = match &c.place {
            Place::Header(name) => {
                let replaced = req
                    .headers()
                    .get(name)
                    .and_then(|v| inject_header(v, &c.placeholder, secret));
                replaced
                    .map(|v| req.headers_mut().insert(name.clone(), v))
                    .is_some()
            }
            Place::Query(param) => {
                let uri = req.uri().clone();
                let query = uri
                    .query()
                    .and_then(|q| inject_query(q, param, &c.placeholder, secret));
                match query.and_then(|q| format!("{}?{q}", uri.path()).parse().ok()) {
                    Some(path_and_query) => {
                        let mut parts = uri.into_parts();
                        parts.path_and_query = Some(path_and_query);
                        match hyper::Uri::from_parts(parts) {
                            Ok(new) => {
                                *req.uri_mut() = new;
                                true
                            }
                            Err(_) => false,
                        }
                    }
                    None => false,
                }
            }
        };
        if done {
            used.push(c.name.clone());
        }
    }
    used
}

/// The secrets of `credentials` and their placeholders, longest secret first.
fn swaps(credentials: &[Credential]) -> Arc<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut v: Vec<(Vec<u8>, Vec<u8>)> = credentials
        .iter()
        .filter(|c| !c.secret.get().is_empty())
        .map(|c| {
            (
                c.secret.get().as_bytes().to_vec(),
                c.placeholder.as_bytes().to_vec(),
            )
        })
        .collect();
    v.sort_by_key(|(s, _)| std::cmp::Reverse(s.len()));
    Arc::new(v)
}

/// `bytes` with every secret of `swaps` replaced by its placeholder (longest secret
/// first, as `swaps` is sorted); `None` when no secret occurs (nothing copied).
fn replace_all(bytes: &[u8], swaps: &[(Vec<u8>, Vec<u8>)]) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    for (secret, placeholder) in swaps {
        let src = out.as_deref().unwrap_or(bytes);
        let finder = memchr::memmem::Finder::new(secret);
        let mut hits = finder.find_iter(src).peekable();
        if hits.peek().is_none() {
            continue;
        }
        let mut next = Vec::with_capacity(src.len());
        let mut at = 0;
        for hit in hits {
            // Matches do not overlap: find_iter resumes after each one.
            next.extend_from_slice(&src[at..hit]);
            next.extend_from_slice(placeholder);
            at = hit + secret.len();
        }
        next.extend_from_slice(&src[at..]);
        out = Some(next);
    }
    out
}

/// A response body with every secret replaced by its placeholder, across chunk
/// boundaries: the last `longest secret - 1` bytes of what arrived are held until more
/// comes or the body ends.
struct Stripped<B> {
    inner: B,
    swaps: Arc<Vec<(Vec<u8>, Vec<u8>)>>,
    held: BytesMut,
    done: bool,
}

impl<B> Body for Stripped<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let keep = self
            .swaps
            .first()
            .map_or(0, |(s, _)| s.len().saturating_sub(1));
        loop {
            if self.done {
                if self.held.is_empty() {
                    return Poll::Ready(None);
                }
                let rest = self.held.split();
                let out = match replace_all(&rest, &self.swaps) {
                    Some(replaced) => Bytes::from(replaced),
                    None => rest.freeze(),
                };
                return Poll::Ready(Some(Ok(Frame::data(out))));
            }
            match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => self.done = true,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        self.held.extend_from_slice(&data);
                        if let Some(replaced) = replace_all(&self.held, &self.swaps) {
                            self.held = BytesMut::from(&replaced[..]);
                        }
                        // Hold back what could be the start of a secret.
                        let cut = self.held.len().saturating_sub(keep);
                        if cut == 0 {
                            continue;
                        }
                        let out = self.held.split_to(cut).freeze();
                        return Poll::Ready(Some(Ok(Frame::data(out))));
                    }
                    // Trailers: passed as they are (HTTP/1.1 clients rarely get any).
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
            }
        }
    }
}

/// Whether `req` may go to the upstream: `None` when it may, else the status to answer
/// and the refusal to report. In order: it must name the connection's host (`421`
/// otherwise); with rules, its path must be in normal form and a rule must allow it
/// (`403`).
fn judge<B>(
    req: &Request<B>,
    authority: &Authority,
    allow: &[RequestRule],
) -> Option<(StatusCode, Refused)> {
    let method = req.method().as_str().to_owned();
    let path = req.uri().path().to_owned();
    let refused = |would_allow: Option<String>, reason: Option<String>| Refused {
        method: method.clone(),
        path: path.clone(),
        would_allow,
        reason,
    };
    let host = req
        .headers()
        .get(hyper::header::HOST)
        .and_then(|h| h.to_str().ok());
    let target = req.uri().authority().map(|a| a.as_str());
    let named =
        host.is_some_and(|h| authority.accepts(h)) && target.is_none_or(|t| authority.accepts(t));
    if !named {
        let reason = format!(
            "its Host ({}) is not {}, the host this connection was made to (and verified for)",
            host.unwrap_or("missing"),
            authority.host
        );
        return Some((StatusCode::MISDIRECTED_REQUEST, refused(None, Some(reason))));
    }
    if allow.is_empty() {
        return None;
    }
    if let Some(why) = tierbox_policy::egress_rules::path_in_normal_form(&path) {
        let reason = format!(
            "its path is not in the normal form the host's request rules judge ({why}): the upstream could resolve it to a path no rule allows"
        );
        return Some((StatusCode::FORBIDDEN, refused(None, Some(reason))));
    }
    if allow.iter().any(|r| r.allows(&method, &path)) {
        return None;
    }
    let rule = format!("{method} {path}");
    Some((StatusCode::FORBIDDEN, refused(Some(rule), None)))
}

/// Serves HTTP/1.1 between `client` (terminated) and `upstream` (verified) under `rules`
/// until either side closes; what went through.
pub async fn relay<C, U>(
    client: C,
    upstream: U,
    authority: Authority,
    rules: HostRules,
) -> RelayReport
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    U: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let report = Arc::new(Mutex::new(RelayReport::default()));
    let Ok((sender, conn)) = hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await
    else {
        return RelayReport::default();
    };
    let upstream_conn = tokio::spawn(conn);
    let sender = Arc::new(tokio::sync::Mutex::new(sender));
    let rules = Arc::new(rules);
    let authority = Arc::new(authority);
    let swaps = swaps(&rules.credentials);
    let service = {
        let report = report.clone();
        hyper::service::service_fn(move |mut req: Request<Incoming>| {
            let (sender, rules, report, swaps) =
                (sender.clone(), rules.clone(), report.clone(), swaps.clone());
            let authority = authority.clone();
            async move {
                if let Some((status, refused)) = judge(&req, &authority, &rules.allow) {
                    let body = refused.message(&authority.host);
                    let mut r = report.lock().unwrap_or_else(PoisonError::into_inner);
                    if r.refused.len() < MAX_REPORTED_REFUSALS {
                        r.refused.push(refused);
                    } else {
                        r.refused_unreported += 1;
                    }
                    return Ok::<_, Infallible>(refusal(status, body));
                }
                let used = inject(&mut req, &rules.credentials);
                let answer = sender.lock().await.send_request(req).await;
                let mut r = report.lock().unwrap_or_else(PoisonError::into_inner);
                r.forwarded += 1;
                for name in used {
                    *r.injected.entry(name).or_default() += 1;
                }
                drop(r);
                Ok(match answer {
                    Ok(resp) => {
                        let (mut parts, body) = resp.into_parts();
                        if swaps.is_empty() {
                            // No secret to take back out: the body as it came.
                            return Ok(Response::from_parts(parts, body.boxed()));
                        }
                        for value in parts.headers.values_mut() {
                            if let Some(replaced) = replace_all(value.as_bytes(), &swaps)
                                && let Ok(v) = HeaderValue::from_bytes(&replaced)
                            {
                                *value = v;
                            }
                        }
                        // The body's length may change with the swaps.
                        parts.headers.remove(hyper::header::CONTENT_LENGTH);
                        let body = Stripped {
                            inner: body,
                            swaps,
                            held: BytesMut::new(),
                            done: false,
                        };
                        Response::from_parts(parts, body.boxed())
                    }
                    Err(e) => refusal(
                        StatusCode::BAD_GATEWAY,
                        format!("egress: the upstream failed: {e}"),
                    ),
                })
            }
        })
    };
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(client), service)
        .await;
    upstream_conn.abort();
    report
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A body that yields its chunks one frame each.
    struct Chunks(std::collections::VecDeque<Bytes>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
        }
    }

    /// `bytes` in frames of `size` bytes, stripped of `secret` (for `ph`).
    async fn stripped(bytes: &[u8], size: usize, secret: &str, ph: &str) -> Vec<u8> {
        let chunks = bytes.chunks(size).map(Bytes::copy_from_slice).collect();
        let credential = Credential {
            name: "c".into(),
            place: Place::Query("t".into()),
            placeholder: ph.into(),
            secret: Secret::new(secret.into()),
        };
        let s = Stripped {
            inner: Chunks(chunks),
            swaps: swaps(&[credential]),
            held: BytesMut::new(),
            done: false,
        };
        s.collect().await.unwrap().to_bytes().to_vec()
    }

    #[tokio::test]
    async fn a_secret_split_across_frames_is_still_replaced_and_nothing_else_changes() {
        let body = b"head SECRET-123 middle SECRET-123SECRET-123 tail SECRET-12".to_vec();
        for size in 1..=body.len() {
            let out = stripped(&body, size, "SECRET-123", "ph");
            assert_eq!(
                out.await,
                b"head ph middle phph tail SECRET-12".to_vec(),
                "frames of {size}"
            );
        }
    }

    #[test]
    fn placeholders_are_replaced_only_where_the_rule_says() {
        let v = HeaderValue::from_static("Bearer PH");
        assert_eq!(inject_header(&v, "PH", "S").unwrap(), "Bearer S");
        let engine = base64::engine::general_purpose::STANDARD;
        let basic = HeaderValue::from_str(&format!("Basic {}", engine.encode("u:PH"))).unwrap();
        let out = inject_header(&basic, "PH", "S").unwrap();
        assert_eq!(out, format!("Basic {}", engine.encode("u:S")).as_str());
        assert!(inject_header(&HeaderValue::from_static("Bearer other"), "PH", "S").is_none());
        assert_eq!(
            inject_query("a=1&t=PH&b=PH", "t", "PH", "S").as_deref(),
            Some("a=1&t=S&b=PH")
        );
        assert!(inject_query("a=PH", "t", "PH", "S").is_none());
    }

    #[test]
    fn request_rules_parse_closed() {
        for bad in ["GET", "get /x", "GET x", "GET /a*b", "GET /a b", "/x GET"] {
            assert!(RequestRule::parse(bad).is_err(), "{bad}");
        }
        let any = RequestRule::parse("* /health").unwrap();
        assert!(any.allows("DELETE", "/health") && !any.allows("GET", "/healthz"));
        let exact = RequestRule::parse("POST /graphql").unwrap();
        assert!(exact.allows("POST", "/graphql") && !exact.allows("POST", "/graphql/x"));
        let long = format!("GET /{}", "a".repeat(MAX_REQUEST_RULE_BYTES));
        assert!(RequestRule::parse(&long).is_err());
    }
}
