//! A terminated connection inside the proxy: after the `CONNECT` (or SOCKS5) answer, the
//! client's TLS is terminated and its requests relayed under the host's rules; each
//! refused request and a failed handshake are decisions of the run's log, and the
//! credential rules used are counted there.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tierbox_policy::hosts::CanonicalHost;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::relay::relay;
use super::{TerminateError, Termination, terminate_with};
use crate::log::Entry;
use crate::server::Shared;
use crate::{Protocol, Verdict};

/// A stream whose first bytes are `prefix` (what the client sent ahead of the proxy's
/// answer: its TLS `ClientHello`, often), then `inner`'s.
pub(crate) struct Prefixed<S> {
    prefix: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S> Prefixed<S> {
    pub(crate) fn new(prefix: Vec<u8>, inner: S) -> Self {
        Self {
            prefix,
            at: 0,
            inner,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at < self.prefix.len() {
            let n = (self.prefix.len() - self.at).min(buf.remaining());
            let at = self.at;
            buf.put_slice(&self.prefix[at..at + n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The upstream side of a terminated connection, counting the bytes it carries into the
/// connection's decision (as a tunnel's copy loop does): what goes to the destination is
/// `sent`, what comes back `received` — TLS records, as on the wire.
pub(crate) struct Counting<S> {
    inner: S,
    counters: std::sync::Arc<crate::log::Counters>,
}

impl<S> Counting<S> {
    pub(crate) fn new(inner: S, counters: std::sync::Arc<crate::log::Counters>) -> Self {
        Self { inner, counters }
    }
}

impl Counting<TcpStream> {
    fn peer_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.inner.peer_addr()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counting<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len().saturating_sub(before);
        crate::log::Counters::add(&self.counters.received, n);
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counting<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &r {
            crate::log::Counters::add(&self.counters.sent, *n);
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Serves a terminated connection to `host:port` (already answered as established):
/// `sent_ahead` and `client` are the client's side, `upstream` the dialed destination.
pub(crate) async fn serve_terminated(
    shared: &Shared,
    termination: &Termination,
    (protocol, host, port): (Protocol, &CanonicalHost, u16),
    sent_ahead: Vec<u8>,
    client: TcpStream,
    upstream: Counting<TcpStream>,
) {
    let Some(rules) = termination.rules(host) else {
        return;
    };
    let address = upstream.peer_addr().ok();
    // The relay writes a message as several TLS records (head, body chunks): with Nagle's
    // algorithm a small one waits for the peer's delayed ACK, 40 ms a request.
    let _ = client.set_nodelay(true);
    let _ = upstream.inner.set_nodelay(true);
    let entry = |verdict, message, request| Entry {
        protocol,
        host: host.to_string(),
        port,
        verdict,
        message,
        address,
        request,
    };
    let client = Prefixed::new(sent_ahead, client);
    let streams = match termination.server_config(host) {
        Ok(server) => terminate_with(server, &termination.trust, host, client, upstream).await,
        Err(e) => Err(e),
    };
    let streams = match streams {
        Ok(s) => s,
        Err(e) => {
            let hint = match &e {
                TerminateError::Client { .. } => {
                    "; the client does not trust the run's CA: point it at the run's trust bundle, the file $SSL_CERT_FILE names (curl --cacert \"$SSL_CERT_FILE\"; most clients read that variable or another bundle variable themselves)"
                }
                TerminateError::Upstream { .. } | TerminateError::Ca(_) => "",
            };
            shared.log.record(entry(
                Verdict::TlsFailed,
                format!("egress failed: {e}{hint}"),
                None,
            ));
            return;
        }
    };
    let authority = super::relay::Authority {
        host: host.clone(),
        port,
    };
    let report = relay(streams.client, streams.upstream, authority, rules.clone()).await;
    for refused in &report.refused {
        let request = format!("{} {}", refused.method, refused.path);
        shared.log.record(entry(
            Verdict::RequestRefused,
            refused.message(host),
            Some(request),
        ));
    }
    shared.log.credentials_used(&report.injected);
}
