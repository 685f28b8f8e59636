//! A launch's stdio pipes, and a child that has exec'd with the supervisor's ends of them.

#[allow(unsafe_code)]
mod sys;

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use tierbox_policy::plan::Plan;

#[cfg(test)]
pub(crate) use sys::open_dev_null;
pub(crate) use sys::{dup_at_least, pipe_cloexec, recv_fd, socketpair_seqpacket};

use super::terminal::TermSize;
use super::{LaunchError, LaunchOptions};

/// A child that has exec'd, with the supervisor's ends of its pipes.
pub(crate) struct SpawnedChild {
    pub(crate) pid: i32,
    pub(crate) pidfd: OwnedFd,
    pub(crate) stdio: ParentStdio,
    pub(crate) chmod_listener: Option<OwnedFd>,
    /// The primary side of the run's terminal, when it has one.
    pub(crate) terminal: Option<super::terminal::Terminal>,
}

/// The pipes of a launch: the child's ends (stdin from `/dev/null` unless the Plan has
/// data) and the supervisor's, each close-on-exec. Shared by Tier B and native Tier C.
/// With a terminal ([`StdioPipes::terminal`]), the child's three ends are the terminal's
/// secondary side and the supervisor's stdout and stderr are pipes nobody writes to.
pub(crate) struct StdioPipes {
    pub(crate) child: ChildStdio,
    pub(crate) parent: ParentStdio,
    /// The terminal's primary side, when the launch asked for one.
    pub(crate) terminal: Option<super::terminal::Terminal>,
}

/// The child's ends of its stdio pipes, its fds 0, 1 and 2 once it runs: closed in the
/// supervisor as soon as the child is cloned.
pub(crate) struct ChildStdio {
    pub(crate) stdin: OwnedFd,
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
}

impl ChildStdio {
    /// Its fds, in the order 0, 1, 2.
    pub(crate) fn raw_fds(&self) -> [RawFd; 3] {
        [
            self.stdin.as_raw_fd(),
            self.stdout.as_raw_fd(),
            self.stderr.as_raw_fd(),
        ]
    }
}

/// The supervisor's ends of a child's stdio pipes: what it writes the child's stdin to
/// (`None`: the child reads `/dev/null`), and reads its stdout and stderr from.
#[derive(Debug)]
pub(crate) struct ParentStdio {
    pub(crate) stdin: Option<OwnedFd>,
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
}

/// Which of [`StdioPipes`] could not be made, for the caller's error.
#[derive(Debug, Clone, Copy)]
pub(crate) enum StdioPart {
    /// The stdin pipe.
    Stdin,
    /// `/dev/null` for stdin.
    DevNull,
    /// The stdout pipe.
    Stdout,
    /// The stderr pipe.
    Stderr,
}

impl StdioPipes {
    /// Opens the pipes of `plan`; `err` names a failure in the caller's terms.
    pub(crate) fn open<E>(
        plan: &Plan,
        err: impl Fn(StdioPart, std::io::Error) -> E,
    ) -> Result<Self, E> {
        let (stdout_r, stdout_w) = sys::pipe_cloexec().map_err(|e| err(StdioPart::Stdout, e))?;
        let (stderr_r, stderr_w) = sys::pipe_cloexec().map_err(|e| err(StdioPart::Stderr, e))?;
        let (stdin_child, stdin_parent) = match &plan.stdin {
            Some(_) => {
                let (r, w) = sys::pipe_cloexec().map_err(|e| err(StdioPart::Stdin, e))?;
                (r, Some(w))
            }
            None => (
                sys::open_dev_null().map_err(|e| err(StdioPart::DevNull, e))?,
                None,
            ),
        };
        Ok(Self {
            child: ChildStdio {
                stdin: stdin_child,
                stdout: stdout_w,
                stderr: stderr_w,
            },
            parent: ParentStdio {
                stdin: stdin_parent,
                stdout: stdout_r,
                stderr: stderr_r,
            },
            terminal: None,
        })
    }

    /// A terminal of `size` made here: the secondary side three times for the child,
    /// the primary for the supervisor; the supervisor's stdout and stderr read a pipe
    /// whose write end is closed at once (the terminal carries all the output).
    pub(crate) fn terminal(size: TermSize) -> std::io::Result<Self> {
        let (primary, secondary) = super::terminal::open_pair(size)?;
        let (empty_r, empty_w) = sys::pipe_cloexec()?;
        drop(empty_w);
        Ok(Self {
            child: ChildStdio {
                stdin: secondary.try_clone()?,
                stdout: secondary.try_clone()?,
                stderr: secondary,
            },
            parent: ParentStdio {
                stdin: None,
                stdout: empty_r.try_clone()?,
                stderr: empty_r,
            },
            terminal: Some(primary),
        })
    }
}

/// The stdio of a launch: a terminal when `opts` asks for one, the plan's pipes
/// otherwise.
pub(crate) fn stdio_pipes(plan: &Plan, opts: &LaunchOptions) -> Result<StdioPipes, LaunchError> {
    if let Some(size) = opts.terminal {
        return StdioPipes::terminal(size).map_err(LaunchError::setup("the run's terminal"));
    }
    StdioPipes::open(plan, |part, source| LaunchError::Setup {
        what: match part {
            StdioPart::Stdin => "pipe for stdin",
            StdioPart::DevNull => "open /dev/null",
            StdioPart::Stdout => "pipe for stdout",
            StdioPart::Stderr => "pipe for stderr",
        }
        .to_owned(),
        source,
    })
}
