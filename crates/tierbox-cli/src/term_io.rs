//! This process's side of a term, shared by `tierbox run -t` in process and by a term
//! held by the daemon (`run -t` through it, `tierbox attach`): this terminal in raw mode
//! while the term is shown (restored when the guard drops: on return, on an error and on
//! a termination signal, which the callers turn into a return), its size, stdin read on
//! a thread of its own, the detach keys, and the exit status that mirrors the program's.

use std::io::{IsTerminal, Read};
use std::os::fd::AsFd;
use std::process::ExitCode;

use tierbox_runner::background::BackgroundStatus;
use tierbox_runner::term::{MAX_TERM_DIMENSION, TermSize};

/// The size a terminal gets when this process's stdout is not a terminal.
pub const DEFAULT_SIZE: TermSize = TermSize { rows: 24, cols: 80 };

/// Bytes read from stdin at a time.
pub const INPUT_CHUNK_BYTES: usize = 4096;

/// The keys that leave a daemon-held term running and end `tierbox attach` (or `tierbox
/// run -t` through the daemon): Ctrl-P then Ctrl-Q, as `docker attach` has. A Ctrl-P
/// not followed by Ctrl-Q goes to the program with the key after it.
pub const DETACH_KEYS: [u8; 2] = [0x10, 0x11];

/// How the detach keys are written in messages.
pub const DETACH_KEYS_NAME: &str = "Ctrl-P Ctrl-Q";

/// This process's terminal size (stdout's), or [`DEFAULT_SIZE`].
pub fn own_size() -> TermSize {
    match rustix::termios::tcgetwinsize(std::io::stdout().as_fd()) {
        Ok(ws) if ws.ws_row > 0 && ws.ws_col > 0 => TermSize {
            rows: ws.ws_row.min(MAX_TERM_DIMENSION),
            cols: ws.ws_col.min(MAX_TERM_DIMENSION),
        },
        _ => DEFAULT_SIZE,
    }
}

/// How a term's program ended, as far as the exit status goes.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Ended {
    /// Its exit code.
    pub exit_code: Option<i32>,
    /// The signal that killed it.
    pub signal: Option<i32>,
    /// The sandbox failed: what happened.
    #[serde(default)]
    pub sandbox_failure: Option<String>,
}

impl From<&BackgroundStatus> for Ended {
    fn from(s: &BackgroundStatus) -> Self {
        Self {
            exit_code: s.exit_code,
            signal: s.signal,
            sandbox_failure: s.sandbox_failure.clone(),
        }
    }
}

/// The exit status that mirrors the program's: its code, 128 + its signal, or 125 when
/// the sandbox failed.
pub fn exit_status(ended: &Ended) -> ExitCode {
    match (ended.exit_code, ended.signal) {
        (Some(code), _) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        (None, Some(sig)) => ExitCode::from(u8::try_from(128 + sig).unwrap_or(1)),
        (None, None) => {
            if let Some(why) = &ended.sandbox_failure {
                eprintln!("tierbox: {why}");
            }
            ExitCode::from(125)
        }
    }
}

/// Reads this process's stdin on a thread of its own (it may be a terminal, a pipe or a
/// file: a blocking read), chunk by chunk; `None` is its end (or a failed read). The
/// thread is left behind when the term ends: the process exits.
pub fn stdin_chunks() -> tokio::sync::mpsc::Receiver<Option<Vec<u8>>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Option<Vec<u8>>>(16);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin();
        let mut buf = vec![0u8; INPUT_CHUNK_BYTES];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = tx.blocking_send(None);
                    return;
                }
                Ok(n) => {
                    if tx.blocking_send(Some(buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    });
    rx
}

/// A stream of `SIGWINCH`s (none when the handler cannot be installed).
pub fn window_changes() -> Option<tokio::signal::unix::Signal> {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change()).ok()
}

/// Finds [`DETACH_KEYS`] in what is typed, across reads.
#[derive(Debug, Default)]
pub struct DetachKeys {
    /// The previous read ended with the first key, held back until the next byte.
    held: bool,
}

/// What one read of typed bytes holds.
#[derive(Debug, PartialEq, Eq)]
pub struct Typed {
    /// The bytes for the program.
    pub forward: Vec<u8>,
    /// Whether the detach keys were typed (nothing after them is forwarded).
    pub detach: bool,
}

impl DetachKeys {
    /// Splits `chunk`: what goes to the program, and whether the detach keys came.
    pub fn feed(&mut self, chunk: &[u8]) -> Typed {
        let [first, second] = DETACH_KEYS;
        let mut forward = Vec::with_capacity(chunk.len() + 1);
        for &b in chunk {
            if self.held {
                self.held = false;
                if b == second {
                    return Typed {
                        forward,
                        detach: true,
                    };
                }
                forward.push(first);
            }
            if b == first {
                self.held = true;
            } else {
                forward.push(b);
            }
        }
        Typed {
            forward,
            detach: false,
        }
    }

    /// What is held back when input ends (a last lone first key).
    pub fn flush(&mut self) -> Vec<u8> {
        if std::mem::take(&mut self.held) {
            vec![DETACH_KEYS[0]]
        } else {
            Vec::new()
        }
    }
}

/// This terminal in raw mode while a term is shown (stdin a terminal), restored on drop.
pub struct RawMode(Option<rustix::termios::Termios>);

impl RawMode {
    /// Raw mode when stdin is a terminal whose mode can be read and set; else nothing.
    pub fn enter() -> Self {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return Self(None);
        }
        let Ok(saved) = rustix::termios::tcgetattr(stdin.as_fd()) else {
            return Self(None);
        };
        let mut raw = saved.clone();
        raw.make_raw();
        match rustix::termios::tcsetattr(stdin.as_fd(), rustix::termios::OptionalActions::Now, &raw)
        {
            Ok(()) => Self(Some(saved)),
            Err(_) => Self(None),
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(saved) = &self.0 {
            let _ = rustix::termios::tcsetattr(
                std::io::stdin().as_fd(),
                rustix::termios::OptionalActions::Now,
                saved,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(forward: &[u8], detach: bool) -> Typed {
        Typed {
            forward: forward.to_vec(),
            detach,
        }
    }

    #[test]
    fn the_detach_keys_end_the_input_in_one_read_or_across_two() {
        let mut keys = DetachKeys::default();
        assert_eq!(keys.feed(b"ls\r\x10\x11after"), typed(b"ls\r", true));
        let mut keys = DetachKeys::default();
        assert_eq!(keys.feed(b"a\x10"), typed(b"a", false));
        assert_eq!(keys.feed(b"\x11"), typed(b"", true));
    }

    #[test]
    fn a_ctrl_p_not_followed_by_ctrl_q_goes_to_the_program() {
        let mut keys = DetachKeys::default();
        assert_eq!(keys.feed(b"\x10x"), typed(b"\x10x", false));
        assert_eq!(keys.feed(b"\x10"), typed(b"", false));
        assert_eq!(keys.feed(b"\x10"), typed(b"\x10", false));
        assert_eq!(keys.flush(), b"\x10".to_vec());
        assert_eq!(keys.flush(), Vec::<u8>::new());
    }
}
