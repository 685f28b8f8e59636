//! Terms: interactive programs on a terminal of their own, driven call by call — write
//! input, close it, resize, signal, read what the terminal showed since an offset.
//!
//! A term is a background process ([`crate::background`]) whose stdin, stdout and stderr
//! are the secondary side of a pseudo-terminal ([`tierbox_sandbox::contract::Terminal`];
//! who makes the pair in each backend is said there): the same handle, ownership (another
//! owner's id is `term.not_found`), lifetime (`run_owned` or `detached`, bounded by the
//! policy's `[background]`), supervision, end of the tree and signed attestation. What
//! differs:
//!
//! - the terminal's output (stdout and stderr together, as a terminal shows them) is
//!   read continuously into one ring of [`TERM_RING_BYTES`], whose oldest bytes go first
//!   and are counted as `missed_bytes` by a read that asks for them: a flood never blocks
//!   the program and never grows the supervisor's memory past the ring;
//! - with redaction on, the output is redacted piece by piece as a background stream is,
//!   and when the program waits for input what is pending is shown up to its last
//!   whitespace (a prompt appears; a word still being echoed waits for its end);
//! - input goes through the terminal's line discipline: `^C` (0x03) interrupts the
//!   foreground job as [`TermSignal::Int`] does; closing input writes the terminal's
//!   end-of-file character (`VEOF`, normally `^D`);
//! - [`TermManager::signal`] takes only [`TermSignal`]'s allowlist, sent to the
//!   terminal's foreground process group (`TIOCGPGRP`); any other name is refused with
//!   `term.signal_refused`;
//! - what is typed is the program's stdin: starting an interpreter that reads its program
//!   from it (a REPL, `bash -i`) needs `exec.allow_eval`, as a run given stdin does;
//! - live terms are capped at [`MAX_LIVE_TERMS`] per supervisor and
//!   [`MAX_LIVE_TERMS_PER_OWNER`] per owner.

use std::io::{Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tierbox_policy::Plan;
use tierbox_sandbox::contract::Terminal;
/// A terminal's size, and its bound.
pub use tierbox_sandbox::contract::{MAX_TERM_DIMENSION, TermSize};
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;

use crate::background::{
    BackgroundError, BackgroundHandle, BackgroundManager, BackgroundStatus, Seal, Stream,
};
use crate::ring::{OutputChunk, ShownRing};
use crate::supervisor::{ChunkSink, RunOptions};

/// Bytes of a term's output kept for reads (1 MiB): the terminal is drained continuously
/// and its oldest bytes dropped (and counted) past this.
pub const TERM_RING_BYTES: usize = 1024 * 1024;

/// Most live terms in one supervisor: each holds a sandbox, a terminal pair and its ring.
pub const MAX_LIVE_TERMS: u32 = 64;

/// Most live terms of one owner.
pub const MAX_LIVE_TERMS_PER_OWNER: u32 = 16;

/// Longest a read waits for output ([`TermManager::output`]'s `wait_ms`), in
/// milliseconds (30 s): a caller that wants longer asks again.
pub const MAX_TERM_WAIT_MS: u64 = 30_000;

/// The stdin a term's request is also checked with (never sent): what is typed into a
/// term reaches the program as stdin does, so an interpreter reading its program from it
/// needs `exec.allow_eval`, as for a run given stdin.
pub(crate) const TYPED_INPUT: &str = "typed";

/// Bytes read from the terminal at a time.
const TERM_READ_CHUNK_BYTES: usize = 16 * 1024;

/// How long the terminal must stay quiet before a word still being written (held back
/// with redaction on, in case it is the start of a secret) is redacted as it stands and
/// shown: what arrives together within it is redacted together, and a key typed at a
/// shell echoes after it, not at the next space (20 ms).
pub const TERM_HOLD: Duration = Duration::from_millis(20);

/// The signals a term accepts, sent to its terminal's foreground process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TermSignal {
    /// `SIGINT` (what `^C` sends).
    Int,
    /// `SIGTERM`.
    Term,
    /// `SIGHUP`.
    Hup,
    /// `SIGQUIT` (`^\`).
    Quit,
    /// `SIGKILL`.
    Kill,
    /// `SIGWINCH`.
    Winch,
    /// `SIGTSTP` (`^Z`).
    Tstp,
    /// `SIGCONT`.
    Cont,
}

