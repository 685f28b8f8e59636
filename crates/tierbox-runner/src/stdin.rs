//! A run's stdin: the plan's inline bytes, then the caller's stream, forwarded to the
//! program as they arrive and bounded by the run's stdin limit.
//!
//! Invariants:
//! - nothing buffers the whole input: the forwarder holds one chunk of at most
//!   [`STDIN_CHUNK_BYTES`] at a time, and a blocking reader's thread at most
//!   [`STDIN_QUEUE_CHUNKS`] more;
//! - the program reads at most `limits.stdin_bytes` bytes. When more are offered, its stdin
//!   is closed after exactly that many and the report says `limit_hit`: a cut input is
//!   never passed off as a whole one. Exactly the limit, then end of input, is no hit;
//! - the report counts only bytes the pipe accepted, and their SHA-256, so it says what the
//!   program could read, also when the run ended before its input did;
//! - a program that closes its stdin (or exits) early ends the forwarding; that is its
//!   choice, not an error, and the report says so (`not_read_to_end`).

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// Largest chunk the forwarder reads from the caller's stream and writes to the
/// program's stdin at once, in bytes: what one forwarding holds in memory.
pub const STDIN_CHUNK_BYTES: usize = 64 * 1024;

/// Chunks a blocking reader's thread ([`StdinSource::from_blocking_reader`]) reads ahead
/// of the program: with [`STDIN_CHUNK_BYTES`], at most 256 KiB waiting in memory.
pub const STDIN_QUEUE_CHUNKS: usize = 4;

/// The caller's stream for a run whose stdin is streamed (`stdin_stream: true` in the
/// request): any async reader, or chunks from a channel.
///
/// ```
/// use tierbox_runner::stdin::StdinSource;
///
/// let from_memory = StdinSource::from_reader(std::io::Cursor::new(vec![0u8, 1, 2]));
/// let (tx, rx) = tokio::sync::mpsc::channel(4);
/// let from_chunks = StdinSource::from_chunks(rx);
/// # drop((from_memory, from_chunks, tx));
/// ```
pub struct StdinSource(Inner);

enum Inner {
    Reader(Pin<Box<dyn AsyncRead + Send>>),
    Chunks(mpsc::Receiver<io::Result<Vec<u8>>>),
}

impl std::fmt::Debug for StdinSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Inner::Reader(_) => "StdinSource::Reader",
            Inner::Chunks(_) => "StdinSource::Chunks",
        })
    }
}

impl StdinSource {
    /// Stdin read from `reader` until its end of file.
    pub fn from_reader(reader: impl AsyncRead + Send + 'static) -> Self {
        Self(Inner::Reader(Box::pin(reader)))
    }

    /// Stdin from the chunks sent on `chunks`, in order, until every sender is dropped;
    /// an `Err` ends the input there (the program sees end of file, the report says
    /// `source_error`).
    pub fn from_chunks(chunks: mpsc::Receiver<io::Result<Vec<u8>>>) -> Self {
        Self(Inner::Chunks(chunks))
    }

    /// Stdin read from a blocking reader (this process's stdin, a file) on a thread of its
    /// own, [`STDIN_QUEUE_CHUNKS`] chunks ahead at most. The thread ends at the reader's
    /// end of file, or at its next read once the run no longer wants input; a read that
    /// blocks forever (a terminal nobody types in) keeps it until the process exits.
    pub fn from_blocking_reader(mut reader: impl io::Read + Send + 'static) -> io::Result<Self> {
        let (tx, rx) = mpsc::channel(STDIN_QUEUE_CHUNKS);
        std::thread::Builder::new()
            .name("tierbox-stdin".to_owned())
            .spawn(move || {
                loop {
                    let mut buf = vec![0u8; STDIN_CHUNK_BYTES];
                    let sent = match reader.read(&mut buf) {
                        Ok(0) => return,
                        Ok(n) => {
                            buf.truncate(n);
                            tx.blocking_send(Ok(buf))
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => {
                            let _ = tx.blocking_send(Err(e));
                            return;
                        }
                    };
                    if sent.is_err() {
                        return;
                    }
                }
            })?;
        Ok(Self::from_chunks(rx))
    }

    /// The next chunk into `buf` (at most [`STDIN_CHUNK_BYTES`]); `None` at the end.
    async fn next<'b>(&mut self, buf: &'b mut Vec<u8>) -> io::Result<Option<&'b [u8]>> {
        match &mut self.0 {
            Inner::Reader(r) => {
                buf.resize(STDIN_CHUNK_BYTES, 0);
                loop {
                    match r.read(buf).await {
                        Ok(0) => return Ok(None),
                        Ok(n) => return Ok(Some(&buf[..n])),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
            }
            Inner::Chunks(rx) => loop {
                match rx.recv().await {
                    None => return Ok(None),
                    Some(Err(e)) => return Err(e),
                    Some(Ok(chunk)) if chunk.is_empty() => {}
                    Some(Ok(chunk)) => {
                        *buf = chunk;
                        return Ok(Some(buf));
                    }
                }
            },
        }
    }
}

/// What a run's stdin carried (the outcome's `stdin`), present when the run had one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StdinReport {
    /// Bytes written to the program's stdin (all of them reached its pipe).
    pub bytes: u64,
    /// Lowercase hex SHA-256 of those bytes.
    pub sha256: String,
    /// The run's stdin limit, in bytes (`limits.stdin_bytes`, or the request's
    /// `stdin_limit_bytes`).
    pub limit_bytes: u64,
    /// More than `limit_bytes` was offered: the program's stdin was closed after exactly
    /// `limit_bytes` and the rest was not read (the outcome's `limit_hit` is `"stdin"`
    /// unless another limit ended the run).
    pub limit_hit: bool,
    /// The bytes came from the caller's stream (`--stdin`, the HTTP streamed form, a
    /// library reader), not from the request.
    pub streamed: bool,
    /// The program closed its stdin, or the run ended, before all the input was written:
    /// `bytes` is what it got (a `head -c 10` reads only what it needs).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub not_read_to_end: bool,
    /// Reading the caller's stream failed (a client that went away mid-upload): why. The
    /// program saw end of file after `bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_error: Option<String>,
}

