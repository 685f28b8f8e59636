//! Load: 1000 runs through the HTTP API from 16 concurrent clients. Every request
//! succeeds or is refused cleanly with 429, and afterwards the server holds no more file
//! descriptors, zombie children, cgroups or mounts than after a warm-up, beyond whole
//! warm slots its bounded pool may have added. Its own test binary, so no other server
//! runs while it counts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "serve/support.rs"]
mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use support::*;

const RUNS: usize = 1000;
const CLIENTS: usize = 16;
/// Counted cgroup directories of one native Tier C slot: memory and pids.
const CGROUPS_PER_SLOT: usize = 2;
/// Most descriptors one slot holds: an attach file per controller (memory, pids, cpu,
/// freezer) and four usage files kept open.
const SLOT_FDS: usize = 8;

/// What the server holds: open fds, zombie children, tierbox cgroups, mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Holdings {
    fds: usize,
    zombies: usize,
    cgroups: usize,
    mounts: usize,
}

/// The run groups beneath `dir` that process `pid` made (named `tierbox-<pid>.<start>-…`):
/// other Tierbox processes on the host (tests running beside this one) are not counted.
fn count_cgroups(dir: &std::path::Path, pid: i32) -> usize {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    let owned = format!("tierbox-{pid}.");
    rd.flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| {
            let own = usize::from(e.file_name().to_string_lossy().starts_with(&owned));
            own + count_cgroups(&e.path(), pid)
        })
        .sum()
}

/// The run groups the (stopped) server `pid` left, in every hierarchy.
fn count_server_cgroups(pid: i32) -> usize {
    ["memory", "pids", "cpu", "unified"]
        .iter()
        .map(|c| count_cgroups(&std::path::Path::new("/sys/fs/cgroup").join(c), pid))
        .sum()
}

fn holdings(pid: i32) -> Holdings {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    let zombies = zombie_children(pid).len();
    let cgroups = count_server_cgroups(pid);
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .unwrap()
        .lines()
        .count()
        + std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .count();
    Holdings {
        fds,
        zombies,
        cgroups,
        mounts,
    }
}

fn hammer(s: &Server, runs: usize) -> BTreeMap<u16, usize> {
    let next = Arc::new(AtomicUsize::new(0));
    let statuses = Arc::new(Mutex::new(BTreeMap::new()));
    let bad = Arc::new(Mutex::new(Vec::new()));
    std::thread::scope(|scope| {
        for _ in 0..CLIENTS {
            let (next, statuses, bad) = (next.clone(), statuses.clone(), bad.clone());
            let addr = s.addr.clone();
            scope.spawn(move || {
                while next.fetch_add(1, Ordering::Relaxed) < runs {
                    let (status, _, body) = raw(
                        &addr,
                        "POST",
                        "/v1/process/run",
                        Some(br#"{"command":"true","tier":"c"}"#),
                        &[("Authorization", &format!("Bearer {TOKEN}"))],
                    );
                    let ok = match status {
                        200 => body.contains(r#""exit_code":0"#),
                        429 => body.contains("server.busy"),
                        _ => false,
                    };
                    if !ok {
                        bad.lock().unwrap().push(format!("{status}: {body}"));
                    }
                    *statuses.lock().unwrap().entry(status).or_default() += 1;
                }
            });
        }
    });
    let bad = bad.lock().unwrap();
    assert!(
        bad.is_empty(),
        "{} bad answers, first: {}",
        bad.len(),
        bad[0]
    );
    statuses.lock().unwrap().clone()
}

#[test]
fn a_thousand_runs_from_sixteen_clients_leave_nothing_behind() {
    if !tier_c_available("http_load") {
        return;
    }
    // Four sandboxes at a time on two cores, the other clients queued.
    let s = Server::start(&["--max-concurrent", "4", "--queue", "16"], None);
    // Warm up: the pools of reusable run slots fill to their steady size.
    hammer(&s, 64);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let before = holdings(s.pid());
    let statuses = hammer(&s, RUNS);
    eprintln!("http_load: statuses {statuses:?}");
    assert_eq!(statuses.values().sum::<usize>(), RUNS);
    assert!(
        statuses.get(&200).copied().unwrap_or(0) > RUNS / 2,
        "{statuses:?}"
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    let after = holdings(s.pid());
    eprintln!("http_load: before {before:?}, after {after:?}");
    assert_eq!(after.zombies, 0);
    // The pool of warm slots may have grown under load: how many runs' slots are still
    // being recycled (on the reaper thread) when the next run starts is a matter of
    // timing, and a run that finds none idle makes a new one. It grows only by whole
    // slots and never past its bound. A native Tier C slot holds two of the counted
    // cgroup directories (memory, pids) and at most SLOT_FDS descriptors (its attach
    // files and the usage files kept open); anything beyond is a leak.
    let grown = after.cgroups.saturating_sub(before.cgroups);
    assert_eq!(
        grown % CGROUPS_PER_SLOT,
        0,
        "cgroup leak (not whole slots): {before:?} -> {after:?}"
    );
    let grown_slots = grown / CGROUPS_PER_SLOT;
    assert!(
        grown_slots <= tierbox_sandbox::launch::slots::MAX_IDLE_SLOTS,
        "cgroup leak: {before:?} -> {after:?}"
    );
    assert!(
        after.fds <= before.fds + grown_slots * SLOT_FDS,
        "fd leak: {before:?} -> {after:?} ({grown_slots} more warm slots)"
    );
    assert!(
        after.mounts <= before.mounts,
        "mount leak: {before:?} -> {after:?}"
    );
    let server = s.pid();
    assert!(s.stop().success());
    // The warm slots go with the server.
    let left = count_server_cgroups(server);
    assert_eq!(left, 0, "{left} tierbox cgroups left after shutdown");
}
