//! cgroup v2: the unified hierarchy, its delegation rules and its kill switch.

use super::*;

/// The unified hierarchy.
pub(super) struct V2;

impl Hierarchy for V2 {
    /// `cgroup.threads` only works in threaded subtrees (module docs).
    fn attach_file(&self) -> &'static str {
        "cgroup.procs"
    }

    fn memory_peak_file(&self) -> &'static str {
        "memory.peak"
    }

    fn memory_events_file(&self) -> &'static str {
        "memory.events"
    }

    fn limit_writes(&self, limits: &CgroupLimits) -> Vec<LimitWrite> {
        let mut plan = vec![
            LimitWrite::required("memory", "memory.max", limits.memory_bytes.to_string()),
            LimitWrite::if_present("memory", "memory.swap.max", "0".into()),
            // An OOM kill takes the whole run, not one process of it.
            LimitWrite::required("memory", "memory.oom.group", "1".into()),
            LimitWrite::required("pids", "pids.max", limits.max_processes.to_string()),
        ];
        if let Some(quota) = limits.cpu_quota_us() {
            plan.push(LimitWrite::required(
                "cpu",
                "cpu.max",
                format!("{quota} {CPU_PERIOD_US}"),
            ));
        }
        plan
    }

    fn delegate(&self, base: &Path, wanted: &[&str]) -> Result<(), CgroupError> {
        ensure_delegation(base, wanted)
    }

    fn separate_freezer(&self) -> bool {
        false
    }

    fn freeze_write(&self, frozen: bool) -> (&'static str, &'static str) {
        ("cgroup.freeze", if frozen { "1" } else { "0" })
    }

    fn is_frozen(&self, dir: &Path) -> bool {
        fs::read_to_string(dir.join("cgroup.events"))
            .is_ok_and(|s| keyed_value(&s, "frozen") == Some(1))
    }

    /// `cgroup.kill` (Linux 5.14+).
    fn kill_file(&self) -> Option<&'static str> {
        Some("cgroup.kill")
    }

    /// `memory.peak` can only be reset per open file, so v2 groups are not reused.
    fn reset_peak(&self, _dir: &Path) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "memory.peak cannot be reset for every reader",
        ))
    }
}

/// A controller list file (`cgroup.controllers`, `cgroup.subtree_control`) as names; a
/// leading `+` is tolerated so fake trees can record what was written.
pub(super) fn controller_set(text: &str) -> BTreeSet<String> {
    text.split_whitespace()
        .map(|c| c.trim_start_matches('+').to_owned())
        .collect()
}

/// Whether a v2 directory is the hierarchy's real root (it has no `cgroup.type`).
pub(super) fn is_v2_root(dir: &Path) -> bool {
    !dir.join("cgroup.type").exists()
}

pub(super) fn probe(
    mounts: &[CgroupMount],
    membership: &[Membership],
    fs_root: &Path,
) -> Option<CgroupSupport> {
    let member = membership.iter().find(|m| m.controllers.is_empty())?;
    let mount = mounts
        .iter()
        .filter(|m| m.v2)
        .find(|m| group_dir(m, &member.path, fs_root).is_ok())?;
    let mut base = group_dir(mount, &member.path, fs_root).ok()?;
    if base.file_name().is_some_and(|n| n == SUPERVISOR_LEAF)
        && let Some(parent) = base.parent()
    {
        // We already moved ourselves into the leaf: run groups go next to it.
        base = parent.to_owned();
    }

    let available = fs::read_to_string(base.join("cgroup.controllers"))
        .map(|s| controller_set(&s))
        .unwrap_or_default();
    let enabled = fs::read_to_string(base.join("cgroup.subtree_control"))
        .map(|s| controller_set(&s))
        .unwrap_or_default();
    let base_ok = writable_dir(&base);
    let subtree_writable = rustix::fs::access(
        base.join("cgroup.subtree_control"),
        rustix::fs::Access::WRITE_OK,
    )
    .is_ok();
    let root = is_v2_root(&base);

    let controller = |name: &str| -> ControllerSupport {
        let reason = if !available.contains(name) {
            Some(format!(
                "{name} is not delegated to {} (cgroup.controllers: {})",
                base.display(),
                available.iter().cloned().collect::<Vec<_>>().join(" ")
            ))
        } else if let Err(reason) = &base_ok {
            Some(reason.clone())
        } else if enabled.contains(name) {
            None
        } else if root {
            Some(format!(
                "{name} is not enabled in the cgroup v2 root's subtree_control, and tierbox does not change the root"
            ))
        } else if !subtree_writable {
            Some(format!(
                "{} is not writable",
                base.join("cgroup.subtree_control").display()
            ))
        } else {
            None
        };
        match reason {
            None => ControllerSupport::usable(base.clone()),
            Some(reason) => ControllerSupport::unusable(Some(base.clone()), reason),
        }
    };
    let memory = controller("memory");
    let pids = controller("pids");
    let cpu = controller("cpu");
    let freezer = match &base_ok {
        Ok(()) => ControllerSupport::usable(base.clone()),
        Err(reason) => ControllerSupport::unusable(Some(base.clone()), reason.clone()),
    };
    Some(CgroupSupport::found(
        CgroupVersion::V2,
        [memory, pids, cpu, freezer],
    ))
}

/// cgroup v2: make `wanted` controllers available to children of `base`, moving the
/// supervisor into [`SUPERVISOR_LEAF`] first if it lives in `base` (module docs).
/// Idempotent; does nothing when they are already enabled.
pub(super) fn ensure_delegation(base: &Path, wanted: &[&str]) -> Result<(), CgroupError> {
    let subtree_path = base.join("cgroup.subtree_control");
    let enabled = controller_set(&read_file(&subtree_path)?);
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|c| !enabled.contains(*c))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_v2_root(base) {
        let procs_path = base.join("cgroup.procs");
        let procs = read_pids(&procs_path).map_err(|source| CgroupError::Read {
            path: procs_path.clone(),
            source,
        })?;
        let me = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
        let others: Vec<i32> = procs.iter().copied().filter(|&p| p != me).collect();
        if !others.is_empty() {
            return Err(CgroupError::V2InternalProcesses {
                path: base.to_owned(),
                pids: others,
            });
        }
        if procs.contains(&me) {
            let leaf = base.join(SUPERVISOR_LEAF);
            match fs::create_dir(&leaf) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(source) => return Err(CgroupError::Mkdir { path: leaf, source }),
            }
            // Writing our pid moves the whole process (every thread) into the leaf.
            write_file(&leaf.join("cgroup.procs"), &me.to_string())?;
        }
    }
    let value = missing
        .iter()
        .map(|c| format!("+{c}"))
        .collect::<Vec<_>>()
        .join(" ");
    write_file(&subtree_path, &value)
}
