//! Cgroups: one group per run, for memory, process-count and CPU limits, usage figures,
//! and killing the whole tree.
//!
//! Invariants kept here:
//!
//! - **Run groups live under our own cgroup, per controller, never elsewhere.** The
//!   supervisor's cgroup is read from `/proc/self/cgroup` and mapped through
//!   `/proc/self/mountinfo`; a run group is `<our group>/<name>`. Nothing is written to
//!   our own group except, on cgroup v2, `cgroup.subtree_control` (see below).
//! - **The child attaches itself before exec.** [`RunCgroup::procs_fds`] are the
//!   attach files of every group, opened `O_WRONLY | O_CLOEXEC` in the supervisor; the
//!   child writes `"0"` to each with `super::sys::write_all_raw`, so no process of the
//!   run ever runs outside its limits. On v1 the attach file is `tasks`, not
//!   `cgroup.procs`: moving a whole thread group takes the global
//!   `cgroup_threadgroup_rwsem` for writing, which waits for an RCU grace period
//!   (measured here: 5–16 ms per write), while a single thread moving *itself* (`tasks`,
//!   pid 0) skips that lock (~30 µs). The child is single-threaded when it attaches, so
//!   moving its only thread moves the process. On v2, `cgroup.threads` only works in
//!   threaded subtrees, so `cgroup.procs` is used.
//! - **Everything created is removed**: [`RunCgroup::remove`], or best effort on drop; a
//!   partially created group is removed when creation fails.
//! - **Figures are read from files kept open.** The usage files a run reads
//!   (`pids.current`, the memory peak, the OOM and pids event counters) are opened once
//!   per group and read with `pread` at offset 0, which makes cgroupfs generate the
//!   content afresh; a reused group costs no path walk or open per figure.
//! - **All paths are injectable** ([`CgroupSupport::from_roots`]), so both versions are
//!   tested against fake trees; probing reads only.
//!
//! Version choice: cgroup v2 when our v2 group has `memory` and `pids` available to
//! delegate; otherwise v1 (this machine: memory, pids, cpu, freezer on separate v1
//! hierarchies, an empty v2 at `/sys/fs/cgroup/unified`).
//!
//! cgroup v2 and the "no internal processes" rule: a non-root v2 group that contains
//! processes cannot enable controllers for its children. When our group contains only
//! our own process, the first [`RunCgroup::create`] moves the supervisor into a leaf
//! [`SUPERVISOR_LEAF`] and enables the controllers in our group's
//! `cgroup.subtree_control`; run groups are then siblings of that leaf. If other
//! processes share our group (e.g. a shell that started us) we do not move them, and
//! creation fails with [`CgroupError::V2InternalProcesses`]: run the supervisor in its
//! own delegated group (systemd `Delegate=yes`) instead.
//!
//! Not covered: I/O bandwidth, network, and (v1) kernel memory beyond what the memory
//! controller charges.
//!
//! Layout: the run group and what both hierarchies share are here; what differs between
//! them is behind the `Hierarchy` trait, implemented in `v1.rs` and `v2.rs` (file names, the
//! limit writes, delegation, the freezer, the kill switch), and probing the host reads
//! `/proc/self/mountinfo` and `/proc/self/cgroup` through `mountinfo.rs`.

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

mod mountinfo;
mod v1;
mod v2;

use mountinfo::{
    CgroupMount, Membership, group_dir, parse_mountinfo, parse_proc_cgroup, writable_dir,
};

/// Name of the leaf group the supervisor moves itself into on cgroup v2 (see the module
/// docs); never a valid run-group name.
pub const SUPERVISOR_LEAF: &str = "tierbox-supervisor";

/// The v1 file the child writes `"0"` to in order to join a group: `tasks` moves only the
/// calling thread and skips the global threadgroup lock (see the module docs).
pub const V1_ATTACH_FILE: &str = "tasks";

/// Longest accepted run-group name, in bytes (a single path component; `NAME_MAX` is 255).
pub const MAX_NAME_BYTES: usize = 200;

/// CFS period set with a CPU quota, in microseconds (100 ms, the kernel default). The
/// quota is `period × percent / 100`, so 50 % allows 50 ms of CPU time per 100 ms.
pub const CPU_PERIOD_US: u64 = 100_000;

/// Smallest CFS quota the kernel accepts, in microseconds (1 ms).
pub const CPU_QUOTA_MIN_US: u64 = 1_000;

