//! The Tier C (native) mount plan: a pure function from a [`Plan`] and a description of
//! the host filesystem ([`HostView`]) to an ordered list of [`MountOp`]s, in the spirit of
//! bubblewrap's setup-op list. Nothing here mounts anything; the executor (the Tier C
//! child, a later step) carries the ops out one by one, in order, inside a fresh mount
//! namespace, against a staging directory that becomes `/` at [`MountOp::PivotRoot`].
//!
//! Invariants kept here (checked by [`mount_plan`] itself before it returns, so a bug in
//! the builder fails closed instead of producing a weaker sandbox):
//!
//! - **Every path is absolute, normalised (no `.`/`..`/empty components), without NUL
//!   bytes, and never `/` itself**, except in the root ops ([`MountOp::TmpfsRoot`],
//!   [`MountOp::PivotRoot`], [`MountOp::RemountRootRo`]), which carry no path.
//! - **Nothing is bound from a symlink.** A bind follows a symlink in its source, so a
//!   symlink among the system paths (`/bin -> usr/bin`, `/etc/localtime`) becomes a
//!   [`MountOp::Symlink`] with the same target, and a symlink where a policy path should
//!   be is an error (Plan paths are canonical). Every bind has `src == dst`: host paths
//!   appear at their own absolute path, nowhere else.
//! - **Parents before children.** Every op's parent directory exists when the op runs:
//!   created by an earlier [`MountOp::Dir`] in a tmpfs, or present on the host under an
//!   earlier bind. Every mountpoint exists with the right kind (directory or not) before
//!   its mount.
//! - **Nothing stays writable by accident.** Each [`MountOp::BindRo`],
//!   [`MountOp::DevNode`] and [`MountOp::CoverWithDevNull`] is followed by a
//!   [`MountOp::RemountRo`] of itself or of the mount that contains it (a bind ignores
//!   `MS_RDONLY` when it is created); the root tmpfs is made read-only last.
//! - **Order of the bind phases**: the sandbox's own mounts (`/proc`, `/dev`, `/tmp`),
//!   then system and policy binds outside the workspace (sorted, so ancestors come
//!   first), then the workspace, then policy read-only binds inside the workspace, then
//!   the protected-path covers, then the `deny_read` covers. A later mount shadows an
//!   earlier one at or below it, so this is also the order of precedence: the workspace
//!   is writable even under a read-only grant of its parent, protected paths stay
//!   read-only inside the writable workspace, and a denied path stays hidden whatever
//!   grant contains it.
//! - **Never bound**: `/`, and anything at or under `/proc` or `/dev` (the sandbox gets
//!   its own). Nothing outside the Plan's grants is bound, so the host's `/root`,
//!   `/home`, `/sys`, `/run`, … are absent unless the Plan grants them.
//!
//! # Protected paths (`plan.filesystem.protected`)
//!
//! The threat is the *host* running something the sandbox planted: git runs
//! `.git/hooks/*` and the commands named in `.git/config` (`core.fsmonitor`,
//! `core.hooksPath`, aliases) the next time the user runs git in the workspace. So a
//! protected path must be neither writable, nor replaceable, nor creatable from inside.
//! Each protected path is walked one component at a time below the workspace, without
//! following symlinks, and the walk stops at the first component that is not a directory:
//!
//! | what the walk finds | ops |
//! |---|---|
//! | the path exists (directory or file) | `BindRo` of itself over itself, `RemountRo` |
//! | a non-directory part-way (`.git` is a worktree's gitfile) | `BindRo` of that file over itself: it can be neither rewritten nor replaced by a directory |
//! | a symlink, at the end or part-way | `CoverWithDevNull` over the symlink itself (not its target), `RemountRo`; and if the fully resolved path lands in a sandbox-writable bind, that resolved path is protected too (the host's git follows the link) |
//! | a missing component whose parent is sandbox-writable | `HostPlaceholder` (an empty directory when more components follow, an empty file when it is the last), then `CoverWithEmptyDir` / `CoverWithDevNull` over it |
//! | a missing component under a read-only mount | nothing: it cannot be created |
//!
//! Why a symlink gets `/dev/null` and not an empty directory: the kernel requires a mount
//! and its mountpoint to agree on being a directory, and a symlink is not one. Why a
//! missing intermediate component gets an empty read-only *directory* while a missing
//! last component gets `/dev/null`: the intermediate one can only ever be a directory, and
//! an empty directory is the faithful stand-in (git sees "not a repository" and keeps
//! looking upwards, exactly as when `.git` is absent; `ls`/`find` see an empty
//! directory); the last component's kind is unknown, and a read-only, `nodev` bind of
//! `/dev/null` can be neither opened, written, nor replaced (Codex covers every
//! symlink or missing component this way).
//!
//! **The trade-off chosen: a missing first component is covered.** With the default
//! policy (`.git/hooks`, `.git/config` protected), a workspace without `.git` gets an
//! empty read-only `.git`, so `git init` fails inside the sandbox. The alternative (cover
//! only when the parent exists) would let the sandbox run `git init` and then write
//! `.git/hooks/post-checkout` or `core.fsmonitor`, which the user's git runs on the host:
//! exactly what protection is for. We fail closed, as Codex does (it mounts `/dev/null` on
//! the first missing component, which "stops `mkdir .git`"); a policy that wants `git
//! init` inside the sandbox removes `.git/*` from `filesystem.protected`, which is a
//! visible, reviewable widening.
//!
//! The cost of covering a missing path: a mountpoint must exist, and below the workspace
//! the only place to create it is the host's workspace directory. Those entries are the
//! one effect of this plan on the host; they are listed in
//! [`MountPlan::host_placeholders`] so the runner removes them after the run (an empty
//! directory rather than an empty file for `.git`, so that the user's git on the host,
//! should it run meanwhile, sees "not a repository" rather than "invalid gitfile").
//!
//! # System roots and host secrets
//!
//! When the Plan carries `system_roots`, each root (`/usr`, `/etc`, …) is bound whole and
//! every `system_hidden` entry (`/etc/shadow`, `/etc/ssl/private`, files others cannot
//! read) is covered after it, exactly as a `deny_read` path. This is the same view as
//! binding the expanded `system_read_only` list entry by entry, in about 15 mounts
//! instead of about 250 on a Debian host (each mount, and each unmount when the namespace
//! dies, takes the kernel's global namespace lock; the per-entry form measured 50 ms per
//! run). Without `system_roots` (hand-built Plans) the list is bound entry by entry.
//!
//! # `deny_read`
//!
//! Each path is resolved through symlinks (a denied `~/.cargo/credentials.toml` is found
//! where the canonical grant of `~/.cargo` put it); when the result exists and is visible
//! through a host bind it is covered: an empty read-only directory over a directory,
//! `/dev/null` (read-only, `nodev`, so it cannot even be opened) over anything else. A
//! denied path that does not exist, or is not visible, needs nothing. Deny wins over any
//! grant it contains, except the workspace: a `deny_read` that would hide the workspace is
//! an error.
//!
//! # Executor notes (for the Tier C child)
//!
//! Each op's documentation states the system calls it stands for. Three general rules:
//! destinations are relative to the staging root until `PivotRoot`; the executor opens
//! every bind source with `O_PATH | O_NOFOLLOW` (or `openat2` with
//! `RESOLVE_NO_SYMLINKS`) and checks its kind against the op before mounting, so a path
//! swapped for a symlink between planning and mounting fails the run instead of binding
//! the link's target; and in a user namespace the kernel refuses to clear a mount's
//! *locked* flags, so every remount ORs in the flags the mount already has (`statvfs`
//! `f_flag`), as bubblewrap does.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use tierbox_policy::plan::FsPlan;
use tierbox_policy::{DevShm, Plan};

/// Size cap of the root tmpfs, in bytes. It holds only mountpoints (empty directories
/// and files) and symlinks, and is read-only once set up; the cap bounds the kernel
/// memory a pathological Plan could make the setup use.
pub const ROOT_TMPFS_BYTES: u64 = 1 << 20;

/// Size cap of a skeleton tmpfs, in bytes: the read-only tmpfs put where a grant's
/// ancestors would otherwise be directories of the sandbox's writable scratch (`/tmp`),
/// holding only those directories and mount points.
pub const SKELETON_TMPFS_BYTES: u64 = 64 << 10;

/// Mode of the root tmpfs's top directory.
pub const ROOT_DIR_MODE: u32 = 0o755;

/// Mode of directories created in a tmpfs as ancestors or mountpoints. Hidden under the
/// mount that lands on them, or read-only with the root; the sandbox can list them.
pub const MOUNTPOINT_DIR_MODE: u32 = 0o755;

/// Mode of the empty files created in a tmpfs as mountpoints for file binds (always
/// hidden under the bind).
pub const MOUNTPOINT_FILE_MODE: u32 = 0o444;

/// Size cap of the `/dev` tmpfs, in bytes: it holds only mountpoints and symlinks, and is
/// remounted read-only after it is populated.
pub const DEV_TMPFS_BYTES: u64 = 64 << 10;

/// Mode of `/dev`.
pub const DEV_DIR_MODE: u32 = 0o755;

/// Most bytes the `/dev/shm` tmpfs may hold (POSIX shared memory, semaphores; the size
/// container runtimes give it). The size used is the smaller of this and the Plan's memory
/// limit ([`dev_shm_size_bytes`]): its pages are charged to the run's memory cgroup as
/// well, and the cap makes a full `/dev/shm` an `ENOSPC` rather than an OOM kill.
pub const DEV_SHM_MAX_BYTES: u64 = 64 << 20;

/// The size of the sandbox's `/dev/shm` for `plan`, in bytes.
pub fn dev_shm_size_bytes(plan: &Plan) -> u64 {
    DEV_SHM_MAX_BYTES.min(plan.limits.memory_bytes)
}

/// Mode of the shared scratch directories `/tmp` and `/dev/shm`: world-writable with the
/// sticky bit, as on every Linux host.
pub const SCRATCH_DIR_MODE: u32 = 0o1777;

