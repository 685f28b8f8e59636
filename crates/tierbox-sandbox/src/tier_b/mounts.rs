//! Tier B's private `/tmp` and `/dev/shm`: the trees of a mount namespace of the run's
//! own (`tier_b::namespace`), in which only those two paths (and the protected paths,
//! `tier_b::protect`) differ from the host's.
//!
//! A Tier B run keeps the host's filesystem view: landlock decides what it may reach.
//! Programs write `/tmp` directly, not `$TMPDIR` (compilers' scratch files, test
//! fixtures, sockets), and POSIX semaphores and shared memory live in `/dev/shm`
//! (Python's `multiprocessing`): granting the host's would share them with every process
//! of the run's uid. So, wherever the run can have a mount namespace (a root supervisor,
//! with `CAP_SYS_ADMIN` in the host's mount namespace — the condition of the bounded
//! `TMPDIR`, the `disk` layer — or an unprivileged one in a user namespace of the run's
//! own), the process that makes it makes every mount private (nothing propagates back to
//! the host) and moves these trees into place ([`plan`]; the mount points made by
//! [`prepare`], each source recorded with the object it is by `ns_trees`):
//!
//! 1. the run's private tmp (the directory `TMPDIR` and the private `HOME` already were;
//!    under a root supervisor the bounded tmpfs of `limits.disk_bytes`) over `/tmp`:
//!    `/tmp` *is* `$TMPDIR`;
//! 2. its [`SHM_DIR`] directory over `/dev/shm`, so shared memory counts against the same
//!    bound;
//! 3. each grant that lies beneath `/tmp` (a workspace in `/tmp/…`, a writable or
//!    read-only path there), which step 1 hid, bound back at its own path onto a
//!    mount point made for it in the private tmp: a read-only grant read-only at the
//!    mount (the private tmp's landlock rule is read-write, and landlock's rights add up
//!    along the path, so the mount flag is what keeps it read-only). A grant beneath an
//!    already bound grant of the same kind is inside that tree already. Every bound tree
//!    is `nosuid` and `nodev`.
//!
//! A grant of `/tmp` or `/dev/shm` itself is served by the private one (as in Tier C).
//! Nothing else changes: every other path, and every landlock rule, is the host's
//! (landlock rules bind to inodes, and the bound trees are the same inodes).
//!
//! Invariants: the namespace is made before landlock and seccomp (both refuse mount
//! operations) by the process that is restricted next: the child, which then restricts
//! itself, or, in a long-lived supervisor, a warm slot's launcher thread before it arms
//! itself (`tier_b::launcher::ThreadMounts`), whose children inherit namespace, domain and filter
//! alike. Each tree is cloned there from its source opened without following a symlink
//! and checked to be the object recorded here: a source swapped meanwhile fails the
//! launch. The run never holds `CAP_SYS_ADMIN` once its setup is done (its capabilities
//! are emptied after this step), so it cannot change this namespace's mounts.

use std::path::{Path, PathBuf};

pub use crate::launch::slots::SHM_DIR;

/// Where the run sees its private tmp.
pub const TMP_VIEW: &str = "/tmp";

/// Where the run sees its shared memory.
pub const SHM_VIEW: &str = "/dev/shm";

/// One tree moved into place in the child's mount namespace, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeMove {
    /// The host path cloned (`open_tree`).
    pub source: PathBuf,
    /// Where it is moved in the run's namespace.
    pub dest: PathBuf,
    /// Read-only at the mount.
    pub read_only: bool,
    /// The mount point to make in the private tmp first, relative to it, and whether it
    /// is a directory (else an empty file); `None` when `dest` exists already (the two
    /// fixed views, and a grant inside an already bound tree).
    pub mount_point: Option<(PathBuf, bool)>,
}