/// How many freeze → SIGKILL → thaw rounds [`RunCgroup::kill_all`] makes before giving
/// up (each round kills every listed process; more rounds only cover races with
/// processes that were mid-fork or mid-migration).
pub const KILL_MAX_ROUNDS: u32 = 20;

/// Pause between kill rounds, for killed processes to finish exiting.
pub const KILL_ROUND_PAUSE: Duration = Duration::from_millis(2);

/// Longest wait for a freeze to complete before killing anyway (SIGKILL is delivered
/// once thawed).
pub const FREEZE_WAIT_MAX: Duration = Duration::from_millis(50);

/// Longest wait for `cgroup.kill` (v2) to empty the group.
pub const KILL_DRAIN_MAX: Duration = Duration::from_millis(500);

/// How many times `rmdir` is retried while the last tasks leave (`EBUSY`).
pub const REMOVE_RETRIES: u32 = 50;

/// Pause between `rmdir` retries (so removal waits at most 50 × 2 ms = 100 ms).
pub const REMOVE_RETRY_PAUSE: Duration = Duration::from_millis(2);

/// Which cgroup hierarchy the run groups use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// Legacy per-controller hierarchies.
    V1,
    /// The unified hierarchy.
    V2,
}

impl CgroupVersion {
    /// What this hierarchy does its own way.
    fn hierarchy(self) -> &'static dyn Hierarchy {
        match self {
            Self::V1 => &v1::V1,
            Self::V2 => &v2::V2,
        }
    }
}

/// What differs between the two hierarchies for a run group; everything else about a
/// [`RunCgroup`] is shared.
trait Hierarchy: Sync {
    /// The file a process writes `0` to, to join the group (module docs).
    fn attach_file(&self) -> &'static str;
    /// The peak-memory figure.
    fn memory_peak_file(&self) -> &'static str;
    /// The file that counts OOM kills (`oom_kill`).
    fn memory_events_file(&self) -> &'static str;
    /// The control-file writes that apply `limits`, in order.
    fn limit_writes(&self, limits: &CgroupLimits) -> Vec<LimitWrite>;
    /// Makes the `wanted` controllers available to new groups under `base`.
    fn delegate(&self, base: &Path, wanted: &[&str]) -> Result<(), CgroupError>;
    /// Whether the freezer is a hierarchy of its own, in which the run needs a group
    /// too (v1); otherwise every group has one built in (v2).
    fn separate_freezer(&self) -> bool;
    /// The file and value that freeze (`true`) or thaw the group.
    fn freeze_write(&self, frozen: bool) -> (&'static str, &'static str);
    /// Whether the group in `dir` is frozen.
    fn is_frozen(&self, dir: &Path) -> bool;
    /// The file that kills every process of the group at once, when the kernel has one.
    fn kill_file(&self) -> Option<&'static str>;
    /// Resets the peak-memory figure of the group whose memory directory is `dir`.
    fn reset_peak(&self, dir: &Path) -> io::Result<()>;
}

impl std::fmt::Display for CgroupVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::V1 => "v1",
            Self::V2 => "v2",
        })
    }
}

/// What was found for one controller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControllerSupport {
    /// Our own cgroup's directory for this controller (v2: the delegated base group).
    pub dir: Option<PathBuf>,
    /// Whether run groups can use this controller.
    pub usable: bool,
    /// Why not, when not usable.
    pub reason: Option<String>,
}

impl ControllerSupport {
    fn usable(dir: PathBuf) -> Self {
        Self {
            dir: Some(dir),
            usable: true,
            reason: None,
        }
    }

    fn unusable(dir: Option<PathBuf>, reason: String) -> Self {
        Self {
            dir,
            usable: false,
            reason: Some(reason),
        }
    }
}

/// What this host offers for per-run cgroups (the result of [`probe`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupSupport {
    /// The hierarchy chosen; `None` when neither is usable.
    pub version: Option<CgroupVersion>,
    /// The memory controller.
    pub memory: ControllerSupport,
    /// The pids controller.
    pub pids: ControllerSupport,
    /// The cpu controller (CFS quota).
    pub cpu: ControllerSupport,
    /// The freezer (v1 controller; built into every v2 group).
    pub freezer: ControllerSupport,
    /// Why per-run cgroups are unavailable, or which part is missing.
    pub reason: Option<String>,
}

impl CgroupSupport {
    /// Whether run groups with memory and process limits can be created.
    pub fn is_usable(&self) -> bool {
        self.version.is_some() && self.memory.usable && self.pids.usable
    }

    /// The hierarchy run groups will use, when they can be created at all.
    pub fn usable_version(&self) -> Option<CgroupVersion> {
        self.version.filter(|_| self.is_usable())
    }