/// Most bytes the sandbox's private `/tmp` tmpfs may hold. The size used is the smaller
/// of this and the Plan's memory limit: tmpfs pages are charged to the run's memory
/// cgroup anyway, and the cap turns a full `/tmp` into `ENOSPC` rather than an OOM kill.
/// Not covered: a run without a memory cgroup still gets at most this much.
pub const TMP_TMPFS_MAX_BYTES: u64 = 1 << 30;

/// Size cap of each empty read-only tmpfs used by [`MountOp::CoverWithEmptyDir`], in
/// bytes (it is mounted read-only and stays empty; the smallest useful size).
pub const COVER_TMPFS_BYTES: u64 = 4 << 10;

/// Mode of the empty directory a [`MountOp::CoverWithEmptyDir`] shows (`r-x`: listable,
/// and read-only at the mount level anyway).
pub const COVER_DIR_MODE: u32 = 0o555;

/// Size of the sandbox's `/tmp` tmpfs for `plan`: its memory limit, at most
/// [`TMP_TMPFS_MAX_BYTES`].
pub fn tmp_size_bytes(plan: &Plan) -> u64 {
    TMP_TMPFS_MAX_BYTES.min(plan.limits.memory_bytes)
}

/// Where a run with `plan.filesystem.private_home` gets its empty, writable `HOME`: inside
/// the sandbox's private `/tmp` tmpfs, so it costs nothing and vanishes with the run.
pub const PRIVATE_HOME: &str = "/tmp/home";

/// Mode of [`PRIVATE_HOME`].
pub const PRIVATE_HOME_MODE: u32 = 0o700;

/// How an entry of the sandbox's `/proc` that shows host-wide state is masked
/// ([`PROC_MASKED`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProcCover {
    /// A file hidden behind a bind of `/dev/null` (reads as empty).
    MaskFile,
    /// A directory hidden behind an empty read-only tmpfs.
    MaskDir,
}

/// The kernel's global knobs in `/proc` — the container runtimes' "readonly" paths
/// (moby's `oci/defaults.go`, runc's `readonlyPaths`). Both Tier C backends mount the
/// sandbox's `/proc` read-only as a whole, which covers these and every other entry (writes
/// to `/proc` were already refused by the native backend's landlock layer; the mount
/// makes the rule hold without it, and on the bwrap backend). Why it matters: global
/// sysctls under `/proc/sys` check only that the writer's *host* uid is 0
/// (`kernel.core_pattern` makes the host kernel run a helper as root; others reconfigure
/// the host); `sysrq-trigger` reboots or crashes the host; `irq`, `bus` and `fs` tune host
/// devices and filesystems. Writes through `/proc/self/fd/N` reach the file the descriptor
/// names, not procfs, and keep working.
pub const PROC_READ_ONLY: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// Entries of the sandbox's `/proc` that show host-wide state, masked as the container
/// runtimes' "masked" paths are, whatever the user mapping and landlock do, so each layer
/// holds alone: host kernel memory (`kcore`), key material (`keys`), and timing side
/// channels (`timer_list`, `timer_stats`, `sched_debug`, `latency_stats`, `interrupts`),
/// and host hardware (`acpi`, `asound`, `scsi`). Entries the kernel does not have are
/// skipped.
pub const PROC_MASKED: &[(&str, ProcCover)] = &[
    ("/proc/asound", ProcCover::MaskDir),
    ("/proc/acpi", ProcCover::MaskDir),
    ("/proc/scsi", ProcCover::MaskDir),
    ("/proc/interrupts", ProcCover::MaskFile),
    ("/proc/kcore", ProcCover::MaskFile),
    ("/proc/keys", ProcCover::MaskFile),
    ("/proc/latency_stats", ProcCover::MaskFile),
    ("/proc/timer_list", ProcCover::MaskFile),
    ("/proc/timer_stats", ProcCover::MaskFile),
    ("/proc/sched_debug", ProcCover::MaskFile),
];

/// Host device nodes bound into the sandbox's `/dev` (`mknod` is impossible in a user
/// namespace). `/dev/null` is required (covers use it); the others are skipped when the
/// host lacks them (some containers have no `/dev/tty`).
pub const DEV_NODES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// Symlinks created in the sandbox's `/dev` (link, target), as bubblewrap's `--dev` does:
/// `ptmx` points into the private devpts instance; the `fd`/`std*` links let programs use
/// `/dev/stdin` and process substitution.
pub const DEV_SYMLINKS: &[(&str, &str)] = &[
    ("/dev/ptmx", "pts/ptmx"),
    ("/dev/fd", "/proc/self/fd"),
    ("/dev/stdin", "/proc/self/fd/0"),
    ("/dev/stdout", "/proc/self/fd/1"),
    ("/dev/stderr", "/proc/self/fd/2"),
];

/// Mode of the devpts `ptmx` node ([`MountOp::DevPts`] option `ptmxmode`): every process
/// of the run may allocate a pty.
pub const PTMX_MODE: u32 = 0o666;

/// Mode of new pty slaves ([`MountOp::DevPts`] option `mode`).
pub const PTS_MODE: u32 = 0o620;

/// Most symlinks followed while resolving one path, as the kernel's `MAXSYMLINKS`; more
/// means a loop (nothing on the host can follow it either).
pub const MAX_SYMLINK_HOPS: usize = 40;

/// Most paths a Plan may name for the mount plan (system, policy, protected and denied
/// paths together). Bounds the host probing and the op list; the system list of a
/// typical host is under 200 entries.
pub const MAX_PLAN_PATHS: usize = 4096;

/// Destinations the sandbox provides itself and no Plan path may be bound at or under:
/// a host `/proc` would show the host's processes across the pid namespace, a host
/// `/dev` every device.
pub const RESERVED_DESTINATIONS: &[&str] = &["/proc", "/dev"];

/// Whether a mount (or a mountpoint) is a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum EntryKind {
    /// A directory.
    Dir,
    /// Anything that is not a directory (regular file, device node, fifo, socket).
    File,
}

/// One step of the sandbox's filesystem setup. Paths are absolute in the *new* root; until
/// [`MountOp::PivotRoot`] the executor prefixes them with its staging directory. Every
/// bind is recursive (`MS_BIND | MS_REC`) and has `src == dst`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountOp {
    /// Mount a tmpfs on the staging directory: the future `/`.
    /// `mount("tmpfs", staging, "tmpfs", MS_NOSUID | MS_NODEV, "size=…,mode=…")`, after
    /// making the whole tree `MS_REC | MS_PRIVATE` so nothing propagates to the host.
    TmpfsRoot {
        /// [`ROOT_TMPFS_BYTES`].
        size_bytes: u64,
        /// [`ROOT_DIR_MODE`].
        mode: u32,
    },
    /// `mkdir(path, mode)` in a tmpfs the plan mounted (an ancestor or a mountpoint).
    Dir {
        /// The directory.
        path: PathBuf,
        /// Its mode (before umask: the executor sets umask 0 or `fchmod`s).
        mode: u32,
    },
    /// Create an empty file `path` (`O_CREAT | O_EXCL`) in a tmpfs the plan mounted, as
    /// the mountpoint of a file bind.
    File {
        /// The file.
        path: PathBuf,
        /// Its mode.
        mode: u32,
    },
    /// `symlink(target, link)` in a tmpfs the plan mounted.
    Symlink {
        /// The link's content, verbatim (relative targets stay relative).
        target: PathBuf,
        /// Where the link is created.
        link: PathBuf,
    },
    /// A fresh procfs for the new pid namespace, read-only ([`PROC_READ_ONLY`]):
    /// `mount("proc", dst, "proc", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL)`. Must run
    /// before the old root is detached: in a user namespace the kernel only allows a new
    /// proc mount while a fully visible one exists in the mount namespace.
    Proc {
        /// `/proc`.
        dst: PathBuf,
    },
    /// Mask one entry of the sandbox's own `/proc` ([`PROC_MASKED`]) right after the proc
    /// mount: `mount(<host /dev/null>, dst, NULL, MS_BIND)` for a file, an empty read-only
    /// tmpfs for a directory. Skipped at setup when this kernel has no such entry (the
    /// list names entries some kernels lack).
    ProcKnob {
        /// The entry, directly under `/proc`.
        dst: PathBuf,
        /// How it is covered.
        cover: ProcCover,
    },
    /// `mount("tmpfs", dst, "tmpfs", MS_NOSUID | MS_NODEV, "size=…,mode=…")`. Executable
    /// (toolchains build and run programs under `/tmp`).
    Tmpfs {
        /// Mountpoint.
        dst: PathBuf,
        /// Size cap in bytes.
        size_bytes: u64,
        /// Mode of the tmpfs root.
        mode: u32,
    },
    /// Bind a host device node (one of [`DEV_NODES`]) onto an empty file: `MS_BIND`
    /// without `MS_NODEV`, made read-only by the following remount of `/dev` (writes to a
    /// device node on a read-only mount still reach the device).
    DevNode {
        /// The host node.
        src: PathBuf,
        /// Same path in the new root.
        dst: PathBuf,
    },
    /// A new devpts instance: `mount("devpts", dst, "devpts", MS_NOSUID | MS_NOEXEC,
    /// "newinstance,ptmxmode=0666,mode=0620")` ([`PTMX_MODE`], [`PTS_MODE`]; no `gid=`,
    /// since the tty group is not mapped in the user namespace).
    DevPts {
        /// `/dev/pts`.
        dst: PathBuf,
    },
    /// A bind that ends up read-only: `MS_BIND | MS_REC`, then the [`MountOp::RemountRo`]
    /// that follows it sets `MS_RDONLY | MS_NOSUID | MS_NODEV` (never `MS_NOEXEC`:
    /// toolchains run from here).
    BindRo {
        /// Host path (never a symlink: the executor opens it `O_NOFOLLOW`).
        src: PathBuf,
        /// Same path in the new root.
        dst: PathBuf,
        /// What the executor must find at `src` (it fails the run on a mismatch).
        kind: EntryKind,
    },
    /// A writable bind (the workspace, a policy's writable cache): `MS_BIND | MS_REC`,
    /// then a bind remount adding `MS_NOSUID | MS_NODEV` (keeping it writable).
    BindRw {
        /// Host path (never a symlink).
        src: PathBuf,
        /// Same path in the new root.
        dst: PathBuf,
        /// What the executor must find at `src`.
        kind: EntryKind,
    },
    /// Create an empty directory or file at `path` *on the host*, inside a writable bind
    /// (the workspace), as the mountpoint of the cover that follows. The only op that
    /// changes the host; every placeholder is listed in [`MountPlan::host_placeholders`]
    /// for the runner to remove after the run. The executor creates it with
    /// `mkdirat`/`openat(O_CREAT | O_EXCL | O_NOFOLLOW)` relative to an `O_PATH` fd of the
    /// parent, and fails the run if it already exists.
    HostPlaceholder {
        /// The entry to create.
        path: PathBuf,
        /// Directory or empty file.
        kind: EntryKind,
    },
    /// Bind the host's `/dev/null` over `dst` *without following a final symlink at
    /// `dst`* (`open_tree` + `move_mount` without `MOVE_MOUNT_T_SYMLINKS`, or an `O_PATH |
    /// O_NOFOLLOW` fd used through `/proc/self/fd`). The following
    /// [`MountOp::RemountRo`] makes it `MS_RDONLY | MS_NOSUID | MS_NODEV`: the cover
    /// cannot be opened (`EACCES`), written, unlinked or renamed (`EBUSY`).
    CoverWithDevNull {
        /// The covered entry (a symlink, a file, or an empty-file placeholder).
        dst: PathBuf,
    },
    /// Mount an empty tmpfs over the directory `dst`, read-only from the start:
    /// `mount("tmpfs", dst, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
    /// "size=4k,mode=0555")` ([`COVER_TMPFS_BYTES`], [`COVER_DIR_MODE`]).
    CoverWithEmptyDir {
        /// The covered directory.
        dst: PathBuf,
    },
    /// Make the mount at `dst` and every mount below it read-only:
    /// `mount_setattr(dst, AT_RECURSIVE, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID
    /// [| MOUNT_ATTR_NODEV])` (Linux 5.12+), or a `MS_REMOUNT | MS_BIND | MS_RDONLY | …`
    /// of each mount under `dst` on older kernels. Always placed right after the mount
    /// it seals (or, for `/dev`, after the device binds), before anything is mounted
    /// below it that must stay writable.
    RemountRo {
        /// The mount to seal.
        dst: PathBuf,
        /// Keep device nodes usable (no `MS_NODEV`): only for `/dev`.
        allow_devices: bool,
    },
    /// Make the skeleton tmpfs at `dst` read-only, not the mounts inside it (the grants
    /// it holds keep their own flags): `mount_setattr(dst, 0, MOUNT_ATTR_RDONLY |
    /// MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)`. After everything is mounted in it.
    SealSkeleton {
        /// The skeleton tmpfs.
        dst: PathBuf,
    },
    /// Make the staging directory `/`: `chdir(staging)`, `pivot_root(".", ".")`,
    /// `umount2(".", MNT_DETACH)` (the old root, stacked under the new one), `chdir("/")`.
    PivotRoot,
    /// Make the root tmpfs read-only (`MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID |
    /// MS_NODEV` on `/`), so the sandbox cannot create top-level entries.
    RemountRootRo,
}

