//! The system paths every run may read, with host secrets carved out — and the walk of
//! `/etc` that finds the secrets, cached in the process and in the state directory.
//!
//! Finding what an unprivileged user could not read under `/etc` takes a `stat` of every
//! entry (about 1,500 on a developer machine): the largest single cost of a one-shot
//! `tierbox run`. A long-lived supervisor walks once and re-checks the walked directories'
//! stamps at most every [`SYSTEM_PATHS_RECHECK`]; a one-shot process reads the last walk
//! from `<state dir>/`[`SYSTEM_PATHS_CACHE_FILE`] instead, and trusts it only when
//!
//! - the file is a regular file owned by the state directory's owner and writable by
//!   nobody else, at most [`MAX_CACHE_BYTES`] long, of this build's format and key (the
//!   crate version and every list and bound the walk depends on);
//! - every directory the walk read still has the modification and change time it had
//!   (an entry added, removed or renamed under `/etc`, or a walked directory's mode
//!   changed, changes one of them);
//! - the system roots that exist are the same;
//! - it is coherent: every grant lies under a root, no grant holds a hidden path, and
//!   every listed host secret that exists is hidden.
//!
//! Anything else (a missing, unreadable, stale, foreign or malformed file) is a fresh walk,
//! which rewrites the file. Not seen by either cache: an existing file under `/etc` made
//! unreadable in place (`chmod o-r`), which changes no directory; it is hidden from the
//! next run after any change of the directory holding it, or after the state directory's
//! cache is removed (SECURITY.md).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::{
    MAX_SYSTEM_DEPTH, MAX_SYSTEM_ENTRIES, SECRETS_ROOT, SYSTEM_PATHS_RECHECK,
    SYSTEM_READ_ONLY_PATHS, SYSTEM_SECRET_PATHS,
};

/// Where, under the state directory, the last walk of the system paths is kept.
pub const SYSTEM_PATHS_CACHE_FILE: &str = "cache/system-paths.json";

/// Largest cache file read, in bytes; bounds what a corrupt file can cost (a walk of a
/// large `/etc` is a few hundred KiB).
pub const MAX_CACHE_BYTES: u64 = 4 << 20;

/// Version of the cache file's layout.
const CACHE_FORMAT: u32 = 1;

/// The system paths of this host in both of the forms the tiers need.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SystemPaths {
    /// The [`SYSTEM_READ_ONLY_PATHS`] that exist (mount-based tiers bind each whole).
    pub roots: Arc<[PathBuf]>,
    /// The host secrets under them that exist, outermost only (mount-based tiers cover
    /// each; `grants` leaves them out).
    pub hidden: Arc<[PathBuf]>,
    /// `roots` minus `hidden`, as the smallest list of grantable entries (landlock, which
    /// can only grant, uses this).
    pub grants: Arc<[PathBuf]>,
}

/// The system paths, with host secrets carved out.
///
/// Hidden: every [`SYSTEM_SECRET_PATHS`] entry, and every entry under `/etc` that an
/// unprivileged user could not read (a file without `o+r`, a directory without `o+rx`) —
/// a process that keeps uid 0 (Tier B under a root supervisor), or that is mapped to the
/// supervisor's uid (Tier C), would otherwise read them through plain file permissions.
/// In `grants` a directory that contains a hidden entry is replaced by its children,
/// recursively. Symlinks are kept (the kernel layers check their targets).
///
/// The walk is cached in the process; at most every [`SYSTEM_PATHS_RECHECK`] the stamps
/// of the walked directories are compared and the walk redone if any changed. See
/// [`system_paths_in`] for the cache in a state directory.
///
/// ```
/// let sys = tierbox_policy::validate::system_paths();
/// for h in sys.hidden.iter() {
///     assert!(!sys.grants.iter().any(|g| h.starts_with(g)), "{h:?} is granted");
/// }
/// ```
pub fn system_paths() -> SystemPaths {
    system_paths_in(None)
}

/// [`system_paths`], reading and writing the walk under `state_dir` (see the module docs)
/// when the process has no fresh walk of its own.
///
/// ```
/// let state = tempfile::tempdir().unwrap();
/// let paths = tierbox_policy::validate::system_paths_in(Some(state.path()));
/// assert_eq!(paths, tierbox_policy::validate::system_paths());
/// ```
pub fn system_paths_in(state_dir: Option<&Path>) -> SystemPaths {
    static CACHE: Mutex<Option<InProcess>> = Mutex::new(None);
    let mut guard = match CACHE.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    };
    if let Some(cache) = guard.as_mut()
        && cache.is_fresh()
    {
        return cache.walk.paths.clone();
    }
    let spec = Spec::host();
    let file = state_dir.map(|d| d.join(SYSTEM_PATHS_CACHE_FILE));
    let walk = match file.as_deref().and_then(|f| load(f, &spec)) {
        Some(walk) => walk,
        None => {
            let walk = walk(&spec);
            if let Some(f) = &file {
                // Best effort: a state directory that cannot hold it costs the next
                // process a walk, nothing else.
                let _ = store(f, &spec, &walk);
            }
            walk
        }
    };
    let paths = walk.paths.clone();
    *guard = Some(InProcess {
        walk,
        checked: std::time::Instant::now(),
    });
    paths
}

