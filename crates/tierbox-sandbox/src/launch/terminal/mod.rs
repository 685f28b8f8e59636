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
pub struct Terminal(OwnedFd);

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
        Ok(Self(self.0.try_clone()?))
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

    /// Sends `sig` to the terminal's foreground process group.
    pub fn signal_foreground(&self, sig: i32) -> std::io::Result<()> {
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

impl AsFd for Terminal {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// A new pair of `size`: the primary (non-blocking) and the secondary, both
/// close-on-exec, above stdio, neither the caller's controlling terminal.
pub(crate) fn open_pair(size: TermSize) -> std::io::Result<(Terminal, OwnedFd)> {
    let (primary, secondary) = sys::open_pair(size)?;
    Ok((Terminal(primary), secondary))
}

/// The primary a sandbox made and sent out, as the supervisor's terminal (made
/// non-blocking here).
pub(crate) fn received(primary: OwnedFd) -> std::io::Result<Terminal> {
    sys::set_nonblocking(primary.as_fd())?;
    Ok(Terminal(primary))
}
