//! Tier B's system roots granted whole, with the host's secrets beneath them covered in
//! the run's own mount namespace — as Tier C binds the roots whole and covers them.
//!
//! Without a mount namespace, landlock can only grant: a system root holding a secret
//! (`/etc` with `/etc/shadow`) is granted as its entries around the secret, recursively
//! ([`tierbox_policy::plan::FsPlan::system_read_only`]: about 150 rules on a Debian
//! host, four system calls each at every cold start). A run that has its own mount
//! namespace ([`super::namespace`]) gets the roots as one rule each instead, and every
//! path the carving left out is covered before landlock applies: a directory with an
//! empty read-only tmpfs whose root has mode 0, anything else with a `nodev`
//! `/dev/null`, so that listing or opening it fails with `EACCES`, as landlock's refusal
//! did (a run holds no capability that could pass a mode-0 directory or open a device on
//! a `nodev` mount, and cannot unmount a cover: landlock and seccomp refuse it).
//!
//! The two are equal only while nothing else changes what the run reaches, so this is
//! used only when ([`whole_roots`]):
//!
//! - every path to cover is known as itself: each `filesystem.deny_read` entry beneath a
//!   root is missing, a file or a directory reached without a symbolic link (a link's
//!   denial would be about its target, which the carving leaves to landlock);
//! - no grant of the policy (the workspace, `filesystem.read_only`, `filesystem.writable`)
//!   lies inside a covered path or holds one: a cover would hide what the grant gives, or
//!   the grant give what the cover hides;
//! - no other mount in the host's tree shows a root's directory (a bind of `/etc` or `/`
//!   elsewhere): landlock's rule is on the directory, so another way to it would reach the
//!   secrets past their covers ([`other_ways_in`]);
//! - there are at most [`MAX_COVERS`] covers.
//!
//! Otherwise the run keeps the carved grants. A secret that appears beneath a root after
//! the run's namespace is made is visible to it — as in Tier C; the host walk notices a
//! new one for the next run ([`tierbox_policy::validate::SYSTEM_PATHS_RECHECK`]).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use tierbox_policy::plan::Plan;

use crate::linux::mount_table::unescape;

/// Most covers one run's namespace makes (each is about seven system calls at its start):
/// a host or policy with more keeps the carved landlock grants, whose cost grows with the
/// entries instead.
pub(crate) const MAX_COVERS: usize = 64;

/// The system roots a run's landlock grants whole, and what its namespace covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WholeRoots {
    /// The system roots, minus any a `deny_read` entry contains.
    pub(crate) roots: Vec<PathBuf>,
    /// The paths to cover, outermost first, none inside another.
    pub(crate) covers: Vec<PathBuf>,
}

impl WholeRoots {
    /// The covers as the namespace step reads them.
    pub(crate) fn cover_strings(&self) -> std::io::Result<Vec<CString>> {
        self.covers
            .iter()
            .map(|p| CString::new(p.as_os_str().as_bytes()).map_err(std::io::Error::other))
            .collect()
    }
}

/// The whole roots of `plan` and their covers, or `None` when the run must keep the
/// carved grants (see the module documentation for when). `also_granted`: what the
/// launch grants besides the plan (the run's private tmp).
pub(crate) fn whole_roots(plan: &Plan, also_granted: &[&Path]) -> Option<WholeRoots> {
    whole_roots_with(
        plan,
        also_granted,
        &|p| std::fs::symlink_metadata(p),
        other_ways_in,
    )
}