    /// One line for `doctor` and enforcement reports: the version and each controller's
    /// directory, or why it is unusable.
    pub fn describe(&self) -> String {
        let Some(version) = self.version else {
            return format!(
                "no cgroups: {}",
                self.reason.as_deref().unwrap_or("no hierarchy found")
            );
        };
        let controllers = [
            ("memory", &self.memory),
            ("pids", &self.pids),
            ("cpu", &self.cpu),
            ("freezer", &self.freezer),
        ]
        .iter()
        .map(|(name, c)| match (&c.dir, c.usable) {
            (Some(dir), true) => format!("{name} {}", dir.display()),
            _ => format!(
                "{name} unusable ({})",
                c.reason.as_deref().unwrap_or("not found")
            ),
        })
        .collect::<Vec<_>>()
        .join(", ");
        format!("cgroup {version}: {controllers}")
    }

    /// What was found on `version`: the memory, pids, cpu and freezer controllers, and
    /// why run groups cannot be made when memory or pids is unusable.
    fn found(version: CgroupVersion, [memory, pids, cpu, freezer]: [ControllerSupport; 4]) -> Self {
        let reason = [("memory", &memory), ("pids", &pids)]
            .iter()
            .filter(|(_, c)| !c.usable)
            .map(|(n, c)| format!("{n}: {}", c.reason.as_deref().unwrap_or("unusable")))
            .reduce(|a, b| format!("{a}; {b}"));
        Self {
            version: Some(version),
            memory,
            pids,
            cpu,
            freezer,
            reason,
        }
    }

    /// Probe from explicit inputs: the text of `/proc/self/mountinfo` and of
    /// `/proc/self/cgroup`, and the directory the mount points are relative to (`/` on a
    /// real host, a tempdir holding a fake `sys/fs/cgroup/...` tree in tests). Reads only.
    pub fn from_roots(mountinfo: &str, proc_self_cgroup: &str, fs_root: &Path) -> Self {
        let mounts = parse_mountinfo(mountinfo);
        let membership = parse_proc_cgroup(proc_self_cgroup);

        let v2 = v2::probe(&mounts, &membership, fs_root);
        if let Some(v2) = &v2
            && v2.memory.usable
            && v2.pids.usable
        {
            return v2.clone();
        }
        let v1 = v1::probe(&mounts, &membership, fs_root);
        if let Some(v1) = v1 {
            return v1;
        }
        if let Some(v2) = v2 {
            return v2;
        }
        Self {
            version: None,
            memory: ControllerSupport::default(),
            pids: ControllerSupport::default(),
            cpu: ControllerSupport::default(),
            freezer: ControllerSupport::default(),
            reason: Some("no cgroup v1 controller or cgroup2 mount found for this process".into()),
        }
    }
}

/// Probe this host: reads `/proc/self/mountinfo` and `/proc/self/cgroup`.
pub fn probe() -> CgroupSupport {
    let mountinfo = crate::linux::mount_table::current().unwrap_or_default();
    let cgroup = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    CgroupSupport::from_roots(&mountinfo, &cgroup, Path::new("/"))
}

/// [`probe`], once per process.
#[cfg(test)]
pub fn probe_cached() -> &'static CgroupSupport {
    static SUPPORT: OnceLock<CgroupSupport> = OnceLock::new();
    SUPPORT.get_or_init(probe)
}

/// Limits applied to a run group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupLimits {
    /// Memory limit in bytes (v1 `memory.limit_in_bytes`, and `memsw` so no swap; v2
    /// `memory.max` with `memory.swap.max = 0`). Past it the kernel reclaims, then
    /// OOM-kills inside the group (v2: the whole group, `memory.oom.group`). Must be > 0.
    pub memory_bytes: u64,
    /// Maximum number of tasks (processes and threads) in the group (`pids.max`); fork
    /// and clone fail with `EAGAIN` past it. Unlike `RLIMIT_NPROC` it holds for uid 0 and
    /// counts only this run. Must be > 0.
    pub max_processes: u64,
    /// CPU bandwidth in percent of one CPU (200 = two CPUs), enforced by the CFS quota
    /// over [`CPU_PERIOD_US`]; `None` = unlimited. Must be > 0.
    pub cpu_quota_percent: Option<u32>,
}

impl CgroupLimits {
    /// The CFS quota, in microseconds per [`CPU_PERIOD_US`], that `cpu_quota_percent`
    /// becomes (at least [`CPU_QUOTA_MIN_US`]).
    pub fn cpu_quota_us(&self) -> Option<u64> {
        self.cpu_quota_percent
            .map(|p| (CPU_PERIOD_US.saturating_mul(u64::from(p)) / 100).max(CPU_QUOTA_MIN_US))
    }

