//! Where the repositories of a workspace are: every directory holding a `.git`, at any
//! depth, in any directory (`node_modules/`, `target/` and `vendor/` included), found
//! before each run so their git directories can be kept read-only, and again after it so
//! the outcome names those that appeared meanwhile.
//!
//! Invariants:
//!
//! - **Complete or refused.** The search has two limits, both policy keys: the directory
//!   entries it reads ([`ScanLimits::max_entries`], `filesystem.repo_scan_max_entries`)
//!   and the repositories it finds ([`ScanLimits::max_repos`],
//!   `filesystem.max_protected_repos`: each costs mounts at launch). A workspace past
//!   either is a [`ScanIncomplete`] naming the limit, what was counted and the key that
//!   raises it — before a run, a rejection (`scope.protection_incomplete`), never a run
//!   whose report says its protection applied when part of it did not. A directory whose
//!   path is longer than [`MAX_SCANNED_PATH_BYTES`] (no mount can be placed there) is the
//!   third limit, raised by no key.
//! - **Nothing followed.** Every directory is opened beneath the workspace with
//!   `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` (or, on a
//!   kernel without it, component by component with `O_NOFOLLOW`): a directory a run
//!   swaps for a symlink is not searched through, and the search never reads outside the
//!   workspace with the supervisor's rights.
//! - **Fresh for every run, without rereading every directory.** The result of the last
//!   search of a workspace is kept per directory with the directory's device, inode and
//!   change time. A directory whose entries changed has a new change time (an entry added,
//!   removed or renamed changes it, and no unprivileged process can set it: `utimensat`
//!   sets only access and modification times), so each search stats every directory and
//!   rereads only those that changed. A listing taken within [`RACY_MARGIN`] of the
//!   directory's change time is not trusted the next time (coarse kernel clocks and
//!   filesystem timestamp granularity could hide a change made in the same tick), the
//!   rule git's index uses for "racily clean" entries. A run's decoy repositories are
//!   therefore seen by the next run's search, whatever the cache holds. A process with
//!   a state directory also keeps the listing there ([`REPO_SCAN_CACHE_DIR`], trusted only
//!   when private to the state directory's owner, as the system-paths cache), so a
//!   one-shot `tierbox run` in a large workspace checks it instead of rereading it all;
//!   every directory of a listing read back is checked the same way.
//!
//! Directories of kernel pseudo-filesystems ([`PSEUDO_FILESYSTEMS`]: `/proc`, `/sys`,
//! cgroup, `devpts`, …), where no program can create a repository, are not searched (a
//! workspace root that holds them needs `danger_any_workspace_root`).
//!
//! What a search cannot see: a repository created after it (by the run, or by the host
//! during the run) is not protected by that run; the search after the run finds it and
//! the outcome names it (`created_git_dirs`).

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// Default of `filesystem.repo_scan_max_entries`: directory entries read while
/// searching one workspace for repositories (1 000 000; ~0.5 s of a cold search on a
/// 2-core VM, a few milliseconds per 10 000 directories once kept).
pub const DEFAULT_REPO_SCAN_MAX_ENTRIES: u64 = 1_000_000;

/// Highest `filesystem.repo_scan_max_entries` a policy may set (50 000 000).
pub const MAX_REPO_SCAN_MAX_ENTRIES: u64 = 50_000_000;

/// Default of `filesystem.max_protected_repos`: repositories kept read-only in one
/// workspace (256; each costs a read-only bind and one self-bind per directory above it
/// at launch).
pub const DEFAULT_MAX_PROTECTED_REPOS: u64 = 256;

/// Highest `filesystem.max_protected_repos` a policy may set (4 096): the mounts of a
/// launch stay well below the kernel's per-namespace limit (`fs.mount-max`, 100 000).
pub const MAX_MAX_PROTECTED_REPOS: u64 = 4096;

