//! Live output: the program's stdout and stderr printed while it runs, each to the CLI's
//! own stream, in the order they arrive — the same batches the HTTP API streams (line by
//! line, redacted with the run's rules: see `tierbox_runner::stream`), whether the run
//! happens in this process or in the local daemon. What is not a terminal gets the
//! program's bytes exactly (`tierbox run -- gzip -c F | gunzip` works); a terminal gets
//! them as text with control characters made visible.
//!
//! The printing happens on a thread of its own, so a terminal that stops reading (a
//! paused pager, `Ctrl-S`) never stalls the supervisor: the run's deadline, output quota
//! and signal handling go on. The thread starts with the run's first output: a program
//! that prints nothing costs no thread (its start, and the two wake-ups of handing it the
//! end and joining it, are a measurable part of a short call). Nothing is dropped on the
//! way to it: its channel is unbounded, and the run's own channel ([`LIVE_EVENTS`]) holds
//! more events than a run can produce, because streaming stops at the output quota and
//! every event carries at least one byte.

use std::io::Write;
use std::sync::mpsc;
use std::thread::JoinHandle;

use tierbox_policy::handle::Stream;
use tierbox_runner::stream::OutputEvent;

/// Capacity of the channel from an in-process run to [`Live`], in events: tokio's
/// largest. A run streams at most its output quota per stream and each event carries at
/// least one byte, so the run never finds the channel full; memory is taken only as
/// events wait (in blocks of a few dozen), never reserved up front.
pub const LIVE_EVENTS: usize = tokio::sync::Semaphore::MAX_PERMITS;

/// The printing side of a live run.
#[derive(Debug)]
pub struct Live {
    stdout_tty: bool,
    stderr_tty: bool,
    /// The printing thread and its channel, once the run has printed something.
    printer: Option<(JoinHandle<()>, mpsc::Sender<OutputEvent>)>,
}

impl Live {
    /// Prints nothing yet: [`Live::print`] starts the printing thread at the first event.
    /// Each stream is neutralised ([`crate::render::neutralize`]) when it goes to a
    /// terminal, and passed through unchanged otherwise.
    pub fn new(stdout_tty: bool, stderr_tty: bool) -> Self {
        Self {
            stdout_tty,
            stderr_tty,
            printer: None,
        }
    }

    /// Hands `event` to the printing thread (started on the first call) and returns at
    /// once: printing never blocks the caller.
    pub fn print(&mut self, event: OutputEvent) {
        if event.bytes.is_empty() {
            return;
        }
        let (stdout_tty, stderr_tty) = (self.stdout_tty, self.stderr_tty);
        let (_, tx) = self.printer.get_or_insert_with(|| {
            let (tx, rx) = mpsc::channel::<OutputEvent>();
            let writer = std::thread::spawn(move || {
                // Ends when `finish` drops the sender, after everything sent before.
                for event in rx {
                    let tty = match event.stream {
                        Stream::Stdout => stdout_tty,
                        Stream::Stderr => stderr_tty,
                    };
                    let text;
                    let bytes = if tty {
                        text = crate::render::neutralize(&event.text()).into_owned();
                        text.as_bytes()
                    } else {
                        &event.bytes
                    };
                    // A closed stream (`| head`) ends nothing but the printing of that
                    // stream.
                    let _ = match event.stream {
                        Stream::Stdout => write_now(&mut std::io::stdout().lock(), bytes),
                        Stream::Stderr => write_now(&mut std::io::stderr().lock(), bytes),
                    };
                }
            });
            (writer, tx)
        });
        // The thread ends only when the sender is dropped, so this cannot fail.
        let _ = tx.send(event);
    }

    /// Waits until everything handed over so far has been printed. Called once the run
    /// is over (its output is all handed over by then), before anything else is printed.
    pub fn finish(self) {
        if let Some((writer, tx)) = self.printer {
            drop(tx);
            let _ = writer.join();
        }
    }
}

fn write_now(out: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    out.write_all(bytes)?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(text: &str) -> OutputEvent {
        OutputEvent::new(Stream::Stderr, text)
    }

    #[test]
    fn the_printing_thread_starts_with_the_first_output() {
        let mut live = Live::new(false, false);
        assert!(live.printer.is_none());
        live.print(event(""));
        assert!(live.printer.is_none(), "an empty event prints nothing");
        live.finish();

        let mut live = Live::new(false, false);
        live.print(event("live output test line\n"));
        let Some((writer, _)) = &live.printer else {
            panic!("no printing thread after the first output");
        };
        let id = writer.thread().id();
        live.print(event("and a second one\n"));
        assert!(
            live.printer
                .as_ref()
                .is_some_and(|(w, _)| w.thread().id() == id),
            "one thread per run"
        );
        live.finish();
    }
}
