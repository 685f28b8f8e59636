//! cgroup v1: one hierarchy per controller.

use super::*;

/// The legacy hierarchies.
pub(super) struct V1;

impl Hierarchy for V1 {
    fn attach_file(&self) -> &'static str {
        V1_ATTACH_FILE
    }

    fn memory_peak_file(&self) -> &'static str {
        "memory.max_usage_in_bytes"
    }

    fn memory_events_file(&self) -> &'static str {
        "memory.oom_control"
    }

    fn limit_writes(&self, limits: &CgroupLimits) -> Vec<LimitWrite> {
        let mem = limits.memory_bytes.to_string();
        let mut plan = vec![
            LimitWrite::required("memory", "memory.limit_in_bytes", mem.clone()),
            // memory+swap = memory: no swap. Must follow limit_in_bytes (memsw ≥ mem).
            LimitWrite::if_present("memory", "memory.memsw.limit_in_bytes", mem),
            LimitWrite::required("pids", "pids.max", limits.max_processes.to_string()),
        ];
        if let Some(quota) = limits.cpu_quota_us() {
            plan.push(LimitWrite::required(
                "cpu",
                "cpu.cfs_period_us",
                CPU_PERIOD_US.to_string(),
            ));
            plan.push(LimitWrite::required(
                "cpu",
                "cpu.cfs_quota_us",
                quota.to_string(),
            ));
        }
        plan
    }

    /// Every v1 controller is delegated by its own hierarchy's permissions: nothing to do.
    fn delegate(&self, _base: &Path, _wanted: &[&str]) -> Result<(), CgroupError> {
        Ok(())
    }

    fn separate_freezer(&self) -> bool {
        true
    }

    fn freeze_write(&self, frozen: bool) -> (&'static str, &'static str) {
        ("freezer.state", if frozen { "FROZEN" } else { "THAWED" })
    }

    fn is_frozen(&self, dir: &Path) -> bool {
        fs::read_to_string(dir.join("freezer.state")).is_ok_and(|s| s.trim() == "FROZEN")
    }

    fn kill_file(&self) -> Option<&'static str> {
        None
    }

    fn reset_peak(&self, dir: &Path) -> io::Result<()> {
        fs::write(dir.join("memory.max_usage_in_bytes"), "0")
    }
}

pub(super) fn probe(
    mounts: &[CgroupMount],
    membership: &[Membership],
    fs_root: &Path,
) -> Option<CgroupSupport> {
    let mut any = false;
    let mut controller = |name: &str| -> ControllerSupport {
        let Some(member) = membership
            .iter()
            .find(|m| m.controllers.iter().any(|c| c == name))
        else {
            return ControllerSupport::unusable(
                None,
                format!("no v1 {name} hierarchy in /proc/self/cgroup"),
            );
        };
        let Some(mount) = mounts
            .iter()
            .filter(|m| !m.v2 && m.controllers.iter().any(|c| c == name))
            .find(|m| group_dir(m, &member.path, fs_root).is_ok())
        else {
            return ControllerSupport::unusable(
                None,
                format!(
                    "v1 {name} hierarchy (our group {}) is not mounted here",
                    member.path
                ),
            );
        };
        any = true;
        match group_dir(mount, &member.path, fs_root) {
            Ok(dir) => match writable_dir(&dir) {
                Ok(()) => ControllerSupport::usable(dir),
                Err(reason) => ControllerSupport::unusable(Some(dir), reason),
            },
            Err(reason) => ControllerSupport::unusable(None, reason),
        }
    };
    let memory = controller("memory");
    let pids = controller("pids");
    let cpu = controller("cpu");
    let freezer = controller("freezer");
    if !any {
        return None;
    }
    Some(CgroupSupport::found(
        CgroupVersion::V1,
        [memory, pids, cpu, freezer],
    ))
}
