//! The watchdog: a process that outlives its supervisor to clean up after it.
//!
//! A supervisor killed with SIGKILL cannot kill its runs. Tier C runs die with it (their
//! pid 1 has a parent-death signal and takes the namespace down), and so does a Tier B
//! run's first process; but a Tier B program's descendants that left its process group —
//! a daemon of a background process — used to live on past their lifetime until a later
//! run swept their cgroups. The watchdog is a child forked at the supervisor's start,
//! while it is still single-threaded: it holds the read end of a pipe whose write end only
//! the supervisor holds, so the pipe ends when the supervisor does, however it dies. It
//! then kills everything left in the dead supervisor's run cgroups and removes them
//! ([`crate::launch::sweep_orphaned_groups`]), and exits.
//!
//! It stays in the supervisor's session (so the supervisor's orphan sweep, which only
//! takes children in other sessions, leaves it alone) and ignores the signals a terminal
//! or a process-group `kill` sends. A run without a cgroup (the `cgroup` layer missing on
//! the host) has nothing the watchdog can find: its stray descendants are the gap.

use std::io::Read;
use std::time::Duration;

use crate::launch::sys;

/// Sweeps after the supervisor's death: the first finds the groups; more catch a process
/// that was forking while the first ran.
const SWEEP_ROUNDS: usize = 3;

/// Pause between sweeps.
const SWEEP_PAUSE: Duration = Duration::from_millis(100);

/// Starts the watchdog for this process. Must be called while the process has a single
/// thread (before any runtime or thread pool starts): otherwise it refuses, naming the
/// thread count, and starts nothing.
pub fn start() -> std::io::Result<()> {
    let threads = thread_count()?;
    if threads != 1 {
        return Err(std::io::Error::other(format!(
            "the watchdog must be started while the process has one thread ({threads} now)"
        )));
    }
    let (read, write) = sys::pipe_cloexec()?;
    match sys::fork_single_threaded()? {
        None => {
            drop(write);
            watch(read)
        }
        Some(_) => {
            drop(read);
            // Held for the life of the process: its closing is the watchdog's signal.
            std::mem::forget(write);
            Ok(())
        }
    }
}

fn watch(read: std::os::fd::OwnedFd) -> ! {
    sys::ignore_termination_signals();
    let mut pipe = std::fs::File::from(read);
    let mut buf = [0u8; 64];
    // Nothing is ever written: this returns at EOF, when the supervisor is gone.
    while matches!(pipe.read(&mut buf), Ok(n) if n > 0) {}
    for _ in 0..SWEEP_ROUNDS {
        crate::launch::sweep_orphaned_groups();
        std::thread::sleep(SWEEP_PAUSE);
    }
    std::process::exit(0)
}

fn thread_count() -> std::io::Result<usize> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| std::io::Error::other("no Threads line in /proc/self/status"))
}