/// The moves for a run whose private tmp is `tmp` and whose landlock grants are
/// `read_only` and `read_write` (host paths, canonical); `is_dir` says whether a grant
/// is a directory. `tmp_view` and `shm_view` are [`TMP_VIEW`] and [`SHM_VIEW`] as the
/// host resolves them. Pure.
pub fn plan(
    tmp: &Path,
    (tmp_view, shm_view): (&Path, &Path),
    read_only: &[&Path],
    read_write: &[&Path],
    is_dir: impl Fn(&Path) -> bool,
) -> Vec<TreeMove> {
    let mut moves = vec![
        TreeMove {
            source: tmp.to_path_buf(),
            dest: tmp_view.to_path_buf(),
            read_only: false,
            mount_point: None,
        },
        TreeMove {
            source: tmp.join(SHM_DIR),
            dest: shm_view.to_path_buf(),
            read_only: false,
            mount_point: None,
        },
    ];
    // Grants strictly beneath /tmp, sorted so that an ancestor comes before what it holds.
    let mut hidden: Vec<(&Path, bool)> = read_only
        .iter()
        .map(|p| (*p, true))
        .chain(read_write.iter().map(|p| (*p, false)))
        .filter(|(p, _)| p.starts_with(tmp_view) && *p != tmp_view)
        // The private tmp itself, when the state directory lies in /tmp: it is `/tmp` now.
        .filter(|(p, _)| !p.starts_with(tmp))
        .collect();
    hidden.sort();
    hidden.dedup();
    // The same path granted both ways: read-write wins, as landlock's union does.
    hidden.dedup_by(|later, earlier| {
        if later.0 == earlier.0 {
            earlier.1 &= later.1;
            true
        } else {
            false
        }
    });
    let mut bound: Vec<(&Path, bool)> = Vec::new();
    for (path, read_only) in hidden {
        // The deepest bound tree holding it.
        let holder = bound
            .iter()
            .filter(|(b, _)| path.starts_with(b))
            .max_by_key(|(b, _)| b.as_os_str().len());
        let mount_point = match holder {
            // Inside a tree with the same or more rights: as on the host.
            Some(&(_, holder_ro)) if !holder_ro || read_only => continue,
            // A writable grant inside a read-only tree: bound over its own path there.
            Some(_) => None,
            None => Some((
                path.strip_prefix(tmp_view).unwrap_or(path).to_path_buf(),
                is_dir(path),
            )),
        };
        moves.push(TreeMove {
            source: path.to_path_buf(),
            dest: path.to_path_buf(),
            read_only,
            mount_point,
        });
        bound.push((path, read_only));
    }
    moves
}

/// The mount points of `moves` made in the private tmp `tmp` (root-owned, mode 0755
/// directories or 0444 empty files, hidden under the mounts; a grant that no longer
/// exists gets none), and the shared-memory directory made owned by `uid:gid`, mode
/// 0700. Idempotent.
pub fn prepare(tmp: &Path, moves: &[TreeMove], (uid, gid): (u32, u32)) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let shm = tmp.join(SHM_DIR);
    if !shm.is_dir() {
        std::fs::DirBuilder::new().mode(0o700).create(&shm)?;
        std::os::unix::fs::chown(&shm, Some(uid), Some(gid))?;
    }
    for m in moves {
        let Some((rel, dir)) = &m.mount_point else {
            continue;
        };
        // A grant that is gone has nothing to bind (landlock skips it too).
        if std::fs::symlink_metadata(&m.source).is_err() {
            continue;
        }
        let at = tmp.join(rel);
        if *dir {
            std::fs::DirBuilder::new()
                .mode(0o755)
                .recursive(true)
                .create(&at)?;
        } else {
            if let Some(parent) = at.parent() {
                std::fs::DirBuilder::new()
                    .mode(0o755)
                    .recursive(true)
                    .create(parent)?;
            }
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o444)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&at)?;
        }
    }
    Ok(())
}

/// The trees of `moves` as the run's mount namespace clones them ([`crate::tier_b::launcher::NsPlan`]):
/// each source with the object it is now (`lstat`: the namespace binds that object or
/// nothing), `nosuid` and `nodev`, read-only grants read-only. A grant that no longer
/// exists is left out (the launch goes on, and whatever else needs it refuses the run);
/// the private tmp and its shared-memory directory must exist.
pub(crate) fn ns_trees(
    tmp: &Path,
    moves: &[TreeMove],
) -> std::io::Result<Vec<crate::tier_b::launcher::NsTreePlan>> {
    use crate::linux::ns::sys::{MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};
    use std::os::unix::ffi::OsStrExt;
    let shm = tmp.join(SHM_DIR);
    let cstr =
        |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(std::io::Error::other);
    let mut trees = Vec::with_capacity(moves.len());
    for m in moves {
        let meta = match std::fs::symlink_metadata(&m.source) {
            Ok(meta) => meta,
            Err(_) if m.source != tmp && m.source != shm => continue,
            Err(e) => return Err(e),
        };
        trees.push(crate::tier_b::launcher::NsTreePlan {
            source: cstr(&m.source)?,
            expect: crate::launch::private_ns::FileId::of_metadata(&meta),
            attr: MOUNT_ATTR_NOSUID
                | MOUNT_ATTR_NODEV
                | if m.read_only { MOUNT_ATTR_RDONLY } else { 0 },
            dest: cstr(&m.dest)?,
        });
    }
    Ok(trees)
}