/// [`whole_roots`] with the host's lookups given: `lstat` and the check for other mounts
/// of the roots.
fn whole_roots_with(
    plan: &Plan,
    also_granted: &[&Path],
    lstat: &dyn Fn(&Path) -> std::io::Result<std::fs::Metadata>,
    other_ways: impl Fn(&[PathBuf]) -> bool,
) -> Option<WholeRoots> {
    let fs = &plan.filesystem;
    if fs.system_roots.is_empty() {
        return None;
    }
    let roots: Vec<PathBuf> = fs
        .system_roots
        .iter()
        .filter(|r| !fs.deny_read.iter().any(|d| r.starts_with(d)))
        .cloned()
        .collect();
    let under_roots = |p: &Path| roots.iter().any(|r| p.starts_with(r) && p != r);
    let mut wanted: Vec<PathBuf> = fs
        .system_hidden
        .iter()
        .filter(|h| under_roots(h))
        .cloned()
        .collect();
    for d in fs.deny_read.iter().filter(|d| under_roots(d)) {
        match lstat(d) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) => return None,
            Ok(m) if m.file_type().is_symlink() => return None,
            Ok(_) => {}
        }
        // Known as itself: no symbolic link on the way (the covers are opened so).
        let canonical = d
            .parent()
            .and_then(|parent| std::fs::canonicalize(parent).ok())
            .zip(d.file_name())
            .map(|(parent, name)| parent.join(name));
        if canonical.as_deref() != Some(d.as_path()) {
            return None;
        }
        wanted.push(d.clone());
    }
    wanted.sort();
    wanted.dedup();
    let mut covers: Vec<PathBuf> = Vec::new();
    for p in wanted {
        if !covers.iter().any(|c| p.starts_with(c)) {
            covers.push(p);
        }
    }
    if covers.len() > MAX_COVERS {
        return None;
    }
    let grants = std::iter::once(&plan.workspace)
        .chain(fs.read_only_binds())
        .chain(fs.writable_binds())
        .chain(&fs.read_only)
        .chain(&fs.writable);
    let overlaps = |g: &Path| covers.iter().any(|c| g.starts_with(c) || c.starts_with(g));
    if grants
        .map(PathBuf::as_path)
        .chain(also_granted.iter().copied())
        .any(overlaps)
    {
        return None;
    }
    if other_ways(&roots) {
        return None;
    }
    Some(WholeRoots { roots, covers })
}

/// Whether a mount of this host shows one of `roots`' directories (or the root
/// directory) anywhere but at its own place: a bind of `/etc` or `/` elsewhere, as a
/// container runtime or a chroot setup makes. Read from `/proc/self/mountinfo` as kept by
/// [`crate::linux::mount_table`] (read again whenever the kernel marks a mount change); a
/// table that cannot be read counts as yes.
fn other_ways_in(roots: &[PathBuf]) -> bool {
    match crate::linux::mount_table::current() {
        Ok(table) => shows_roots_elsewhere(&table, roots),
        Err(_) => true,
    }
}