/// Longest path, in bytes, of a directory the search descends into (Linux `PATH_MAX`):
/// a read-only mount can be placed only at a path the kernel accepts.
pub const MAX_SCANNED_PATH_BYTES: usize = 4095;

/// How long before a listing a directory's change time must lie for the listing to be
/// trusted by the next search (2 s: coarse clock ticks, and filesystems whose timestamps
/// have a one- or two-second granularity).
pub const RACY_MARGIN: Duration = Duration::from_secs(2);

/// Workspaces whose last search is kept (the least recently searched is dropped).
pub const KEPT_WORKSPACES: usize = 16;

/// Directories kept over all kept workspaces (each ~100 bytes plus its subdirectories'
/// names): bounds the memory the kept searches take. A search with more is not kept.
pub const KEPT_DIRECTORIES: usize = 1_000_000;

/// The `statfs` types of the kernel pseudo-filesystems the search does not enter (no
/// program can make a directory named `.git` in them): proc, sysfs, cgroup v1 and v2,
/// devpts, debugfs, tracefs, securityfs, bpf, pstore, configfs, efivarfs, binfmt_misc,
/// fusectl, mqueue, nsfs.
pub const PSEUDO_FILESYSTEMS: &[i64] = &[
    0x9fa0,
    0x6265_6572,
    0x0027_e0eb,
    0x6367_7270,
    0x1cd1,
    0x6462_6720,
    0x7472_6163,
    0x7363_6673,
    0xcafe_4a11,
    0x6165_676c,
    0x6265_6570,
    0xde5e_81e4,
    0x4249_4e4d,
    0x6573_5543,
    0x1980_0202,
    0x6e73_6673,
];

/// The limits of one search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScanLimits {
    /// Most directory entries read (`filesystem.repo_scan_max_entries`).
    pub max_entries: u64,
    /// Most repositories found (`filesystem.max_protected_repos`).
    pub max_repos: u64,
}

impl Default for ScanLimits {
    fn default() -> Self {
        Self {
            max_entries: DEFAULT_REPO_SCAN_MAX_ENTRIES,
            max_repos: DEFAULT_MAX_PROTECTED_REPOS,
        }
    }
}

impl ScanLimits {
    /// Whether these are the defaults (for `skip_serializing_if`).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// The limits a policy sets.
    pub fn of(fs: &crate::policy::FilesystemPolicy) -> Self {
        Self {
            max_entries: fs.repo_scan_max_entries,
            max_repos: fs.max_protected_repos,
        }
    }
}

/// The repositories found below a workspace.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RepoScan {
    /// Directories holding a `.git` (directory, file or symlink), sorted.
    pub repos: Vec<PathBuf>,
    /// Directory entries read (or known unchanged since the last search).
    pub entries: u64,
    /// Directories searched.
    pub directories: u64,
    /// Directories whose entries were read this time (the rest were unchanged).
    pub reread: u64,
    /// The listing differs from the one the search started from (or there was none) in
    /// a way the next search can use: a directory gone, or one reread whose listing is
    /// settled (taken [`RACY_MARGIN`] after its change time) and new. Whether a kept copy
    /// needs writing again.
    pub changed: bool,
}

/// Which limit a search hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanLimit {
    /// [`ScanLimits::max_entries`].
    Entries,
    /// [`ScanLimits::max_repos`].
    Repos,
    /// [`MAX_SCANNED_PATH_BYTES`].
    PathLength,
}

impl ScanLimit {
    /// The limit in words.
    pub fn what(self) -> &'static str {
        match self {
            Self::Entries => "directory entries read",
            Self::Repos => "git repositories",
            Self::PathLength => "bytes in a directory's path",
        }
    }

    /// The policy key that raises it, when one does.
    pub fn key(self) -> Option<&'static str> {
        match self {
            Self::Entries => Some("filesystem.repo_scan_max_entries"),
            Self::Repos => Some("filesystem.max_protected_repos"),
            Self::PathLength => None,
        }
    }
}