/// The forwarding's state, shared with the supervisor so the report survives the task
/// being stopped at the end of the run.
#[derive(Debug)]
struct Progress {
    hasher: Sha256,
    bytes: u64,
    limit_bytes: u64,
    limit_hit: bool,
    streamed: bool,
    done: bool,
    not_read_to_end: bool,
    source_error: Option<String>,
}

/// A run's stdin being forwarded (see [`forward`]).
#[derive(Debug)]
pub(crate) struct Forwarding {
    task: tokio::task::JoinHandle<()>,
    progress: Arc<Mutex<Progress>>,
}

impl Forwarding {
    /// Stops the forwarding (the run's processes are gone: a write can only fail now, a
    /// read of the caller's stream could wait forever) and reports what it wrote.
    pub(crate) async fn finish(self) -> StdinReport {
        // A forwarding that has already finished is reported as it ended; one that has
        // not is stopped at its current await, where every counted byte is written.
        if !self.task.is_finished() {
            self.task.abort();
        }
        let _ = self.task.await;
        let mut p = self.progress.lock().unwrap_or_else(PoisonError::into_inner);
        StdinReport {
            bytes: p.bytes,
            sha256: tierbox_attest::jcs::hex(&std::mem::take(&mut p.hasher).finalize()),
            limit_bytes: p.limit_bytes,
            limit_hit: p.limit_hit,
            streamed: p.streamed,
            not_read_to_end: p.not_read_to_end || !p.done,
            source_error: p.source_error.take(),
        }
    }
}

/// Starts writing `inline` and then `source` (when the plan's stdin is streamed) to
/// `pipe`, the program's stdin, at most `limit_bytes` in all; closes it at the end of the
/// input or at the limit.
pub(crate) fn forward<W: AsyncWrite + Unpin + Send + 'static>(
    pipe: W,
    inline: Vec<u8>,
    source: Option<StdinSource>,
    limit_bytes: u64,
) -> Forwarding {
    let progress = Arc::new(Mutex::new(Progress {
        hasher: Sha256::new(),
        bytes: 0,
        limit_bytes,
        limit_hit: false,
        streamed: source.is_some(),
        done: false,
        not_read_to_end: false,
        source_error: None,
    }));
    let task = tokio::spawn(run_forward(pipe, inline, source, progress.clone()));
    Forwarding { task, progress }
}

async fn run_forward<W: AsyncWrite + Unpin>(
    mut pipe: W,
    inline: Vec<u8>,
    source: Option<StdinSource>,
    progress: Arc<Mutex<Progress>>,
) {
    let lock = || progress.lock().unwrap_or_else(PoisonError::into_inner);
    let limit = lock().limit_bytes;
    let mut written = 0u64;
    // Validation refused inline bytes past the limit; the check stays for hand-built
    // plans.
    let mut ok = write_counted(&mut pipe, &inline, &mut written, limit, &lock).await;
    if ok && let Some(mut source) = source {
        let mut buf = Vec::new();
        loop {
            match source.next(&mut buf).await {
                Ok(None) => break,
                Ok(Some(chunk)) => {
                    if !write_counted(&mut pipe, chunk, &mut written, limit, &lock).await {
                        ok = false;
                        break;
                    }
                    if lock().limit_hit {
                        break;
                    }
                }
                Err(e) => {
                    lock().source_error = Some(e.to_string());
                    break;
                }
            }
        }
    }
    // Recorded before the pipe is closed, with no await between: when the program sees
    // its end of file, the report is final.
    {
        let mut p = lock();
        p.done = true;
        p.not_read_to_end = !ok;
    }
    // Closing the pipe is the program's end of file.
    drop(pipe);
}