/// [`other_ways_in`] on a mount table's text: a mount whose root (field 4, within its
/// filesystem) is `/` or names one of `roots` (or an ancestor of one) while its mount
/// point (field 5) is not that same path. The root of one filesystem is only a way in
/// when that filesystem holds a root: it is judged by its device (field 3) against the
/// devices the roots' own mounts have.
fn shows_roots_elsewhere(table: &str, roots: &[PathBuf]) -> bool {
    struct Mount<'a> {
        dev: &'a str,
        root: &'a str,
        point: &'a str,
    }
    let mounts: Vec<Mount> = table
        .lines()
        .filter_map(|line| {
            let mut f = line.split(' ');
            let (_, _, dev, root, point) = (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
            Some(Mount { dev, root, point })
        })
        .collect();
    // The mount each root lives on: the one with the longest mount point above it (the
    // last such in the table, as mounts stack).
    let home_of = |path: &Path| {
        mounts
            .iter()
            .filter(|m| path.starts_with(unescape(m.point)))
            .max_by_key(|m| m.point.len())
    };
    roots.iter().any(|root| {
        // Where the root's directory is in its filesystem.
        let Some(home) = home_of(root) else {
            return true;
        };
        let Ok(rel) = root.strip_prefix(unescape(home.point)) else {
            return true;
        };
        let inside = Path::new(&unescape(home.root)).join(rel);
        mounts.iter().any(|m| {
            if m.dev != home.dev {
                return false;
            }
            let m_root = PathBuf::from(unescape(m.root));
            // The mount shows the root's directory when its root is that directory or
            // one of its ancestors; at the root's own place that is the root itself.
            inside.starts_with(&m_root) && {
                let at = Path::new(&unescape(m.point)).join(
                    inside
                        .strip_prefix(&m_root)
                        .unwrap_or_else(|_| Path::new("")),
                );
                at != *root
            }
        })
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn plan_with(roots: &[&str], hidden: &[&str], deny: &[&str]) -> Plan {
        let mut plan = crate::test_fixtures::golden_plan("strict.toml");
        let paths = |l: &[&str]| l.iter().map(PathBuf::from).collect::<Vec<_>>();
        plan.workspace = PathBuf::from("/work/ws");
        plan.filesystem.system_roots = paths(roots).into();
        plan.filesystem.system_hidden = paths(hidden).into();
        plan.filesystem.deny_read = paths(deny);
        plan.filesystem.read_only = Vec::new();
        plan.filesystem.writable = Vec::new();
        plan.filesystem.read_only_roots = Vec::new();
        plan.filesystem.writable_roots = Vec::new();
        plan
    }

    fn exists_as_file(_: &Path) -> std::io::Result<std::fs::Metadata> {
        std::fs::symlink_metadata("/proc/self/status")
    }

    /// The hidden entries become covers, outermost only; a denied root is not granted;
    /// a denial outside every root changes nothing here.
    #[test]
    fn covers_are_the_hidden_entries_outermost_first() {
        let plan = plan_with(
            &["/usr", "/etc", "/opt"],
            &["/etc/shadow", "/etc/ssh", "/etc/ssh/ssh_host_rsa_key"],
            &["/opt", "/home/u/.ssh"],
        );
        let w = whole_roots_with(&plan, &[], &exists_as_file, |_| false).unwrap();
        assert_eq!(w.roots, [PathBuf::from("/usr"), PathBuf::from("/etc")]);
        assert_eq!(
            w.covers,
            [PathBuf::from("/etc/shadow"), PathBuf::from("/etc/ssh")]
        );
    }

    /// A `deny_read` entry beneath a root is covered when it exists, skipped when it does
    /// not, and a symbolic link keeps the carved grants.
    #[test]
    fn denials_beneath_a_root_are_covered_when_they_are_themselves() {
        let plan = plan_with(&["/etc"], &[], &["/etc/hostname"]);
        let w = whole_roots_with(&plan, &[], &exists_as_file, |_| false).unwrap();
        assert_eq!(w.covers, [PathBuf::from("/etc/hostname")]);
        let missing = |_: &Path| -> std::io::Result<std::fs::Metadata> {
            Err(std::io::ErrorKind::NotFound.into())
        };
        let plan = plan_with(&["/etc"], &[], &["/etc/no-such-file"]);
        assert!(
            whole_roots_with(&plan, &[], &missing, |_| false)
                .unwrap()
                .covers
                .is_empty()
        );
        let link = |_: &Path| std::fs::symlink_metadata("/proc/self/exe");
        let plan = plan_with(&["/etc"], &[], &["/etc/hostname"]);
        assert_eq!(whole_roots_with(&plan, &[], &link, |_| false), None);
        // A path reached through a symbolic link (`/bin` is one on merged-/usr hosts, or
        // not there at all): never covered by that name.
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(real.join("d")).unwrap();
        std::fs::write(real.join("d/f"), "").unwrap();
        std::os::unix::fs::symlink(real.join("d"), real.join("l")).unwrap();
        let via = real.join("l/f");
        let root = real.display().to_string();
        let via_s = via.display().to_string();
        let plan = plan_with(&[&root], &[], &[&via_s]);
        assert_eq!(
            whole_roots_with(&plan, &[], &|p| std::fs::symlink_metadata(p), |_| false),
            None
        );
        let direct = real.join("d/f").display().to_string();
        let plan = plan_with(&[&root], &[], &[&direct]);
        assert_eq!(
            whole_roots_with(&plan, &[], &|p| std::fs::symlink_metadata(p), |_| false)
                .unwrap()
                .covers,
            [real.join("d/f")]
        );
    }

    /// A grant inside a cover, or holding one, keeps the carved grants; so do too many
    /// covers, and another way to a root.
    #[test]
    fn overlapping_grants_many_covers_and_other_mounts_keep_the_carving() {
        let mut plan = plan_with(&["/etc"], &["/etc/ssl/private"], &[]);
        plan.filesystem.read_only = vec![PathBuf::from("/etc/ssl")];
        assert_eq!(
            whole_roots_with(&plan, &[], &exists_as_file, |_| false),
            None
        );
        plan.filesystem.read_only = vec![PathBuf::from("/etc/ssl/private/ca.pem")];
        assert_eq!(
            whole_roots_with(&plan, &[], &exists_as_file, |_| false),
            None
        );
        plan.filesystem.read_only = vec![PathBuf::from("/etc/ssl/certs")];
        assert!(whole_roots_with(&plan, &[], &exists_as_file, |_| false).is_some());
        assert_eq!(
            whole_roots_with(&plan, &[], &exists_as_file, |_| true),
            None
        );
        let many: Vec<String> = (0..=MAX_COVERS).map(|i| format!("/etc/s{i:03}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let plan = plan_with(&["/etc"], &many, &[]);
        assert_eq!(
            whole_roots_with(&plan, &[], &exists_as_file, |_| false),
            None
        );
        let plan = plan_with(&["/etc"], &many[..MAX_COVERS], &[]);
        assert!(whole_roots_with(&plan, &[], &exists_as_file, |_| false).is_some());
    }

    /// The mount table check: the host's own mounts show each root once, at its place; a
    /// bind of `/etc`, of `/`, or of the filesystem holding `/etc` elsewhere is another
    /// way in; a bind of a directory inside `/etc`, or of another filesystem, is not.
    #[test]
    fn another_mount_of_a_root_or_its_filesystem_is_found() {
        let base = "\
22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
23 22 0:5 / /dev rw shared:2 - devtmpfs udev rw
24 22 0:22 / /proc rw shared:3 - proc proc rw
25 22 0:23 / /tmp rw shared:4 - tmpfs tmpfs rw
";
        let roots = [PathBuf::from("/etc"), PathBuf::from("/usr")];
        assert!(!shows_roots_elsewhere(base, &roots));
        let with = |line: &str| format!("{base}{line}\n");
        assert!(shows_roots_elsewhere(
            &with("30 22 254:1 /etc /srv/etc\\040copy rw - ext4 /dev/vda rw"),
            &roots
        ));
        assert!(shows_roots_elsewhere(
            &with("30 22 254:1 / /mnt/host rw - ext4 /dev/vda rw"),
            &roots
        ));
        assert!(!shows_roots_elsewhere(
            &with("30 22 254:1 /etc/ssh /srv/ssh rw - ext4 /dev/vda rw"),
            &roots
        ));
        assert!(!shows_roots_elsewhere(
            &with("30 22 0:40 / /mnt/other rw - ext4 /dev/vdb rw"),
            &roots
        ));
        // /etc on a filesystem of its own, mounted twice.
        let own = format!("{base}31 22 0:41 / /etc rw - ext4 /dev/vdc rw\n");
        assert!(!shows_roots_elsewhere(&own, &roots));
        assert!(shows_roots_elsewhere(
            &format!("{own}32 22 0:41 / /srv/e rw - ext4 /dev/vdc rw\n"),
            &roots
        ));
        // A table that names no mount above a root: another way in, for all we know.
        assert!(shows_roots_elsewhere("", &roots));
        assert_eq!(unescape("/srv/etc\\040copy"), "/srv/etc copy");
    }
}