/// What the walk depends on besides the files it reads.
pub(crate) struct Spec {
    /// The directory whose unreadable entries are hidden.
    pub(crate) secrets_root: PathBuf,
    /// The system roots, whether they exist or not.
    pub(crate) roots: Vec<PathBuf>,
    /// The host secrets hidden whatever their permissions.
    pub(crate) secret_paths: Vec<PathBuf>,
}

impl Spec {
    /// This host's: [`SECRETS_ROOT`], [`SYSTEM_READ_ONLY_PATHS`], [`SYSTEM_SECRET_PATHS`].
    fn host() -> Self {
        Self {
            secrets_root: PathBuf::from(SECRETS_ROOT),
            roots: SYSTEM_READ_ONLY_PATHS.iter().map(PathBuf::from).collect(),
            secret_paths: SYSTEM_SECRET_PATHS.iter().map(PathBuf::from).collect(),
        }
    }

    /// Everything a cached walk must have been made with to be this build's walk.
    fn key(&self) -> String {
        format!(
            "tierbox-policy {} | root {:?} | roots {:?} | secrets {:?} | depth {} | entries {}",
            env!("CARGO_PKG_VERSION"),
            self.secrets_root,
            self.roots,
            self.secret_paths,
            MAX_SYSTEM_DEPTH,
            MAX_SYSTEM_ENTRIES
        )
    }

    /// The roots that exist on this host, in order.
    fn existing_roots(&self) -> Vec<PathBuf> {
        self.roots
            .iter()
            .filter(|r| std::fs::symlink_metadata(r).is_ok())
            .cloned()
            .collect()
    }
}

/// A walk's result and what it read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Walk {
    pub(crate) paths: SystemPaths,
    /// Each walked directory and its stamp when it was read.
    pub(crate) stamps: Vec<(PathBuf, Option<Stamp>)>,
}

/// When a directory last changed: its entries (modification time) or its inode (change
/// time: mode, owner, links), in seconds and nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Stamp {
    modified: (i64, i64),
    changed: (i64, i64),
}

impl Stamp {
    fn of(dir: &Path) -> Option<Self> {
        let meta = std::fs::symlink_metadata(dir).ok()?;
        Some(Self::from_meta(&meta))
    }