impl MountOp {
    /// The path this op creates or mounts on, if it has one.
    pub fn dst(&self) -> Option<&Path> {
        match self {
            Self::TmpfsRoot { .. } | Self::PivotRoot | Self::RemountRootRo => None,
            Self::Dir { path, .. } | Self::File { path, .. } => Some(path),
            Self::HostPlaceholder { path, .. } => Some(path),
            Self::Symlink { link, .. } => Some(link),
            Self::Proc { dst }
            | Self::ProcKnob { dst, .. }
            | Self::Tmpfs { dst, .. }
            | Self::DevNode { dst, .. }
            | Self::DevPts { dst }
            | Self::BindRo { dst, .. }
            | Self::BindRw { dst, .. }
            | Self::CoverWithDevNull { dst }
            | Self::CoverWithEmptyDir { dst }
            | Self::RemountRo { dst, .. }
            | Self::SealSkeleton { dst } => Some(dst),
        }
    }

    /// The host path this op binds, if it binds one.
    pub fn bind_src(&self) -> Option<&Path> {
        match self {
            Self::BindRo { src, .. } | Self::BindRw { src, .. } | Self::DevNode { src, .. } => {
                Some(src)
            }
            _ => None,
        }
    }

    /// Whether this op mounts something at [`MountOp::dst`].
    pub fn is_mount(&self) -> bool {
        matches!(
            self,
            Self::Proc { .. }
                | Self::ProcKnob { .. }
                | Self::Tmpfs { .. }
                | Self::DevNode { .. }
                | Self::DevPts { .. }
                | Self::BindRo { .. }
                | Self::BindRw { .. }
                | Self::CoverWithDevNull { .. }
                | Self::CoverWithEmptyDir { .. }
        )
    }

    /// What the mountpoint of a mounting op must be.
    fn mountpoint_kind(&self) -> Option<EntryKind> {
        match self {
            Self::Proc { .. }
            | Self::Tmpfs { .. }
            | Self::DevPts { .. }
            | Self::CoverWithEmptyDir { .. } => Some(EntryKind::Dir),
            Self::DevNode { .. } | Self::CoverWithDevNull { .. } => Some(EntryKind::File),
            Self::ProcKnob { cover, .. } => Some(match cover {
                ProcCover::MaskFile => EntryKind::File,
                ProcCover::MaskDir => EntryKind::Dir,
            }),
            Self::BindRo { kind, .. } | Self::BindRw { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}

impl fmt::Display for MountOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TmpfsRoot { size_bytes, mode } => {
                write!(f, "tmpfs-root size={size_bytes} mode={mode:o}")
            }
            Self::Dir { path, mode } => write!(f, "dir {} mode={mode:o}", path.display()),
            Self::File { path, mode } => write!(f, "file {} mode={mode:o}", path.display()),
            Self::Symlink { target, link } => {
                write!(f, "symlink {} -> {}", link.display(), target.display())
            }
            Self::Proc { dst } => write!(f, "proc {}", dst.display()),
            Self::ProcKnob { dst, cover } => {
                let how = match cover {
                    ProcCover::MaskFile => "dev-null",
                    ProcCover::MaskDir => "empty dir",
                };
                write!(f, "proc-mask {} ({how}, if present)", dst.display())
            }
            Self::Tmpfs {
                dst,
                size_bytes,
                mode,
            } => write!(f, "tmpfs {} size={size_bytes} mode={mode:o}", dst.display()),
            Self::DevNode { src, dst } => {
                write!(f, "dev-node {} -> {}", src.display(), dst.display())
            }
            Self::DevPts { dst } => write!(f, "devpts {}", dst.display()),
            Self::BindRo { src, dst, kind } => {
                write!(
                    f,
                    "bind-ro {} -> {} ({kind:?})",
                    src.display(),
                    dst.display()
                )
            }
            Self::BindRw { src, dst, kind } => {
                write!(
                    f,
                    "bind-rw {} -> {} ({kind:?})",
                    src.display(),
                    dst.display()
                )
            }
            Self::HostPlaceholder { path, kind } => {
                write!(f, "host-placeholder {} ({kind:?})", path.display())
            }
            Self::CoverWithDevNull { dst } => write!(f, "cover-dev-null {}", dst.display()),
            Self::CoverWithEmptyDir { dst } => write!(f, "cover-empty-dir {}", dst.display()),
            Self::RemountRo { dst, allow_devices } => write!(
                f,
                "remount-ro {}{}",
                dst.display(),
                if *allow_devices { " (devices)" } else { "" }
            ),
            Self::SealSkeleton { dst } => write!(f, "seal-skeleton {}", dst.display()),
            Self::PivotRoot => f.write_str("pivot-root"),
            Self::RemountRootRo => f.write_str("remount-root-ro"),
        }
    }
}

/// The result of [`mount_plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountPlan {
    /// The ops, in execution order.
    pub ops: Vec<MountOp>,
    /// Entries [`MountOp::HostPlaceholder`] creates on the host; the runner removes each
    /// after the run (`rmdir`/`unlink`, only if it is still an empty directory / empty
    /// file).
    pub host_placeholders: Vec<PathBuf>,
    /// The child's `HOME` when the Plan asks for a private one ([`PRIVATE_HOME`]).
    pub home: Option<PathBuf>,
}

/// What the host has at a path, as seen by `lstat` (symlinks not followed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostNode {
    /// A directory.
    Dir,
    /// A regular file, fifo or socket.
    File,
    /// A character or block device node.
    Device,
    /// A symlink and its content.
    Symlink {
        /// The link's content, verbatim.
        target: PathBuf,
    },
    /// Nothing there (`ENOENT`, or `ENOTDIR` for a path below a non-directory).
    Missing,
    /// `lstat` failed otherwise (`EACCES`, …): the planner fails closed on it.
    Inaccessible {
        /// The `errno`.
        errno: i32,
    },
}

/// The host filesystem facts [`mount_plan`] needs, recorded up front so that planning is
/// pure. [`HostView::probe`] reads the real host; [`HostView::assume_missing`] and the
/// `with_*` methods build one by hand for tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostView {
    nodes: BTreeMap<PathBuf, HostNode>,
    /// Paths not recorded are missing (hand-built views) rather than unknown (probed
    /// views, where an unrecorded path is a planner bug reported as an error).
    unrecorded_missing: bool,
}