    /// The limits in words, for enforcement reports.
    ///
    /// ```
    /// use tierbox_sandbox::linux::cgroup::CgroupLimits;
    /// let limits = CgroupLimits { memory_bytes: 1 << 30, max_processes: 64, cpu_quota_percent: Some(100) };
    /// assert_eq!(
    ///     limits.describe(),
    ///     "memory 1073741824 bytes, pids 64, cpu 100% of one CPU (CFS quota 100000 us per 100000 us)"
    /// );
    /// ```
    pub fn describe(&self) -> String {
        let mut text = format!(
            "memory {} bytes, pids {}",
            self.memory_bytes, self.max_processes
        );
        if let (Some(percent), Some(quota)) = (self.cpu_quota_percent, self.cpu_quota_us()) {
            text.push_str(&format!(
                ", cpu {percent}% of one CPU (CFS quota {quota} us per {CPU_PERIOD_US} us)"
            ));
        }
        text
    }
}

/// Usage figures of a run group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupStats {
    /// Peak memory use in bytes (v1 `memory.max_usage_in_bytes`, v2 `memory.peak`, 5.19+).
    pub memory_peak_bytes: Option<u64>,
    /// Processes killed by the OOM killer inside the group.
    pub oom_kills: u64,
    /// How many times a fork failed because `pids.max` was reached.
    pub pids_limit_hit: u64,
}

/// Why a run group could not be created or used.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// No usable hierarchy.
    #[error("no usable cgroup hierarchy: {reason}")]
    Unavailable {
        /// The probe's reason.
        reason: String,
    },
    /// A required controller is not usable.
    #[error("cgroup controller {controller} is not usable: {reason}")]
    ControllerUnavailable {
        /// `memory`, `pids` or `cpu`.
        controller: &'static str,
        /// The probe's reason.
        reason: String,
    },
    /// The run-group name is not a single safe path component.
    #[error("invalid cgroup name {name:?}: {why}")]
    InvalidName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A limit is out of range.
    #[error("invalid cgroup limit {limit} = {value}: must be greater than 0")]
    InvalidLimit {
        /// Which limit.
        limit: &'static str,
        /// The value given.
        value: u64,
    },
    /// `mkdir` of a group failed (`EEXIST`: a stale group of the same name).
    #[error("mkdir({}) failed: {source}", path.display())]
    Mkdir {
        /// The group directory.
        path: PathBuf,
        /// The system error.
        source: io::Error,
    },
    /// Writing a control file failed.
    #[error("write({}, {value:?}) failed: {source}", path.display())]
    Write {
        /// The control file.
        path: PathBuf,
        /// What was written.
        value: String,
        /// The system error.
        source: io::Error,
    },
    /// Reading a control file failed.
    #[error("read({}) failed: {source}", path.display())]
    Read {
        /// The control file.
        path: PathBuf,
        /// The system error.
        source: io::Error,
    },
    /// Opening a `cgroup.procs` file for the child failed.
    #[error("open({}, O_WRONLY | O_CLOEXEC) failed: {source}", path.display())]
    OpenProcs {
        /// The `cgroup.procs` file.
        path: PathBuf,
        /// The system error.
        source: io::Error,
    },
    /// cgroup v2: our group holds other processes, so controllers cannot be enabled for
    /// its children (the "no internal processes" rule) and we will not move them.
    #[error(
        "cgroup v2 group {} holds other processes {pids:?}: cannot enable controllers for run groups (run the supervisor in its own delegated cgroup)", path.display()
    )]
    V2InternalProcesses {
        /// Our group.
        path: PathBuf,
        /// The other processes in it.
        pids: Vec<i32>,
    },
}

/// One control-file write of the pure limit plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitWrite {
    /// The controller whose directory holds the file (`memory`, `pids`, `cpu`).
    pub controller: &'static str,
    /// The control file.
    pub file: &'static str,
    /// The value written.
    pub value: String,
    /// Written only when the file exists (e.g. `memory.memsw.limit_in_bytes` needs swap
    /// accounting); required writes fail creation when they fail.
    pub only_if_present: bool,
}

impl LimitWrite {
    /// A write that fails creation when it fails.
    fn required(controller: &'static str, file: &'static str, value: String) -> Self {
        Self {
            controller,
            file,
            value,
            only_if_present: false,
        }
    }

