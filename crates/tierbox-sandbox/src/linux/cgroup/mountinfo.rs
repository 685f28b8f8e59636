//! Where this process's cgroups are: `/proc/self/mountinfo` and `/proc/self/cgroup`
//! parsed, and our group's directory in each hierarchy.

use std::path::{Path, PathBuf};

use crate::linux::mount_table::unescape;

/// One cgroup mount from mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CgroupMount {
    /// `cgroup` (v1) or `cgroup2`.
    pub(super) v2: bool,
    /// v1: controller names from the super options (`memory`, `cpu`, `cpuacct`, ...).
    pub(super) controllers: Vec<String>,
    /// The mount's root within the hierarchy.
    pub(super) root: String,
    /// Where it is mounted.
    pub(super) mount_point: String,
}

/// One line of `/proc/self/cgroup`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Membership {
    /// Controllers of the hierarchy (empty for v2's `0::`).
    pub(super) controllers: Vec<String>,
    /// Our path in it.
    pub(super) path: String,
}

pub(super) fn parse_mountinfo(text: &str) -> Vec<CgroupMount> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let sep = fields.iter().position(|f| *f == "-")?;
            let fstype = *fields.get(sep + 1)?;
            let v2 = match fstype {
                "cgroup" => false,
                "cgroup2" => true,
                _ => return None,
            };
            let super_opts = fields.get(sep + 3).copied().unwrap_or("");
            Some(CgroupMount {
                v2,
                controllers: super_opts.split(',').map(str::to_owned).collect(),
                root: unescape(fields.get(3)?),
                mount_point: unescape(fields.get(4)?),
            })
        })
        .collect()
}

pub(super) fn parse_proc_cgroup(text: &str) -> Vec<Membership> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let _id = parts.next()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            Some(Membership {
                controllers: controllers
                    .split(',')
                    .filter(|c| !c.is_empty())
                    .map(str::to_owned)
                    .collect(),
                path: path.to_owned(),
            })
        })
        .collect()
}

/// Our directory in a hierarchy: `fs_root / mount_point / (path relative to mount root)`,
/// or why it is not visible.
pub(super) fn group_dir(
    mount: &CgroupMount,
    path: &str,
    fs_root: &Path,
) -> Result<PathBuf, String> {
    let root = mount.root.trim_end_matches('/');
    let rel = path
        .strip_prefix(root)
        .filter(|r| r.is_empty() || r.starts_with('/'));
    let Some(rel) = rel else {
        return Err(format!(
            "our cgroup {path} is outside the mount at {} (root {})",
            mount.mount_point, mount.root
        ));
    };
    let mut dir = fs_root.join(mount.mount_point.trim_start_matches('/'));
    for part in rel.split('/').filter(|p| !p.is_empty()) {
        if part == ".." {
            return Err(format!("our cgroup path {path} contains '..'"));
        }
        dir.push(part);
    }
    Ok(dir)
}

pub(super) fn writable_dir(dir: &Path) -> Result<(), String> {
    if !dir.is_dir() {
        return Err(format!("{} does not exist", dir.display()));
    }
    rustix::fs::access(dir, rustix::fs::Access::WRITE_OK)
        .map_err(|e| format!("{} is not writable: {e}", dir.display()))
}