impl HostView {
    /// Reads the host: `lstat` (and `readlink` for symlinks) of exactly the paths
    /// [`mount_plan`] will ask about for `plan`, which it finds by running the planner
    /// against the live filesystem and recording each answer. Read-only; never fails
    /// (a path that cannot be read is recorded as [`HostNode::Inaccessible`], and the
    /// planner's own errors reappear when [`mount_plan`] runs on the result).
    pub fn probe(plan: &Plan) -> Self {
        let mut nodes = BTreeMap::new();
        crate::placeholders::observing(|claims| {
            let mut lookup = |p: &Path| -> Result<HostNode, MountPlanError> {
                let node = nodes
                    .entry(p.to_path_buf())
                    .or_insert_with(|| lstat_host(claims, p))
                    .clone();
                Ok(node)
            };
            let _ = build(plan, &mut lookup);
        });
        Self {
            nodes,
            unrecorded_missing: false,
        }
    }

    /// Whether the host still looks exactly as recorded: every recorded path is
    /// `lstat`ed again (one system call each, and `readlink` for symlinks) and compared.
    /// A view built by hand is never current. Because [`mount_plan`] is a pure function of
    /// the Plan and the view, a current view means the plan built from it is still right.
    pub fn is_current(&self) -> bool {
        !self.unrecorded_missing
            && crate::placeholders::observing(|claims| {
                self.nodes
                    .iter()
                    .all(|(path, node)| lstat_host(claims, path) == *node)
            })
    }

    /// How many host paths the view records.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the view records no path.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// An empty hand-built view in which every path not added with a `with_*` method is
    /// missing.
    pub fn assume_missing() -> Self {
        Self {
            nodes: BTreeMap::new(),
            unrecorded_missing: true,
        }
    }

    /// Adds a directory (and its ancestors as directories).
    #[must_use]
    pub fn with_dir(self, path: impl AsRef<Path>) -> Self {
        self.with(path.as_ref(), HostNode::Dir)
    }

    /// Adds a regular file (and its ancestors as directories).
    #[must_use]
    pub fn with_file(self, path: impl AsRef<Path>) -> Self {
        self.with(path.as_ref(), HostNode::File)
    }

    /// Adds a device node (and its ancestors as directories).
    #[must_use]
    pub fn with_device(self, path: impl AsRef<Path>) -> Self {
        self.with(path.as_ref(), HostNode::Device)
    }

    /// Adds a symlink with content `target` (and the link's ancestors as directories).
    #[must_use]
    pub fn with_symlink(self, path: impl AsRef<Path>, target: impl AsRef<Path>) -> Self {
        let target = target.as_ref().to_path_buf();
        self.with(path.as_ref(), HostNode::Symlink { target })
    }

    /// Records `node` at `path`, replacing what was there; ancestors not yet recorded
    /// become directories.
    #[must_use]
    pub fn with(mut self, path: &Path, node: HostNode) -> Self {
        for anc in path.ancestors().skip(1) {
            self.nodes.entry(anc.to_path_buf()).or_insert(HostNode::Dir);
        }
        self.nodes.insert(path.to_path_buf(), node);
        self
    }

    /// What the view knows about `path`.
    pub fn node(&self, path: &Path) -> Result<HostNode, MountPlanError> {
        match self.nodes.get(path) {
            Some(node) => Ok(node.clone()),
            None if self.unrecorded_missing => Ok(HostNode::Missing),
            None => Err(MountPlanError::NotProbed {
                path: path.to_path_buf(),
            }),
        }
    }
}

/// `lstat` + `readlink` of one host path.
fn lstat_host(claims: &crate::placeholders::Observer<'_>, path: &Path) -> HostNode {
    // A placeholder a concurrent run claims is missing as far as planning goes.
    match claims.observe(path, || std::fs::symlink_metadata(path)) {
        None => HostNode::Missing,
        Some(meta) => host_node(path, meta),
    }
}

fn host_node(path: &Path, meta: std::io::Result<std::fs::Metadata>) -> HostNode {
    let meta = match meta {
        Ok(m) => m,
        Err(e) => {
            return match e.raw_os_error() {
                Some(libc::ENOENT | libc::ENOTDIR) => HostNode::Missing,
                errno => HostNode::Inaccessible {
                    errno: errno.unwrap_or(libc::EIO),
                },
            };
        }
    };
    let ft = meta.file_type();
    if ft.is_symlink() {
        match std::fs::read_link(path) {
            Ok(target) => HostNode::Symlink { target },
            Err(e) => HostNode::Inaccessible {
                errno: e.raw_os_error().unwrap_or(libc::EIO),
            },
        }
    } else if ft.is_dir() {
        HostNode::Dir
    } else {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_char_device() || ft.is_block_device() {
            HostNode::Device
        } else {
            HostNode::File
        }
    }
}

/// Why no mount plan could be built. Each names the offending path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MountPlanError {
    /// A path is relative.
    #[error("{field} path {path:?} is not absolute")]
    NotAbsolute {
        /// Which Plan field (or op) it came from.
        field: &'static str,
        /// The path.
        path: PathBuf,
    },
    /// A path has a `..` component.
    #[error("{field} path {path:?} contains a `..` component")]
    ParentComponent {
        /// Which Plan field it came from.
        field: &'static str,
        /// The path.
        path: PathBuf,
    },
    /// A path has a NUL byte.
    #[error("{field} path {path:?} contains a NUL byte")]
    NulByte {
        /// Which Plan field it came from.
        field: &'static str,
        /// The path.
        path: PathBuf,
    },
    /// A path is `/`: binding the host root would undo the whole mount namespace.
    #[error("{field} path {path:?} is the root directory, which is never bound")]
    BindsRoot {
        /// Which Plan field it came from.
        field: &'static str,
        /// The path.
        path: PathBuf,
    },
    /// A path lies at or under a destination the sandbox provides itself.
    #[error("{field} path {path:?} lies in {reserved}, which the sandbox provides itself")]
    Reserved {
        /// Which Plan field it came from.
        field: &'static str,
        /// The path.
        path: PathBuf,
        /// The reserved destination.
        reserved: &'static str,
    },
    /// A protected path is not strictly inside the workspace.
    #[error("protected path {path:?} is not inside the workspace {workspace:?}")]
    ProtectedOutsideWorkspace {
        /// The protected path.
        path: PathBuf,
        /// The workspace.
        workspace: PathBuf,
    },
    /// A path the Plan says exists does not.
    #[error("{field} path {path:?} does not exist on the host")]
    Missing {
        /// Which Plan field it came from.
        field: &'static str,
        /// The path.
        path: PathBuf,
    },
    /// A path the Plan says is canonical is a symlink.
    #[error("{field} path {path:?} is a symlink to {target:?}; plan paths must be canonical")]
    UnexpectedSymlink {
        /// Which Plan field it came from.
        field: &'static str,
        /// The path.
        path: PathBuf,
        /// The link's content.
        target: PathBuf,
    },
    /// A path needed as a directory is something else.
    #[error("{path:?} is needed as a directory but is {found}")]
    NotADirectory {
        /// The path.
        path: PathBuf,
        /// What it is.
        found: &'static str,
    },
    /// The host refused to tell what is at a path.
    #[error("cannot inspect {path:?} on the host: errno {errno}")]
    Inaccessible {
        /// The path.
        path: PathBuf,
        /// The `errno` of `lstat`.
        errno: i32,
    },
    /// The host has no usable `/dev/null` (covers need it).
    #[error("the host's /dev/null is not a device node ({found})")]
    NoDevNull {
        /// What is there instead.
        found: &'static str,
    },
    /// The same path is granted read-only and writable (or is both the workspace and
    /// another grant).
    #[error("{path:?} is granted both as {first} and as {second}")]
    ConflictingGrant {
        /// The path.
        path: PathBuf,
        /// One Plan field.
        first: &'static str,
        /// The other.
        second: &'static str,
    },
    /// A `deny_read` path is the workspace or contains it.
    #[error("deny_read path {path:?} would hide the workspace {workspace:?}")]
    DenyHidesWorkspace {
        /// The resolved denied path.
        path: PathBuf,
        /// The workspace.
        workspace: PathBuf,
    },
    /// Resolving a path went through more than [`MAX_SYMLINK_HOPS`] symlinks.
    #[error("{field} path {path:?} does not resolve: more than {MAX_SYMLINK_HOPS} symlinks")]
    SymlinkLoop {
        /// Which Plan field it came from.
        field: &'static str,
        /// The path.
        path: PathBuf,
    },
    /// The Plan names more paths than [`MAX_PLAN_PATHS`].
    #[error("the plan names {count} paths, more than {MAX_PLAN_PATHS}")]
    TooManyPaths {
        /// How many.
        count: usize,
    },
    /// A [`HostView`] from [`HostView::probe`] lacks a fact the planner asked for.
    #[error("the host view has no entry for {path:?}")]
    NotProbed {
        /// The path.
        path: PathBuf,
    },
    /// The finished op list broke one of the module's invariants (a planner bug; the
    /// plan is refused rather than executed).
    #[error("mount op {index} ({op}) breaks an invariant: {rule}")]
    Invariant {
        /// Position in the op list.
        index: usize,
        /// The op, displayed.
        op: String,
        /// The rule broken.
        rule: &'static str,
    },
}

/// Builds the mount plan for `plan` on a host described by `host`. Pure: reads nothing
/// but its arguments. See the module documentation for the order and the rules.
pub fn mount_plan(plan: &Plan, host: &HostView) -> Result<MountPlan, MountPlanError> {
    let mut lookup = |p: &Path| host.node(p);
    build(plan, &mut lookup)
}

type Lookup<'a> = dyn FnMut(&Path) -> Result<HostNode, MountPlanError> + 'a;

