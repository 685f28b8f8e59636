//! The client side of a connection before its tunnel: a bounded read buffer, so the
//! bytes a client sends ahead of the proxy's answer are kept and forwarded, not lost.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::{CLOSE_DRAIN_BYTES, CLOSE_DRAIN_TIMEOUT_MS, MAX_REQUEST_HEAD_BYTES};

/// A client connection and the bytes read from it that nobody consumed yet.
#[derive(Debug)]
pub(crate) struct Inbound {
    pub(crate) stream: TcpStream,
    buf: Vec<u8>,
    filled: usize,
    pos: usize,
}

impl Inbound {
    /// Wraps `stream` with a [`MAX_REQUEST_HEAD_BYTES`] buffer.
    pub(crate) fn new(stream: TcpStream) -> Self {
        Self {
            stream,
            buf: vec![0; MAX_REQUEST_HEAD_BYTES],
            filled: 0,
            pos: 0,
        }
    }

    /// Every byte read so far, consumed or not.
    pub(crate) fn received(&self) -> &[u8] {
        &self.buf[..self.filled]
    }

    /// The bytes read but not consumed.
    pub(crate) fn unread(&self) -> &[u8] {
        &self.buf[self.pos..self.filled]
    }

    /// Marks `n` unread bytes as consumed.
    pub(crate) fn consume(&mut self, n: usize) {
        self.pos = self.pos.saturating_add(n).min(self.filled);
    }

    /// Whether the buffer has no room left.
    pub(crate) fn is_full(&self) -> bool {
        self.filled == self.buf.len()
    }

    /// Reads what the client has sent (at least one byte, unless at end of stream) into
    /// the free part of the buffer; `Ok(0)` at end of stream or when the buffer is full.
    pub(crate) async fn fill(&mut self) -> io::Result<usize> {
        if self.is_full() {
            return Ok(0);
        }
        let n = self.stream.read(&mut self.buf[self.filled..]).await?;
        self.filled += n;
        Ok(n)
    }

    /// Reads until at least `n` bytes are unread; end of stream (or a full buffer) first
    /// is an [`io::ErrorKind::UnexpectedEof`] error.
    pub(crate) async fn need(&mut self, n: usize) -> io::Result<&[u8]> {
        while self.unread().len() < n {
            if self.fill().await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        Ok(&self.unread()[..n])
    }
}

/// Closes a client connection after a refusal without resetting it: shuts down the
/// write side (the client sees the end of the response), then reads and discards what
/// the client still sends, for at most [`CLOSE_DRAIN_TIMEOUT_MS`] and
/// [`CLOSE_DRAIN_BYTES`]. Closing a socket with unread bytes makes the kernel send a
/// reset, which can destroy the refusal before the client reads it.
pub(crate) async fn close_gracefully(stream: &mut TcpStream) {
    let _ = stream.shutdown().await;
    let drain = async {
        let mut scratch = [0u8; 4096];
        let mut drained = 0usize;
        while drained < CLOSE_DRAIN_BYTES {
            match stream.read(&mut scratch).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    };
    let _ = timeout(Duration::from_millis(CLOSE_DRAIN_TIMEOUT_MS), drain).await;
}