/// A search that stopped at a limit, or that could not read a directory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScanIncomplete {
    /// A limit was hit.
    #[error("{} in {} passed {max} (at least {count}){}", limit.what(), workspace.display(), match limit.key() {
        Some(key) => format!("; {key} raises the limit"),
        None => format!(": {} cannot be covered by a mount", at.display()),
    })]
    Limit {
        /// The workspace.
        workspace: PathBuf,
        /// The limit.
        limit: ScanLimit,
        /// What was counted when the search stopped.
        count: u64,
        /// The limit's value.
        max: u64,
        /// Where the search was.
        at: PathBuf,
    },
    /// A directory could not be opened or read (other than being a symlink, or gone).
    #[error("{}: {errno} while searching for git repositories", at.display())]
    Unreadable {
        /// The directory.
        at: PathBuf,
        /// The error.
        errno: String,
    },
}

/// Where, under a state directory, the listings of past searches are kept: one file per
/// workspace, named by a hash of its path (which the file repeats).
pub const REPO_SCAN_CACHE_DIR: &str = "cache/repo-scans";

/// Largest listing file read or written (64 MiB; ~300 bytes per directory).
pub const MAX_REPO_SCAN_CACHE_BYTES: u64 = 64 << 20;

/// The listing file's format version.
const CACHE_FORMAT: u32 = 1;

/// One directory of a kept search.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Dir {
    dev: u64,
    ino: u64,
    ctime: (i64, u64),
    /// Whether the listing may be reused (taken [`RACY_MARGIN`] after the change time).
    settled: bool,
    entries: u64,
    git: bool,
    subdirs: Vec<OsString>,
}

/// A listing as kept in a state directory.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CacheFile {
    format: u32,
    workspace: PathBuf,
    dirs: Vec<(PathBuf, Dir)>,
}

/// The listing file of `workspace` under `state_dir`.
fn cache_file(state_dir: &Path, workspace: &Path) -> PathBuf {
    // FNV-1a: a name, not a proof (the file names its workspace).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in workspace.as_os_str().as_encoded_bytes() {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    state_dir
        .join(REPO_SCAN_CACHE_DIR)
        .join(format!("{h:016x}.json"))
}

fn load(state_dir: &Path, workspace: &Path) -> Option<HashMap<PathBuf, Dir>> {
    let file = cache_file(state_dir, workspace);
    let text = crate::state_file::read_private(&file, state_dir, MAX_REPO_SCAN_CACHE_BYTES)?;
    let cached: CacheFile = serde_json::from_str(&text).ok()?;
    (cached.format == CACHE_FORMAT && cached.workspace == workspace)
        .then(|| cached.dirs.into_iter().collect())
}

/// Least time between two writes of one workspace's kept listing to the state directory
/// by one process, in milliseconds. A workspace whose root changes on every run (a Tier C
/// run's `.git` placeholder is made and removed in it) would otherwise cost a file
/// written and synced per run; the first write of a process is never held back.
pub const PERSIST_INTERVAL_MS: u64 = 5_000;

/// Whether this process may write `workspace`'s listing now ([`PERSIST_INTERVAL_MS`]);
/// records the write when it may.
fn persist_due(workspace: &Path) -> bool {
    use std::time::{Duration, Instant};
    static LAST: Mutex<Vec<(PathBuf, Instant)>> = Mutex::new(Vec::new());
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let interval = Duration::from_millis(PERSIST_INTERVAL_MS);
    last.retain(|(_, at)| at.elapsed() < interval);
    if last.iter().any(|(w, _)| w == workspace) {
        return false;
    }
    last.push((workspace.to_path_buf(), Instant::now()));
    true
}

