//! Output of a foreground run as it happens, for callers that stream it (MCP progress
//! notifications, the HTTP API's JSON lines, the CLI's live printing).
//!
//! - Events carry **bytes**, line-buffered and redacted with the run's redactor before
//!   they leave ([`StreamRedactor`]): a batch ends at the last newline, or, when a line
//!   grows past [`STREAM_FLUSH_BYTES`], at its last whitespace (credentials contain
//!   none), so a token is never split across two events and always reaches the redactor
//!   whole; a private key block printed over several batches stays hidden up to its END
//!   line. A batch never ends inside a UTF-8 character while more may follow, so each
//!   event's text view is lossy only where the program's bytes are not UTF-8 (and then
//!   the event carries them as `bytes_base64`: [`crate::wire`]).
//! - **Nothing is lost while the consumer keeps reading**, and the run never waits for
//!   it: events go through a bounded channel with `try_send`; when it is full, a stream's
//!   batches are joined, in order, into a backlog that a task sends as soon as there is
//!   room (later batches of that stream join the backlog until then). The backlog holds
//!   at most what the stream may stream (the output quota). At the run's end the backlog
//!   is sent, waiting at most [`STREAM_END_WAIT_MS`] for room; what a consumer that
//!   stopped reading did not take by then is dropped and counted
//!   ([`StreamSummary::dropped_bytes`], and `live_dropped_bytes` of the outcome's
//!   stream). The final [`crate::Outcome`] has all the captured output either way.
//! - Only what the output quota captures is streamed: a stream stops producing events
//!   once it reaches the plan's `output.max_bytes`.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tierbox_policy::handle::Stream;
use tierbox_policy::plan::{OutputPlan, RedactionPlan};
use tierbox_redact::Redactor;
pub use tierbox_redact::stream::STREAM_FLUSH_BYTES;
use tierbox_redact::stream::StreamRedactor;
use tokio::sync::mpsc;

use crate::capture::Push;
use crate::supervisor::ChunkSink;
use crate::wire::{self, WireError};

/// Longest the end of a run waits for its live-output consumer to make room for what it
/// has not taken yet, in milliseconds (2 s). A consumer that keeps reading (the HTTP
/// API's stream, MCP progress, the CLI) never makes the run wait this long; one that
/// stopped reading without closing its end (a library caller that reads only after the
/// run) costs the run this much, once, and misses the bytes ([`StreamSummary`]).
pub const STREAM_END_WAIT_MS: u64 = 2_000;

/// One batch of output.
///
/// Serialised as `{"stream", "text", "bytes_base64"?}`: `text` is the bytes as UTF-8
/// (each invalid sequence replaced by U+FFFD), and `bytes_base64` the bytes exactly,
/// present only when `text` is lossy ([`crate::wire`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputEvent {
    /// Which stream it came from.
    pub stream: Stream,
    /// The bytes, redacted.
    pub bytes: Vec<u8>,
}

impl OutputEvent {
    /// An event of `stream` carrying `bytes`.
    pub fn new(stream: Stream, bytes: impl Into<Vec<u8>>) -> Self {
        Self {
            stream,
            bytes: bytes.into(),
        }
    }

    /// The event as its JSON fields carry it (`text`, `bytes_base64`) made back into
    /// bytes.
    pub fn from_wire(
        stream: Stream,
        text: &str,
        bytes_base64: Option<&str>,
    ) -> Result<Self, WireError> {
        Ok(Self::new(
            stream,
            wire::decode(text, bytes_base64)?.into_owned(),
        ))
    }

    /// The bytes as text, each invalid UTF-8 sequence replaced by U+FFFD.
    pub fn text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.bytes)
    }

    /// The bytes in their JSON form ([`crate::wire::encode`]).
    pub fn wire(&self) -> wire::Wire {
        wire::encode(&self.bytes)
    }
}

impl Serialize for OutputEvent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let w = self.wire();
        let mut st = s.serialize_struct("OutputEvent", 3)?;
        st.serialize_field("stream", &self.stream)?;
        st.serialize_field("text", &w.text)?;
        match &w.bytes_base64 {
            Some(b64) => st.serialize_field("bytes_base64", b64)?,
            None => st.skip_field("bytes_base64")?,
        }
        st.end()
    }
}

