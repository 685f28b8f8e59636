//! Host facts: what this kernel and this process can enforce, probed once and cached.
//!
//! Kernel differences are runtime probes, not `cfg`s: landlock ABI, seccomp, cgroup
//! version and delegation, and the supervisor's identity. `tierbox doctor` prints these,
//! tier selection reads them, and the attestation records them.

use std::sync::OnceLock;

use serde::Serialize;

use crate::launch::sys;
use crate::linux::cgroup::{self, CgroupSupport};
use crate::linux::{landlock, seccomp};

/// What the host can enforce.
#[derive(Debug, Clone)]
pub struct HostFacts {
    /// `uname -r`.
    pub kernel: String,
    /// Landlock ABI version, `None` when landlock is unavailable or disabled.
    pub landlock_abi: Option<u32>,
    /// seccomp filters can be installed.
    pub seccomp: bool,
    /// Cgroup support for per-run memory/pids limits and tree kill.
    pub cgroup: CgroupSupport,
    /// The supervisor's effective uid.
    pub euid: u32,
    /// The supervisor's effective gid.
    pub egid: u32,
}

/// A serializable summary of [`HostFacts`] for `doctor --json` and attestations.
#[derive(Debug, Clone, Serialize)]
pub struct HostSummary {
    /// `uname -r`.
    pub kernel: String,
    /// Landlock ABI.
    pub landlock_abi: Option<u32>,
    /// seccomp usable.
    pub seccomp: bool,
    /// `"v1"`, `"v2"`, or `None`.
    pub cgroup_version: Option<String>,
    /// Why cgroups are unusable, when they are.
    pub cgroup_detail: String,
    /// The supervisor runs as root.
    pub root: bool,
}

impl HostFacts {
    /// Probes the host (uncached; prefer [`host_facts`]).
    pub fn probe() -> Self {
        let (euid, egid) = sys::current_ids();
        Self {
            kernel: sys::kernel_release(),
            landlock_abi: landlock::probe_abi(),
            seccomp: seccomp::probe_seccomp(),
            cgroup: cgroup::probe(),
            euid,
            egid,
        }
    }

    /// A serializable summary.
    pub fn summary(&self) -> HostSummary {
        HostSummary {
            kernel: self.kernel.clone(),
            landlock_abi: self.landlock_abi,
            seccomp: self.seccomp,
            cgroup_version: self.cgroup.usable_version().map(|v| format!("{v}")),
            cgroup_detail: self.cgroup.describe(),
            root: self.euid == 0,
        }
    }
}

/// The host facts, probed on first use and cached for the life of the process.
pub fn host_facts() -> &'static HostFacts {
    static FACTS: OnceLock<HostFacts> = OnceLock::new();
    FACTS.get_or_init(HostFacts::probe)
}