fn store(state_dir: &Path, workspace: &Path, listing: &HashMap<PathBuf, Dir>) {
    if listing.len() > KEPT_DIRECTORIES {
        return;
    }
    let file = CacheFile {
        format: CACHE_FORMAT,
        workspace: workspace.to_path_buf(),
        dirs: listing
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    };
    // A name that is not UTF-8 cannot be written as JSON text: nothing is kept then.
    if let Ok(text) = serde_json::to_string(&file)
        && text.len() as u64 <= MAX_REPO_SCAN_CACHE_BYTES
    {
        let _ = crate::state_file::write_private(&cache_file(state_dir, workspace), &text);
    }
}

/// One workspace's kept search (relative directory → its listing), locked for the whole
/// of a search: concurrent searches of one workspace take turns, each starting from the
/// listing the one before left, rather than each from none.
type Slot = std::sync::Arc<Mutex<Option<HashMap<PathBuf, Dir>>>>;

/// Kept searches, most recently used first, with the number of directories each holds.
static KEPT: Mutex<Vec<(PathBuf, Slot, usize)>> = Mutex::new(Vec::new());

fn kept() -> std::sync::MutexGuard<'static, Vec<(PathBuf, Slot, usize)>> {
    KEPT.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Every directory holding a `.git` below `workspace` (canonical), within `limits`,
/// reusing the listings of the last search of this workspace that are known unchanged
/// (see the module docs). Reads nothing outside `workspace` and follows no symlink.
///
/// ```
/// use tierbox_policy::validate::{ScanLimits, scan_repos};
///
/// let dir = tempfile::tempdir().unwrap();
/// let ws = std::fs::canonicalize(dir.path()).unwrap();
/// std::fs::create_dir_all(ws.join("node_modules/a/b/c/d/e/.git")).unwrap();
/// let found = scan_repos(&ws, ScanLimits::default()).unwrap();
/// assert_eq!(found.repos, [ws.join("node_modules/a/b/c/d/e")]);
/// ```
pub fn scan_repos(workspace: &Path, limits: ScanLimits) -> Result<RepoScan, ScanIncomplete> {
    scan_repos_in(workspace, limits, None)
}

/// [`scan_repos`], also reading and keeping the listing under `state_dir`
/// ([`REPO_SCAN_CACHE_DIR`]) when this process has none of its own for `workspace`.
pub fn scan_repos_in(
    workspace: &Path,
    limits: ScanLimits,
    state_dir: Option<&Path>,
) -> Result<RepoScan, ScanIncomplete> {
    let slot = {
        let mut kept = kept();
        let entry = match kept.iter().position(|(w, ..)| w == workspace) {
            Some(i) => kept.remove(i),
            None => (workspace.to_path_buf(), Slot::default(), 0),
        };
        let slot = entry.1.clone();
        kept.insert(0, entry);
        kept.truncate(KEPT_WORKSPACES);
        slot
    };
    let mut held = slot
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let previous = held
        .take()
        .or_else(|| state_dir.and_then(|d| load(d, workspace)));
    let (result, listing) = imp::search(workspace, limits, previous);
    // Written when it changed: a workspace changing all the time is reread where it
    // changed, not rewritten on every run where nothing did; and by a long-lived process
    // at most once per PERSIST_INTERVAL_MS (the copy serves the next process, which
    // rereads whatever changed since anyway).
    if let (Some(dir), Some(listing), Ok(scan)) = (state_dir, &listing, &result)
        && scan.changed
        && persist_due(workspace)
    {
        store(dir, workspace, listing);
    }
    let size = listing.as_ref().map_or(0, HashMap::len);
    *held = listing;
    drop(held);
    // Bound what all kept searches hold: the least recently used go first.
    let mut kept = kept();
    if let Some(entry) = kept.iter_mut().find(|(w, ..)| w == workspace) {
        entry.2 = size;
    }
    let mut total = 0usize;
    kept.retain(|(.., n)| {
        total += n;
        total <= KEPT_DIRECTORIES
    });
    result
}