    #[cfg(unix)]
    fn from_meta(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self {
            modified: (meta.mtime(), meta.mtime_nsec()),
            changed: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    #[cfg(not(unix))]
    fn from_meta(meta: &std::fs::Metadata) -> Self {
        let nanos = |t: std::io::Result<std::time::SystemTime>| {
            t.ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or((0, 0), |d| {
                    (
                        i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                        i64::from(d.subsec_nanos()),
                    )
                })
        };
        Self {
            modified: nanos(meta.modified()),
            changed: nanos(meta.modified()),
        }
    }
}

fn stamps_hold(stamps: &[(PathBuf, Option<Stamp>)]) -> bool {
    stamps.iter().all(|(dir, stamp)| Stamp::of(dir) == *stamp)
}

struct InProcess {
    walk: Walk,
    checked: std::time::Instant,
}

impl InProcess {
    fn is_fresh(&mut self) -> bool {
        if self.checked.elapsed() < SYSTEM_PATHS_RECHECK {
            return true;
        }
        let fresh = stamps_hold(&self.walk.stamps);
        self.checked = std::time::Instant::now();
        fresh
    }
}

/// Walks `spec.secrets_root` and carves what it hides out of the existing roots.
pub(crate) fn walk(spec: &Spec) -> Walk {
    let mut walked = Vec::new();
    let mut hidden: Vec<PathBuf> = spec.secret_paths.clone();
    let mut budget = MAX_SYSTEM_ENTRIES;
    find_unreadable(&spec.secrets_root, 0, &mut budget, &mut hidden, &mut walked);
    let roots = spec.existing_roots();
    let mut grants = Vec::new();
    for root in &roots {
        grants.extend(crate::access::carve(
            std::slice::from_ref(root),
            &hidden,
            crate::access::Links::UnlessHidden,
        ));
    }
    grants.sort();
    grants.dedup();
    hidden.retain(|h| std::fs::symlink_metadata(h).is_ok());
    hidden.sort();
    hidden.dedup();
    let outer: Vec<PathBuf> = hidden
        .iter()
        .filter(|h| !hidden.iter().any(|o| o != *h && h.starts_with(o)))
        .cloned()
        .collect();
    let stamps = walked
        .into_iter()
        .map(|d| {
            let stamp = Stamp::of(&d);
            (d, stamp)
        })
        .collect();
    Walk {
        paths: SystemPaths {
            roots: roots.into(),
            hidden: outer.into(),
            grants: grants.into(),
        },
        stamps,
    }
}

/// The cache file's contents.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CacheFile {
    format: u32,
    key: String,
    roots: Vec<PathBuf>,
    hidden: Vec<PathBuf>,
    grants: Vec<PathBuf>,
    stamps: Vec<(PathBuf, Option<Stamp>)>,
}

/// The walk kept in `file`, when it may be trusted (module docs); `None` otherwise.
pub(crate) fn load(file: &Path, spec: &Spec) -> Option<Walk> {
    let state_dir = file.parent()?.parent()?;
    let text = crate::state_file::read_private(file, state_dir, MAX_CACHE_BYTES)?;
    let cached: CacheFile = serde_json::from_str(&text).ok()?;
    if cached.format != CACHE_FORMAT || cached.key != spec.key() {
        return None;
    }
    if !stamps_hold(&cached.stamps) || cached.roots != spec.existing_roots() {
        return None;
    }
    // No hidden path at or beneath a grant: each hidden path's ancestors looked up in
    // the grants, which must be strictly sorted for the lookup to be a proof (a walk
    // stores them sorted and deduplicated; anything else is not trusted).
    let coherent = cached.grants.windows(2).all(|w| w[0] < w[1])
        && cached
            .grants
            .iter()
            .all(|g| cached.roots.iter().any(|r| g.starts_with(r)))
        && !cached.hidden.iter().any(|h| {
            h.ancestors().any(|a| {
                cached
                    .grants
                    .binary_search_by(|g| g.as_path().cmp(a))
                    .is_ok()
            })
        })
        && spec
            .secret_paths
            .iter()
            .filter(|s| std::fs::symlink_metadata(s).is_ok())
            .all(|s| cached.hidden.iter().any(|h| s.starts_with(h)));
    if !coherent {
        return None;
    }
    Some(Walk {
        paths: SystemPaths {
            roots: cached.roots.into(),
            hidden: cached.hidden.into(),
            grants: cached.grants.into(),
        },
        stamps: cached.stamps,
    })
}

/// Writes `walk` to `file` (mode 0600, its directory 0700), whole
/// ([`crate::state_file::write_private`]).
pub(crate) fn store(file: &Path, spec: &Spec, walk: &Walk) -> std::io::Result<()> {
    let cached = CacheFile {
        format: CACHE_FORMAT,
        key: spec.key(),
        roots: walk.paths.roots.to_vec(),
        hidden: walk.paths.hidden.to_vec(),
        grants: walk.paths.grants.to_vec(),
        stamps: walk.stamps.clone(),
    };
    let text = serde_json::to_string(&cached).map_err(std::io::Error::other)?;
    crate::state_file::write_private(file, &text)
}

/// Adds to `hidden` every entry under `dir` that others cannot read; records walked dirs.
pub(crate) fn find_unreadable(
    dir: &Path,
    depth: usize,
    budget: &mut usize,
    hidden: &mut Vec<PathBuf>,
    walked: &mut Vec<PathBuf>,
) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    walked.push(dir.to_path_buf());
    for entry in entries.flatten() {
        if *budget == 0 {
            return;
        }
        *budget -= 1;
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let mode = permission_bits(&meta);
        if meta.file_type().is_symlink() {
            continue;
        }
        if meta.is_dir() {
            if mode & 0o005 != 0o005 {
                hidden.push(path);
            } else if depth < MAX_SYSTEM_DEPTH {
                find_unreadable(&path, depth + 1, budget, hidden, walked);
            }
        } else if mode & 0o004 == 0 {
            hidden.push(path);
        }
    }
}

/// The file's Unix permission bits.
#[cfg(unix)]
fn permission_bits(meta: &std::fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode()
}

/// No Unix permission bits here (Windows has ACLs, and no `/etc` to walk): everything
/// reads as world-readable, so only [`SYSTEM_SECRET_PATHS`] are hidden.
#[cfg(not(unix))]
fn permission_bits(_meta: &std::fs::Metadata) -> u32 {
    0o755
}

#[cfg(test)]
#[path = "system_tests.rs"]
mod tests;