/// What the streaming side of a run dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StreamSummary {
    /// Bytes not streamed because the consumer was not reading (both streams).
    pub dropped_bytes: u64,
    /// Of those, stdout's and stderr's.
    pub dropped: [u64; 2],
}

struct Pending {
    pieces: StreamRedactor,
    /// Bytes of this stream accepted for streaming so far (bounded by the quota).
    seen: u64,
    /// Batches not sent yet because the channel was full, joined in order: sent before
    /// any later batch of this stream.
    backlog: Vec<u8>,
    /// A task is waiting for room to send the backlog.
    flushing: bool,
}

/// The tap a run's readers feed.
pub(crate) struct Tap {
    tx: mpsc::Sender<OutputEvent>,
    redactor: Option<Redactor>,
    budget: u64,
    pending: [Arc<Mutex<Pending>>; 2],
    dropped: [Arc<AtomicU64>; 2],
    end_wait: Duration,
}

fn index(stream: Stream) -> usize {
    match stream {
        Stream::Stdout => 0,
        Stream::Stderr => 1,
    }
}

impl Tap {
    /// A tap sending to `tx`, streaming at most `budget` bytes per stream, waiting at most
    /// `end_wait` at the end for room for the backlog.
    pub(crate) fn new(
        tx: mpsc::Sender<OutputEvent>,
        redactor: Option<Redactor>,
        budget: u64,
        end_wait: Duration,
    ) -> Self {
        let pending = || {
            Arc::new(Mutex::new(Pending {
                pieces: StreamRedactor::default(),
                seen: 0,
                backlog: Vec::new(),
                flushing: false,
            }))
        };
        Self {
            tx,
            redactor,
            budget,
            pending: [pending(), pending()],
            dropped: [Arc::default(), Arc::default()],
            end_wait,
        }
    }

    /// The tap of a run whose plan has `redaction` and `output`: redacted when the plan
    /// redacts, streaming at most the output quota per stream.
    pub(crate) fn for_plan(
        tx: mpsc::Sender<OutputEvent>,
        redaction: &RedactionPlan,
        output: &OutputPlan,
    ) -> Self {
        let redactor = redaction
            .enabled
            .then(|| Redactor::new(&redaction.sensitive_values));
        Self::new(
            tx,
            redactor,
            output.max_bytes,
            Duration::from_millis(STREAM_END_WAIT_MS),
        )
    }

    pub(crate) fn push(&self, stream: Stream, chunk: &[u8]) {
        let i = index(stream);
        let Ok(mut p) = self.pending[i].lock() else {
            return;
        };
        let room = usize::try_from(self.budget.saturating_sub(p.seen)).unwrap_or(usize::MAX);
        let take = &chunk[..chunk.len().min(room)];
        if take.is_empty() {
            return;
        }
        p.seen += take.len() as u64;
        let force = p.seen >= self.budget;
        if let Some(bytes) = p.pieces.push(take, force, self.redactor.as_ref()) {
            self.offer(&mut p, stream, bytes);
        }
    }

    /// Sends one redacted batch, or joins it to the backlog (when there is one, or the
    /// channel is full) and makes sure a task will send that. Called with the stream's
    /// pending lock held, so a stream's batches are sent in order; never waits.
    fn offer(&self, p: &mut Pending, stream: Stream, bytes: Vec<u8>) {
        if p.backlog.is_empty() {
            match self.tx.try_send(OutputEvent::new(stream, bytes)) {
                Ok(()) => return,
                Err(mpsc::error::TrySendError::Closed(ev)) => {
                    self.dropped[index(stream)].fetch_add(ev.bytes.len() as u64, Ordering::Relaxed);
                    return;
                }
                Err(mpsc::error::TrySendError::Full(ev)) => p.backlog = ev.bytes,
            }
        } else {
            p.backlog.extend_from_slice(&bytes);
        }
        if !p.flushing
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            p.flushing = true;
            let (tx, pending, dropped) = (
                self.tx.clone(),
                self.pending[index(stream)].clone(),
                self.dropped[index(stream)].clone(),
            );
            rt.spawn(async move {
                send_backlog(&tx, &pending, &dropped, stream, None).await;
            });
        }
    }

    /// Sends what is still buffered (the run's streams have ended), waiting at most the
    /// end wait for room, and says what was dropped.
    pub(crate) async fn finish(&self) -> StreamSummary {
        for stream in [Stream::Stdout, Stream::Stderr] {
            let i = index(stream);
            let backlog = match self.pending[i].lock() {
                Ok(mut p) => {
                    if let Some(bytes) = p.pieces.finish(self.redactor.as_ref()) {
                        // Sent now, or joined to the backlog, which is sent below (no
                        // task is started for it).
                        p.flushing = true;
                        self.offer(&mut p, stream, bytes);
                    }
                    !p.backlog.is_empty()
                }
                Err(_) => false,
            };
            if backlog {
                send_backlog(
                    &self.tx,
                    &self.pending[i],
                    &self.dropped[i],
                    stream,
                    Some(self.end_wait),
                )
                .await;
            }
        }
        let dropped = [
            self.dropped[0].load(Ordering::Relaxed),
            self.dropped[1].load(Ordering::Relaxed),
        ];
        StreamSummary {
            dropped_bytes: dropped[0] + dropped[1],
            dropped,
        }
    }
}

