//! How a run's process ended, and the supervisor's calls on a child it watches: its pidfd
//! waited on, polled and signalled, a process group killed, an orphan reaped.

#[allow(unsafe_code)]
mod sys;

#[cfg(test)]
pub use sys::pidfd_open;
pub use sys::{
    exited_child_waiting, kill, pidfd_has_exited, pidfd_signal, reap_nohang, register_readable,
    wait_pidfd,
};

/// How a child ended, with its resource usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitInfo {
    /// Exit code when it exited normally.
    pub code: Option<i32>,
    /// Signal number when it was killed by a signal.
    pub signal: Option<i32>,
    /// User CPU time in microseconds (the child and its reaped descendants).
    pub user_us: u64,
    /// System CPU time in microseconds.
    pub sys_us: u64,
    /// Peak resident set size in bytes.
    pub max_rss_bytes: u64,
}