fn build(plan: &Plan, lookup: &mut Lookup<'_>) -> Result<MountPlan, MountPlanError> {
    let fs = &plan.filesystem;
    let count = fs.system_read_only.len()
        + fs.system_roots.len()
        + fs.system_hidden.len()
        + fs.read_only_binds().len()
        + fs.writable_binds().len()
        + fs.deny_read.len()
        + fs.protected.len()
        + 1;
    if count > MAX_PLAN_PATHS {
        return Err(MountPlanError::TooManyPaths { count });
    }
    let mut p = Planner {
        lookup,
        ops: Vec::new(),
        mounts: Vec::new(),
        created: BTreeMap::new(),
        placeholders: Vec::new(),
        skeletons: Vec::new(),
    };
    let workspace = normalize("workspace", &plan.workspace)?;
    let home = fs.private_home.then(|| PathBuf::from(PRIVATE_HOME));

    // 1. The root: everything else lands in it.
    p.ops.push(MountOp::TmpfsRoot {
        size_bytes: ROOT_TMPFS_BYTES,
        mode: ROOT_DIR_MODE,
    });
    p.mounts
        .push(Mounted::new("/", Backing::Tmpfs, EntryKind::Dir));

    // 2. The sandbox's own kernel and scratch filesystems, before any bind: a policy path
    //    under /tmp needs the /tmp tmpfs below it.
    p.proc()?;
    p.dev(plan)?;
    p.tmp(plan, home.as_deref())?;

    // 3. Binds: outside the workspace (sorted: ancestors first), the workspace, inside it.
    let binds = classify_binds(&mut p, plan, &workspace, home.as_deref())?;
    for b in binds.iter().filter(|b| !b.dst().starts_with(&workspace)) {
        p.emit_bind(b)?;
    }
    p.emit_bind(&Bind::Mount {
        path: workspace.clone(),
        kind: EntryKind::Dir,
        writable: true,
    })?;
    for b in binds.iter().filter(|b| b.dst().starts_with(&workspace)) {
        p.emit_bind(b)?;
    }

    // 4. Protected paths, after the workspace bind they live in.
    p.protect(&fs.protected, &workspace)?;

    // 5. Host secrets under the system roots, and denied paths, last: they hide
    //    whatever grant contains them.
    p.deny("filesystem.system_hidden", fs.system_covers(), &workspace)?;
    p.deny("filesystem.deny_read", &fs.deny_read, &workspace)?;
    // Skeletons in scratch, once everything inside them is mounted.
    for skeleton in std::mem::take(&mut p.skeletons) {
        p.ops.push(MountOp::SealSkeleton { dst: skeleton });
    }

    // 6. Switch roots, then seal the root tmpfs.
    p.ops.push(MountOp::PivotRoot);
    p.ops.push(MountOp::RemountRootRo);

    let Planner {
        lookup,
        ops,
        placeholders,
        ..
    } = p;
    check_ops(&ops, lookup)?;
    Ok(MountPlan {
        ops,
        host_placeholders: placeholders,
        home,
    })
}

/// A bind (or symlink) derived from the Plan's path lists.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Bind {
    Mount {
        path: PathBuf,
        kind: EntryKind,
        writable: bool,
    },
    Symlink {
        link: PathBuf,
        target: PathBuf,
    },
}

impl Bind {
    fn dst(&self) -> &Path {
        match self {
            Self::Mount { path, .. } => path,
            Self::Symlink { link, .. } => link,
        }
    }
}

/// The system, read-only and writable paths as binds, validated, deduplicated and sorted
/// (component-wise, so every ancestor sorts before its descendants).
fn classify_binds(
    p: &mut Planner<'_, '_>,
    plan: &Plan,
    workspace: &Path,
    home: Option<&Path>,
) -> Result<Vec<Bind>, MountPlanError> {
    let fs = &plan.filesystem;
    check_destination("workspace", workspace, home)?;
    // dst -> (bind, field)
    let mut by_dst: BTreeMap<PathBuf, (Bind, &'static str)> = BTreeMap::new();
    let lists: [(&'static str, &[PathBuf], bool); 3] = [
        ("filesystem.system_read_only", fs.system_binds(), false),
        ("filesystem.read_only", fs.read_only_binds(), false),
        ("filesystem.writable", fs.writable_binds(), true),
    ];
    for (field, list, writable) in lists {
        let system = field == "filesystem.system_read_only";
        for raw in list {
            let path = normalize(field, raw)?;
            // The sandbox's own /dev/shm serves this grant (see `Planner::dev`).
            if !system && FsPlan::sandbox_provides(&path) {
                continue;
            }
            check_destination(field, &path, home)?;
            if path == workspace {
                return Err(MountPlanError::ConflictingGrant {
                    path,
                    first: "workspace",
                    second: field,
                });
            }
            // Writable inside the writable workspace: already granted.
            if writable && path.starts_with(workspace) {
                continue;
            }
            let bind = match p.lookup(&path)? {
                HostNode::Dir => Bind::Mount {
                    path: path.clone(),
                    kind: EntryKind::Dir,
                    writable,
                },
                HostNode::File | HostNode::Device => Bind::Mount {
                    path: path.clone(),
                    kind: EntryKind::File,
                    writable,
                },
                HostNode::Symlink { target } if system => Bind::Symlink {
                    link: path.clone(),
                    target,
                },
                HostNode::Symlink { target } => {
                    return Err(MountPlanError::UnexpectedSymlink {
                        field,
                        path,
                        target,
                    });
                }
                // A system entry removed since validation has nothing to show.
                HostNode::Missing if system => continue,
                HostNode::Missing => return Err(MountPlanError::Missing { field, path }),
                HostNode::Inaccessible { errno } => {
                    return Err(MountPlanError::Inaccessible { path, errno });
                }
            };
            match by_dst.get(&path) {
                None => {
                    by_dst.insert(path, (bind, field));
                }
                Some((existing, _)) if *existing == bind => {}
                Some((_, first)) => {
                    return Err(MountPlanError::ConflictingGrant {
                        path,
                        first,
                        second: field,
                    });
                }
            }
        }
    }
    Ok(by_dst.into_values().map(|(b, _)| b).collect())
}

/// Rejects bind destinations that are `/`, reserved, or in the private home's way.
fn check_destination(
    field: &'static str,
    path: &Path,
    home: Option<&Path>,
) -> Result<(), MountPlanError> {
    if path == Path::new("/") {
        return Err(MountPlanError::BindsRoot {
            field,
            path: path.to_path_buf(),
        });
    }
    for reserved in RESERVED_DESTINATIONS {
        if path.starts_with(reserved) {
            return Err(MountPlanError::Reserved {
                field,
                path: path.to_path_buf(),
                reserved,
            });
        }
    }
    if let Some(home) = home
        && (path.starts_with(home) || home.parent().is_some_and(|tmp| path == tmp))
    {
        return Err(MountPlanError::Reserved {
            field,
            path: path.to_path_buf(),
            reserved: PRIVATE_HOME,
        });
    }
    Ok(())
}

/// Validates `path` and returns it normalised: absolute, no NUL, no `..`, no `.` or
/// repeated separators.
fn normalize(field: &'static str, path: &Path) -> Result<PathBuf, MountPlanError> {
    if path.as_os_str().as_bytes().contains(&0) {
        return Err(MountPlanError::NulByte {
            field,
            path: path.to_path_buf(),
        });
    }
    if !path.is_absolute() {
        return Err(MountPlanError::NotAbsolute {
            field,
            path: path.to_path_buf(),
        });
    }
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(MountPlanError::ParentComponent {
                    field,
                    path: path.to_path_buf(),
                });
            }
        }
    }
    Ok(out)
}

/// What backs a mount in the new root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backing {
    /// A tmpfs the plan populates (writable during setup).
    Tmpfs,
    /// The sandbox's scratch tmpfs (`/tmp`, `/dev/shm`): writable by the program for good.
    /// A directory the plan needs there for a grant's ancestors becomes a skeleton tmpfs,
    /// sealed read-only before the pivot, so nothing the program writes beside a grant
    /// lands in scratch as if it were on the host.
    Scratch,
    /// A tmpfs already sealed read-only (`/dev` after its remount).
    SealedTmpfs,
    /// procfs or devpts: nothing is created in them.
    Kernel,
    /// A read-only host bind.
    HostRo,
    /// A writable host bind.
    HostRw,
    /// A cover: `/dev/null` or an empty read-only tmpfs.
    Cover,
}

#[derive(Debug, Clone)]
struct Mounted {
    dst: PathBuf,
    backing: Backing,
    kind: EntryKind,
}

impl Mounted {
    fn new(dst: impl Into<PathBuf>, backing: Backing, kind: EntryKind) -> Self {
        Self {
            dst: dst.into(),
            backing,
            kind,
        }
    }
}

/// What the plan created inside a tmpfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Created {
    Dir,
    File,
    Symlink,
}

/// What a protected path needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protect {
    /// Bind the existing entry over itself, read-only.
    BindSelf(EntryKind),
    /// Cover a symlink with `/dev/null`.
    CoverSymlink,
    /// Create a placeholder of this kind and cover it.
    CoverMissing(EntryKind),
}

struct Planner<'l, 'a> {
    lookup: &'l mut Lookup<'a>,
    ops: Vec<MountOp>,
    /// Mounts in the order made; the last one containing a path is what shows there.
    mounts: Vec<Mounted>,
    /// Entries created in tmpfs mounts.
    created: BTreeMap<PathBuf, Created>,
    placeholders: Vec<PathBuf>,
    /// Skeleton tmpfs mounts made in scratch, sealed read-only before the pivot.
    skeletons: Vec<PathBuf>,
}

impl Planner<'_, '_> {
    fn lookup(&mut self, path: &Path) -> Result<HostNode, MountPlanError> {
        (self.lookup)(path)
    }

    /// The mount that shows at `path`: the last one made at or above it.
    fn visible(&self, path: &Path) -> Option<&Mounted> {
        self.mounts
            .iter()
            .rev()
            .find(|m| is_at_or_under(path, &m.dst))
    }

    /// Makes sure `path` exists as a directory, creating missing ancestors and `path`
    /// itself in a tmpfs; under a host bind it must already exist on the host.
    fn ensure_dir(&mut self, path: &Path) -> Result<(), MountPlanError> {
        let mut prefix = PathBuf::from("/");
        for c in path.components().skip(1) {
            prefix.push(c);
            self.ensure_entry_as(&prefix, EntryKind::Dir, MOUNTPOINT_DIR_MODE, true)?;
        }
        Ok(())
    }

