#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::*;

/// A child that would run for a minute unless something kills it.
fn sleeper() -> (libc::pid_t, OwnedFd) {
    let child = Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("spawn sleep");
    let pid = child.id() as libc::pid_t;
    let fd = crate::launch::exit::pidfd_open(pid).expect("pidfd_open");
    // `Child` never waits on drop: the reaper is the only one to reap it.
    drop(child);
    (pid, fd)
}

fn is_reaped(pid: libc::pid_t) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Hands `fd` over with a counting follow-up, settles, and returns the count.
fn follow_ups_run(fd: OwnedFd) -> usize {
    let ran = Arc::new(AtomicUsize::new(0));
    let r = Arc::clone(&ran);
    defer(
        &fd,
        Box::new(move || {
            r.fetch_add(1, Ordering::SeqCst);
        }),
    );
    assert!(settle(Duration::from_secs(10)));
    ran.load(Ordering::SeqCst)
}

#[test]
fn handed_over_processes_are_killed_reaped_and_followed_up_in_order() {
    let ran = Arc::new(AtomicUsize::new(0));
    let mut pids = Vec::new();
    for i in 0..3 {
        let (pid, fd) = sleeper();
        pids.push(pid);
        let ran = Arc::clone(&ran);
        defer(
            &fd,
            Box::new(move || {
                // Follow-ups run after their own process is reaped, in hand-over order.
                assert!(is_reaped(pid), "follow-up ran before pid {pid} was reaped");
                assert_eq!(ran.fetch_add(1, Ordering::SeqCst), i);
            }),
        );
    }
    assert!(settle(Duration::from_secs(10)), "reaper did not settle");
    assert_eq!(ran.load(Ordering::SeqCst), 3);
    for pid in pids {
        assert!(
            is_reaped(pid),
            "pid {pid} is still there (alive or a zombie)"
        );
    }
}

#[test]
fn a_process_reaped_elsewhere_still_gets_its_follow_up() {
    let (pid, fd) = sleeper();
    sys::kill(pid, libc::SIGKILL).unwrap();
    // Reaped here first: the reaper's wait finds no child (ECHILD) and goes on.
    while !crate::launch::exit::reap_nohang(pid) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(follow_ups_run(fd), 1);
}

#[test]
fn a_panicking_follow_up_does_not_stop_the_reaper() {
    let (_, fd) = sleeper();
    defer(
        &fd,
        Box::new(|| panic!("follow-up failure (expected by this test)")),
    );
    let (pid, fd) = sleeper();
    assert_eq!(follow_ups_run(fd), 1);
    assert!(is_reaped(pid));
}

/// The check that lets a subreaper skip its orphan scan sees an exited, unreaped child,
/// and leaves it for whoever reaps it.
#[test]
fn an_exited_child_is_seen_waiting_and_left_unreaped() {
    let (pid, _fd) = sleeper();
    sys::kill(pid, libc::SIGKILL).unwrap();
    let zombie = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|t| t.trim_start().starts_with('Z'))
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !zombie() {
        assert!(
            std::time::Instant::now() < deadline,
            "the child never exited"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        crate::launch::exit::exited_child_waiting(),
        "a zombie child was not seen"
    );
    // Still there to reap: the check did not take it.
    assert!(
        crate::launch::exit::reap_nohang(pid),
        "the check reaped the child"
    );
}