impl TermSignal {
    /// Every accepted signal, with its name.
    pub const ALL: [(TermSignal, &'static str); 8] = [
        (Self::Int, "INT"),
        (Self::Term, "TERM"),
        (Self::Hup, "HUP"),
        (Self::Quit, "QUIT"),
        (Self::Kill, "KILL"),
        (Self::Winch, "WINCH"),
        (Self::Tstp, "TSTP"),
        (Self::Cont, "CONT"),
    ];

    /// The signal named `name` (`INT` or `SIGINT`, any case); a name off the allowlist is
    /// [`TermError::SignalRefused`].
    pub fn parse(name: &str) -> Result<Self, TermError> {
        let upper = name.to_ascii_uppercase();
        let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
        Self::ALL
            .iter()
            .find(|(_, n)| *n == bare)
            .map(|(s, _)| *s)
            .ok_or_else(|| TermError::SignalRefused {
                signal: name.to_owned(),
            })
    }

    /// The signal's number.
    pub fn number(self) -> i32 {
        match self {
            Self::Int => libc::SIGINT,
            Self::Term => libc::SIGTERM,
            Self::Hup => libc::SIGHUP,
            Self::Quit => libc::SIGQUIT,
            Self::Kill => libc::SIGKILL,
            Self::Winch => libc::SIGWINCH,
            Self::Tstp => libc::SIGTSTP,
            Self::Cont => libc::SIGCONT,
        }
    }
}

/// Why a term operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TermError {
    /// The background machinery refused or failed (the start, or no such term of this
    /// owner).
    #[error(transparent)]
    Background(#[from] BackgroundError),
    /// A size outside 1 to [`MAX_TERM_DIMENSION`].
    #[error("terminal size {rows}x{cols} is outside 1 to {MAX_TERM_DIMENSION} rows and columns")]
    BadSize {
        /// Rows asked for.
        rows: u16,
        /// Columns asked for.
        cols: u16,
    },
    /// A wait past [`MAX_TERM_WAIT_MS`].
    #[error("wait_ms {wait_ms} is past the maximum of {MAX_TERM_WAIT_MS} ms")]
    BadWait {
        /// The wait asked for.
        wait_ms: u64,
    },
    /// A signal off [`TermSignal`]'s allowlist.
    #[error(
        "signal {signal} is not one a term accepts (INT, TERM, HUP, QUIT, KILL, WINCH, TSTP, CONT)"
    )]
    SignalRefused {
        /// The name given.
        signal: String,
    },
    /// The term has ended: it takes no input, resize or signal.
    #[error("term {id} has ended")]
    Ended {
        /// The term.
        id: String,
    },
    /// The terminal refused the operation.
    #[error("term {id}: {what}: {source}")]
    Terminal {
        /// The term.
        id: String,
        /// What was done.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

impl TermError {
    /// Stable machine code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Background(BackgroundError::NotFound { .. }) => "term.not_found",
            Self::Background(BackgroundError::Limit { .. }) => "term.limit",
            Self::Background(BackgroundError::Stdin { .. }) => "term.input",
            Self::Background(BackgroundError::ExitedDuringStartup(_)) => {
                "term.exited_during_startup"
            }
            Self::Background(e) => e.code(),
            Self::BadSize { .. } => "term.bad_size",
            Self::BadWait { .. } => "term.bad_wait",
            Self::SignalRefused { .. } => "term.signal_refused",
            Self::Ended { .. } => "term.ended",
            Self::Terminal { .. } => "term.terminal",
        }
    }
}

/// Why input could not be written to a term's terminal.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InputError {
    /// [`TermManager::close_input`] was called before.
    #[error("input was closed")]
    Closed,
    /// The program did not read it within the time allowed.
    #[error("the program did not read its input within {timeout:?}")]
    NotRead {
        /// The time allowed.
        timeout: Duration,
    },
    /// The terminal refused the write.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// The supervisor's side of a term's terminal: the primary, registered with the tokio
/// reactor, and a wake-up for readers waiting for output.
pub(crate) struct TermIo {
    fd: AsyncFd<std::fs::File>,
    terminal: Terminal,
    /// Output arrived, or the terminal hung up.
    arrived: Notify,
    /// Input was closed ([`TermManager::close_input`]).
    input_closed: AtomicBool,
}

impl TermIo {
    pub(crate) fn new(terminal: Terminal) -> std::io::Result<Self> {
        Ok(Self {
            fd: terminal.register()?,
            terminal,
            arrived: Notify::new(),
            input_closed: AtomicBool::new(false),
        })
    }