    /// Makes sure `path` exists as `kind` (its parent must already exist).
    fn ensure_entry(
        &mut self,
        path: &Path,
        kind: EntryKind,
        mode: u32,
    ) -> Result<(), MountPlanError> {
        self.ensure_entry_as(path, kind, mode, false)
    }

    /// [`Planner::ensure_entry`]; `ancestor` says `path` is only on the way to a mount
    /// point (in scratch it then becomes a skeleton tmpfs, see [`Backing::Scratch`]).
    fn ensure_entry_as(
        &mut self,
        path: &Path,
        kind: EntryKind,
        mode: u32,
        ancestor: bool,
    ) -> Result<(), MountPlanError> {
        let Some(m) = self.visible(path).cloned() else {
            return Err(not_a_dir(path, "outside every mount"));
        };
        if m.dst == path {
            return if m.kind == kind {
                Ok(())
            } else {
                Err(not_a_dir(path, "a file mount"))
            };
        }
        match m.backing {
            Backing::Scratch
                if ancestor && kind == EntryKind::Dir && !self.created.contains_key(path) =>
            {
                // A grant's ancestor in scratch: its own small tmpfs, sealed later.
                self.created.insert(path.to_path_buf(), Created::Dir);
                self.ops.push(MountOp::Dir {
                    path: path.to_path_buf(),
                    mode,
                });
                self.ops.push(MountOp::Tmpfs {
                    dst: path.to_path_buf(),
                    size_bytes: SKELETON_TMPFS_BYTES,
                    mode: MOUNTPOINT_DIR_MODE,
                });
                self.mounts
                    .push(Mounted::new(path, Backing::Tmpfs, EntryKind::Dir));
                self.skeletons.push(path.to_path_buf());
                Ok(())
            }
            Backing::Tmpfs | Backing::SealedTmpfs | Backing::Scratch => {
                match (self.created.get(path), kind) {
                    (Some(Created::Dir), EntryKind::Dir)
                    | (Some(Created::File), EntryKind::File) => Ok(()),
                    (Some(Created::Symlink), _) => Err(not_a_dir(path, "a symlink")),
                    (Some(_), _) => Err(not_a_dir(path, "of another kind")),
                    (None, _) if m.backing == Backing::SealedTmpfs => {
                        Err(not_a_dir(path, "inside a tmpfs already sealed read-only"))
                    }
                    (None, EntryKind::Dir) => {
                        self.created.insert(path.to_path_buf(), Created::Dir);
                        self.ops.push(MountOp::Dir {
                            path: path.to_path_buf(),
                            mode,
                        });
                        Ok(())
                    }
                    (None, EntryKind::File) => {
                        self.created.insert(path.to_path_buf(), Created::File);
                        self.ops.push(MountOp::File {
                            path: path.to_path_buf(),
                            mode,
                        });
                        Ok(())
                    }
                }
            }
            Backing::HostRo | Backing::HostRw => match (self.lookup(path)?, kind) {
                (HostNode::Dir, EntryKind::Dir) => Ok(()),
                (HostNode::File | HostNode::Device, EntryKind::File) => Ok(()),
                (HostNode::Missing, _) => Err(MountPlanError::Missing {
                    field: "mountpoint",
                    path: path.to_path_buf(),
                }),
                (HostNode::Inaccessible { errno }, _) => Err(MountPlanError::Inaccessible {
                    path: path.to_path_buf(),
                    errno,
                }),
                (HostNode::Symlink { .. }, _) => Err(not_a_dir(path, "a symlink on the host")),
                _ => Err(not_a_dir(path, "of another kind on the host")),
            },
            Backing::Kernel | Backing::Cover => {
                Err(not_a_dir(path, "inside a mount nothing is created in"))
            }
        }
    }

    /// A mountpoint of `kind` at `path`, with its ancestors.
    fn ensure_mountpoint(&mut self, path: &Path, kind: EntryKind) -> Result<(), MountPlanError> {
        if let Some(parent) = path.parent() {
            self.ensure_dir(parent)?;
        }
        let mode = match kind {
            EntryKind::Dir => MOUNTPOINT_DIR_MODE,
            EntryKind::File => MOUNTPOINT_FILE_MODE,
        };
        self.ensure_entry(path, kind, mode)
    }

    fn symlink(&mut self, link: &Path, target: &Path) -> Result<(), MountPlanError> {
        if let Some(parent) = link.parent() {
            self.ensure_dir(parent)?;
        }
        match self.visible(link).map(|m| (m.backing, m.dst == link)) {
            Some((Backing::Tmpfs, false)) if !self.created.contains_key(link) => {
                self.created.insert(link.to_path_buf(), Created::Symlink);
                self.ops.push(MountOp::Symlink {
                    target: target.to_path_buf(),
                    link: link.to_path_buf(),
                });
                Ok(())
            }
            _ => Err(not_a_dir(link, "not creatable as a symlink")),
        }
    }

    fn mount(&mut self, op: MountOp, backing: Backing) -> Result<(), MountPlanError> {
        let (Some(dst), Some(kind)) = (op.dst().map(Path::to_path_buf), op.mountpoint_kind())
        else {
            return Err(MountPlanError::Invariant {
                index: self.ops.len(),
                op: op.to_string(),
                rule: "not a mount",
            });
        };
        self.ensure_mountpoint(&dst, kind)?;
        self.ops.push(op);
        self.mounts.push(Mounted::new(dst, backing, kind));
        Ok(())
    }

    fn remount_ro(&mut self, dst: &Path, allow_devices: bool) {
        self.ops.push(MountOp::RemountRo {
            dst: dst.to_path_buf(),
            allow_devices,
        });
    }

    fn proc(&mut self) -> Result<(), MountPlanError> {
        self.mount(
            MountOp::Proc {
                dst: PathBuf::from("/proc"),
            },
            Backing::Kernel,
        )?;
        // Host-wide state masked in the proc mount itself: no host lookup (the sandbox's
        // proc is the kernel's, whatever the host's /proc shows).
        for (path, cover) in PROC_MASKED {
            self.ops.push(MountOp::ProcKnob {
                dst: PathBuf::from(path),
                cover: *cover,
            });
        }
        Ok(())
    }

    /// `/dev`: tmpfs, device binds, directories and symlinks, sealed read-only (devices
    /// allowed), then the writable `/dev/shm` (unless `dev_shm = "none"`) and the private `/dev/pts` on top.
    fn dev(&mut self, plan: &Plan) -> Result<(), MountPlanError> {
        let dev = PathBuf::from("/dev");
        self.mount(
            MountOp::Tmpfs {
                dst: dev.clone(),
                size_bytes: DEV_TMPFS_BYTES,
                mode: DEV_DIR_MODE,
            },
            Backing::Tmpfs,
        )?;
        for node in DEV_NODES {
            let path = PathBuf::from(node);
            match self.lookup(&path)? {
                HostNode::Device => self.mount(
                    MountOp::DevNode {
                        src: path.clone(),
                        dst: path,
                    },
                    Backing::HostRo,
                )?,
                other if *node == "/dev/null" => {
                    return Err(MountPlanError::NoDevNull {
                        found: node_name(&other),
                    });
                }
                _ => {}
            }
        }
        let (shm, pts) = (PathBuf::from("/dev/shm"), PathBuf::from("/dev/pts"));
        self.ensure_mountpoint(&shm, EntryKind::Dir)?;
        self.ensure_mountpoint(&pts, EntryKind::Dir)?;
        for (link, target) in DEV_SYMLINKS {
            self.symlink(Path::new(link), Path::new(target))?;
        }
        self.remount_ro(&dev, true);
        if let Some(m) = self.mounts.iter_mut().find(|m| m.dst == dev) {
            m.backing = Backing::SealedTmpfs;
        }
        // `dev_shm = "none"`: the empty directory of the sealed /dev.
        if plan.filesystem.dev_shm == DevShm::Private {
            self.mount(
                MountOp::Tmpfs {
                    dst: shm,
                    size_bytes: dev_shm_size_bytes(plan),
                    mode: SCRATCH_DIR_MODE,
                },
                Backing::Scratch,
            )?;
        }
        self.mount(MountOp::DevPts { dst: pts }, Backing::Kernel)
    }

    fn tmp(&mut self, plan: &Plan, home: Option<&Path>) -> Result<(), MountPlanError> {
        self.mount(
            MountOp::Tmpfs {
                dst: PathBuf::from("/tmp"),
                size_bytes: tmp_size_bytes(plan),
                mode: SCRATCH_DIR_MODE,
            },
            Backing::Scratch,
        )?;
        if let Some(home) = home {
            // The private home is the program's own scratch, not a skeleton.
            self.created.insert(home.to_path_buf(), Created::Dir);
            self.ops.push(MountOp::Dir {
                path: home.to_path_buf(),
                mode: PRIVATE_HOME_MODE,
            });
        }
        Ok(())
    }

    fn emit_bind(&mut self, bind: &Bind) -> Result<(), MountPlanError> {
        match bind {
            Bind::Symlink { link, target } => self.symlink(link, target),
            Bind::Mount {
                path,
                kind,
                writable: true,
            } => self.mount(
                MountOp::BindRw {
                    src: path.clone(),
                    dst: path.clone(),
                    kind: *kind,
                },
                Backing::HostRw,
            ),
            Bind::Mount {
                path,
                kind,
                writable: false,
            } => {
                self.mount(
                    MountOp::BindRo {
                        src: path.clone(),
                        dst: path.clone(),
                        kind: *kind,
                    },
                    Backing::HostRo,
                )?;
                self.remount_ro(path, false);
                Ok(())
            }
        }
    }