    /// A write made only when the file exists.
    fn if_present(controller: &'static str, file: &'static str, value: String) -> Self {
        Self {
            only_if_present: true,
            ..Self::required(controller, file, value)
        }
    }
}

/// The control-file writes that apply `limits` on `version`, in order. Pure.
#[cfg(test)]
pub fn limit_plan(version: CgroupVersion, limits: &CgroupLimits) -> Vec<LimitWrite> {
    version.hierarchy().limit_writes(limits)
}

/// A per-run cgroup (one directory per v1 controller, or one v2 directory).
#[derive(Debug)]
pub struct RunCgroup {
    version: CgroupVersion,
    /// Created directories, in creation order (removed in reverse), deduplicated.
    dirs: Vec<PathBuf>,
    memory_dir: PathBuf,
    pids_dir: PathBuf,
    cpu_dir: Option<PathBuf>,
    /// v1 freezer group, when the freezer is usable (v2: the group itself).
    freezer_dir: Option<PathBuf>,
    procs: Vec<OwnedFd>,
    procs_raw: Vec<RawFd>,
    /// `pids.current`.
    pids_current: ControlFile,
    /// v1 `memory.max_usage_in_bytes`, v2 `memory.peak`.
    memory_peak: ControlFile,
    /// v1 `memory.oom_control`, v2 `memory.events` (both carry `oom_kill`).
    memory_events: ControlFile,
    /// `pids.events` (`max`).
    pids_events: ControlFile,
}

/// Bytes read at most from one control file kept open (module docs): the files read this
/// way hold one number or a few keyed lines, so anything longer is not one of them.
pub const CONTROL_FILE_MAX_BYTES: usize = 4096;

/// A control file opened on first use and kept open while the group lives; read at
/// offset 0. A failed open is not remembered (the next use tries again), so a
/// missing file reads as `None` each time, as a path read would.
#[derive(Debug)]
struct ControlFile {
    path: PathBuf,
    file: OnceLock<fs::File>,
}

impl ControlFile {
    fn new(path: PathBuf) -> Self {
        Self {
            path,
            file: OnceLock::new(),
        }
    }

    fn file(&self) -> Option<&fs::File> {
        if let Some(f) = self.file.get() {
            return Some(f);
        }
        let opened = fs::File::open(&self.path).ok()?;
        let _ = self.file.set(opened);
        self.file.get()
    }

    /// The whole content (up to [`CONTROL_FILE_MAX_BYTES`]), or `None` when the file
    /// cannot be opened or read.
    fn read(&self) -> Option<String> {
        use std::os::unix::fs::FileExt;
        let file = self.file()?;
        let mut out = Vec::new();
        let mut buf = [0u8; 512];
        while out.len() < CONTROL_FILE_MAX_BYTES {
            let n = file.read_at(&mut buf, out.len() as u64).ok()?;
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
            if n < buf.len() {
                // A control file is a seq_file: a read fills the buffer as far as the
                // content goes, so a short one reached the end (no second read for 0).
                break;
            }
        }
        String::from_utf8(out).ok()
    }
}

