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
//! | a missing component whose parent is sandbox-writable | `HostPlaceholder` (an empty directory when more components follow, a file when it is the last: empty, or for a git directory's `commondir` holding `.`, which git needs to read), then `CoverWithEmptyDir` / a read-only bind of the file onto itself |
//! | a missing `.git` with more components to follow (only entries of a repository listed, not `.git`) | nothing: the run may make its own repository, reported after the run |
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
//!
//! # Layout
//!
//! The ops and their errors are here; `host.rs` describes the host filesystem the plan is
//! built against ([`HostView`]), `plan.rs` is the planner that builds the ops in the
//! order above, and `check.rs` the model checker that replays them over a model of the
//! sandbox's tree and refuses a plan that breaks an invariant.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use tierbox_policy::plan::FsPlan;
use tierbox_policy::{DevShm, Plan};

mod check;
mod host;
mod model;
mod plan;
pub(crate) mod protect;

use check::check_ops;
pub(crate) use host::lstat_host;
pub use host::{HostNode, HostView};
use plan::{Lookup, build};

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

/// Size of the sandbox's `/tmp` tmpfs for `plan`: its disk limit (`limits.disk_bytes`),
/// at most its memory limit and [`TMP_TMPFS_MAX_BYTES`].
pub fn tmp_size_bytes(plan: &Plan) -> u64 {
    TMP_TMPFS_MAX_BYTES
        .min(plan.limits.memory_bytes)
        .min(plan.limits.disk_bytes)
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
    /// Create a file `path` (`O_CREAT | O_EXCL`) in a tmpfs the plan mounted: empty, as
    /// the mountpoint of a file bind, or holding `contents` (a [`TmpFile`] the run is
    /// given in its `/tmp`).
    File {
        /// The file.
        path: PathBuf,
        /// Its mode.
        mode: u32,
        /// What it holds (`None`: empty).
        contents: Option<FileContents>,
    },
    /// `symlink(target, link)` in a tmpfs the plan mounted.
    Symlink {
        /// The link's content, verbatim (relative targets stay relative).
        target: PathBuf,
        /// Where the link is created.
        link: PathBuf,
    },
    /// A fresh procfs for the new pid namespace, read-only as a whole: that covers the
    /// kernel's global knobs (the container runtimes' "readonly" paths: moby's
    /// `oci/defaults.go`, runc's `readonlyPaths` — `/proc/sys`, whose global sysctls check
    /// only that the writer's *host* uid is 0; `sysrq-trigger`, which reboots or crashes the
    /// host; `irq`, `bus` and `fs`, which tune host devices and filesystems) and every other
    /// entry. Writes through `/proc/self/fd/N` reach the file the descriptor names, not
    /// procfs, and keep working.
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
    /// The workspace in overlay (review) mode: the host directory `lower` becomes the
    /// read-only lower layer of an overlayfs mounted on `dst`, with an upper layer of the
    /// run's own in a tmpfs of `size_bytes` (`limits.disk_bytes`: a write past it fails
    /// with `ENOSPC`). The executor binds `lower` on a staging directory (idmapped, like a
    /// writable bind, when its owner is not the sandbox's), mounts the tmpfs on another,
    /// makes the upper and work directories there (the upper one with the lower root's
    /// owner and mode, which the overlay's root shows), mounts
    /// `overlay` on `dst` with `MS_NOSUID | MS_NODEV`, and sends an fd of the tmpfs to the
    /// supervisor, which reads the run's changes from it once the run ends. Every
    /// staging mount is detached with the host tree at the final pivot; the overlay keeps
    /// its own references to its layers.
    Overlay {
        /// Host path of the workspace (never a symlink).
        lower: PathBuf,
        /// Same path in the new root.
        dst: PathBuf,
        /// Size of the upper layer's tmpfs, in bytes.
        size_bytes: u64,
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
            | Self::Overlay { dst, .. }
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
            Self::Overlay { lower, .. } => Some(lower),
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
                | Self::Overlay { .. }
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
            | Self::Overlay { .. }
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
            Self::File {
                path,
                mode,
                contents,
            } => {
                write!(f, "file {} mode={mode:o}", path.display())?;
                match contents {
                    Some(c) => write!(f, " bytes={}", c.0.len()),
                    None => Ok(()),
                }
            }
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
            Self::Overlay {
                lower,
                dst,
                size_bytes,
            } => write!(
                f,
                "overlay {} -> {} (upper: tmpfs size={size_bytes})",
                lower.display(),
                dst.display()
            ),
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
    /// Bind sources that must be sockets when the executor opens them (the plan's
    /// `egress.unix_sockets`): anything else there fails the run.
    pub sockets: Vec<PathBuf>,
}

impl MountPlan {
    /// Whether the plan mounts the workspace through an overlay ([`MountOp::Overlay`]).
    pub fn has_overlay(&self) -> bool {
        self.ops
            .iter()
            .any(|op| matches!(op, MountOp::Overlay { .. }))
    }

    /// Whether the executor hands an fd of what `op` mounts to the supervisor: the
    /// sandbox's `/tmp` (whose fullness is `limit_hit: "disk"`). The overlay's upper
    /// layer is handed over too, by the overlay's own ops.
    pub fn is_sent(op: &MountOp) -> bool {
        matches!(op, MountOp::Tmpfs { dst, .. } if dst == Path::new("/tmp"))
    }

    /// How many fds the executor hands to the supervisor: `/tmp`'s and the upper
    /// layer's.
    pub fn sent_fds(&self) -> usize {
        self.ops
            .iter()
            .filter(|op| Self::is_sent(op) || matches!(op, MountOp::Overlay { .. }))
            .count()
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
#[cfg(test)]
pub fn mount_plan(plan: &Plan, host: &HostView) -> Result<MountPlan, MountPlanError> {
    mount_plan_with(plan, host, &[])
}

/// [`mount_plan`], with `files` created in the sandbox's `/tmp` right after it is
/// mounted (before any grant beneath `/tmp` is bound).
pub fn mount_plan_with(
    plan: &Plan,
    host: &HostView,
    files: &[TmpFile],
) -> Result<MountPlan, MountPlanError> {
    let mut lookup = |p: &Path| host.node(p);
    build(plan, &mut lookup, files)
}

/// A file the run finds in its private `/tmp`, written by the sandbox's setup before the
/// program starts: the egress proxy's trust bundle ([`crate::egress::CA_BUNDLE_FILE`]).
/// Read-only for the program's user (mode [`TMP_FILE_MODE`]); the program may still
/// remove it, as anything of its own `/tmp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TmpFile {
    /// Its name, directly under `/tmp` (one component).
    pub name: String,
    /// Its bytes.
    pub contents: FileContents,
}

/// Mode of a [`TmpFile`]: readable by everyone, writable by no one.
pub const TMP_FILE_MODE: u32 = 0o444;

/// A file's contents, shown by size only (a trust bundle is some 200 KiB of PEM).
#[derive(Clone, PartialEq, Eq)]
pub struct FileContents(pub std::sync::Arc<str>);

impl fmt::Debug for FileContents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FileContents({} bytes)", self.0.len())
    }
}

#[cfg(test)]
mod tests;