/// The search, with directory file descriptors (Unix).
#[cfg(unix)]
mod imp {
    use std::collections::HashMap;
    use std::ffi::OsString;
    use std::os::fd::OwnedFd;
    use std::os::unix::ffi::OsStringExt;
    use std::path::{Path, PathBuf};
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use rustix::fs::{AtFlags, FileType, Mode, OFlags};

    use super::{
        Dir, MAX_SCANNED_PATH_BYTES, RACY_MARGIN, RepoScan, ScanIncomplete, ScanLimit, ScanLimits,
    };

    /// Whether a directory's filesystem is one of [`super::PSEUDO_FILESYSTEMS`].
    #[cfg(target_os = "linux")]
    fn is_pseudo(fd: &OwnedFd) -> bool {
        fn of(f_type: impl Into<i64>) -> bool {
            super::PSEUDO_FILESYSTEMS.contains(&f_type.into())
        }
        rustix::fs::fstatfs(fd).is_ok_and(|f| of(f.f_type))
    }

    /// No pseudo-filesystem list for this kernel.
    #[cfg(not(target_os = "linux"))]
    fn is_pseudo(_fd: &OwnedFd) -> bool {
        false
    }

    /// The search itself: its result, and the listing to keep (none when it stopped).
    pub(super) fn search(
        workspace: &Path,
        limits: ScanLimits,
        mut previous: Option<HashMap<PathBuf, Dir>>,
    ) -> (
        Result<RepoScan, ScanIncomplete>,
        Option<HashMap<PathBuf, Dir>>,
    ) {
        let unreadable = |at: &Path, e: rustix::io::Errno| ScanIncomplete::Unreadable {
            at: at.to_path_buf(),
            errno: std::io::Error::from(e).to_string(),
        };
        // The workspace is opened once, when a listing must be read: an unchanged
        // workspace is checked with one `fstatat` per directory and nothing else.
        let mut root: Option<OwnedFd> = None;
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut scan = RepoScan::default();
        let mut listing: HashMap<PathBuf, Dir> = HashMap::new();
        // Each directory with its parent's device: a mount crossing is checked for a
        // pseudo-filesystem.
        let mut stack: Vec<(PathBuf, Option<u64>)> = vec![(PathBuf::new(), None)];
        let limit = |limit: ScanLimit, count: u64, max: u64, at: &Path| ScanIncomplete::Limit {
            workspace: workspace.to_path_buf(),
            limit,
            count,
            max,
            at: workspace.join(at),
        };
        while let Some((rel, parent_dev)) = stack.pop() {
            let gone = |e: rustix::io::Errno| {
                // Gone, or replaced by something that is not a directory since its parent
                // was listed: a change after this search, for the next one to see.
                matches!(
                    e,
                    rustix::io::Errno::NOENT
                        | rustix::io::Errno::NOTDIR
                        | rustix::io::Errno::LOOP
                        | rustix::io::Errno::XDEV
                )
            };
            // The check against the kept listing is one `fstatat` by the path beneath the
            // workspace (no open): the path's directories were checked or listed before it
            // in this search, and one swapped for a symlink since then is a change after
            // the search — it can only match a kept listing that is the same directory,
            // unchanged. Reading a listing always goes through `open_beneath`.
            let quick = rustix::fs::statat(
                rustix::fs::CWD,
                workspace.join(&rel),
                AtFlags::SYMLINK_NOFOLLOW,
            );
            let st = match quick {
                Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => st,
                Ok(_) => continue,
                Err(e) if gone(e) => continue,
                Err(e) => return (Err(unreadable(&workspace.join(&rel), e)), None),
            };
            let (dev, ino) = (st.st_dev as u64, st.st_ino as u64);
            let ctime = (st.st_ctime as i64, st.st_ctime_nsec as u64);
            let before = previous.as_mut().and_then(|p| p.remove(&rel));
            let kept = before
                .as_ref()
                .is_some_and(|d| d.settled && (d.dev, d.ino, d.ctime) == (dev, ino, ctime));
            let dir = match before {
                Some(d) if kept => d,
                before => {
                    scan.reread += 1;
                    let fd = match open_beneath(&mut root, workspace, &rel) {
                        Ok(fd) => fd,
                        Err(e) if gone(e) => continue,
                        Err(e) => return (Err(unreadable(&workspace.join(&rel), e)), None),
                    };
                    // A mount crossing: a pseudo-filesystem is not searched. (A kept
                    // listing that matched was searched before, so it is not one.)
                    if parent_dev != Some(dev) && is_pseudo(&fd) {
                        continue;
                    }
                    let budget = limits.max_entries.saturating_sub(scan.entries);
                    let dir = match read_dir(fd, started, budget) {
                        Ok(d) => d,
                        Err(e) => return (Err(unreadable(&workspace.join(&rel), e)), None),
                    };
                    // Only a listing the next search can reuse is worth keeping: one
                    // taken within RACY_MARGIN of its change time is reread anyway (as
                    // the root is after every Tier C run, whose placeholder is made and
                    // removed in it).
                    scan.changed |= dir.settled && before.as_ref() != Some(&dir);
                    dir
                }
            };
            let dev = dir.dev;
            scan.directories += 1;
            scan.entries += dir.entries;
            if scan.entries > limits.max_entries {
                return (
                    Err(limit(
                        ScanLimit::Entries,
                        scan.entries,
                        limits.max_entries,
                        &rel,
                    )),
                    None,
                );
            }
            if dir.git {
                scan.repos.push(workspace.join(&rel));
                if scan.repos.len() as u64 > limits.max_repos {
                    return (
                        Err(limit(
                            ScanLimit::Repos,
                            scan.repos.len() as u64,
                            limits.max_repos,
                            &rel,
                        )),
                        None,
                    );
                }
            }
            for name in &dir.subdirs {
                let child = rel.join(name);
                let bytes = workspace.as_os_str().len() + 1 + child.as_os_str().len();
                if bytes > MAX_SCANNED_PATH_BYTES {
                    return (
                        Err(limit(
                            ScanLimit::PathLength,
                            bytes as u64,
                            MAX_SCANNED_PATH_BYTES as u64,
                            &child,
                        )),
                        None,
                    );
                }
                stack.push((child, Some(dev)));
            }
            listing.insert(rel, dir);
        }
        // Directories the last search saw that this one did not: gone since.
        scan.changed |= previous.is_none_or(|p| !p.is_empty());
        scan.repos.sort();
        (Ok(scan), Some(listing))
    }

