//! Live output: the program's stdout and stderr printed while it runs, each to the CLI's
//! own stream, in the order they arrive — the same batches the HTTP API streams (line by
//! line, redacted with the run's rules: see `tierbox_runner::stream`), whether the run
//! happens in this process or in the local daemon.
//!
//! The printing happens on a thread of its own, so a terminal that stops reading (a
//! paused pager, `Ctrl-S`) never stalls the supervisor: the run's deadline, output quota
//! and signal handling go on. Nothing is dropped on the way to it: the channel's capacity
//! ([`LIVE_EVENTS`]) is more events than a run can produce, because streaming stops at
//! the output quota and every event carries at least one byte.

use std::io::Write;
use std::thread::JoinHandle;

use tierbox_policy::handle::Stream;
use tierbox_runner::stream::OutputEvent;
use tokio::sync::mpsc;

/// Capacity of the channel from the run to the printing thread, in events: tokio's
/// largest. A run streams at most its output quota per stream and each event carries at
/// least one byte, so the run never finds the channel full; memory is taken only as
/// events wait (in blocks of a few dozen), never reserved up front.
pub const LIVE_EVENTS: usize = tokio::sync::Semaphore::MAX_PERMITS;

/// The printing side of a live run.
pub struct Live {
    writer: JoinHandle<()>,
    /// Sends the end marker (an event with no text, which no run sends).
    own: mpsc::Sender<OutputEvent>,
}

impl Live {
    /// Starts the printing thread; the run sends its output to the returned sender. Each
    /// stream is neutralised ([`crate::render::neutralize`]) when it goes to a terminal,
    /// and passed through unchanged otherwise.
    pub fn start(stdout_tty: bool, stderr_tty: bool) -> (Self, mpsc::Sender<OutputEvent>) {
        let (tx, mut rx) = mpsc::channel::<OutputEvent>(LIVE_EVENTS);
        let writer = std::thread::spawn(move || {
            while let Some(event) = rx.blocking_recv() {
                if event.text.is_empty() {
                    // The end marker: everything sent before it is printed.
                    break;
                }
                let tty = match event.stream {
                    Stream::Stdout => stdout_tty,
                    Stream::Stderr => stderr_tty,
                };
                let text = if tty {
                    crate::render::neutralize(&event.text)
                } else {
                    std::borrow::Cow::Borrowed(event.text.as_str())
                };
                // A closed stream (`| head`) ends nothing but the printing of that stream.
                let _ = match event.stream {
                    Stream::Stdout => write_now(&mut std::io::stdout().lock(), &text),
                    Stream::Stderr => write_now(&mut std::io::stderr().lock(), &text),
                };
            }
        });
        let own = tx.clone();
        (Self { writer, own }, tx)
    }

    /// Waits until everything sent so far has been printed. Called once the run is over
    /// (its output is all sent by then), before anything else is printed.
    pub fn finish(self) {
        let end = OutputEvent {
            stream: Stream::Stdout,
            text: String::new(),
        };
        if self.own.blocking_send(end).is_ok() {
            let _ = self.writer.join();
        }
    }
}

fn write_now(out: &mut impl Write, text: &str) -> std::io::Result<()> {
    out.write_all(text.as_bytes())?;
    out.flush()
}
