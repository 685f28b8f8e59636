//! Cgroup probe: a run cannot move itself out of its cgroup (which would take it out of
//! the run's memory and process limits and out of the end-of-run kill).

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use crate::sys::io_errno_name;
use crate::{ProbeError, ProbeResult, Report};

/// A cgroup filesystem mount: where, which version, which controllers (v1 super options).
struct CgroupMount {
    root: String,
    mount_point: PathBuf,
    v2: bool,
    options: Vec<String>,
}

fn cgroup_mounts() -> Result<Vec<CgroupMount>, ProbeError> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| {
        ProbeError(format!(
            "cannot read /proc/self/mountinfo ({})",
            io_errno_name(&e)
        ))
    })?;
    let mut mounts = Vec::new();
    for line in text.lines() {
        // `ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS`
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let left: Vec<&str> = left.split_whitespace().collect();
        let right: Vec<&str> = right.split_whitespace().collect();
        let (Some(root), Some(mount_point), Some(fstype)) =
            (left.get(3), left.get(4), right.first())
        else {
            continue;
        };
        if *fstype != "cgroup" && *fstype != "cgroup2" {
            continue;
        }
        mounts.push(CgroupMount {
            root: (*root).to_owned(),
            mount_point: PathBuf::from(mount_point),
            v2: *fstype == "cgroup2",
            options: right
                .get(2)
                .map(|o| o.split(',').map(str::to_owned).collect())
                .unwrap_or_default(),
        });
    }
    Ok(mounts)
}

/// `cgroup-escape`: for every hierarchy the probe is in, `cgroup.procs` of its own group
/// and of the hierarchy's root cannot be opened for writing. Nothing is written: opening
/// is the capability (writing a pid there migrates a process).
pub fn cgroup_escape() -> ProbeResult {
    let mounts = cgroup_mounts()?;
    let membership = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| {
        ProbeError(format!(
            "cannot read /proc/self/cgroup ({})",
            io_errno_name(&e)
        ))
    })?;
    let mut targets: Vec<PathBuf> = Vec::new();
    for line in membership.lines() {
        // `ID:CONTROLLERS:PATH`; v2 is `0::PATH`.
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let mount = if controllers.is_empty() {
            mounts.iter().find(|m| m.v2)
        } else {
            mounts.iter().find(|m| {
                !m.v2
                    && controllers
                        .split(',')
                        .any(|c| m.options.iter().any(|o| o == c))
            })
        };
        let Some(mount) = mount else { continue };
        let relative = path
            .strip_prefix(mount.root.as_str())
            .unwrap_or(path)
            .trim_start_matches('/');
        for dir in [mount.mount_point.join(relative), mount.mount_point.clone()] {
            let procs = dir.join("cgroup.procs");
            if !targets.contains(&procs) && Path::new(&procs).exists() {
                targets.push(procs);
            }
        }
    }
    if targets.is_empty() {
        return Err(ProbeError(
            "no cgroup.procs file found for this process: nothing to test".to_owned(),
        ));
    }
    let mut opened = false;
    let text: Vec<String> = targets
        .iter()
        .map(|t| match OpenOptions::new().write(true).open(t) {
            Ok(_) => {
                opened = true;
                format!("{}: OPENED for writing", t.display())
            }
            Err(e) => format!("{}: {}", t.display(), io_errno_name(&e)),
        })
        .collect();
    let text = text.join("; ");
    Ok(if opened {
        Report::Broken(text)
    } else {
        Report::Holds(text)
    })
}
