//! Network namespaces made ahead of runs, so creating one is not on a run's critical path.
//!
//! A fresh network namespace is the single most expensive kernel object of a Tier C
//! sandbox (per-namespace sysctl tables, the loopback device, routing and netfilter
//! state: ~0.5 ms on the development VM, RCU-bound). A filler thread keeps up to
//! [`NETNS_POOL_SIZE`] fresh namespaces ready, each with `lo` up and nothing else; a
//! launch takes one ([`take`]) and its pid 1 is cloned inside it
//! (`sys::clone_init`) instead of with `CLONE_NEWNET`.
//!
//! Isolation is the same as a namespace made by the clone:
//! - each namespace is handed out **once**: [`take`] removes it from the pool, and the
//!   pool's fd is closed once the sandbox is in it, so no two runs ever share one and
//!   none is reused after a run;
//! - it was never entered by anything but the filler thread, for the few system calls
//!   that bring `lo` up; no socket was ever opened in it except that `ioctl`'s;
//! - it is owned by the supervisor's user namespace, not the sandbox's, so the sandbox
//!   (which has no capability there) cannot change its interfaces, routes, firewall or
//!   sysctls — stricter than a namespace the sandbox's own user namespace owns.
//!
//! The pool only works for a supervisor that may create and join network namespaces in
//! its own user namespace (`CAP_SYS_ADMIN` there: root on the host, or root in a
//! container). Otherwise — or when the filler cannot keep up — launches fall back to
//! `CLONE_NEWNET`, and [`take`] says so by returning `None`.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, OnceLock, PoisonError};

use super::sys as nsys;

/// Fresh network namespaces kept ready, per supervisor process. Bounds the kernel memory
/// held ahead of time (a namespace with only `lo` is a few hundred KiB at most) while
/// covering two launches in quick succession; a launch that finds the pool empty creates
/// its namespace itself.
pub const NETNS_POOL_SIZE: usize = 2;

#[derive(Debug, Default)]
struct State {
    ready: VecDeque<OwnedFd>,
    /// Set when the filler stopped (it could not create or leave a namespace): every
    /// later [`take`] returns `None` at once.
    stopped: bool,
}

#[derive(Debug, Default)]
struct Pool {
    state: Mutex<State>,
    /// Signalled when a namespace is asked for or the pool is switched (the filler makes
    /// another when there is room).
    taken: Condvar,
}

static POOL: OnceLock<Option<Pool>> = OnceLock::new();

fn pool() -> Option<&'static Pool> {
    POOL.get_or_init(|| {
        // Only a supervisor with CAP_SYS_ADMIN in its user namespace can join a namespace
        // it made; an unprivileged one would only waste a thread finding that out.
        if !super::reach::supervisor_can_join_namespaces() {
            return None;
        }
        let spawned = std::thread::Builder::new()
            .name("tierbox-netns".to_owned())
            .spawn(fill);
        spawned.is_ok().then(Pool::default)
    })
    .as_ref()
}

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns the pool on (the default) or off. A process that launches one sandbox and exits
/// (the `tierbox run` command) turns it off before its launch: namespaces made ahead of
/// time would only cost it CPU. Turning it off closes the namespaces that are ready.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::SeqCst);
    if let Some(pool) = POOL.get().and_then(Option::as_ref) {
        if !on {
            pool.state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .ready
                .clear();
        }
        pool.taken.notify_one();
    }
}

/// A fresh network namespace with `lo` up, never used by any run, or `None` when the pool
/// is off, empty or unavailable (the caller then creates one with `CLONE_NEWNET`). The
/// first call starts the filler and returns `None`.
pub fn take() -> Option<OwnedFd> {
    if !ENABLED.load(Ordering::SeqCst) {
        return None;
    }
    let pool = pool()?;
    let mut state = pool.state.lock().unwrap_or_else(PoisonError::into_inner);
    if state.stopped {
        return None;
    }
    let fd = state.ready.pop_front();
    // The filler makes the next one (it also wakes here after the pool was turned back on).
    pool.taken.notify_one();
    fd
}

/// Whether the pool is serving namespaces (false when it is switched off, once the filler
/// has stopped, or when it never could start).
#[cfg(test)]
pub fn active() -> bool {
    ENABLED.load(Ordering::SeqCst)
        && pool().is_some_and(|p| {
            !p.state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .stopped
        })
}

/// The filler thread: keeps [`NETNS_POOL_SIZE`] namespaces ready. Each is made by moving
/// this thread into a new namespace, bringing `lo` up and opening an fd for it, then
/// returning to the thread's original namespace. Stops for good on the first failure.
fn fill() {
    // Blocks until the initialiser that spawned this thread has stored the pool.
    let Some(pool) = pool() else {
        return;
    };
    let stop = || {
        let mut state = pool.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.stopped = true;
        state.ready.clear();
    };
    let Ok(own) = nsys::own_netns() else {
        return stop();
    };
    loop {
        {
            let mut state = pool.state.lock().unwrap_or_else(PoisonError::into_inner);
            while (state.ready.len() >= NETNS_POOL_SIZE || !ENABLED.load(Ordering::SeqCst))
                && !state.stopped
            {
                state = pool
                    .taken
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if state.stopped {
                return;
            }
        }
        let made = nsys::new_netns_with_loopback();
        // Back home whatever happened: a failed unshare left the thread where it was,
        // a failed `lo` left it in a namespace nobody will use.
        if nsys::setns_net(&own).is_err() {
            return stop();
        }
        match made {
            // Made while the pool was being switched off: closed, not kept.
            Ok(fd) if ENABLED.load(Ordering::SeqCst) => pool
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .ready
                .push_back(fd),
            Ok(_) => {}
            Err(_) => return stop(),
        }
    }
}
