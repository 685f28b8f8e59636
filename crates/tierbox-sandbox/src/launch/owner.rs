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
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses; fields after it are
    // plain. Field 22 is the 20th after the closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
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
    process_start_time(pid) != Some(start)
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