/// The mediator's roots for a run with this plan: each path the run names its private
/// tmp and shared memory by, with the host path it is (the run's view of every bound
/// grant is its host path, so those need nothing). The private tmp's own host path is
/// kept unless `/tmp` hides it.
pub fn mediator_roots(tmp: &Path, (tmp_view, shm_view): (&Path, &Path)) -> Vec<(PathBuf, PathBuf)> {
    let mut roots = vec![
        (tmp_view.to_path_buf(), tmp.to_path_buf()),
        (shm_view.to_path_buf(), tmp.join(SHM_DIR)),
    ];
    if !tmp.starts_with(tmp_view) && !tmp.starts_with(shm_view) {
        roots.push((tmp.to_path_buf(), tmp.to_path_buf()));
    }
    roots
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A move as text: source, destination, read-only, mount point.
    type Row<'a> = (&'a str, &'a str, bool, Option<(&'a str, bool)>);

    fn views() -> (&'static Path, &'static Path) {
        (Path::new("/tmp"), Path::new("/dev/shm"))
    }

    #[test]
    fn tmp_and_shm_first_then_grants_under_tmp_bound_back() {
        let tmp = Path::new("/var/lib/tierbox/tmp/run-1");
        let ws = Path::new("/tmp/ws");
        let moves = plan(
            tmp,
            views(),
            &[
                Path::new("/usr"),
                Path::new("/tmp/data"),
                Path::new("/tmp/ws/ro"),
                Path::new("/tmp/f.txt"),
            ],
            &[
                ws,
                Path::new("/dev/shm"),
                Path::new("/tmp"),
                Path::new("/tmp/data/out"),
            ],
            |p| p != Path::new("/tmp/f.txt"),
        );
        let got: Vec<Row> = moves
            .iter()
            .map(|m| {
                (
                    m.source.to_str().unwrap(),
                    m.dest.to_str().unwrap(),
                    m.read_only,
                    m.mount_point
                        .as_ref()
                        .map(|(r, d)| (r.to_str().unwrap(), *d)),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("/var/lib/tierbox/tmp/run-1", "/tmp", false, None),
                (
                    "/var/lib/tierbox/tmp/run-1/.dev-shm",
                    "/dev/shm",
                    false,
                    None
                ),
                // A read-only grant: read-only at the mount.
                ("/tmp/data", "/tmp/data", true, Some(("data", true))),
                // A writable grant inside it: bound over its own path.
                ("/tmp/data/out", "/tmp/data/out", false, None),
                // A file grant: an empty file as its mount point.
                ("/tmp/f.txt", "/tmp/f.txt", true, Some(("f.txt", false))),
                ("/tmp/ws", "/tmp/ws", false, Some(("ws", true))),
                // /tmp/ws/ro lies in the writable workspace: as on the host.
            ]
        );
    }

    #[test]
    fn a_path_granted_both_ways_is_bound_writable() {
        let moves = plan(
            Path::new("/state/run"),
            views(),
            &[Path::new("/tmp/x")],
            &[Path::new("/tmp/x")],
            |_| true,
        );
        assert_eq!(moves.len(), 3);
        assert!(!moves[2].read_only);
    }

    #[test]
    fn a_private_tmp_inside_tmp_is_not_bound_back_and_not_a_root_by_its_host_path() {
        let tmp = Path::new("/tmp/state/tmp/run-1");
        let moves = plan(tmp, views(), &[], &[tmp, Path::new("/tmp/ws")], |_| true);
        assert_eq!(moves.len(), 3, "{moves:?}");
        assert_eq!(moves[2].dest, Path::new("/tmp/ws"));
        let roots = mediator_roots(tmp, views());
        assert_eq!(roots.len(), 2, "{roots:?}");
        let roots = mediator_roots(Path::new("/state/run"), views());
        assert_eq!(
            roots[2],
            (PathBuf::from("/state/run"), PathBuf::from("/state/run"))
        );
    }
}