    /// Resolves `path` through host symlinks, as the kernel would (lexically below the
    /// first missing or non-directory component).
    fn resolve(&mut self, field: &'static str, path: &Path) -> Result<PathBuf, MountPlanError> {
        let mut rest: VecDeque<PathBuf> = path
            .components()
            .skip(1)
            .map(|c| PathBuf::from(c.as_os_str()))
            .collect();
        let mut resolved = PathBuf::from("/");
        let mut hops = 0;
        let mut missing = false;
        while let Some(c) = rest.pop_front() {
            if c == Path::new("..") {
                resolved.pop();
                continue;
            }
            if c == Path::new(".") {
                continue;
            }
            let next = resolved.join(&c);
            if missing {
                resolved = next;
                continue;
            }
            match self.lookup(&next)? {
                HostNode::Dir => resolved = next,
                HostNode::Symlink { target } => {
                    hops += 1;
                    if hops > MAX_SYMLINK_HOPS {
                        return Err(MountPlanError::SymlinkLoop {
                            field,
                            path: path.to_path_buf(),
                        });
                    }
                    if target.is_absolute() {
                        resolved = PathBuf::from("/");
                    }
                    for tc in target.components().rev() {
                        if !matches!(tc, Component::RootDir) {
                            rest.push_front(PathBuf::from(tc.as_os_str()));
                        }
                    }
                }
                HostNode::File | HostNode::Device | HostNode::Missing => {
                    resolved = next;
                    missing = true;
                }
                HostNode::Inaccessible { errno } => {
                    return Err(MountPlanError::Inaccessible { path: next, errno });
                }
            }
        }
        Ok(resolved)
    }

    /// Walks `path` below `base` (both normalised, `path` strictly inside `base`) and
    /// records what protects it; see the module docs for the table.
    fn walk_protected(
        &mut self,
        path: &Path,
        base: &Path,
        follow_links: bool,
        targets: &mut BTreeMap<PathBuf, Protect>,
    ) -> Result<(), MountPlanError> {
        let Ok(rel) = path.strip_prefix(base) else {
            return Ok(());
        };
        let comps: Vec<_> = rel.components().collect();
        let mut q = base.to_path_buf();
        for (i, c) in comps.iter().enumerate() {
            q.push(c);
            let last = i + 1 == comps.len();
            let found = match self.lookup(&q)? {
                HostNode::Dir if !last => continue,
                HostNode::Dir => Protect::BindSelf(EntryKind::Dir),
                HostNode::File | HostNode::Device => Protect::BindSelf(EntryKind::File),
                HostNode::Symlink { .. } => {
                    if follow_links {
                        self.protect_link_target(path, targets)?;
                    }
                    Protect::CoverSymlink
                }
                HostNode::Missing => {
                    // Only what the sandbox could create needs covering.
                    if self.visible(&q).map(|m| m.backing) != Some(Backing::HostRw) {
                        return Ok(());
                    }
                    // A missing last component is covered as a file, except a git
                    // directory: an empty `.git` directory is no repository to git, which
                    // goes on searching above, where an empty `.git` file is fatal.
                    Protect::CoverMissing(if last && c.as_os_str() != ".git" {
                        EntryKind::File
                    } else {
                        EntryKind::Dir
                    })
                }
                HostNode::Inaccessible { errno } => {
                    return Err(MountPlanError::Inaccessible { path: q, errno });
                }
            };
            let merged = match (targets.get(&q), found) {
                (Some(Protect::CoverMissing(EntryKind::Dir)), Protect::CoverMissing(_)) => {
                    Protect::CoverMissing(EntryKind::Dir)
                }
                _ => found,
            };
            targets.insert(q, merged);
            return Ok(());
        }
        Ok(())
    }