    /// Writes `data` whole (waiting at most `timeout` for the program to read), then with
    /// `close` the terminal's end-of-file character.
    pub(crate) async fn write(
        &self,
        data: &[u8],
        close: bool,
        timeout: Duration,
    ) -> Result<usize, InputError> {
        if self.input_closed.load(Ordering::Acquire) {
            return Err(InputError::Closed);
        }
        let eof = match close {
            true => Some(self.terminal.eof_byte()?),
            false => None,
        };
        let all = async {
            self.write_all(data).await?;
            if let Some(eof) = eof {
                self.write_all(&[eof]).await?;
            }
            Ok::<(), std::io::Error>(())
        };
        match tokio::time::timeout(timeout, all).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(InputError::Io(e)),
            Err(_) => return Err(InputError::NotRead { timeout }),
        }
        if close {
            self.input_closed.store(true, Ordering::Release);
        }
        Ok(data.len())
    }

    /// Wakes the reads waiting for output: the term has ended. Its end is published after
    /// the terminal hung up (which woke them too, when the term may still have seemed to
    /// run), so without this a waiting read would sleep out its whole wait.
    pub(crate) fn ended(&self) {
        self.arrived.notify_waiters();
    }

    async fn write_all(&self, mut data: &[u8]) -> std::io::Result<()> {
        while !data.is_empty() {
            let mut guard = self.fd.writable().await?;
            match guard.try_io(|f| f.get_ref().write(data)) {
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }
}

/// Reads the terminal into `sink` until it hangs up (every holder of the secondary side
/// gone: `EIO`), waking waiting readers at each arrival.
pub(crate) fn spawn_reader(io: Arc<TermIo>, sink: Arc<ShownRing>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut buf = vec![0u8; TERM_READ_CHUNK_BYTES];
        // A word is held back (the terminal went quiet in the middle of one).
        let mut holding = false;
        loop {
            let readable = tokio::select! {
                r = io.fd.readable() => r,
                () = tokio::time::sleep(TERM_HOLD), if holding => {
                    holding = false;
                    if sink.release() {
                        io.arrived.notify_waiters();
                    }
                    continue;
                }
            };
            let Ok(mut guard) = readable else {
                break;
            };
            match guard.try_io(|f| f.get_ref().read(&mut buf)) {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(n)) => {
                    sink.push_chunk(&buf[..n]);
                    if n < buf.len() {
                        // Nothing more queued: the program may be waiting for input.
                        holding = sink.settle();
                    }
                    io.arrived.notify_waiters();
                }
                Err(_would_block) => continue,
            }
        }
        sink.finish();
        io.arrived.notify_waiters();
    })
}

/// A term as started: its status, and what its terminal showed in the startup window.
pub type TermHandle = BackgroundHandle;

/// The terms of one supervisor.
#[derive(Debug)]
pub struct TermManager {
    inner: BackgroundManager,
}

impl TermManager {
    /// A manager with [`MAX_LIVE_TERMS`] and [`MAX_LIVE_TERMS_PER_OWNER`].
    pub fn new(options: RunOptions) -> Self {
        Self {
            inner: BackgroundManager::new(MAX_LIVE_TERMS_PER_OWNER, MAX_LIVE_TERMS, options)
                .with_ring_bytes(TERM_RING_BYTES),
        }
    }

    /// Starts `plan` (validated with `background: true`) on a terminal of `size` for
    /// `owner`, attested with `seal` when it ends.
    pub async fn start(
        &self,
        owner: &str,
        plan: &Plan,
        size: TermSize,
        seal: Option<Seal>,
    ) -> Result<TermHandle, TermError> {
        check_size(size)?;
        Ok(self.inner.start_with(owner, plan, seal, Some(size)).await?)
    }

    /// Writes `data` to the term's terminal (its input, through the line discipline).
    pub async fn write(&self, owner: &str, id: &str, data: &[u8]) -> Result<usize, TermError> {
        self.live(owner, id)?;
        Ok(self.inner.write_stdin(owner, id, data, false).await?)
    }

    /// Closes the term's input: the terminal's end-of-file character, after which writes
    /// are refused.
    pub async fn close_input(&self, owner: &str, id: &str) -> Result<(), TermError> {
        self.live(owner, id)?;
        self.inner.write_stdin(owner, id, b"", true).await?;
        Ok(())
    }