impl RunCgroup {
    /// Create the run group `name` under our own cgroup and apply `limits`.
    ///
    /// `name` must be unique among live runs (e.g. include the supervisor pid and a run
    /// counter): an existing group of that name is an error, never shared. On cgroup v2
    /// the first call may move the supervisor into [`SUPERVISOR_LEAF`] (module docs).
    pub fn create(
        support: &CgroupSupport,
        name: &str,
        limits: &CgroupLimits,
    ) -> Result<Self, CgroupError> {
        validate_name(name)?;
        validate_limits(limits)?;
        let Some(version) = support.version else {
            return Err(CgroupError::Unavailable {
                reason: support
                    .reason
                    .clone()
                    .unwrap_or_else(|| "no cgroup hierarchy".into()),
            });
        };
        let memory = required(&support.memory, "memory")?;
        let pids = required(&support.pids, "pids")?;
        let cpu = match limits.cpu_quota_percent {
            Some(_) => Some(required(&support.cpu, "cpu")?),
            None => None,
        };

        let hierarchy = version.hierarchy();
        let mut wanted = vec!["memory", "pids"];
        if cpu.is_some() {
            wanted.push("cpu");
        }
        hierarchy.delegate(memory, &wanted)?;

        let (memory_dir, pids_dir) = (memory.join(name), pids.join(name));
        let mut run = Self {
            version,
            dirs: Vec::new(),
            cpu_dir: cpu.map(|c| c.join(name)),
            freezer_dir: None,
            procs: Vec::new(),
            procs_raw: Vec::new(),
            pids_current: ControlFile::new(pids_dir.join("pids.current")),
            memory_peak: ControlFile::new(memory_dir.join(hierarchy.memory_peak_file())),
            memory_events: ControlFile::new(memory_dir.join(hierarchy.memory_events_file())),
            pids_events: ControlFile::new(pids_dir.join("pids.events")),
            memory_dir,
            pids_dir,
        };
        // On any error below, dropping `run` removes what was created.
        run.mkdir(&run.memory_dir.clone())?;
        run.mkdir(&run.pids_dir.clone())?;
        if let Some(dir) = run.cpu_dir.clone() {
            run.mkdir(&dir)?;
        }
        if !hierarchy.separate_freezer() {
            run.freezer_dir = Some(run.memory_dir.clone());
        } else if let (true, Some(dir)) = (support.freezer.usable, &support.freezer.dir) {
            let dir = dir.join(name);
            run.mkdir(&dir)?;
            run.freezer_dir = Some(dir);
        }

        for write in hierarchy.limit_writes(limits) {
            let dir = match write.controller {
                "memory" => &run.memory_dir,
                "pids" => &run.pids_dir,
                _ => match &run.cpu_dir {
                    Some(dir) => dir,
                    None => continue,
                },
            };
            let path = dir.join(write.file);
            if write.only_if_present && !path.exists() {
                continue;
            }
            write_file(&path, &write.value)?;
        }

        let attach_file = hierarchy.attach_file();
        for dir in run.dirs.clone() {
            let path = dir.join(attach_file);
            // `create` only matters in fake trees; cgroupfs always has the attach file.
            let file = fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(|source| CgroupError::OpenProcs { path, source })?;
            let fd = OwnedFd::from(file);
            run.procs_raw.push(fd.as_raw_fd());
            run.procs.push(fd);
        }
        Ok(run)
    }

    fn mkdir(&mut self, dir: &Path) -> Result<(), CgroupError> {
        if self.dirs.iter().any(|d| d == dir) {
            return Ok(()); // co-mounted v1 controllers, or v2's single group
        }
        fs::create_dir(dir).map_err(|source| CgroupError::Mkdir {
            path: dir.to_owned(),
            source,
        })?;
        DIRS_LEFT.fetch_add(1, Ordering::SeqCst);
        self.dirs.push(dir.to_owned());
        Ok(())
    }

    /// The hierarchy this group lives in.
    pub fn version(&self) -> CgroupVersion {
        self.version
    }

    /// The group's directories (v1: one per controller; v2: one).
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// `cgroup.procs` of every group, open `O_WRONLY | O_CLOEXEC`: the child writes `"0"`
    /// to each (with `super::sys::write_all_raw`) to join the run before exec. Valid
    /// while `self` lives.
    pub fn procs_fds(&self) -> &[RawFd] {
        &self.procs_raw
    }

    /// Every process currently in the group (union over controllers, sorted).
    pub fn pids(&self) -> Vec<i32> {
        let mut all = BTreeSet::new();
        for dir in &self.dirs {
            all.extend(read_pids(&dir.join("cgroup.procs")).unwrap_or_default());
        }
        all.into_iter().collect()
    }

    /// Tasks the pids controller still charges to the group (`pids.current`): unlike
    /// [`Self::pids`], it counts processes that have exited but are not yet reaped, which
    /// still hold a place under `pids.max`. `None` when the file cannot be read.
    pub fn charged_pids(&self) -> Option<u64> {
        self.pids_current.read()?.trim().parse().ok()
    }

    /// Whether no process is left in the group. One read of `pids.current` when it says
    /// zero: that count includes exited but unreaped tasks, and a run's processes join
    /// every controller's group together (before they can fork), so no controller holds
    /// one either. Otherwise (no pids controller, or zombies the kernel still charges)
    /// the `cgroup.procs` of every controller are read, as [`Self::pids`].
    pub fn is_empty(&self) -> bool {
        self.charged_pids() == Some(0) || self.pids().is_empty()
    }