    /// `rel` (relative, no `..`) opened as a directory beneath the workspace (`root`,
    /// opened on first use), following nothing.
    fn open_beneath(
        root: &mut Option<OwnedFd>,
        workspace: &Path,
        rel: &Path,
    ) -> rustix::io::Result<OwnedFd> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let root = match root {
            Some(fd) => &*fd,
            None => root.insert(rustix::fs::open(workspace, flags, Mode::empty())?),
        };
        if rel.as_os_str().is_empty() {
            return rustix::fs::openat(root, ".", flags, Mode::empty());
        }
        #[cfg(target_os = "linux")]
        {
            use rustix::fs::ResolveFlags;
            let resolve =
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
            match rustix::fs::openat2(root, rel, flags, Mode::empty(), resolve) {
                Err(rustix::io::Errno::NOSYS) => {}
                other => return other,
            }
        }
        // Before Linux 5.6, and elsewhere: one component at a time, none followed.
        let mut fd = rustix::fs::openat(root, ".", flags, Mode::empty())?;
        for part in rel.components() {
            fd = rustix::fs::openat(&fd, part.as_os_str(), flags, Mode::empty())?;
        }
        Ok(fd)
    }

    /// The listing of the open directory `fd` (its identity and change time read from the
    /// fd itself); past `budget` entries it stops, with one entry more than the budget
    /// counted (the caller's limit check then fails).
    fn read_dir(fd: OwnedFd, started: Duration, budget: u64) -> rustix::io::Result<Dir> {
        let st = rustix::fs::fstat(&fd)?;
        let ctime = (st.st_ctime as i64, st.st_ctime_nsec as u64);
        let mut dir = Dir {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            ctime,
            settled: Duration::new(ctime.0.max(0) as u64, ctime.1 as u32) + RACY_MARGIN < started,
            entries: 0,
            git: false,
            subdirs: Vec::new(),
        };
        let mut stream = rustix::fs::Dir::new(fd)?;
        while let Some(entry) = stream.next() {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            dir.entries += 1;
            if dir.entries > budget {
                break;
            }
            if name == b".git" {
                // The git directory (or file, or symlink) is protected as a whole; what is
                // inside it is the repository's, not another repository.
                dir.git = true;
                continue;
            }
            let kind = match entry.file_type() {
                FileType::Unknown => {
                    rustix::fs::statat(stream.fd()?, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW)
                        .map(|st| FileType::from_raw_mode(st.st_mode))?
                }
                kind => kind,
            };
            if kind == FileType::Directory {
                dir.subdirs.push(OsString::from_vec(name.to_vec()));
            }
        }
        Ok(dir)
    }
}

