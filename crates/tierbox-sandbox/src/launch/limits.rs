//! A run's limits as the kernel takes them: the run cgroup's, the rlimits, and the
//! enforcement report's lines for them.

use tierbox_policy::plan::Plan;

use super::sys;
use crate::linux::cgroup::CgroupLimits;

/// The run cgroup's limits: the plan's memory and process limits, and `limits.cpus` as a
/// CFS quota of 100% of one CPU per CPU.
pub(crate) fn cgroup_limits(plan: &Plan) -> CgroupLimits {
    CgroupLimits {
        memory_bytes: plan.limits.memory_bytes,
        max_processes: plan.limits.max_processes,
        cpu_quota_percent: plan.limits.cpus.map(|cpus| cpus.saturating_mul(100)),
    }
}

/// The rlimits of a run: (resource, soft, hard). The CPU hard limit is one second above
/// the soft one, so a process that ignores SIGXCPU is killed a second later.
/// [`rlimits_for`] in the form `prlimit64` takes; Tier C's program gets the same.
pub(crate) fn rlimit64_table(plan: &Plan) -> [(i32, libc::rlimit64); sys::RLIMIT_COUNT] {
    rlimits_for(plan).map(|(r, cur, max)| {
        (
            r,
            libc::rlimit64 {
                rlim_cur: cur,
                rlim_max: max,
            },
        )
    })
}

fn rlimits_for(plan: &Plan) -> [(i32, u64, u64); sys::RLIMIT_COUNT] {
    let l = &plan.limits;
    [
        (
            libc::RLIMIT_CPU as i32,
            l.cpu_time_secs,
            l.cpu_time_secs.saturating_add(1),
        ),
        (libc::RLIMIT_NPROC as i32, l.max_processes, l.max_processes),
        (libc::RLIMIT_NOFILE as i32, l.open_files, l.open_files),
        (
            libc::RLIMIT_FSIZE as i32,
            l.file_size_bytes,
            l.file_size_bytes,
        ),
        (libc::RLIMIT_CORE as i32, 0, 0),
    ]
}

/// The enforcement report's rlimit lines for `limits` (the five every native backend
/// sets); `nproc_note` follows the `RLIMIT_NPROC` value (e.g. why the kernel ignores it).
pub(crate) fn rlimit_report(
    limits: &tierbox_policy::plan::LimitsPlan,
    nproc_note: &str,
) -> Vec<String> {
    vec![
        format!("RLIMIT_CPU={}s", limits.cpu_time_secs),
        format!("RLIMIT_NPROC={}{nproc_note}", limits.max_processes),
        format!("RLIMIT_NOFILE={}", limits.open_files),
        format!("RLIMIT_FSIZE={}", limits.file_size_bytes),
        "RLIMIT_CORE=0".to_owned(),
    ]
}