    /// Kill every process in the group and wait (bounded) until it is empty.
    ///
    /// v2 with `cgroup.kill` (5.14+): write `1` and wait up to [`KILL_DRAIN_MAX`].
    /// Otherwise: up to [`KILL_MAX_ROUNDS`] rounds of freeze (so nothing forks while we
    /// list), SIGKILL every listed process, thaw (frozen tasks die only once thawed).
    /// Blocks the calling thread for at most a few hundred milliseconds.
    pub fn kill_all(&self) -> io::Result<()> {
        if let Some(file) = self.version.hierarchy().kill_file() {
            let kill = self.memory_dir.join(file);
            if kill.exists() {
                write_plain(&kill, "1")?;
                let deadline = Instant::now() + KILL_DRAIN_MAX;
                while !self.is_empty() && Instant::now() < deadline {
                    std::thread::sleep(KILL_ROUND_PAUSE);
                }
                if self.is_empty() {
                    return Ok(());
                }
            }
        }
        for _ in 0..KILL_MAX_ROUNDS {
            if self.is_empty() {
                return Ok(());
            }
            let frozen = self.freeze(true);
            for pid in self.pids() {
                if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                    // ESRCH: already gone.
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
            if frozen {
                self.freeze(false);
            }
            std::thread::sleep(KILL_ROUND_PAUSE);
        }
        let left = self.pids();
        if left.is_empty() {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "cgroup {} still holds {left:?} after {KILL_MAX_ROUNDS} kill rounds",
                self.memory_dir.display()
            )))
        }
    }

    /// Freeze (`true`) or thaw the group; returns whether a freezer was written.
    /// Freezing waits up to [`FREEZE_WAIT_MAX`] for the state to settle.
    fn freeze(&self, frozen: bool) -> bool {
        let Some(dir) = &self.freezer_dir else {
            return false;
        };
        let (file, value) = self.version.hierarchy().freeze_write(frozen);
        if write_plain(&dir.join(file), value).is_err() {
            return false;
        }
        if frozen {
            let deadline = Instant::now() + FREEZE_WAIT_MAX;
            while Instant::now() < deadline && !self.version.hierarchy().is_frozen(dir) {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        true
    }

    /// Resets the peak-memory figure so a reused group reports only the next run's peak
    /// (v1 `memory.max_usage_in_bytes`). On v2 this is an error: `memory.peak` can only be
    /// reset per open file, so v2 groups are not reused.
    pub fn reset_peak(&self) -> io::Result<()> {
        self.version.hierarchy().reset_peak(&self.memory_dir)
    }

    /// Usage figures (missing files count as zero / `None`), read from the group's
    /// control files kept open (module docs).
    pub fn stats(&self) -> CgroupStats {
        // v1 `memory.oom_control` and v2 `memory.events` both carry `oom_kill`.
        CgroupStats {
            memory_peak_bytes: self.memory_peak.read().and_then(|s| s.trim().parse().ok()),
            oom_kills: self
                .memory_events
                .read()
                .and_then(|s| keyed_value(&s, "oom_kill"))
                .unwrap_or(0),
            pids_limit_hit: self
                .pids_events
                .read()
                .and_then(|s| keyed_value(&s, "max"))
                .unwrap_or(0),
        }
    }

    /// Remove every directory of the group, retrying `rmdir` while the last tasks leave
    /// (up to [`REMOVE_RETRIES`] × [`REMOVE_RETRY_PAUSE`] per directory). Kill first: a
    /// populated group cannot be removed.
    pub fn remove(mut self) -> io::Result<()> {
        self.remove_dirs()
    }

    fn remove_dirs(&mut self) -> io::Result<()> {
        self.procs_raw.clear();
        self.procs.clear(); // close our cgroup.procs fds first
        for control in [
            &mut self.pids_current,
            &mut self.memory_peak,
            &mut self.memory_events,
            &mut self.pids_events,
        ] {
            control.file.take();
        }
        let mut first_err = None;
        while let Some(dir) = self.dirs.pop() {
            let removed = rmdir_retrying(&dir);
            if removed.is_ok() {
                DIRS_LEFT.fetch_sub(1, Ordering::SeqCst);
            }
            if let Err(e) = removed
                && first_err.is_none()
            {
                first_err = Some(io::Error::new(
                    e.kind(),
                    format!("rmdir({}) failed: {e}", dir.display()),
                ));
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

/// Run-group directories this process created and has not removed, over every
/// hierarchy: 0 means no run of this process left a group behind (what lets the watchdog
/// skip its sweep after a clean exit, [`crate::watchdog::release`]).
static DIRS_LEFT: AtomicUsize = AtomicUsize::new(0);

/// [`DIRS_LEFT`]'s value.
pub(crate) fn dirs_left() -> usize {
    DIRS_LEFT.load(Ordering::SeqCst)
}

impl Drop for RunCgroup {
    /// Best-effort removal (errors ignored; a populated group stays behind).
    fn drop(&mut self) {
        let _ = self.remove_dirs();
    }
}

// ---------------------------------------------------------------------------------------
// Small file helpers.
// ---------------------------------------------------------------------------------------

fn validate_name(name: &str) -> Result<(), CgroupError> {
    let why = if name.is_empty() {
        Some("empty")
    } else if name.len() > MAX_NAME_BYTES {
        Some("longer than 200 bytes")
    } else if name == "." || name == ".." {
        Some("a relative directory")
    } else if name.contains('/') || name.contains('\0') {
        Some("contains '/' or NUL")
    } else if name == SUPERVISOR_LEAF {
        Some("reserved for the supervisor's own leaf group")
    } else if name.starts_with("cgroup.") || name.contains('\n') {
        Some("looks like a control file")
    } else {
        None
    };
    match why {
        Some(why) => Err(CgroupError::InvalidName {
            name: name.to_owned(),
            why,
        }),
        None => Ok(()),
    }
}

fn validate_limits(limits: &CgroupLimits) -> Result<(), CgroupError> {
    let checks = [
        ("memory_bytes", limits.memory_bytes),
        ("max_processes", limits.max_processes),
        (
            "cpu_quota_percent",
            limits.cpu_quota_percent.map_or(1, u64::from),
        ),
    ];
    match checks.into_iter().find(|&(_, v)| v == 0) {
        Some((limit, value)) => Err(CgroupError::InvalidLimit { limit, value }),
        None => Ok(()),
    }
}

fn required<'a>(c: &'a ControllerSupport, name: &'static str) -> Result<&'a Path, CgroupError> {
    match (&c.dir, c.usable) {
        (Some(dir), true) => Ok(dir),
        _ => Err(CgroupError::ControllerUnavailable {
            controller: name,
            reason: c.reason.clone().unwrap_or_else(|| "not found".into()),
        }),
    }
}

/// Write a control file (created if missing, which only happens in fake trees: cgroupfs
/// refuses to create files, with `EACCES`).
fn write_file(path: &Path, value: &str) -> Result<(), CgroupError> {
    write_plain(path, value).map_err(|source| CgroupError::Write {
        path: path.to_owned(),
        value: value.to_owned(),
        source,
    })
}

fn write_plain(path: &Path, value: &str) -> io::Result<()> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    file.write_all(value.as_bytes())
}

fn read_file(path: &Path) -> Result<String, CgroupError> {
    fs::read_to_string(path).map_err(|source| CgroupError::Read {
        path: path.to_owned(),
        source,
    })
}

fn read_pids(path: &Path) -> io::Result<Vec<i32>> {
    Ok(fs::read_to_string(path)?
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect())
}

/// The value of `key` in a flat-keyed file (`key value` per line).
fn keyed_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut parts = line.split_whitespace();
        (parts.next()? == key).then_some(())?;
        parts.next()?.parse().ok()
    })
}

fn rmdir_retrying(dir: &Path) -> io::Result<()> {
    let mut attempt = 0;
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && attempt < REMOVE_RETRIES => {
                attempt += 1;
                std::thread::sleep(REMOVE_RETRY_PAUSE);
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests;

/// Removes run groups left behind by supervisors that died without cleaning up (a
/// SIGKILLed supervisor cannot kill its runs' descendants; they stay in their groups).
///
/// Looks in our own group of every controller for directories named `<prefix>*` for which
/// `is_orphaned(name)` is true, SIGKILLs every task in them (bounded rounds) and removes
/// them. Returns how many directories were removed.
pub fn sweep_orphaned(
    support: &CgroupSupport,
    prefix: &str,
    is_orphaned: impl Fn(&str) -> bool,
) -> usize {
    let mut removed = 0;
    let controllers = [
        &support.memory,
        &support.pids,
        &support.cpu,
        &support.freezer,
    ];
    for dir in controllers.iter().filter_map(|c| c.dir.as_ref()) {
        let Ok(entries) = fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if !name.starts_with(prefix) || !is_orphaned(name) {
                continue;
            }
            let group = entry.path();
            for _ in 0..KILL_MAX_ROUNDS {
                let pids = read_pids(&group.join("cgroup.procs")).unwrap_or_default();
                if pids.is_empty() {
                    break;
                }
                for pid in pids {
                    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                    }
                }
                std::thread::sleep(KILL_ROUND_PAUSE);
            }
            for _ in 0..REMOVE_RETRIES {
                if fs::remove_dir(&group).is_ok() {
                    removed += 1;
                    break;
                }
                std::thread::sleep(REMOVE_RETRY_PAUSE);
            }
        }
    }
    removed
}
