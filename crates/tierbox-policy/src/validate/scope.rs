//! Workspace scope: the workspace root, the cwd, and the grants every tier shares.
//!
//! Invariants:
//! - the workspace root is canonicalised once; every comparison is component-wise
//!   against that canonical path;
//! - `cwd` must resolve to an existing directory inside the workspace (an absolute cwd
//!   is accepted only if it does);
//! - resolution ([`resolve_in`]) walks a path component by component as the kernel does,
//!   following symlinks (dangling ones included, up to [`MAX_SYMLINK_HOPS`] links) and
//!   applying what does not exist lexically.
//!
//! The arguments that name paths are checked against what the run sees in
//! [`super::arg_paths`].

use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

use crate::policy::Policy;
use crate::rejection::{HostRule, OwnFile, Rejection, WorkspaceRule};
use crate::validate::ValidateContext;

/// Most symlinks followed while resolving one path (Linux's own `MAXSYMLINKS`). A
/// longer chain, or a loop, is refused: it cannot be shown to stay inside.
pub const MAX_SYMLINK_HOPS: usize = 40;

/// The canonical workspace root: it must exist and be a directory.
pub(crate) fn canonical_workspace(root: &Path) -> Result<PathBuf, Rejection> {
    let invalid = |reason: String| Rejection::WorkspaceInvalid {
        path: root.to_path_buf(),
        reason,
    };
    let canon = std::fs::canonicalize(root).map_err(|e| {
        invalid(match e.kind() {
            ErrorKind::NotFound => "it does not exist".to_owned(),
            _ => format!("it cannot be resolved ({e})"),
        })
    })?;
    if !canon.is_dir() {
        return Err(invalid("it is not a directory".to_owned()));
    }
    Ok(canon)
}

/// Directories that are never a workspace root, nor is anything below them: the host's
/// programs, libraries, configuration, boot files and kernel interfaces. A run may write
/// its whole workspace; any of these as one would hand it the host.
pub const REFUSED_WORKSPACE_TREES: &[&str] = &[
    "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/dev",
    "/proc", "/sys",
];

/// Directories that are never a workspace root themselves (what lies below them may be):
/// each holds the state of every user or service on the host (`/var/lib/ci/build` is a
/// fine workspace, `/var` is not).
pub const REFUSED_WORKSPACE_DIRS: &[&str] =
    &["/", "/run", "/var", "/tmp", "/var/tmp", "/home", "/root"];

/// The canonical workspace root of a run, after the rules on what may be one: not `/` nor
/// a system directory ([`REFUSED_WORKSPACE_TREES`], [`REFUSED_WORKSPACE_DIRS`]), not a home
/// directory itself (the supervisor's `$HOME`, `/root`, `/home/<user>`, or a home in
/// `/etc/passwd`: dotfiles there configure the host user's shell, git and ssh); the policy
/// may lift these with `danger_any_workspace_root = true`. Never, whatever the policy: a
/// directory that holds, or lies inside, one of Tierbox's own files ([`own_paths`]). The
/// rejection carries the rule, and so what lifts it ([`WorkspaceRule::fixes`]): a host
/// rule is offered `danger_any_workspace_root` only where lifting it would let the
/// workspace through.
pub(crate) fn workspace_root(
    policy: &Policy,
    ctx: &ValidateContext,
    own: &[OwnPath],
) -> Result<PathBuf, Rejection> {
    let canon = canonical_workspace(&ctx.workspace)?;
    let refused = |rule: WorkspaceRule| Rejection::WorkspaceRefused {
        path: canon.clone(),
        rule,
    };
    let reached = reaches_own(own, &canon, true);
    if !policy.danger_any_workspace_root
        && let Err(rule) = host_rules(ctx, &canon)
    {
        return Err(refused(WorkspaceRule::Host {
            rule,
            own: reached.map(|o| o.file),
        }));
    }
    if let Some(own) = reached {
        return Err(refused(own.workspace_rule(&canon)));
    }
    Ok(canon)
}

