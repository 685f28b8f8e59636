//! The enforcement report of a native Tier C run: what each layer applied, and what is missing.

use super::*;

pub(super) fn enforcement_report(
    plan: &Plan,
    (identity, idmapped): (SandboxIdentity, usize),
    (seccomp, handed_off): (Option<&SeccompProgram>, bool),
    landlock: Option<&PreparedLandlock>,
    cgroup: bool,
    mplan: &MountPlan,
    netns_pooled: bool,
) -> Enforcement {
    let limits = &plan.limits;
    let mut missing = Vec::new();
    let landlock = match landlock {
        Some(l) => LayerReport::applied(match &l.status {
            LandlockStatus::FullyEnforced => format!(
                "abi {}, fully enforced: system roots and read-only grants readable, workspace and writable grants writable, the sandbox's own /tmp, /dev/shm, /dev/pts writable, /proc readable, / listable",
                l.abi
            ),
            LandlockStatus::PartiallyEnforced { missing } => format!(
                "abi {}, partially enforced (missing: {})",
                l.abi,
                missing.join(", ")
            ),
        }),
        None => {
            missing.push(Layer::Landlock);
            LayerReport::missing(
                "landlock unavailable on this host (the mount namespace is the filesystem boundary)",
            )
        }
    };
    let cgroup = if cgroup {
        LayerReport::applied(format!(
            "run cgroup joined by pid 1: {}",
            crate::launch::cgroup_limits(plan).describe()
        ))
    } else {
        missing.push(Layer::Cgroup);
        LayerReport::missing("no usable cgroup; the pid namespace is the kill boundary")
    };
    let (euid, egid) = identity.ids();
    Enforcement {
        tier: Some(Tier::C),
        backend: BACKEND,
        kernel: crate::launch::sys::kernel_release(),
        uid: Some(euid),
        gid: Some(egid),
        capabilities: "none: bounding, ambient, effective, permitted and inheritable sets cleared in the user namespace; securebits NOROOT locked; no capability in the host namespace at any time".to_owned(),
        no_new_privs: true,
        landlock,
        seccomp: match seccomp {
            Some(p) => LayerReport::applied(format!(
                "deny-list filter, {} instructions, nested namespaces denied{}",
                p.len(),
                if handed_off {
                    "; the argument rules' refusals answered and recorded by the supervisor"
                } else {
                    ""
                }
            )),
            None => LayerReport::missing("disabled by NativeOptions::seccomp = false"),
        },
        cgroup,
        namespaces: vec![
            match identity {
                SandboxIdentity::Supervisor { .. } => format!(
                    "user (uid {SANDBOX_UID} -> {euid}, gid {SANDBOX_GID} -> {egid}, the supervisor's own ids; setgroups deny)"
                ),
                SandboxIdentity::Host { .. } => format!(
                    "user (uid {SANDBOX_UID} -> host uid {euid}, gid {SANDBOX_GID} -> host gid {egid}, no supplementary groups; {idmapped} writable bind(s) idmapped so host ownership stays; pid 1's setup as ns uid 0 until the program runs)"
                ),
            },
            "pid (pid 1 is tierbox-init, the reaper)".to_owned(),
            match plan.workspace_mode {
                tierbox_policy::WorkspaceMode::Direct => "mount (tmpfs root, pivot_root)".to_owned(),
                tierbox_policy::WorkspaceMode::Overlay => format!(
                    "mount (tmpfs root, pivot_root; the workspace through an overlay: the host's read-only below, the run's writes in an upper tmpfs of {} bytes kept for review)",
                    plan.limits.disk_bytes
                ),
            },
            format!(
                "net (loopback only{}{})",
                if netns_pooled {
                    "; made for this run ahead of time, owned by the supervisor's user namespace"
                } else {
                    ""
                },
                if plan.network.needs_proxy() {
                    format!("; the egress proxy listens on 127.0.0.1:{SANDBOX_PROXY_PORT}")
                } else {
                    String::new()
                }
            ),
            "ipc".to_owned(),
            "uts".to_owned(),
            "cgroup".to_owned(),
        ],
        rlimits: crate::launch::rlimit_report(
            limits,
            if euid == 0 {
                " (not enforced by the kernel: the program's real uid is host uid 0)"
            } else {
                ""
            },
        ),
        network: "own network namespace with only lo (up): no route off the host".to_owned(),
        protected_paths: if plan.filesystem.protected.is_empty() {
            LayerReport::applied("none requested")
        } else {
            LayerReport::applied(format!(
                "{} protected path(s) bound read-only or covered; {} placeholder(s) created in the workspace",
                plan.filesystem.protected.len(),
                mplan.host_placeholders.len()
            ))
        },
        disk: LayerReport::applied(match plan.workspace_mode {
            tierbox_policy::WorkspaceMode::Direct => format!(
                "/tmp: a tmpfs of {} bytes; the workspace is bounded per file only",
                crate::linux::mounts::tmp_size_bytes(plan)
            ),
            tierbox_policy::WorkspaceMode::Overlay => format!(
                "/tmp: a tmpfs of {} bytes; the workspace's changes: an upper tmpfs of {} bytes",
                crate::linux::mounts::tmp_size_bytes(plan),
                plan.limits.disk_bytes
            ),
        }),
        missing_layers: missing,
        passed_over: None,
        grants: Vec::new(),
        denial_reports: std::collections::BTreeMap::new(),
    }
}
