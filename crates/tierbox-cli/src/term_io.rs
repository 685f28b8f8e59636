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
/// run -t` through the daemon) when neither `--detach-keys` nor [`DETACH_KEYS_ENV`] names
/// others: Ctrl-P then Ctrl-Q, as `docker attach` has. A Ctrl-P not followed by Ctrl-Q
/// goes to the program with the key after it.
pub const DETACH_KEYS: [u8; 2] = [0x10, 0x11];

/// The environment variable that names the detach keys when `--detach-keys` does not
/// (the same syntax).
pub const DETACH_KEYS_ENV: &str = "TIERBOX_DETACH_KEYS";

/// Most keys in a detach sequence: bounds what is held back from the program while the
/// keys typed so far could still be the start of the sequence.
pub const MAX_DETACH_KEYS: usize = 8;

/// How detach sequences are written: comma-separated keys, each `ctrl-<key>` or one
/// character; or `none`.
pub const DETACH_KEYS_SYNTAX: &str = "comma-separated keys, each `ctrl-` and a letter or one of @ [ \\ ] ^ _ (e.g. ctrl-p,ctrl-q), or a single character other than a comma; or `none` to never detach";

/// The key sequence that detaches, as `--detach-keys` or [`DETACH_KEYS_ENV`] name it
/// (empty: detaching is off, every key goes to the program).
/// `DetachSeq::parse("ctrl-a,d")` is Ctrl-A then `d` (named `Ctrl-A d`);
/// `DetachSeq::parse("ctrl-1")` is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetachSeq(Vec<u8>);

impl Default for DetachSeq {
    fn default() -> Self {
        Self(DETACH_KEYS.to_vec())
    }
}

impl DetachSeq {
    /// Parses `spec` ([`DETACH_KEYS_SYNTAX`]); the error names the offending key and the
    /// syntax.
    pub fn parse(spec: &str) -> Result<Self, DetachKeysError> {
        let spec = spec.trim();
        if spec.eq_ignore_ascii_case("none") {
            return Ok(Self(Vec::new()));
        }
        let bad = |key: Option<&str>| DetachKeysError::Key {
            spec: spec.to_owned(),
            key: key.map(str::to_owned),
        };
        let mut keys = Vec::new();
        for token in spec.split(',') {
            let key = match token.len() {
                0 => return Err(bad(None)),
                1 if token.is_ascii() && token != " " => token.as_bytes()[0],
                _ => match token.to_ascii_lowercase().strip_prefix("ctrl-") {
                    Some(k) if k.len() == 1 => match k.as_bytes()[0] {
                        c @ (b'a'..=b'z' | b'@' | b'[' | b'\\' | b']' | b'^' | b'_') => {
                            c.to_ascii_uppercase() & 0x1f
                        }
                        _ => return Err(bad(Some(token))),
                    },
                    _ => return Err(bad(Some(token))),
                },
            };
            keys.push(key);
        }
        if keys.len() > MAX_DETACH_KEYS {
            return Err(DetachKeysError::TooMany {
                spec: spec.to_owned(),
                keys: keys.len(),
            });
        }
        Ok(Self(keys))
    }

    /// The sequence `--detach-keys` names, else [`DETACH_KEYS_ENV`], else
    /// [`DETACH_KEYS`].
    pub fn chosen(flag: Option<&str>) -> Result<Self, DetachKeysError> {
        let (from, spec) = match flag {
            Some(spec) => ("--detach-keys", spec.to_owned()),
            None => match std::env::var(DETACH_KEYS_ENV) {
                Ok(spec) => (DETACH_KEYS_ENV, spec),
                Err(_) => return Ok(Self::default()),
            },
        };
        Self::parse(&spec).map_err(|e| DetachKeysError::In {
            from,
            error: Box::new(e),
        })
    }

    /// The keys' bytes (empty: detaching is off).
    pub fn keys(&self) -> &[u8] {
        &self.0
    }

    /// How the sequence is written in messages: `Ctrl-P Ctrl-Q`, or `none`.
    pub fn name(&self) -> String {
        if self.0.is_empty() {
            return "none".to_owned();
        }
        let names: Vec<String> = self
            .0
            .iter()
            .map(|&k| match k {
                0..=0x1f => format!("Ctrl-{}", char::from(k | 0x40)),
                _ => char::from(k).to_string(),
            })
            .collect();
        names.join(" ")
    }
}

/// The exit status of a `run -t` or an attach whose stdout closed (its reader went away,
/// as `head` does): 128 + `SIGPIPE`, what a shell reports for a command a closed pipe
/// ended — after this terminal has left raw mode.
pub const OUTPUT_CLOSED_EXIT: u8 = 128 + 13;

