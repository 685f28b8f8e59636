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
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt};
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

    /// The next chunk of the input (at most [`STDIN_CHUNK_BYTES`] from a reader, a
    /// sender's chunk as it was sent); `None` at its end.
    pub async fn next_chunk(&mut self) -> io::Result<Option<Vec<u8>>> {
        match &mut self.0 {
            Inner::Reader(r) => {
                let mut buf = vec![0u8; STDIN_CHUNK_BYTES];
                loop {
                    match r.read(&mut buf).await {
                        Ok(0) => return Ok(None),
                        Ok(n) => {
                            buf.truncate(n);
                            return Ok(Some(buf));
                        }
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
                    Some(Ok(chunk)) => return Ok(Some(chunk)),
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

/// Longest the end of a run waits for the stdin writer's current write to return, in
/// milliseconds. Once the run's processes are gone a write fails at once (`EPIPE`); only a
/// process outside the run's control holding the pipe open could make it wait, and the
/// report then counts what was written so far.
pub const STDIN_WRITER_WAIT_MS: u64 = 500;

/// The forwarding's state, shared by the feeding task, the writer thread and the
/// supervisor, so the report survives the task being stopped at the end of the run.
#[derive(Debug)]
struct Progress {
    hasher: Sha256,
    bytes: u64,
    limit_bytes: u64,
    limit_hit: bool,
    streamed: bool,
    /// The feeding reached the end of the input (its end, the limit, or a failed read).
    fed_to_end: bool,
    /// A write to the program's stdin failed: it closed it, or it is gone.
    write_failed: bool,
    source_error: Option<String>,
}

type Shared = Arc<Mutex<Progress>>;

fn lock(p: &Shared) -> std::sync::MutexGuard<'_, Progress> {
    p.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A run's stdin being forwarded (see [`forward`]).
#[derive(Debug)]
pub(crate) struct Forwarding {
    /// Reads the input and hands it to the writer, within the limit.
    feed: tokio::task::JoinHandle<()>,
    /// Told when the writer thread has closed the program's stdin.
    written: tokio::sync::oneshot::Receiver<()>,
    progress: Shared,
}

impl Forwarding {
    /// Stops the forwarding (the run's processes are gone: a write can only fail now, a
    /// read of the caller's stream could wait forever) and reports what it wrote.
    pub(crate) async fn finish(self) -> StdinReport {
        self.feed.abort();
        let _ = self.feed.await;
        // The feed is gone, so the writer ends after its current write.
        let _ = tokio::time::timeout(
            std::time::Duration::from_millis(STDIN_WRITER_WAIT_MS),
            self.written,
        )
        .await;
        let mut p = lock(&self.progress);
        StdinReport {
            bytes: p.bytes,
            sha256: tierbox_attest::jcs::hex(&std::mem::take(&mut p.hasher).finalize()),
            limit_bytes: p.limit_bytes,
            limit_hit: p.limit_hit,
            streamed: p.streamed,
            not_read_to_end: p.write_failed || !p.fed_to_end,
            source_error: p.source_error.take(),
        }
    }
}

/// Starts forwarding `inline` and then `source` (when the plan's stdin is streamed) to
/// `pipe`, the write end of the program's stdin, at most `limit_bytes` in all; the pipe
/// is closed at the end of the input or at the limit.
///
/// The writes are made by a thread of their own that blocks `SIGPIPE`: a program that
/// closes its stdin early makes a write fail with `EPIPE` there, and never ends a
/// supervisor that restored the signal's default action (the CLI does, for its stdout).
pub(crate) fn forward(
    pipe: OwnedFd,
    inline: Vec<u8>,
    source: Option<StdinSource>,
    limit_bytes: u64,
) -> io::Result<Forwarding> {
    let progress = Arc::new(Mutex::new(Progress {
        hasher: Sha256::new(),
        bytes: 0,
        limit_bytes,
        limit_hit: false,
        streamed: source.is_some(),
        fed_to_end: false,
        write_failed: false,
        source_error: None,
    }));
    let (chunks, mut to_write) = mpsc::channel::<Vec<u8>>(1);
    let (written_tx, written) = tokio::sync::oneshot::channel();
    let shared = progress.clone();
    std::thread::Builder::new()
        .name("tierbox-stdin".to_owned())
        .spawn(move || {
            tierbox_sandbox::contract::process::block_sigpipe_on_this_thread();
            let mut file = std::fs::File::from(pipe);
            while let Some(chunk) = to_write.blocking_recv() {
                if !write_counted(&mut file, &chunk, &shared) {
                    lock(&shared).write_failed = true;
                    break;
                }
            }
            // Closing the pipe is the program's end of file; the feed recorded how the
            // input ended before it let the loop end, so the report is final by now.
            drop(file);
            let _ = written_tx.send(());
        })?;
    let feed = tokio::spawn(run_feed(inline, source, chunks, progress.clone()));
    Ok(Forwarding {
        feed,
        written,
        progress,
    })
}

/// Hands the inline bytes and then the source's chunks to the writer, cutting at the
/// limit; records how the input ended before it returns (and so before the writer can
/// close the pipe).
async fn run_feed(
    inline: Vec<u8>,
    source: Option<StdinSource>,
    chunks: mpsc::Sender<Vec<u8>>,
    progress: Shared,
) {
    let limit = lock(&progress).limit_bytes;
    let mut fed = 0u64;
    let mut next = Some(inline);
    let mut source = source;
    loop {
        let chunk = match next.take() {
            Some(chunk) => chunk,
            None => match source.as_mut() {
                None => break,
                Some(s) => match s.next_chunk().await {
                    Ok(Some(chunk)) => chunk,
                    Ok(None) => break,
                    Err(e) => {
                        lock(&progress).source_error = Some(e.to_string());
                        break;
                    }
                },
            },
        };
        let mut chunk = chunk;
        let room = usize::try_from(limit.saturating_sub(fed)).unwrap_or(usize::MAX);
        let cut = chunk.len() > room;
        if cut {
            chunk.truncate(room);
            // Validation refuses inline bytes past the limit: only a stream is cut.
            lock(&progress).limit_hit = true;
        }
        fed += chunk.len() as u64;
        if !chunk.is_empty() && chunks.send(chunk).await.is_err() {
            // The writer stopped: the program closed its stdin.
            return;
        }
        if cut {
            break;
        }
    }
    lock(&progress).fed_to_end = true;
}

/// Writes `chunk` whole, counting and hashing each accepted write; `false` when the pipe
/// refused one (the program closed its stdin or is gone).
fn write_counted(file: &mut std::fs::File, chunk: &[u8], progress: &Shared) -> bool {
    use std::io::Write;
    let mut rest = chunk;
    while !rest.is_empty() {
        match file.write(rest) {
            Ok(0) => return false,
            Ok(n) => {
                let mut p = lock(progress);
                p.hasher.update(&rest[..n]);
                p.bytes += n as u64;
                rest = &rest[n..];
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::Read;

    use super::*;

    /// Forwards `inline` and `chunks` to a pipe of which at most `read_max` bytes are
    /// read (then its read end is closed), and reports.
    async fn through(
        inline: &[u8],
        chunks: Vec<io::Result<Vec<u8>>>,
        limit: u64,
        read_max: u64,
    ) -> (Vec<u8>, StdinReport) {
        // Every chunk queued before the forwarding starts.
        let (tx, rx) = mpsc::channel(chunks.len().max(1));
        for c in chunks {
            tx.send(c).await.unwrap();
        }
        drop(tx);
        let (r, w) = std::io::pipe().unwrap();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            r.take(read_max).read_to_end(&mut got).unwrap();
            got
        });
        let f = forward(
            w.into(),
            inline.to_vec(),
            Some(StdinSource::from_chunks(rx)),
            limit,
        )
        .unwrap();
        let got = tokio::task::spawn_blocking(move || reader.join().unwrap())
            .await
            .unwrap();
        // The reader saw the end of file, which the writer makes after the feed ended (or
        // it stopped reading, and the rest does not matter).
        (got, f.finish().await)
    }

    fn sha(b: &[u8]) -> String {
        tierbox_attest::sha256_hex(b)
    }

    #[tokio::test]
    async fn everything_under_the_limit_is_passed_whole() {
        let chunks = vec![Ok(b"\0\xff".to_vec()), Ok(b"cd".to_vec())];
        let (got, r) = through(b"ab", chunks, 6, 100).await;
        assert_eq!(got, b"ab\0\xffcd");
        assert_eq!((r.bytes, r.limit_hit, r.streamed), (6, false, true));
        assert_eq!(r.sha256, sha(b"ab\0\xffcd"));
        assert!(!r.not_read_to_end, "{r:?}");
    }

    #[tokio::test]
    async fn more_than_the_limit_is_cut_at_it_and_said() {
        let chunks = vec![Ok(b"abc".to_vec()), Ok(b"defg".to_vec())];
        let (got, r) = through(b"", chunks, 5, 100).await;
        assert_eq!(got, b"abcde");
        assert_eq!((r.bytes, r.limit_hit), (5, true));
        assert_eq!(r.sha256, sha(b"abcde"));
        assert!(!r.not_read_to_end, "{r:?}");
        // A limit of zero: nothing at all.
        let (got, r) = through(b"", vec![Ok(b"x".to_vec())], 0, 100).await;
        assert_eq!((got.len(), r.bytes, r.limit_hit), (0, 0, true));
    }

    #[tokio::test]
    async fn a_program_that_stops_reading_ends_the_forwarding() {
        let chunks = (0..64).map(|_| Ok(vec![7u8; 64 * 1024])).collect();
        let (got, r) = through(b"", chunks, u64::MAX, 10).await;
        assert_eq!(got.len(), 10);
        assert!(r.not_read_to_end, "{r:?}");
        assert!(r.bytes < 64 * 64 * 1024, "{r:?}");
    }

    #[tokio::test]
    async fn a_failing_source_is_reported() {
        let chunks = vec![
            Ok(b"ab".to_vec()),
            Err(io::Error::other("client went away")),
        ];
        let (got, r) = through(b"", chunks, 100, 100).await;
        assert_eq!(got, b"ab");
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
            let mut src =
                StdinSource::from_blocking_reader(std::io::Cursor::new(data.clone())).unwrap();
            let mut got = Vec::new();
            while let Some(chunk) = src.next_chunk().await.unwrap() {
                assert!(chunk.len() <= STDIN_CHUNK_BYTES);
                got.extend_from_slice(&chunk);
            }
            assert_eq!(got, data);
        });
    }
}