    /// Resizes the term's terminal; the kernel tells its foreground group (`SIGWINCH`).
    pub fn resize(&self, owner: &str, id: &str, size: TermSize) -> Result<(), TermError> {
        check_size(size)?;
        let io = self.live(owner, id)?;
        io.terminal
            .resize(size)
            .map_err(|source| TermError::Terminal {
                id: id.to_owned(),
                what: "resize (TIOCSWINSZ)",
                source,
            })
    }

    /// Resizes the term's terminal as [`Self::resize`] does and, when that leaves the size
    /// as it was (the kernel then signals nobody), sends `SIGWINCH` to its foreground group
    /// itself: a program that draws the whole screen draws it again. What a client that
    /// attaches again asks for, since the screen it joins was drawn before it came.
    pub fn resize_and_redraw(
        &self,
        owner: &str,
        id: &str,
        size: TermSize,
    ) -> Result<(), TermError> {
        check_size(size)?;
        let io = self.live(owner, id)?;
        let before = io.terminal.size().map_err(|source| TermError::Terminal {
            id: id.to_owned(),
            what: "read the size (TIOCGWINSZ)",
            source,
        })?;
        self.resize(owner, id, size)?;
        match before == size {
            true => self.signal(owner, id, TermSignal::Winch),
            false => Ok(()),
        }
    }

    /// Sends `signal` to the term's foreground process group.
    pub fn signal(&self, owner: &str, id: &str, signal: TermSignal) -> Result<(), TermError> {
        let io = self.live(owner, id)?;
        io.terminal
            .signal_foreground(signal.number())
            .map_err(|source| TermError::Terminal {
                id: id.to_owned(),
                what: "signal the foreground group (TIOCGPGRP, kill)",
                source,
            })
    }

    /// Up to `max` bytes of the term's output from `offset` on. With `wait_ms`, waits up
    /// to that long (at most [`MAX_TERM_WAIT_MS`]) for output past `offset` when there is
    /// none yet, and returns what arrived (or nothing, once the term ended or the wait
    /// passed).
    pub async fn output(
        &self,
        owner: &str,
        id: &str,
        offset: u64,
        max: usize,
        wait_ms: u64,
    ) -> Result<OutputChunk, TermError> {
        if wait_ms > MAX_TERM_WAIT_MS {
            return Err(TermError::BadWait { wait_ms });
        }
        let until = Instant::now() + Duration::from_millis(wait_ms);
        loop {
            let (io, ended, total) = self.inner.term_of(owner, id)?;
            let arrived = io.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let (_, _, total_now) = self.inner.term_of(owner, id)?;
            let left = until.saturating_duration_since(Instant::now());
            if total.max(total_now) > offset || ended || left.is_zero() {
                break;
            }
            let _ = tokio::time::timeout(left, arrived).await;
        }
        Ok(self.inner.output(owner, id, Stream::Stdout, offset, max)?)
    }

    /// The term's status (its attestation once it has ended).
    pub async fn status(&self, owner: &str, id: &str) -> Result<BackgroundStatus, TermError> {
        self.inner.term_of(owner, id)?;
        Ok(self.inner.status(owner, id).await?)
    }

    /// Kills the term's whole tree and returns its final status.
    pub async fn kill(&self, owner: &str, id: &str) -> Result<BackgroundStatus, TermError> {
        self.inner.term_of(owner, id)?;
        Ok(self.inner.kill(owner, id).await?)
    }

    /// `owner`'s terms, running or ended.
    pub async fn list(&self, owner: &str) -> Vec<BackgroundStatus> {
        self.inner.list(owner).await
    }

    /// The owner ended: its `run_owned` terms are killed.
    pub async fn end_owner(&self, owner: &str) {
        self.inner.end_owner(owner).await;
    }

    /// Kills every term and waits for them.
    pub async fn shutdown(&self) {
        self.inner.shutdown().await;
    }

    /// The terminal of one of `owner`'s terms that has not ended.
    fn live(&self, owner: &str, id: &str) -> Result<Arc<TermIo>, TermError> {
        match self.inner.term_of(owner, id)? {
            (_, true, _) => Err(TermError::Ended { id: id.to_owned() }),
            (io, false, _) => Ok(io),
        }
    }
}

fn check_size(size: TermSize) -> Result<(), TermError> {
    match size.is_valid() {
        true => Ok(()),
        false => Err(TermError::BadSize {
            rows: size.rows,
            cols: size.cols,
        }),
    }
}