/// Writes `bytes` to stdout and flushes; `false` when the reader of stdout is gone
/// (`EPIPE`). Other errors are ignored, as a terminal that cannot show a byte is.
pub fn show(out: &mut std::io::Stdout, bytes: &[u8]) -> bool {
    use std::io::Write;
    !matches!(
        out.write_all(bytes).and_then(|()| out.flush()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe
    )
}

/// Says on stderr that `lost` bytes of a term's output were not shown (they left its
/// ring, `TERM_RING_BYTES`, before this terminal read them); nothing when none were.
pub fn report_lost(lost: u64) {
    if lost > 0 {
        eprintln!(
            "\r\ntierbox: {lost} bytes of the program's output were not shown: they left the term's {} KiB buffer before this terminal read them",
            tierbox_runner::term::TERM_RING_BYTES / 1024
        );
    }
}

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

/// Detach keys that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DetachKeysError {
    /// A key that is not one (`None`: an empty one).
    #[error("detach keys {spec:?}: {}; write {DETACH_KEYS_SYNTAX}", match key {
        Some(k) if k.to_ascii_lowercase().starts_with("ctrl-") => format!("{k:?} is not a control key"),
        Some(k) => format!("{k:?} is not a key"),
        None => "an empty key".to_owned(),
    })]
    Key {
        /// The sequence as written.
        spec: String,
        /// The key.
        key: Option<String>,
    },
    /// More than [`MAX_DETACH_KEYS`] keys.
    #[error(
        "detach keys {spec:?}: {keys} keys, more than the {MAX_DETACH_KEYS} a sequence may have; write {DETACH_KEYS_SYNTAX}"
    )]
    TooMany {
        /// The sequence as written.
        spec: String,
        /// How many keys it has.
        keys: usize,
    },
    /// Where the refused sequence came from (the flag or the environment variable).
    #[error("{from}: {error}")]
    In {
        /// `--detach-keys` or [`DETACH_KEYS_ENV`].
        from: &'static str,
        /// What is wrong with it.
        error: Box<DetachKeysError>,
    },
}

/// Finds a [`DetachSeq`] in what is typed, across reads.
#[derive(Debug, Default)]
pub struct DetachKeys {
    seq: DetachSeq,
    /// The keys typed last that are the start of the sequence, held back until the next
    /// byte says whether the sequence goes on.
    held: Vec<u8>,
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
    /// A finder for `seq`.
    pub fn new(seq: DetachSeq) -> Self {
        Self {
            seq,
            held: Vec::new(),
        }
    }

    /// Splits `chunk`: what goes to the program, and whether the detach keys came.
    pub fn feed(&mut self, chunk: &[u8]) -> Typed {
        let seq = self.seq.keys();
        let mut forward = Vec::with_capacity(chunk.len() + self.held.len());
        if seq.is_empty() {
            forward.extend_from_slice(chunk);
            return Typed {
                forward,
                detach: false,
            };
        }
        for &b in chunk {
            self.held.push(b);
            if self.held == seq {
                self.held.clear();
                return Typed {
                    forward,
                    detach: true,
                };
            }
            // Keep the longest end of what is held that could still begin the sequence;
            // what comes before it goes to the program.
            let keep = (0..=self.held.len())
                .find(|&start| seq.starts_with(&self.held[start..]))
                .unwrap_or(self.held.len());
            forward.extend(self.held.drain(..keep));
        }
        Typed {
            forward,
            detach: false,
        }
    }

    /// What is held back when input ends (a last start of the sequence).
    pub fn flush(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.held)
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
    fn other_detach_keys_are_found_however_the_reads_split_them() {
        let seq = DetachSeq::parse("ctrl-a,ctrl-a,d").unwrap();
        let typed_all = |chunks: &[&[u8]]| {
            let mut keys = DetachKeys::new(seq.clone());
            let mut forward = Vec::new();
            for chunk in chunks {
                let t = keys.feed(chunk);
                forward.extend(t.forward);
                if t.detach {
                    return (forward, true);
                }
            }
            forward.extend(keys.flush());
            (forward, false)
        };
        // A sequence that overlaps itself: the third Ctrl-A restarts it, one goes on.
        assert_eq!(typed_all(&[b"x\x01\x01\x01d"]), (b"x\x01".to_vec(), true));
        assert_eq!(
            typed_all(&[b"x\x01", b"\x01", b"\x01", b"d"]),
            (b"x\x01".to_vec(), true)
        );
        assert_eq!(
            typed_all(&[b"\x01\x01e\x01"]),
            (b"\x01\x01e\x01".to_vec(), false)
        );
        let mut off = DetachKeys::new(DetachSeq::parse("none").unwrap());
        assert_eq!(off.feed(b"\x10\x11"), typed(b"\x10\x11", false));
    }

    #[test]
    fn detach_keys_are_parsed_as_docker_writes_them_and_refused_naming_the_key() {
        assert_eq!(
            DetachSeq::parse("ctrl-p,ctrl-q").unwrap(),
            DetachSeq::default()
        );
        assert_eq!(DetachSeq::default().name(), "Ctrl-P Ctrl-Q");
        assert_eq!(
            DetachSeq::parse("Ctrl-@,ctrl-_,q").unwrap().keys(),
            &[0, 0x1f, b'q']
        );
        assert_eq!(DetachSeq::parse("none").unwrap().name(), "none");
        for (bad, names) in [
            ("", "an empty key"),
            ("ctrl-p,,ctrl-q", "an empty key"),
            ("ctrl-1", "\"ctrl-1\" is not a control key"),
            ("alt-x", "\"alt-x\" is not a key"),
            ("é", "\"é\" is not a key"),
            ("a,b,c,d,e,f,g,h,i", "9 keys, more than the 8"),
        ] {
            let e = DetachSeq::parse(bad).unwrap_err().to_string();
            assert!(
                e.contains(names) && e.contains("ctrl-p,ctrl-q"),
                "{bad:?}: {e}"
            );
        }
        assert!(
            DetachSeq::chosen(Some("ctrl-9"))
                .unwrap_err()
                .to_string()
                .starts_with("--detach-keys: ")
        );
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
