//! Guest stdout/stderr: every chunk goes straight to the caller's [`OutputSink`], on the
//! guest's own thread, with no buffer in between that could grow or block.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

/// Where guest output goes.
pub trait OutputSink: Send + Sync + 'static {
    /// Takes one chunk of guest output. Returning `false` stops the run: the guest traps
    /// on this write (the output quota in `kill` mode).
    fn push(&self, chunk: &[u8]) -> bool;
}

/// Largest write the guest is told it may make at once, in bytes. The sink takes any
/// size; this only bounds the guest's single `write` so quota checks stay fine-grained.
pub(crate) const GUEST_WRITE_BUDGET_BYTES: usize = 64 * 1024;

/// One of the guest's output streams.
#[derive(Clone)]
pub(crate) struct GuestOutput {
    sink: Arc<dyn OutputSink>,
    /// Set once the sink refused a chunk.
    stopped: Arc<AtomicBool>,
}

impl GuestOutput {
    pub(crate) fn new(sink: Arc<dyn OutputSink>, stopped: Arc<AtomicBool>) -> Self {
        Self { sink, stopped }
    }

    fn push(&self, chunk: &[u8]) -> bool {
        if self.stopped.load(Ordering::Relaxed) {
            return false;
        }
        if self.sink.push(chunk) {
            return true;
        }
        self.stopped.store(true, Ordering::Relaxed);
        false
    }
}

fn quota_trap() -> StreamError {
    StreamError::Trap(wasmtime::format_err!("output quota exceeded"))
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        if self.push(&bytes) {
            Ok(())
        } else {
            Err(quota_trap())
        }
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        if self.stopped.load(Ordering::Relaxed) {
            return Err(quota_trap());
        }
        Ok(GUEST_WRITE_BUDGET_BYTES)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for GuestOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.push(buf) {
            Poll::Ready(Ok(buf.len()))
        } else {
            Poll::Ready(Err(std::io::Error::other("output quota exceeded")))
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
