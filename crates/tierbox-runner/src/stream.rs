//! Output of a foreground run as it happens, for callers that stream it (MCP progress
//! notifications, the HTTP API's JSON lines).
//!
//! - Events are **line-buffered and redacted** with the run's redactor before they leave:
//!   a batch ends at the last newline, or, when a line grows past [`STREAM_FLUSH_BYTES`],
//!   at its last whitespace (credentials contain none), so a token is never split across
//!   two events and always reaches the redactor whole; a private key block printed over
//!   several batches stays hidden up to its END line (`Pieces`).
//! - The run never waits for the consumer: events go through a bounded channel with
//!   `try_send`, and when it is full the batch is dropped and counted
//!   ([`StreamSummary::dropped_bytes`]). The final [`crate::Outcome`] still has all the
//!   captured output.
//! - Only what the output quota captures is streamed: a stream stops producing events
//!   once it reaches the plan's `output.max_bytes`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use tierbox_policy::handle::Stream;
use tierbox_policy::plan::{OutputPlan, RedactionPlan};
use tierbox_redact::Redactor;
use tokio::sync::mpsc;

use crate::capture::Push;
use crate::supervisor::ChunkSink;

/// Longest a line may grow before it is sent without its newline, in bytes (16 KiB).
/// Bounds both the buffering delay of a newline-free stream and the memory it holds.
pub const STREAM_FLUSH_BYTES: usize = 16 * 1024;

/// One batch of output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OutputEvent {
    /// Which stream it came from.
    pub stream: Stream,
    /// The text, redacted (invalid UTF-8 replaced with U+FFFD).
    pub text: String,
}

/// What the streaming side of a run dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StreamSummary {
    /// Bytes not streamed because the consumer was not keeping up.
    pub dropped_bytes: u64,
}

struct Pending {
    pieces: Pieces,
    /// Bytes of this stream accepted for streaming so far (bounded by the quota).
    seen: u64,
}

/// One output stream cut into pieces at line ends and redacted piece by piece, with what
/// came before in mind: a token is never split across two pieces (a piece ends at a
/// newline, or for a line longer than [`STREAM_FLUSH_BYTES`] at its last whitespace, and
/// credentials contain none), and a private key block that spans pieces stays hidden up
/// to its END line ([`Redactor::redact_piece`]). Used for the live stream of a
/// foreground run ([`Tap`]) and for what a background process's output reads return.
#[derive(Debug, Default)]
pub(crate) struct Pieces {
    buf: Vec<u8>,
    /// The last piece ended inside a private key block.
    in_key: bool,
}

impl Pieces {
    /// Adds `chunk`; returns the redacted text of the piece it completes, if any. `force`
    /// ends a piece even without a newline (the stream's quota is reached).
    pub(crate) fn push(
        &mut self,
        chunk: &[u8],
        force: bool,
        redactor: Option<&Redactor>,
    ) -> Option<String> {
        self.buf.extend_from_slice(chunk);
        let force = force || self.buf.len() >= STREAM_FLUSH_BYTES;
        let cut = cut_point(&self.buf, force)?;
        let piece: Vec<u8> = self.buf.drain(..cut).collect();
        Some(self.redact(&piece, redactor))
    }

    /// What is left once the stream has ended, redacted.
    pub(crate) fn finish(&mut self, redactor: Option<&Redactor>) -> Option<String> {
        if self.buf.is_empty() {
            return None;
        }
        let rest = std::mem::take(&mut self.buf);
        Some(self.redact(&rest, redactor))
    }

    fn redact(&mut self, bytes: &[u8], redactor: Option<&Redactor>) -> String {
        let raw = String::from_utf8_lossy(bytes);
        match redactor {
            Some(r) => {
                let (text, _, open) = r.redact_piece(&raw, self.in_key);
                self.in_key = open;
                text.into_owned()
            }
            None => raw.into_owned(),
        }
    }
}

/// The tap a run's readers feed.
pub(crate) struct Tap {
    tx: mpsc::Sender<OutputEvent>,
    redactor: Option<Redactor>,
    budget: u64,
    pending: [Mutex<Pending>; 2],
    dropped: AtomicU64,
}

fn index(stream: Stream) -> usize {
    match stream {
        Stream::Stdout => 0,
        Stream::Stderr => 1,
    }
}

/// Where to cut a pending buffer, if anywhere: after the last newline; for an overlong
/// line, after its last whitespace, else before a trailing incomplete UTF-8 sequence.
fn cut_point(buf: &[u8], force: bool) -> Option<usize> {
    if let Some(i) = buf.iter().rposition(|&b| b == b'\n') {
        return Some(i + 1);
    }
    if !force || buf.is_empty() {
        return None;
    }
    if let Some(i) = buf.iter().rposition(|b| b.is_ascii_whitespace()) {
        return Some(i + 1);
    }
    match std::str::from_utf8(buf) {
        Err(e) if e.error_len().is_none() && e.valid_up_to() > 0 => Some(e.valid_up_to()),
        _ => Some(buf.len()),
    }
}