/// Sends `pending`'s backlog once the channel has room (waiting at most `wait`, when
/// given; past it, or when the receiver is gone, the backlog is dropped and counted).
/// The backlog is taken under the lock at the moment a slot is held, so it goes out in
/// order with everything else of its stream.
async fn send_backlog(
    tx: &mpsc::Sender<OutputEvent>,
    pending: &Mutex<Pending>,
    dropped: &AtomicU64,
    stream: Stream,
    wait: Option<Duration>,
) {
    let permit = match wait {
        None => tx.reserve().await.ok(),
        Some(wait) => tokio::time::timeout(wait, tx.reserve())
            .await
            .ok()
            .and_then(Result::ok),
    };
    let Ok(mut p) = pending.lock() else {
        return;
    };
    let backlog = std::mem::take(&mut p.backlog);
    if wait.is_none() {
        p.flushing = false;
    }
    if backlog.is_empty() {
        return;
    }
    match permit {
        Some(permit) => permit.send(OutputEvent::new(stream, backlog)),
        None => {
            dropped.fetch_add(backlog.len() as u64, Ordering::Relaxed);
        }
    }
}

/// A reader's sink that also feeds a tap.
pub(crate) struct Tee<S: ChunkSink + ?Sized> {
    pub(crate) inner: std::sync::Arc<S>,
    pub(crate) tap: std::sync::Arc<Tap>,
    pub(crate) stream: Stream,
}

impl<S: ChunkSink + ?Sized> ChunkSink for Tee<S> {
    fn push_chunk(&self, chunk: &[u8]) -> Push {
        self.tap.push(self.stream, chunk);
        self.inner.push_chunk(chunk)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn drain(rx: &mut mpsc::Receiver<OutputEvent>) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Ok(e) = rx.try_recv() {
            out.push(e.bytes);
        }
        out
    }