    /// The host's git follows a protected symlink: when the fully resolved path lands in
    /// a sandbox-writable bind, protect it there too.
    fn protect_link_target(
        &mut self,
        path: &Path,
        targets: &mut BTreeMap<PathBuf, Protect>,
    ) -> Result<(), MountPlanError> {
        let resolved = match self.resolve("filesystem.protected", path) {
            Ok(r) => r,
            // A loop cannot be followed by the host either; the symlink is covered.
            Err(MountPlanError::SymlinkLoop { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let Some(m) = self.visible(&resolved).cloned() else {
            return Ok(());
        };
        if m.backing != Backing::HostRw {
            return Ok(());
        }
        if resolved == m.dst {
            targets.insert(resolved, Protect::BindSelf(m.kind));
            return Ok(());
        }
        self.walk_protected(&resolved, &m.dst, false, targets)
    }

    fn protect(&mut self, protected: &[PathBuf], workspace: &Path) -> Result<(), MountPlanError> {
        let mut targets = BTreeMap::new();
        for raw in protected {
            let path = normalize("filesystem.protected", raw)?;
            if path == workspace || !path.starts_with(workspace) {
                return Err(MountPlanError::ProtectedOutsideWorkspace {
                    path,
                    workspace: workspace.to_path_buf(),
                });
            }
            self.walk_protected(&path, workspace, true, &mut targets)?;
        }
        // A target inside another is already read-only or hidden by it.
        let mut kept: Vec<(PathBuf, Protect)> = Vec::new();
        for (q, t) in targets {
            if !kept.iter().any(|(k, _)| q.starts_with(k)) {
                kept.push((q, t));
            }
        }
        // Pin every directory between the workspace and a protected path with a writable
        // self-bind: a mount point cannot be renamed or removed (EBUSY), so `mv .git x`
        // followed by a fresh `.git/hooks` is impossible. Ancestors first, before the
        // binds and covers inside them.
        let mut pins: std::collections::BTreeSet<PathBuf> = std::collections::BTreeSet::new();
        for (q, _) in &kept {
            for anc in q.ancestors().skip(1) {
                if anc == workspace || !anc.starts_with(workspace) {
                    break;
                }
                pins.insert(anc.to_path_buf());
            }
        }
        for pin in pins {
            let writable = self
                .visible(&pin)
                .is_some_and(|m| m.backing == Backing::HostRw);
            if writable && self.lookup(&pin)? == HostNode::Dir {
                self.emit_bind(&Bind::Mount {
                    path: pin,
                    kind: EntryKind::Dir,
                    writable: true,
                })?;
            }
        }
        // Placeholders first, while everything they are created in is still writable.
        for (q, t) in &kept {
            if let Protect::CoverMissing(kind) = t {
                self.ops.push(MountOp::HostPlaceholder {
                    path: q.clone(),
                    kind: *kind,
                });
                self.placeholders.push(q.clone());
            }
        }
        for (q, t) in kept {
            match t {
                Protect::BindSelf(kind) => {
                    self.emit_bind(&Bind::Mount {
                        path: q,
                        kind,
                        writable: false,
                    })?;
                }
                Protect::CoverSymlink => self.cover_dev_null(&q),
                Protect::CoverMissing(EntryKind::File) => self.cover_empty_file(&q),
                Protect::CoverMissing(EntryKind::Dir) => self.cover_empty_dir(&q),
            }
        }
        Ok(())
    }

    fn cover_dev_null(&mut self, dst: &Path) {
        self.ops.push(MountOp::CoverWithDevNull {
            dst: dst.to_path_buf(),
        });
        self.mounts
            .push(Mounted::new(dst, Backing::Cover, EntryKind::File));
        self.remount_ro(dst, false);
    }

    /// A missing protected file: its empty host placeholder (created by the op just
    /// before) bound onto itself read-only, so it reads as an empty regular file — what
    /// git takes for "absent" (an empty `commondir` is ignored, where an unreadable one
    /// is fatal) — and cannot be written, replaced or removed.
    fn cover_empty_file(&mut self, dst: &Path) {
        self.ops.push(MountOp::BindRo {
            src: dst.to_path_buf(),
            dst: dst.to_path_buf(),
            kind: EntryKind::File,
        });
        self.mounts
            .push(Mounted::new(dst, Backing::HostRo, EntryKind::File));
        self.remount_ro(dst, false);
    }

    fn cover_empty_dir(&mut self, dst: &Path) {
        self.ops.push(MountOp::CoverWithEmptyDir {
            dst: dst.to_path_buf(),
        });
        self.mounts
            .push(Mounted::new(dst, Backing::Cover, EntryKind::Dir));
    }

    fn deny(
        &mut self,
        field: &'static str,
        deny: &[PathBuf],
        workspace: &Path,
    ) -> Result<(), MountPlanError> {
        let mut targets: BTreeMap<PathBuf, EntryKind> = BTreeMap::new();
        for raw in deny {
            let path = normalize(field, raw)?;
            let resolved = self.resolve(field, &path)?;
            if workspace.starts_with(&resolved) {
                return Err(MountPlanError::DenyHidesWorkspace {
                    path: resolved,
                    workspace: workspace.to_path_buf(),
                });
            }
            let visible = self
                .visible(&resolved)
                .is_some_and(|m| matches!(m.backing, Backing::HostRo | Backing::HostRw));
            if !visible {
                continue;
            }
            let kind = match self.lookup(&resolved)? {
                HostNode::Dir => EntryKind::Dir,
                HostNode::File | HostNode::Device | HostNode::Symlink { .. } => EntryKind::File,
                HostNode::Missing => continue,
                HostNode::Inaccessible { errno } => {
                    return Err(MountPlanError::Inaccessible {
                        path: resolved,
                        errno,
                    });
                }
            };
            targets.insert(resolved, kind);
        }
        let mut kept: Vec<PathBuf> = Vec::new();
        for (q, kind) in targets {
            if kept.iter().any(|k| q.starts_with(k)) {
                continue;
            }
            match kind {
                EntryKind::Dir => self.cover_empty_dir(&q),
                EntryKind::File => self.cover_dev_null(&q),
            }
            kept.push(q);
        }
        Ok(())
    }
}

/// `path.starts_with(prefix)` for normalised absolute paths, on bytes: `Path::starts_with`
/// parses both paths into components on every call, which made the planner's
/// mount-visibility lookups its main cost.
fn is_at_or_under(path: &Path, prefix: &Path) -> bool {
    let (p, q) = (path.as_os_str().as_bytes(), prefix.as_os_str().as_bytes());
    if q == b"/" {
        return p.first() == Some(&b'/');
    }
    p.starts_with(q) && (p.len() == q.len() || p[q.len()] == b'/')
}

fn not_a_dir(path: &Path, found: &'static str) -> MountPlanError {
    MountPlanError::NotADirectory {
        path: path.to_path_buf(),
        found,
    }
}

fn node_name(node: &HostNode) -> &'static str {
    match node {
        HostNode::Dir => "a directory",
        HostNode::File => "a file",
        HostNode::Device => "a device",
        HostNode::Symlink { .. } => "a symlink",
        HostNode::Missing => "missing",
        HostNode::Inaccessible { .. } => "inaccessible",
    }
}

/// Re-checks a finished op list against the module's invariants by replaying it on a
/// model of the new root (host facts from `lookup`). Used by [`mount_plan`] on its own
/// output and by the tests on hand-made lists.
pub(crate) fn check_ops(ops: &[MountOp], lookup: &mut Lookup<'_>) -> Result<(), MountPlanError> {
    let fail = |index: usize, rule: &'static str| MountPlanError::Invariant {
        index,
        op: ops.get(index).map(ToString::to_string).unwrap_or_default(),
        rule,
    };
    if !matches!(ops.first(), Some(MountOp::TmpfsRoot { .. })) {
        return Err(fail(0, "the first op must be the root tmpfs"));
    }
    let pivot = ops
        .iter()
        .position(|op| *op == MountOp::PivotRoot)
        .ok_or_else(|| fail(ops.len(), "no pivot_root"))?;
    if ops.get(pivot + 1..) != Some(&[MountOp::RemountRootRo][..]) {
        return Err(fail(
            pivot,
            "pivot_root must be followed by the root remount, last",
        ));
    }
    let mut model = Model {
        mounts: vec![Mounted::new("/", Backing::Tmpfs, EntryKind::Dir)],
        created: BTreeMap::new(),
        host_created: BTreeMap::new(),
    };
    for (i, op) in ops.iter().enumerate().take(pivot).skip(1) {
        let Some(dst) = op.dst() else {
            return Err(fail(i, "a root op in the middle of the list"));
        };
        if normalize("op", dst).ok().as_deref() != Some(dst) || dst == Path::new("/") {
            return Err(fail(i, "path not absolute, normalised and below /"));
        }
        let parent = dst.parent().unwrap_or(Path::new("/"));
        if !model.is(parent, EntryKind::Dir, lookup)? {
            return Err(fail(i, "parent directory does not exist yet"));
        }
        if let Some(src) = op.bind_src() {
            let ok = match op {
                MountOp::DevNode { .. } => DEV_NODES.iter().any(|n| src == Path::new(n)),
                _ => src == dst,
            };
            if !ok {
                return Err(fail(i, "bind source differs from its destination"));
            }
        }
        match op {
            MountOp::Dir { .. } | MountOp::File { .. } | MountOp::Symlink { .. } => {
                let in_tmpfs = model
                    .visible(dst)
                    .is_some_and(|m| m.backing == Backing::Tmpfs && m.dst != dst);
                if !in_tmpfs {
                    return Err(fail(i, "created outside a writable tmpfs"));
                }
                if model.exists(dst, lookup)? {
                    return Err(fail(i, "created twice"));
                }
                let c = match op {
                    MountOp::Dir { .. } => Created::Dir,
                    MountOp::File { .. } => Created::File,
                    _ => Created::Symlink,
                };
                model.created.insert(dst.to_path_buf(), c);
            }
            MountOp::HostPlaceholder { kind, .. } => {
                if model.visible(dst).map(|m| m.backing) != Some(Backing::HostRw)
                    || model.exists(dst, lookup)?
                {
                    return Err(fail(i, "placeholder not new in a writable host bind"));
                }
                model.host_created.insert(dst.to_path_buf(), *kind);
            }
            MountOp::ProcKnob { .. } => {
                let in_proc = model
                    .visible(dst)
                    .is_some_and(|m| m.backing == Backing::Kernel && m.dst == Path::new("/proc"))
                    && parent == Path::new("/proc");
                if !in_proc {
                    return Err(fail(i, "a proc mask outside the sandbox's /proc"));
                }
            }
            MountOp::SealSkeleton { .. } => {
                let Some(m) = model.mounts.iter_mut().rev().find(|m| m.dst == dst) else {
                    return Err(fail(i, "seal of something that is not a mount"));
                };
                if m.backing != Backing::Tmpfs {
                    return Err(fail(i, "seal of a mount that is not a tmpfs"));
                }
                m.backing = Backing::SealedTmpfs;
            }
            MountOp::RemountRo { allow_devices, .. } => {
                let Some(m) = model.mounts.iter_mut().rev().find(|m| m.dst == dst) else {
                    return Err(fail(i, "remount of something that is not a mount"));
                };
                if *allow_devices && dst != Path::new("/dev") {
                    return Err(fail(i, "devices allowed outside /dev"));
                }
                if m.backing == Backing::Tmpfs {
                    m.backing = Backing::SealedTmpfs;
                }
            }
            _ => {
                let kind = op.mountpoint_kind().ok_or_else(|| fail(i, "unknown op"))?;
                let on_symlink = matches!(op, MountOp::CoverWithDevNull { .. })
                    && model.is_symlink(dst, lookup)?;
                if !on_symlink && !model.is(dst, kind, lookup)? {
                    return Err(fail(i, "mountpoint missing or of the wrong kind"));
                }
                let backing = match op {
                    MountOp::Tmpfs { .. } => Backing::Tmpfs,
                    MountOp::Proc { .. } | MountOp::DevPts { .. } => Backing::Kernel,
                    MountOp::BindRw { .. } => Backing::HostRw,
                    MountOp::CoverWithDevNull { .. } | MountOp::CoverWithEmptyDir { .. } => {
                        Backing::Cover
                    }
                    _ => Backing::HostRo,
                };
                model.mounts.push(Mounted::new(dst, backing, kind));
            }
        }
    }
    // Every bind that must end read-only is followed by a remount of it or of a mount
    // containing it, before the pivot.
    for (i, op) in ops.iter().enumerate().take(pivot) {
        let needs = matches!(
            op,
            MountOp::BindRo { .. } | MountOp::DevNode { .. } | MountOp::CoverWithDevNull { .. }
        );
        let Some(dst) = op.dst().filter(|_| needs) else {
            continue;
        };
        let sealed = ops.get(i + 1..pivot).is_some_and(|later| {
            later
                .iter()
                .any(|l| matches!(l, MountOp::RemountRo { dst: d, .. } if dst.starts_with(d)))
        });
        if !sealed {
            return Err(fail(i, "read-only bind never remounted read-only"));
        }
    }
    // No mount is hidden by a later non-cover mount at one of its ancestors.
    for (i, op) in ops.iter().enumerate().take(pivot) {
        let Some(dst) = op.dst().filter(|_| op.is_mount()) else {
            continue;
        };
        let shadowed = ops.get(i + 1..pivot).is_some_and(|later| {
            later.iter().any(|l| {
                l.is_mount()
                    && !matches!(
                        l,
                        MountOp::CoverWithDevNull { .. }
                            | MountOp::CoverWithEmptyDir { .. }
                            | MountOp::ProcKnob { .. }
                    )
                    && l.dst().is_some_and(|d| dst.starts_with(d) && dst != d)
            })
        });
        if shadowed {
            return Err(fail(i, "hidden by a later mount above it"));
        }
    }
    Ok(())
}

/// The op-list replay model of [`check_ops`].
struct Model {
    mounts: Vec<Mounted>,
    created: BTreeMap<PathBuf, Created>,
    host_created: BTreeMap<PathBuf, EntryKind>,
}

impl Model {
    fn visible(&self, path: &Path) -> Option<&Mounted> {
        self.mounts
            .iter()
            .rev()
            .find(|m| is_at_or_under(path, &m.dst))
    }

    /// What is at `path` in the new root, as (exists, kind, is_symlink).
    fn at(
        &self,
        path: &Path,
        lookup: &mut Lookup<'_>,
    ) -> Result<Option<(EntryKind, bool)>, MountPlanError> {
        let Some(m) = self.visible(path) else {
            return Ok(None);
        };
        if m.dst == path {
            return Ok(Some((m.kind, false)));
        }
        Ok(match m.backing {
            Backing::Tmpfs | Backing::SealedTmpfs | Backing::Scratch => {
                match self.created.get(path) {
                    Some(Created::Dir) => Some((EntryKind::Dir, false)),
                    Some(Created::File) => Some((EntryKind::File, false)),
                    Some(Created::Symlink) => Some((EntryKind::File, true)),
                    None => None,
                }
            }
            Backing::HostRo | Backing::HostRw => {
                if let Some(kind) = self.host_created.get(path) {
                    return Ok(Some((*kind, false)));
                }
                match lookup(path)? {
                    HostNode::Dir => Some((EntryKind::Dir, false)),
                    HostNode::File | HostNode::Device => Some((EntryKind::File, false)),
                    HostNode::Symlink { .. } => Some((EntryKind::File, true)),
                    HostNode::Missing | HostNode::Inaccessible { .. } => None,
                }
            }
            Backing::Kernel | Backing::Cover => None,
        })
    }

    fn exists(&self, path: &Path, lookup: &mut Lookup<'_>) -> Result<bool, MountPlanError> {
        Ok(self.at(path, lookup)?.is_some())
    }

    fn is(
        &self,
        path: &Path,
        kind: EntryKind,
        lookup: &mut Lookup<'_>,
    ) -> Result<bool, MountPlanError> {
        if path == Path::new("/") {
            return Ok(kind == EntryKind::Dir);
        }
        Ok(self.at(path, lookup)? == Some((kind, false)))
    }

    fn is_symlink(&self, path: &Path, lookup: &mut Lookup<'_>) -> Result<bool, MountPlanError> {
        Ok(matches!(self.at(path, lookup)?, Some((_, true))))
    }
}

#[cfg(test)]
#[path = "mounts_tests.rs"]
mod tests;