/// The rules `danger_any_workspace_root` lifts: `Err(rule)` when `canon` is the root, a
/// system directory, a directory that holds every user's files, or a home itself.
fn host_rules(ctx: &ValidateContext, canon: &Path) -> Result<(), HostRule> {
    if canon == Path::new("/") {
        return Err(HostRule::FilesystemRoot);
    }
    if let Some(tree) = REFUSED_WORKSPACE_TREES
        .iter()
        .find(|t| canon.starts_with(t))
    {
        return Err(HostRule::SystemTree {
            tree: PathBuf::from(tree),
        });
    }
    if REFUSED_WORKSPACE_DIRS.iter().any(|d| canon == Path::new(d)) {
        return Err(HostRule::SharedDir {
            dir: canon.to_path_buf(),
        });
    }
    let is_home_under_home = canon.parent() == Some(Path::new("/home"));
    let is_home = is_home_under_home
        || ctx.home().is_some_and(|h| same_dir(&h, canon))
        || passwd_homes().iter().any(|h| h == canon);
    if is_home {
        return Err(HostRule::Home);
    }
    Ok(())
}

/// One of Tierbox's own files or directories, which no run may reach.
#[derive(Debug, Clone)]
pub(crate) struct OwnPath {
    /// What it is.
    file: OwnFile,
    /// Canonical where it exists.
    path: PathBuf,
    /// Reading it is harmful too (keys, the cache, the audit trail); else only writing
    /// (the Tier A runtimes, which are public builds).
    secret: bool,
}

impl OwnPath {
    /// The path, when reading it is harmful too.
    pub(crate) fn secret_path(&self) -> Option<&Path> {
        self.secret.then_some(self.path.as_path())
    }

    /// Whether `path` lies in this file, for a run that reads it (or, `write`, writes
    /// it): a secret one is reached either way, the others only by writing.
    pub(crate) fn holds(&self, path: &Path, write: bool) -> bool {
        (self.secret || write) && !self.path.as_os_str().is_empty() && path.starts_with(&self.path)
    }

    /// Why an argument may not name it, whatever the policy.
    pub(crate) fn unreachable(&self) -> crate::rejection::Unreachable {
        crate::rejection::Unreachable::Own {
            file: self.file,
            at: self.path.clone(),
        }
    }

    /// Why a workspace at `canon` is refused.
    fn workspace_rule(&self, canon: &Path) -> WorkspaceRule {
        WorkspaceRule::Own {
            file: self.file,
            path: self.path.clone(),
            holds: self.path.starts_with(canon),
        }
    }

    /// Why `grant` may not be granted.
    pub(crate) fn rule(&self, grant: &Path) -> String {
        self.workspace_rule(grant).to_string()
    }
}

/// Tierbox's own files for a run of `policy` in `ctx`: the state directory (signing key,
/// compiled-module cache, spill files), the audit log, the signing key, and the Tier A
/// runtimes directory. A sandbox that could write the cache would run code in the
/// supervisor (a compiled module is native code); one that could read the key could forge
/// attestations.
pub(crate) fn own_paths(policy: &Policy, ctx: &ValidateContext) -> Vec<OwnPath> {
    let secret = ctx
        .state_dir
        .iter()
        .map(|d| (OwnFile::StateDir, d.clone()))
        .chain(
            policy
                .audit
                .log
                .iter()
                .map(|p| (OwnFile::AuditLog, p.clone())),
        )
        .chain(
            policy
                .audit
                .signing_key
                .iter()
                .map(|p| (OwnFile::SigningKey, p.clone())),
        )
        .map(|(file, path)| (file, path, true));
    let runtimes = std::iter::once((OwnFile::RuntimesDir, ctx.runtimes_dir.clone(), false));
    secret
        .chain(runtimes)
        .map(|(file, path, secret)| OwnPath {
            file,
            path: std::fs::canonicalize(&path).unwrap_or(path),
            secret,
        })
        .collect()
}

/// The own path a grant of canonical `path` would reach — one inside it, or one it lies
/// in — writable or (for a secret one) readable.
pub(crate) fn reaches_own<'a>(
    own: &'a [OwnPath],
    path: &Path,
    writable: bool,
) -> Option<&'a OwnPath> {
    own.iter().find(|o| {
        (writable || o.secret)
            && !o.path.as_os_str().is_empty()
            && (o.path.starts_with(path) || path.starts_with(&o.path))
    })
}

