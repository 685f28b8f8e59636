//! Names owned by this supervisor (`tierbox-<pid>.<start time>-<run id>`), and sweeping
//! what supervisors that died left behind: run cgroups and private tmp directories.

use std::path::Path;
use std::sync::OnceLock;

use super::{sys, unmount_private_tmp};
use crate::probe::host_facts;

/// Run groups are named `tierbox-<supervisor pid>.<its start time>-<run id>`, so groups
/// left by a supervisor that died (SIGKILL cannot be handled) can be recognised and swept.
const GROUP_PREFIX: &str = "tierbox-";

pub(super) fn owner_prefix() -> &'static str {
    static PREFIX: OnceLock<String> = OnceLock::new();
    PREFIX.get_or_init(|| {
        let pid = sys::getpid();
        format!(
            "{GROUP_PREFIX}{pid}.{}-",
            process_start_time(pid).unwrap_or(0)
        )
    })
}

/// Start time of `pid` in clock ticks since boot (`/proc/<pid>/stat` field 22): with the
/// pid it identifies a process across pid reuse.
fn process_start_time(pid: i32) -> Option<u64> {
    process_state(pid).map(|(_, start)| start)
}

/// `pid`'s state letter (`/proc/<pid>/stat` field 3: `R`, `S`, … `Z` for a zombie) and its
/// start time (field 22).
fn process_state(pid: i32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_state(&stat)
}

fn parse_state(stat: &str) -> Option<(char, u64)> {
    // The command name (field 2) may contain spaces and parentheses; fields after it are
    // plain. Field 3 is the first after the closing parenthesis, field 22 the 20th.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    Some((state, fields.nth(18)?.parse().ok()?))
}

/// `run_id` prefixed with this process's identity, `<pid>.<start>-<run id>`: with
/// `tierbox-` before it, a name [`owner_is_gone`] reads (the container backends' names).
pub(crate) fn owned_id(run_id: &str) -> String {
    let owner = owner_prefix();
    format!("{}{run_id}", &owner[GROUP_PREFIX.len()..])
}

/// Whether the supervisor named in a group name (`tierbox-<pid>.<start>-…`) is gone.
pub(crate) fn owner_is_gone(name: &str) -> bool {
    let Some(owner) = name
        .strip_prefix(GROUP_PREFIX)
        .and_then(|r| r.split('-').next())
    else {
        return false;
    };
    let Some((pid, start)) = owner.split_once('.') else {
        return false;
    };
    let (Ok(pid), Ok(start)) = (pid.parse::<i32>(), start.parse::<u64>()) else {
        return false;
    };
    // A zombie runs nothing and holds nothing: its parent has not reaped it yet (a test
    // harness that killed it, a shell busy elsewhere) — what it left is orphaned already.
    // Not so a leader that ended its own thread only (`pthread_exit`): it shows as a
    // zombie while its other threads, listed beside it, still run the process.
    match process_state(pid) {
        Some((state, started)) => {
            started != start || (matches!(state, 'Z' | 'X') && only_thread_left(pid))
        }
        None => true,
    }
}

/// Whether `pid`'s thread group has no thread but its leader left.
fn only_thread_left(pid: i32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(true, |tasks| tasks.count() <= 1)
}

/// Once per process, before its first run group: remove groups of dead supervisors.
pub(super) fn sweep_orphaned_groups_once() {
    static SWEPT: OnceLock<()> = OnceLock::new();
    SWEPT.get_or_init(|| {
        sweep_orphaned_groups();
    });
}

/// Kills whatever is left in run groups of supervisors that died without cleaning up, and
/// removes those groups. Runs automatically before a process's first run; returns how many
/// group directories were removed.
pub fn sweep_orphaned_groups() -> usize {
    crate::linux::cgroup::sweep_orphaned(&host_facts().cgroup, GROUP_PREFIX, owner_is_gone)
}

/// Whether a private temporary directory of this process is left under `base`.
pub(crate) fn own_tmp_left(base: &Path) -> bool {
    std::fs::read_dir(base).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(owner_prefix()))
        })
    })
}

/// Removes the private temporary directories that supervisors which died left under
/// `base` (unmounting a Tier B run's bounded tmpfs first); returns how many. Runs
/// automatically before a process's first run under `base`.
pub fn sweep_orphaned_tmp(base: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(base) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name
            .to_str()
            .is_some_and(|n| n.starts_with(GROUP_PREFIX) && owner_is_gone(n))
        {
            // A Tier B run's bounded tmp is a tmpfs of its own, left mounted when its
            // supervisor was SIGKILLed.
            unmount_private_tmp(&entry.path());
            if std::fs::remove_dir_all(entry.path()).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_state_and_start_time_are_read_past_a_command_with_parentheses() {
        let stat = "4242 (a (b) c) Z 1 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 \
                    987654 1000 0 18446744073709551615";
        assert_eq!(super::parse_state(stat), Some(('Z', 987_654)));
        assert_eq!(super::parse_state("4242 (x) S 1"), None);
    }

    #[test]
    fn a_living_owner_is_not_gone_and_a_zombie_or_another_start_is() {
        let me = std::process::id() as i32;
        let (_, start) = super::process_state(me).unwrap();
        assert!(!super::owner_is_gone(&format!("tierbox-{me}.{start}-run")));
        assert!(super::owner_is_gone(&format!(
            "tierbox-{me}.{}-run",
            start + 1
        )));
        // A child that exited and is not reaped yet: a zombie.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        let zombie = (0..500).find_map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            super::process_state(pid).filter(|(s, _)| *s == 'Z')
        });
        let (_, child_start) = zombie.expect("the unreaped child became a zombie");
        assert!(super::owner_is_gone(&format!(
            "tierbox-{pid}.{child_start}-run"
        )));
        child.wait().unwrap();
    }

    /// A process whose first thread ended alone (`pthread_exit`) shows as a zombie while
    /// its other thread runs: it is not gone.
    #[test]
    fn a_zombie_leader_with_a_thread_still_running_is_not_gone() {
        let script = "import threading, time, ctypes\n\
                      threading.Thread(target=time.sleep, args=(30,)).start()\n\
                      ctypes.CDLL(None).pthread_exit(None)\n";
        let Ok(mut child) = std::process::Command::new("python3")
            .args(["-c", script])
            .spawn()
        else {
            tierbox_test_support::skip_here("python3 is not installed");
            return;
        };
        let pid = child.id() as i32;
        let leader = (0..500).find_map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            super::process_state(pid).filter(|(s, _)| *s == 'Z')
        });
        let alive =
            leader.map(|(_, start)| !super::owner_is_gone(&format!("tierbox-{pid}.{start}-run")));
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(
            alive,
            Some(true),
            "the leader never showed as a zombie, or was taken for gone"
        );
    }
}