impl Tap {
    /// A tap sending to `tx`, streaming at most `budget` bytes per stream.
    pub(crate) fn new(
        tx: mpsc::Sender<OutputEvent>,
        redactor: Option<Redactor>,
        budget: u64,
    ) -> Self {
        let pending = || {
            Mutex::new(Pending {
                pieces: Pieces::default(),
                seen: 0,
            })
        };
        Self {
            tx,
            redactor,
            budget,
            pending: [pending(), pending()],
            dropped: AtomicU64::new(0),
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
        Self::new(tx, redactor, output.max_bytes)
    }

    pub(crate) fn push(&self, stream: Stream, chunk: &[u8]) {
        let Ok(mut p) = self.pending[index(stream)].lock() else {
            return;
        };
        let room = usize::try_from(self.budget.saturating_sub(p.seen)).unwrap_or(usize::MAX);
        let take = &chunk[..chunk.len().min(room)];
        if take.is_empty() {
            return;
        }
        p.seen += take.len() as u64;
        let force = p.seen >= self.budget;
        if let Some(text) = p.pieces.push(take, force, self.redactor.as_ref()) {
            self.send(stream, text);
        }
    }

    /// Sends what is still buffered (the run's streams have ended) and says what was
    /// dropped.
    pub(crate) fn finish(&self) -> StreamSummary {
        for stream in [Stream::Stdout, Stream::Stderr] {
            if let Ok(mut p) = self.pending[index(stream)].lock()
                && let Some(text) = p.pieces.finish(self.redactor.as_ref())
            {
                self.send(stream, text);
            }
        }
        StreamSummary {
            dropped_bytes: self.dropped.load(Ordering::Relaxed),
        }
    }

    /// Sends one redacted piece. Called with the stream's pending lock held, so a
    /// stream's pieces are sent in order; `try_send` never waits: a full channel drops
    /// the piece and counts it.
    fn send(&self, stream: Stream, text: String) {
        let len = text.len() as u64;
        if self.tx.try_send(OutputEvent { stream, text }).is_err() {
            self.dropped.fetch_add(len, Ordering::Relaxed);
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

    fn drain(rx: &mut mpsc::Receiver<OutputEvent>) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(e) = rx.try_recv() {
            out.push(e.text);
        }
        out
    }

    #[test]
    fn batches_end_at_newlines() {
        let (tx, mut rx) = mpsc::channel(16);
        let tap = Tap::new(tx, None, u64::MAX);
        tap.push(Stream::Stdout, b"one\ntw");
        tap.push(Stream::Stdout, b"o\nthr");
        assert_eq!(drain(&mut rx), ["one\n", "two\n"]);
        assert_eq!(tap.finish(), StreamSummary::default());
        assert_eq!(drain(&mut rx), ["thr"]);
    }

    #[test]
    fn a_token_split_across_reads_is_redacted_whole() {
        let (tx, mut rx) = mpsc::channel(16);
        let tap = Tap::new(tx, Some(Redactor::new(&[])), u64::MAX);
        tap.push(Stream::Stderr, b"token ghp_0123456789abcdef");
        tap.push(Stream::Stderr, b"0123456789abcdefABCD\n");
        let text = drain(&mut rx).concat();
        assert!(!text.contains("0123456789abcdef"), "{text}");
        assert!(text.starts_with("token "), "{text}");
    }

    /// Regression: each batch was redacted on its own, so the body of a private key that
    /// a program printed line by line reached the stream (only a block's BEGIN and END in
    /// one batch hid it).
    #[test]
    fn a_private_key_printed_line_by_line_stays_hidden() {
        let (tx, mut rx) = mpsc::channel(16);
        let tap = Tap::new(tx, Some(Redactor::new(&[])), u64::MAX);
        tap.push(Stream::Stdout, b"-----BEGIN PRIVATE KEY-----\n");
        tap.push(Stream::Stderr, b"unrelated MIIEvQ on stderr\n");
        tap.push(Stream::Stdout, b"MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n");
        tap.push(Stream::Stdout, b"-----END PRIVATE KEY-----\ndone\n");
        tap.finish();
        let text = drain(&mut rx).concat();
        assert!(!text.contains("MIIEvQIBAD"), "{text}");
        assert!(text.contains("unrelated MIIEvQ on stderr"), "{text}");
        assert!(
            text.ends_with("-----END PRIVATE KEY-----\ndone\n"),
            "{text}"
        );
    }

    #[test]
    fn overlong_lines_are_cut_at_whitespace_and_never_inside_a_character() {
        let (tx, mut rx) = mpsc::channel(64);
        let tap = Tap::new(tx, None, u64::MAX);
        let mut line = "a ".repeat(STREAM_FLUSH_BYTES / 2).into_bytes();
        line.extend_from_slice(b"tail");
        tap.push(Stream::Stdout, &line);
        let first = drain(&mut rx);
        assert_eq!(first.len(), 1);
        assert!(first[0].ends_with(' '));
        // No whitespace at all: cut before the incomplete 'é'.
        let mut blob = vec![b'x'; STREAM_FLUSH_BYTES - 1];
        blob.push(0xC3);
        tap.push(Stream::Stderr, &blob);
        tap.push(Stream::Stderr, &[0xA9, b'\n']);
        let got = drain(&mut rx).concat();
        assert!(got.ends_with("é\n") && !got.contains('\u{FFFD}'));
    }

    #[test]
    fn a_slow_consumer_loses_batches_not_the_run() {
        let (tx, mut rx) = mpsc::channel(1);
        let tap = Tap::new(tx, None, u64::MAX);
        tap.push(Stream::Stdout, b"kept\n");
        tap.push(Stream::Stdout, b"dropped\n");
        assert_eq!(tap.finish().dropped_bytes, 8);
        assert_eq!(drain(&mut rx), ["kept\n"]);
    }

    #[test]
    fn streaming_stops_at_the_output_quota() {
        let (tx, mut rx) = mpsc::channel(16);
        let tap = Tap::new(tx, None, 6);
        tap.push(Stream::Stdout, b"abc\n");
        tap.push(Stream::Stdout, b"defgh\n");
        tap.push(Stream::Stdout, b"more\n");
        tap.finish();
        assert_eq!(drain(&mut rx).concat(), "abc\nde");
    }
}