/// Checks one canonical `filesystem.read_only` or `filesystem.writable` entry (`key`)
/// against the rules every tier shares, so that a policy gets the same answer in Tier B
/// and Tier C. Returns whether to keep it: a device every run has anyway
/// ([`PROVIDED_DEVICES`](crate::plan::PROVIDED_DEVICES)) is dropped. Refused with
/// [`Rejection::GrantRefused`]: one of Tierbox's own files or a directory holding one
/// ([`own_paths`]; read-only grants only of the secret ones), the workspace itself (a
/// read-only grant of it contradicts
/// the workspace; a writable one says nothing), anything in `/proc` (a host `/proc` path
/// names the supervisor's processes, never the run's: canonicalising `/proc/self` gives
/// the supervisor's pid), and any other device, `/dev` itself, or a path inside
/// `/dev/shm` (Tier C's `/dev/shm` is the run's own).
pub(crate) fn check_grant(
    key: &str,
    path: &Path,
    workspace: &Path,
    own: &[OwnPath],
) -> Result<bool, Rejection> {
    let refused = |rule: &str| Rejection::GrantRefused {
        key: key.to_owned(),
        path: path.to_path_buf(),
        rule: rule.to_owned(),
    };
    if let Some(o) = reaches_own(own, path, key == "filesystem.writable") {
        return Err(refused(&o.rule(path)));
    }
    if path == workspace {
        return Err(refused(
            "it is the workspace itself, which every run may read and write already; remove the entry",
        ));
    }
    if path.starts_with("/proc") {
        return Err(refused(
            "it lies in /proc: a host /proc path names the supervisor's processes, not the run's (/proc/self resolves to the supervisor's pid); every tier gives the run the /proc entries of its own processes",
        ));
    }
    if !path.starts_with("/dev") {
        return Ok(true);
    }
    if crate::plan::PROVIDED_DEVICES
        .iter()
        .any(|d| path == Path::new(d))
    {
        return Ok(false);
    }
    if path == Path::new(crate::plan::DEV_SHM) {
        return Ok(true);
    }
    if path.starts_with(crate::plan::DEV_SHM) {
        return Err(refused(
            "it lies inside /dev/shm, which in Tier C is the run's own (filesystem.dev_shm); grant /dev/shm itself",
        ));
    }
    Err(refused(
        "it is a host device or /dev itself, which no tier passes through; every run has /dev/null, /dev/zero, /dev/full, /dev/random, /dev/urandom and pseudo-terminals, and /dev/shm as filesystem.dev_shm says",
    ))
}

/// Whether `a` names the directory `b` (canonical) is.
fn same_dir(a: &Path, b: &Path) -> bool {
    std::fs::canonicalize(a).is_ok_and(|a| a == b)
}

/// Home directories listed in `/etc/passwd` that exist, canonical, read at most once per
/// [`crate::validate::SYSTEM_PATHS_RECHECK`] (a user added meanwhile is seen after it).
fn passwd_homes() -> Vec<PathBuf> {
    use std::sync::Mutex;
    use std::time::Instant;
    static CACHE: Mutex<Option<(Instant, Vec<PathBuf>)>> = Mutex::new(None);
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((at, homes)) = cache.as_ref()
        && at.elapsed() < crate::validate::SYSTEM_PATHS_RECHECK
    {
        return homes.clone();
    }
    let homes: Vec<PathBuf> = std::fs::read_to_string("/etc/passwd")
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split(':').nth(5))
        .filter(|home| home.starts_with('/') && *home != "/" && *home != "/nonexistent")
        .filter_map(|home| std::fs::canonicalize(home).ok())
        .collect();
    *cache = Some((Instant::now(), homes.clone()));
    homes
}

