//! A run's terminal: a pseudo-terminal pair whose secondary side is the program's stdin,
//! stdout and stderr (and its controlling terminal, in a session of its own), and whose
//! primary side the supervisor holds ([`Terminal`]).
//!
//! Who makes the pair:
//!
//! | backend | the pair | `tty` inside |
//! |---|---|---|
//! | Tier B | the supervisor (`posix_openpt` on the host's devpts) | the host's `/dev/pts/N` |
//! | native Tier C | the program, from the sandbox's own devpts instance (`/dev/ptmx`), before its exec; the primary is sent to the supervisor over a socket pair | the sandbox's `/dev/pts/0` |
//! | bubblewrap | the program, from bwrap's devpts instance (`tierbox-init --pty`), sent out over a socket pair as in native Tier C | the sandbox's `/dev/pts/0` |
//! | containers | the supervisor, for the engine's CLI (`--interactive --tty`), which relays it to the container's own terminal (`Relay`) | the container's `/dev/pts/0` |
//!
//! In each, the program gets a session of its own and the secondary as its controlling
//! terminal (`setsid`, `TIOCSCTTY`), so the kernel's line discipline delivers `^C` as
//! `SIGINT` to its foreground process group and a resize as `SIGWINCH`. The filters that
//! refuse `TIOCSTI` and `TIOCLINUX` apply to the secondary as to every fd.

#[allow(unsafe_code)]
pub(crate) mod sys;

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// Largest number of rows or columns a terminal may be given (a `winsize` field is 16
/// bits; beyond a few thousand a screen is no longer a screen).
pub const MAX_TERM_DIMENSION: u16 = 4096;

/// A terminal's size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TermSize {
    /// Rows (lines), 1 to [`MAX_TERM_DIMENSION`].
    pub rows: u16,
    /// Columns, 1 to [`MAX_TERM_DIMENSION`].
    pub cols: u16,
}

impl TermSize {
    /// Whether both dimensions are within 1 to [`MAX_TERM_DIMENSION`].
    pub fn is_valid(self) -> bool {
        (1..=MAX_TERM_DIMENSION).contains(&self.rows)
            && (1..=MAX_TERM_DIMENSION).contains(&self.cols)
    }
}

/// The supervisor's side (the primary) of a run's terminal: what the program writes to
/// its terminal is read here, and what is written here is the program's input, through
/// the line discipline. Non-blocking and close-on-exec.
#[derive(Debug)]
pub struct Terminal(OwnedFd, Option<std::sync::Arc<Relay>>);

/// A container run's terminal: the engine's CLI holds it (raw mode) and relays it to the
/// container's own, so the terminal's foreground group is the CLI, not the program.
#[derive(Debug)]
pub(crate) struct Relay {
    /// The engine's CLI, run with exactly `env` to signal the container.
    pub(crate) engine: std::path::PathBuf,
    pub(crate) env: &'static [(&'static str, &'static str)],
    /// The container's name.
    pub(crate) container: String,
}

/// The byte a terminal's line discipline turns into `sig` (`VINTR`, `VQUIT`, `VSUSP` as
/// a terminal starts): how a signal reaches the foreground job of a container's own
/// terminal, as a person's keyboard sends it.
fn control_byte(sig: i32) -> Option<u8> {
    match sig {
        libc::SIGINT => Some(0x03),
        libc::SIGQUIT => Some(0x1c),
        libc::SIGTSTP => Some(0x1a),
        _ => None,
    }
}

impl Terminal {
    /// The primary's fd (non-blocking): read the program's output, write its input.
    pub fn fd(&self) -> &OwnedFd {
        &self.0
    }

    /// Another handle on the primary (non-blocking), registered with the tokio reactor
    /// for reads and writes: call inside a runtime with I/O enabled.
    pub fn register(&self) -> std::io::Result<tokio::io::unix::AsyncFd<std::fs::File>> {
        sys::register(self.0.try_clone()?)
    }