/// The search without directory file descriptors (no Unix API): every directory read
/// whole, by path, symlinks not followed; nothing is kept.
#[cfg(not(unix))]
mod imp {
    use std::collections::HashMap;
    use std::path::{Path, PathBuf};

    use super::{Dir, MAX_SCANNED_PATH_BYTES, RepoScan, ScanIncomplete, ScanLimit, ScanLimits};

    pub(super) fn search(
        workspace: &Path,
        limits: ScanLimits,
        _previous: Option<HashMap<PathBuf, Dir>>,
    ) -> (
        Result<RepoScan, ScanIncomplete>,
        Option<HashMap<PathBuf, Dir>>,
    ) {
        let mut scan = RepoScan::default();
        let mut stack = vec![PathBuf::new()];
        let limit = |limit: ScanLimit, count: u64, max: u64, at: &Path| ScanIncomplete::Limit {
            workspace: workspace.to_path_buf(),
            limit,
            count,
            max,
            at: workspace.join(at),
        };
        while let Some(rel) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(workspace.join(&rel)) else {
                continue;
            };
            scan.directories += 1;
            scan.reread += 1;
            for entry in entries.flatten() {
                scan.entries += 1;
                if scan.entries > limits.max_entries {
                    return (
                        Err(limit(
                            ScanLimit::Entries,
                            scan.entries,
                            limits.max_entries,
                            &rel,
                        )),
                        None,
                    );
                }
                let name = entry.file_name();
                if name == ".git" {
                    scan.repos.push(workspace.join(&rel));
                    if scan.repos.len() as u64 > limits.max_repos {
                        return (
                            Err(limit(
                                ScanLimit::Repos,
                                scan.repos.len() as u64,
                                limits.max_repos,
                                &rel,
                            )),
                            None,
                        );
                    }
                } else if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    let child = rel.join(name);
                    if workspace.join(&child).as_os_str().len() > MAX_SCANNED_PATH_BYTES {
                        return (
                            Err(limit(
                                ScanLimit::PathLength,
                                workspace.join(&child).as_os_str().len() as u64,
                                MAX_SCANNED_PATH_BYTES as u64,
                                &child,
                            )),
                            None,
                        );
                    }
                    stack.push(child);
                }
            }
        }
        scan.repos.sort();
        (Ok(scan), None)
    }
}

/// Forgets this process's kept search of `workspace` (what a new process starts with).
pub fn forget_kept_search(workspace: &Path) {
    kept().retain(|(w, ..)| w != workspace);
}

#[cfg(all(test, target_os = "linux"))]
#[path = "repo_scan_tests.rs"]
mod tests;