/// The canonical working directory: `cwd` relative to the workspace (or absolute, if it
/// resolves inside), which must be an existing directory. `None` is the workspace.
/// `root` narrowed to the request's `workspace` subdirectory (see
/// [`crate::ProcessRunRequest::workspace`]): plain names only, each an existing directory
/// and not a symbolic link, so the result is canonical and inside `root`.
pub(crate) fn narrow_workspace(root: &Path, sub: Option<&str>) -> Result<PathBuf, Rejection> {
    let Some(sub) = sub else {
        return Ok(root.to_path_buf());
    };
    let invalid = |reason: String| Rejection::WorkspaceSubdirInvalid {
        workspace: sub.to_owned(),
        reason,
    };
    if sub.is_empty() || sub.len() > crate::request::MAX_CWD_BYTES {
        return Err(invalid(format!(
            "it must be 1 to {} bytes",
            crate::request::MAX_CWD_BYTES
        )));
    }
    let mut at = root.to_path_buf();
    for part in Path::new(sub).components() {
        let std::path::Component::Normal(name) = part else {
            return Err(invalid(
                "only plain directory names are allowed (no leading '/', '.' or '..')".to_owned(),
            ));
        };
        at.push(name);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(invalid(format!("{} is a symbolic link", at.display())));
            }
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(invalid(format!("{} is not a directory", at.display()))),
            Err(e) => return Err(invalid(format!("{} cannot be used: {e}", at.display()))),
        }
    }
    Ok(at)
}

pub(crate) fn resolve_cwd(workspace: &Path, cwd: Option<&str>) -> Result<PathBuf, Rejection> {
    let Some(cwd) = cwd else {
        return Ok(workspace.to_path_buf());
    };
    let outside = |resolved: PathBuf| Rejection::CwdOutsideWorkspace {
        cwd: cwd.to_owned(),
        resolved,
        workspace: workspace.to_path_buf(),
    };
    let resolved = resolve(workspace, Path::new(cwd)).map_err(outside)?;
    if !resolved.starts_with(workspace) {
        return Err(outside(resolved));
    }
    if !resolved.is_dir() {
        return Err(Rejection::CwdNotDirectory {
            cwd: cwd.to_owned(),
        });
    }
    Ok(resolved)
}

/// Where `path` (absolute, or relative to `base`) leads on the host: [`resolve_in`] with
/// every component looked up.
pub(crate) fn resolve(base: &Path, path: &Path) -> Result<PathBuf, PathBuf> {
    resolve_in(base, path, &|_| false)
}

/// Where `path` (absolute, or relative to `base`) leads, walked one component at a time
/// as the kernel does: a symlink is replaced by its target (a dangling one too, up to
/// [`MAX_SYMLINK_HOPS`] links), `..` goes to the parent of what was reached, and from the
/// first component that does not exist on, the rest is applied lexically (it holds no
/// symlinks; a `..` after it would fail in the kernel). A component for which `own`
/// says so is not looked up on the host either — the sandbox's own mounts (its `/tmp`,
/// `/dev`, `/proc`), whose host contents the run does not see. `Err` carries the path
/// reached when it cannot be resolved (a symlink loop, too many links, an unreadable
/// link).
pub(crate) fn resolve_in(
    base: &Path,
    path: &Path,
    own: &dyn Fn(&Path) -> bool,
) -> Result<PathBuf, PathBuf> {
    use std::collections::VecDeque;
    use std::ffi::OsString;

    /// One step of the walk still to take.
    enum Part {
        Root,
        Up,
        Name(OsString),
    }
    fn parts(path: &Path) -> impl Iterator<Item = Part> + '_ {
        path.components().filter_map(|c| match c {
            Component::RootDir | Component::Prefix(_) => Some(Part::Root),
            Component::ParentDir => Some(Part::Up),
            Component::Normal(name) => Some(Part::Name(name.to_owned())),
            Component::CurDir => None,
        })
    }

    let mut pending: VecDeque<Part> = parts(&base.join(path)).collect();
    let mut at = PathBuf::from("/");
    let mut hops = 0;
    let mut missing = false;
    while let Some(part) = pending.pop_front() {
        let name = match part {
            Part::Root => {
                at = PathBuf::from("/");
                continue;
            }
            Part::Up => {
                at.pop();
                continue;
            }
            Part::Name(name) => name,
        };
        at.push(&name);
        if missing || own(&at) {
            continue;
        }
        match std::fs::symlink_metadata(&at) {
            Err(_) => missing = true,
            Ok(meta) if meta.file_type().is_symlink() => {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(at);
                }
                let Ok(target) = std::fs::read_link(&at) else {
                    return Err(at);
                };
                at.pop();
                for part in parts(&target).collect::<Vec<_>>().into_iter().rev() {
                    pending.push_front(part);
                }
            }
            Ok(_) => {}
        }
    }
    Ok(at)
}

#[cfg(test)]
#[path = "scope_tests.rs"]
mod tests;
