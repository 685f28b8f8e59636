//! The run roots this supervisor owns, and the orphans it sweeps: a registry of live
//! runs' roots, the launch lock that keeps a just-cloned root from looking like an
//! orphan, and — when the supervisor is a child subreaper — the kill and reap of
//! re-parented descendants that left their run's process group.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock, PoisonError, RwLock};
use std::time::Duration;

use tierbox_sandbox::contract::RunningSandbox;
use tierbox_sandbox::contract::process;

/// Pids of the direct children of live runs, so the orphan sweep never touches them.
fn live_roots() -> &'static Mutex<HashSet<i32>> {
    static ROOTS: OnceLock<Mutex<HashSet<i32>>> = OnceLock::new();
    ROOTS.get_or_init(|| Mutex::new(HashSet::new()))
}

/// Held shared from a launch's `clone` until its root is registered, and exclusively
/// while the orphan sweep lists this process's children: a child the sweep sees that is
/// not a registered root is then certainly an orphan, never a run that has just started.
pub(super) static LAUNCHING: RwLock<()> = RwLock::new(());

static SUBREAPER: OnceLock<bool> = OnceLock::new();

/// Makes this process a child subreaper, so orphaned descendants of runs (daemons that
/// left the process group with `setsid`) are re-parented here and killed at the end of
/// their run when no cgroup contains them.
///
/// Call it only in a process that owns no other children: at the end of each run the
/// supervisor kills and reaps re-parented children that are not the root of a live run.
/// The `tierbox` CLI and server call it at startup.
pub fn enable_subreaper() -> std::io::Result<()> {
    process::set_child_subreaper()?;
    let _ = SUBREAPER.set(true);
    Ok(())
}

pub(crate) fn register_root(pid: i32, live: bool) {
    if let Ok(mut roots) = live_roots().lock() {
        if live {
            roots.insert(pid);
        } else {
            roots.remove(&pid);
        }
    }
}

/// SIGKILLs every process of the run: the cgroup, the process group, and (subreaper
/// mode) orphans re-parented to the supervisor.
pub(crate) fn kill_tree(l: &RunningSandbox) {
    l.kill_all();
    if SUBREAPER.get().copied().unwrap_or(false) && l.cgroup().is_none() {
        sweep_orphans();
    }
}

/// Kills and reaps children of this process that are not the root of a live run: they
/// can only be re-parented orphans of runs (see [`enable_subreaper`]).
fn sweep_orphans() {
    for pid in orphans() {
        let _ = process::kill(pid, libc::SIGKILL);
        for _ in 0..50 {
            if process::reap_nohang(pid) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Reaps the orphans of runs that have already exited, leaving live ones alone (they
/// belong to runs whose cgroup holds and kills them). Without this an orphan that ends
/// as a zombie of the subreaper — bwrap's pid 1 when its monitor exits first — stays one,
/// still charged to its run's `pids.max`.
fn reap_exited_orphans() {
    // One system call instead of reading every thread's `children`, when no child of
    // this process is a zombie (the common case: every run's root is reaped by its run).
    if !process::exited_child_waiting() {
        return;
    }
    for pid in orphans() {
        process::reap_nohang(pid);
    }
}

/// Children of this process that are not the root of a live run and not in this
/// process's session. Every process of a run is in a session of its own (each backend
/// starts the run with `setsid`, and nothing can join another session), so this never
/// includes a helper the supervisor started itself with `Command` (a container engine's
/// CLI, a probe), whose exit status belongs to the code waiting for it.
fn orphans() -> Vec<i32> {
    let _listing = LAUNCHING.write().unwrap_or_else(PoisonError::into_inner);
    let roots: HashSet<i32> = live_roots().lock().map(|r| r.clone()).unwrap_or_default();
    // The supervisor's session does not change: read once.
    static OWN_SESSION: OnceLock<Option<i32>> = OnceLock::new();
    let Some(own_session) = *OWN_SESSION.get_or_init(|| session_of("self")) else {
        return Vec::new();
    };
    own_children()
        .into_iter()
        .filter(|pid| !roots.contains(pid))
        .filter(|pid| session_of(&pid.to_string()).is_some_and(|sid| sid != own_session))
        .collect()
}

/// The session id of `/proc/<pid>` (field 6 of its `stat`), zombies included.
fn session_of(pid: &str) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: fields after it
    // follow the last ')'. After it: state, ppid, pgrp, session.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()
}

fn own_children() -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
    out
}

/// Hands the run's resources back ([`RunningSandbox::release`]) and, once its root is
/// reaped, forgets it as a live root; first reaps orphans of earlier runs that have
/// exited (subreaper mode).
pub(crate) fn cleanup(l: &mut RunningSandbox) {
    if SUBREAPER.get().copied().unwrap_or(false) {
        reap_exited_orphans();
    }
    let pid = l.pid();
    l.release(Box::new(move || register_root(pid, false)));
}