/// Writes what of `chunk` fits under `limit`, counting and hashing each accepted write;
/// marks the limit hit when some of it does not fit. `false`: the pipe refused a write
/// (the program closed its stdin or is gone).
async fn write_counted<'p, W: AsyncWrite + Unpin>(
    pipe: &mut W,
    chunk: &[u8],
    written: &mut u64,
    limit: u64,
    lock: &impl Fn() -> std::sync::MutexGuard<'p, Progress>,
) -> bool {
    let room = usize::try_from(limit.saturating_sub(*written)).unwrap_or(usize::MAX);
    let (fits, cut) = if chunk.len() > room {
        (&chunk[..room], true)
    } else {
        (chunk, false)
    };
    if cut {
        lock().limit_hit = true;
    }
    let mut rest = fits;
    while !rest.is_empty() {
        match pipe.write(rest).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => {
                let mut p = lock();
                p.hasher.update(&rest[..n]);
                p.bytes += n as u64;
                *written += n as u64;
                rest = &rest[n..];
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    async fn through(
        inline: &[u8],
        chunks: &[&[u8]],
        limit: u64,
        read_max: usize,
    ) -> (Vec<u8>, StdinReport) {
        let (tx, rx) = mpsc::channel(8);
        for c in chunks {
            tx.send(Ok(c.to_vec())).await.unwrap();
        }
        drop(tx);
        let (w, mut r) = tokio::io::duplex(1 << 20);
        let f = forward(
            w,
            inline.to_vec(),
            Some(StdinSource::from_chunks(rx)),
            limit,
        );
        let mut got = vec![0u8; read_max];
        let mut n = 0;
        while n < read_max {
            match r.read(&mut got[n..]).await.unwrap() {
                0 => break,
                k => n += k,
            }
        }
        got.truncate(n);
        // Wait for the forwarding to end by itself before reading its report.
        while !f.task.is_finished() {
            tokio::task::yield_now().await;
        }
        (got, f.finish().await)
    }

    fn sha(b: &[u8]) -> String {
        tierbox_attest::sha256_hex(b)
    }

    #[tokio::test]
    async fn everything_under_the_limit_is_passed_whole() {
        let (got, r) = through(b"ab", &[b"\0\xff", b"cd"], 6, 100).await;
        assert_eq!(got, b"ab\0\xffcd");
        assert_eq!((r.bytes, r.limit_hit, r.streamed), (6, false, true));
        assert_eq!(r.sha256, sha(b"ab\0\xffcd"));
        assert!(!r.not_read_to_end);
    }

    #[tokio::test]
    async fn more_than_the_limit_is_cut_at_it_and_said() {
        let (got, r) = through(b"", &[b"abc", b"defg"], 5, 100).await;
        assert_eq!(got, b"abcde");
        assert_eq!((r.bytes, r.limit_hit), (5, true));
        assert_eq!(r.sha256, sha(b"abcde"));
        // A limit of zero: nothing at all.
        let (got, r) = through(b"", &[b"x"], 0, 100).await;
        assert_eq!((got.len(), r.bytes, r.limit_hit), (0, 0, true));
    }

    #[tokio::test]
    async fn a_program_that_stops_reading_ends_the_forwarding() {
        let (tx, rx) = mpsc::channel(8);
        let (w, r) = tokio::io::duplex(4);
        let f = forward(w, Vec::new(), Some(StdinSource::from_chunks(rx)), 100);
        tx.send(Ok(b"0123456789".to_vec())).await.unwrap();
        drop(r);
        let r = f.finish().await;
        assert!(r.not_read_to_end, "{r:?}");
        assert!(r.bytes <= 4, "{r:?}");
    }

    #[tokio::test]
    async fn a_failing_source_is_reported() {
        let (tx, rx) = mpsc::channel(8);
        tx.send(Ok(b"ab".to_vec())).await.unwrap();
        tx.send(Err(io::Error::other("client went away")))
            .await
            .unwrap();
        let (w, mut r) = tokio::io::duplex(64);
        let f = forward(w, Vec::new(), Some(StdinSource::from_chunks(rx)), 100);
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"ab");
        while !f.task.is_finished() {
            tokio::task::yield_now().await;
        }
        let r = f.finish().await;
        assert_eq!(r.source_error.as_deref(), Some("client went away"));
    }

    #[test]
    fn a_blocking_reader_is_read_on_its_own_thread() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
            let src =
                StdinSource::from_blocking_reader(std::io::Cursor::new(data.clone())).unwrap();
            let (w, mut r) = tokio::io::duplex(1 << 16);
            let f = forward(w, Vec::new(), Some(src), 1 << 20);
            let mut got = Vec::new();
            r.read_to_end(&mut got).await.unwrap();
            assert_eq!(got, data);
            while !f.task.is_finished() {
                tokio::task::yield_now().await;
            }
            assert_eq!(f.finish().await.sha256, sha(&data));
        });
    }
}
