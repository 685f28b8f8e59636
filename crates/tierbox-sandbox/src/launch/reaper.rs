//! Reaping a run's last process after the run has been reported, off the caller's path.
//!
//! A Tier C run is over when the sandbox's pid 1 reports the program's exit: pid 1
//! writes that record only after it has killed and reaped every other process of the
//! namespace (see `tier_c::program_exit`). pid 1's own exit still has to tear
//! the namespaces down — unmount every mount of the sandbox, free the tmpfs instances —
//! which takes about a quarter of a millisecond and holds nothing of the run. A
//! supervisor that finishes the run on the record hands pid 1's pidfd here together with
//! what must wait for it (the run's cgroup slot, which is recycled only once it is
//! provably empty): one background thread, `tierbox-reaper`, kills (a no-op for a process
//! already exiting) and reaps each in turn and then runs its follow-up.
//!
//! [`settle`] waits for everything handed over so far; [`super::slots::drain`] calls it,
//! so a supervisor that drains its slots before exiting leaves no group behind.
//!
//! ```
//! // Nothing handed over: settled at once.
//! assert!(tierbox_sandbox::launch::reaper::settle(std::time::Duration::from_millis(10)));
//! ```

use std::os::fd::OwnedFd;
use std::sync::mpsc::{Sender, channel};
use std::sync::{Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use super::sys;

/// What to run once a process is reaped.
pub type FollowUp = Box<dyn FnOnce() + Send + 'static>;

struct Job {
    pidfd: OwnedFd,
    then: FollowUp,
}

/// Jobs handed over and not finished yet.
static PENDING: Mutex<usize> = Mutex::new(0);
static SETTLED: Condvar = Condvar::new();

/// Hands over the process behind `pidfd` (a child of this process): it is sent `SIGKILL`,
/// reaped, and then `then` runs, on the reaper thread (with a duplicate of `pidfd`).
/// When that thread could not be started, or the descriptor not duplicated, all of it
/// happens here, before returning.
pub fn defer(pidfd: &OwnedFd, then: FollowUp) {
    let (Some(tx), Ok(own)) = (sender(), pidfd.try_clone()) else {
        finish(pidfd, then);
        return;
    };
    *PENDING.lock().unwrap_or_else(PoisonError::into_inner) += 1;
    if let Err(returned) = tx.send(Job { pidfd: own, then }) {
        done();
        let Job { pidfd, then } = returned.0;
        finish(&pidfd, then);
    }
}

/// Waits until every process handed to [`defer`] is reaped and its follow-up has run, at
/// most `timeout`. Returns whether that happened.
pub fn settle(timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let mut pending = PENDING.lock().unwrap_or_else(PoisonError::into_inner);
    while *pending > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        pending = SETTLED
            .wait_timeout(pending, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
    true
}

fn sender() -> Option<&'static Sender<Job>> {
    static TX: OnceLock<Option<Sender<Job>>> = OnceLock::new();
    TX.get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        std::thread::Builder::new()
            .name("tierbox-reaper".to_owned())
            .spawn(move || {
                for job in rx {
                    // A follow-up that panics must not take the thread (and every later
                    // job) with it.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        finish(&job.pidfd, job.then)
                    }));
                    done();
                }
            })
            .ok()
            .map(|_| tx)
    })
    .as_ref()
}

fn finish(pidfd: &OwnedFd, then: FollowUp) {
    // The run is over: whatever is still alive behind the pidfd goes now. ESRCH (already
    // gone) and ECHILD (reaped by someone else) both mean there is nothing left to do.
    let _ = sys::pidfd_signal(pidfd, libc::SIGKILL);
    let _ = sys::wait_pidfd(pidfd, false);
    then();
}

fn done() {
    let mut pending = PENDING.lock().unwrap_or_else(PoisonError::into_inner);
    *pending = pending.saturating_sub(1);
    if *pending == 0 {
        SETTLED.notify_all();
    }
}

#[cfg(test)]
#[path = "reaper_tests.rs"]
mod tests;