    fn tap(tx: mpsc::Sender<OutputEvent>, redactor: Option<Redactor>, budget: u64) -> Tap {
        Tap::new(
            tx,
            redactor,
            budget,
            Duration::from_millis(STREAM_END_WAIT_MS),
        )
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn batches_end_at_newlines() {
        let (tx, mut rx) = mpsc::channel(16);
        let tap = tap(tx, None, u64::MAX);
        tap.push(Stream::Stdout, b"one\ntw");
        tap.push(Stream::Stdout, b"o\nthr");
        assert_eq!(drain(&mut rx), [b"one\n".to_vec(), b"two\n".to_vec()]);
        assert_eq!(rt().block_on(tap.finish()), StreamSummary::default());
        assert_eq!(drain(&mut rx), [b"thr".to_vec()]);
    }

    #[test]
    fn a_token_split_across_reads_is_redacted_whole() {
        let (tx, mut rx) = mpsc::channel(16);
        let tap = tap(tx, Some(Redactor::new(&[])), u64::MAX);
        tap.push(Stream::Stderr, b"token ghp_0123456789abcdef");
        tap.push(Stream::Stderr, b"0123456789abcdefABCD\n");
        let text = drain(&mut rx).concat();
        assert!(
            !text.windows(16).any(|w| w == b"0123456789abcdef"),
            "{text:?}"
        );
        assert!(text.starts_with(b"token "), "{text:?}");
    }

    /// Regression: each batch was redacted on its own, so the body of a private key that
    /// a program printed line by line reached the stream (only a block's BEGIN and END in
    /// one batch hid it).
    #[test]
    fn a_private_key_printed_line_by_line_stays_hidden() {
        let (tx, mut rx) = mpsc::channel(16);
        let tap = tap(tx, Some(Redactor::new(&[])), u64::MAX);
        tap.push(Stream::Stdout, b"-----BEGIN PRIVATE KEY-----\n");
        tap.push(Stream::Stderr, b"unrelated MIIEvQ on stderr\n");
        tap.push(Stream::Stdout, b"MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n");
        tap.push(Stream::Stdout, b"-----END PRIVATE KEY-----\ndone\n");
        rt().block_on(tap.finish());
        let text = String::from_utf8(drain(&mut rx).concat()).unwrap();
        assert!(!text.contains("MIIEvQIBAD"), "{text}");
        assert!(text.contains("unrelated MIIEvQ on stderr"), "{text}");
        assert!(
            text.ends_with("-----END PRIVATE KEY-----\ndone\n"),
            "{text}"
        );
    }

    /// Regression: an event was the lossy text of its batch, so binary output (`gzip
    /// -c`) reached a streaming consumer with every invalid byte replaced by U+FFFD.
    #[test]
    fn binary_output_streams_byte_exact_and_its_json_says_so() {
        let (tx, mut rx) = mpsc::channel(16);
        let tap = tap(tx, Some(Redactor::new(&[])), u64::MAX);
        let bytes: Vec<u8> = (0u8..=255).collect();
        tap.push(Stream::Stdout, &bytes[..100]);
        tap.push(Stream::Stdout, &bytes[100..]);
        rt().block_on(tap.finish());
        let events: Vec<OutputEvent> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        let got: Vec<u8> = events.iter().flat_map(|e| e.bytes.clone()).collect();
        assert_eq!(got, bytes);
        for e in &events {
            let v = serde_json::to_value(e).unwrap();
            let text = v["text"].as_str().unwrap();
            let back = OutputEvent::from_wire(e.stream, text, v["bytes_base64"].as_str()).unwrap();
            assert_eq!(&back, e);
            assert_eq!(
                v.get("bytes_base64").is_some(),
                std::str::from_utf8(&e.bytes).is_err()
            );
        }
    }

    /// Regression: a batch the channel had no room for was dropped, so a consumer that
    /// read a little slower than the program wrote (the daemon's CLI) lost output.
    #[test]
    fn a_slow_consumer_gets_every_byte_in_order() {
        let rt = rt();
        let (tx, mut rx) = mpsc::channel(1);
        let tap = Arc::new(tap(tx, None, u64::MAX));
        let want: Vec<u8> = (0..2000u32)
            .flat_map(|i| format!("line {i}\n").into_bytes())
            .collect();
        let got = rt.block_on(async {
            let reader = tokio::spawn(async move {
                let mut got = Vec::new();
                while let Some(e) = rx.recv().await {
                    got.extend(e.bytes);
                    tokio::task::yield_now().await;
                }
                got
            });
            for chunk in want.chunks(7) {
                tap.push(Stream::Stdout, chunk);
            }
            assert_eq!(tap.finish().await, StreamSummary::default());
            drop(tap);
            reader.await.unwrap()
        });
        assert_eq!(got, want);
    }

    #[test]
    fn a_consumer_that_stops_reading_costs_the_end_wait_and_is_told_what_it_missed() {
        let (tx, mut rx) = mpsc::channel(1);
        let tap = Tap::new(tx, None, u64::MAX, Duration::ZERO);
        tap.push(Stream::Stdout, b"kept\n");
        tap.push(Stream::Stdout, b"missed\n");
        let summary = rt().block_on(tap.finish());
        assert_eq!((summary.dropped_bytes, summary.dropped), (7, [7, 0]));
        assert_eq!(drain(&mut rx), [b"kept\n".to_vec()]);
    }

    #[test]
    fn streaming_stops_at_the_output_quota() {
        let (tx, mut rx) = mpsc::channel(16);
        let tap = tap(tx, None, 6);
        tap.push(Stream::Stdout, b"abc\n");
        tap.push(Stream::Stdout, b"defgh\n");
        tap.push(Stream::Stdout, b"more\n");
        rt().block_on(tap.finish());
        assert_eq!(drain(&mut rx).concat(), b"abc\nde");
    }
}