    /// Another handle on the same primary.
    pub fn try_clone(&self) -> std::io::Result<Self> {
        Ok(Self(self.0.try_clone()?, self.1.clone()))
    }

    /// Marks this terminal as relayed by a container engine's CLI (see [`Relay`]).
    pub(crate) fn relayed(mut self, relay: Relay) -> Self {
        self.1 = Some(std::sync::Arc::new(relay));
        self
    }

    /// Sets the terminal's size (`TIOCSWINSZ`); the kernel sends `SIGWINCH` to its
    /// foreground process group when the size changes.
    pub fn resize(&self, size: TermSize) -> std::io::Result<()> {
        sys::set_winsize(self.0.as_fd(), size)
    }

    /// The terminal's size (`TIOCGWINSZ`).
    pub fn size(&self) -> std::io::Result<TermSize> {
        sys::get_winsize(self.0.as_fd())
    }

    /// The terminal's foreground process group (`TIOCGPGRP`), as a pid of the
    /// supervisor's pid namespace. Only processes of the terminal's session — the run's —
    /// can be its foreground group.
    pub fn foreground_group(&self) -> std::io::Result<i32> {
        sys::foreground_group(self.0.as_fd())
    }

    /// Sends `sig` to the terminal's foreground process group. A container's terminal is
    /// relayed by the engine's CLI: `SIGINT`, `SIGQUIT` and `SIGTSTP` are then its control
    /// byte (`^C`, `^\`, `^Z`), which the container's own terminal turns into the signal
    /// for its foreground job when that terminal is set to (`ISIG`, as a shell leaves
    /// it); any other signal goes to the container's main process through the engine
    /// (`kill --signal`, not waited for).
    pub fn signal_foreground(&self, sig: i32) -> std::io::Result<()> {
        if let Some(relay) = &self.1 {
            return match control_byte(sig) {
                Some(byte) => match rustix::io::write(&self.0, &[byte])? {
                    1 => Ok(()),
                    _ => Err(std::io::Error::other("the terminal took no input")),
                },
                None => signal_container(relay, sig),
            };
        }
        let group = self.foreground_group()?;
        if group <= 1 {
            return Err(std::io::Error::other(format!(
                "the terminal's foreground group is {group}"
            )));
        }
        sys::kill_group(group, sig)
    }

    /// The byte that ends input at the start of a line in canonical mode (`VEOF`,
    /// normally `^D`), as the terminal is set now.
    pub fn eof_byte(&self) -> std::io::Result<u8> {
        sys::eof_byte(self.0.as_fd())
    }
}

/// `ENGINE kill --signal SIG CONTAINER`, on a thread that waits for it (the engine takes
/// tens of milliseconds; a term's signal does not wait for it).
fn signal_container(relay: &std::sync::Arc<Relay>, sig: i32) -> std::io::Result<()> {
    let mut cmd = std::process::Command::new(&relay.engine);
    cmd.env_clear()
        .envs(relay.env.iter().copied())
        .args(["kill", "--signal", &sig.to_string(), &relay.container])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn()?;
    std::thread::Builder::new()
        .name("tierbox-container-kill".to_owned())
        .spawn(move || {
            let _ = child.wait();
        })?;
    Ok(())
}

impl AsFd for Terminal {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// A new pair of `size`: the primary (non-blocking) and the secondary, both
/// close-on-exec, above stdio, neither the caller's controlling terminal.
pub(crate) fn open_pair(size: TermSize) -> std::io::Result<(Terminal, OwnedFd)> {
    let (primary, secondary) = sys::open_pair(size)?;
    Ok((Terminal(primary, None), secondary))
}

/// The primary a sandbox made and sent out, as the supervisor's terminal (made
/// non-blocking here).
pub(crate) fn received(primary: OwnedFd) -> std::io::Result<Terminal> {
    sys::set_nonblocking(primary.as_fd())?;
    Ok(Terminal(primary, None))
}
