//! Security review tests (Tier B child setup and chmod mediation).
//!
//! Tests named `bug_*` demonstrate a finding and FAIL on the current code; tests named
//! `sound_*` check a property the review found to hold (they pass). All need root and
//! skip (pass with a message) otherwise.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

mod sys;
use sys::*;

#[test]
fn sound_pdeathsig_kills_a_uid0_child_when_the_cloning_thread_exits() {
    if !is_root() {
        return;
    }
    let pidfd = sleep_child_from_exiting_thread(false);
    assert_eq!(
        died_within(&pidfd, Duration::from_secs(3)),
        Some(Ok(libc::SIGKILL))
    );
}

/// FINDING: `child_setup` sets `PR_SET_PDEATHSIG` at step 3, then switches uid/gid at
/// step 9. The kernel clears the parent-death signal on any change of euid/egid/fsuid/
/// fsgid (`commit_creds`), so for the configuration SECURITY.md recommends (root
/// supervisor, non-root workspace owner) the direct child does NOT die with the
/// supervisor, contrary to SECURITY.md ("The direct child dies with it").
#[test]
fn regression_pdeathsig_survives_the_uid_switch() {
    if !is_root() {
        return;
    }
    let pidfd = sleep_child_from_exiting_thread(true);
    assert_eq!(
        died_within(&pidfd, Duration::from_secs(3)),
        Some(Ok(libc::SIGKILL)),
        "the child switched to uid 65534 outlived the thread that cloned it \
         (PR_SET_PDEATHSIG was cleared by setresuid)"
    );
}

// ---- chmod mediation -----------------------------------------------------------------

/// One system call the mediated child makes.
enum Call {
    /// `fchmodat(AT_FDCWD, path, mode)`.
    Chmod(CString, u32),
    /// `link(old, new)` (not mediated; used under landlock).
    Link(CString, CString),
    /// `open(path, O_PATH)`, then `linkat(AT_FDCWD, "/proc/self/fd/N", new,
    /// AT_SYMLINK_FOLLOW)` and `linkat(N, "", new2, AT_EMPTY_PATH)`; reports the first
    /// success (0) or the last errno.
    LinkViaFd(CString, CString, CString),
    /// `file_setattr(AT_FDCWD, path, {fa_xflags}, 24, 0)` (Linux 6.17, nr 469).
    FileSetattr(CString, u64),
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// A root-owned workspace `<tmp>/ws` and its parent (on the same filesystem).
fn workspace() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let parent = std::fs::canonicalize(root.path()).unwrap();
    let ws = parent.join("ws");
    std::fs::create_dir(&ws).unwrap();
    (root, parent, ws)
}

/// Control: the harness works — inside allowed, outside refused.
#[test]
fn sound_mediator_allows_inside_and_refuses_outside() {
    if !is_root() {
        return;
    }
    let (_t, parent, ws) = workspace();
    let inside = ws.join("inside");
    let outside = parent.join("outside");
    std::fs::write(&inside, "x").unwrap();
    std::fs::write(&outside, "x").unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o600)).unwrap();
    let link_out = ws.join("link-out");
    std::os::unix::fs::symlink(&outside, &link_out).unwrap();
    let r = run_mediated(
        &ws,
        0,
        0,
        None,
        &[
            Call::Chmod(cpath(&inside), 0o640),
            Call::Chmod(cpath(&outside), 0o644),
            Call::Chmod(cpath(&link_out), 0o644),
            Call::Chmod(cpath(&ws.join("../outside")), 0o644),
        ],
    );
    assert_eq!(r, vec![0, libc::EPERM, libc::EPERM, libc::EPERM]);
    assert_eq!(std::fs::metadata(&inside).unwrap().mode() & 0o7777, 0o640);
    assert_eq!(std::fs::metadata(&outside).unwrap().mode() & 0o7777, 0o600);
}

/// FINDING (low): the mediator mirrors the kernel's "drop S_ISGID when the caller is not
/// in the file's group" only for non-directories. The kernel (`setattr_prepare`) drops it
/// for directories too (checked on this host: `setpriv --bounding-set=-fsetid chmod 2755
/// d` leaves 0755). The supervisor acts with CAP_FSETID, so a uid-0 run can set setgid on
/// a directory of a group it is not in (files created below then inherit that group).
#[test]
fn regression_mediator_sets_setgid_on_a_directory_of_a_foreign_group() {
    if !is_root() {
        return;
    }
    let (_t, _parent, ws) = workspace();
    let dir = ws.join("d");
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(0), Some(4242)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let r = run_mediated(&ws, 0, 0, None, &[Call::Chmod(cpath(&dir), 0o2755)]);
    assert_eq!(r, vec![0]);
    let mode = std::fs::metadata(&dir).unwrap().mode() & 0o7777;
    assert_eq!(
        mode & libc::S_ISGID,
        0,
        "mediated chmod set S_ISGID on a directory of group 4242 for a gid-0 caller \
         (mode {mode:o}); the kernel would have dropped it"
    );
}

/// FINDING (low/medium, needs a pre-existing hard link): "beneath the workspace" is
/// checked on the path, not the inode. A hard link inside the workspace to a root-owned
/// file elsewhere on the same filesystem lets a uid-0 run change that file's mode (e.g.
/// `chmod 0644` of a secret, `chmod u+s` of a binary). The run cannot create such a link
/// itself (see `sound_landlock_refer_blocks_hardlinks_from_read_only_paths`), but one left
/// by earlier tooling (`cp -al`, package stores, backup trees) is enough; the mediator
/// does not refuse `st_nlink > 1` non-directories.
#[test]
fn regression_mediator_chmods_an_outside_file_through_a_hardlink() {
    if !is_root() {
        return;
    }
    let (_t, parent, ws) = workspace();
    let outside = parent.join("secret");
    std::fs::write(&outside, "secret").unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::hard_link(&outside, ws.join("innocent")).unwrap();
    let r = run_mediated(
        &ws,
        0,
        0,
        None,
        &[Call::Chmod(cpath(&ws.join("innocent")), 0o4777)],
    );
    let mode = std::fs::metadata(&outside).unwrap().mode() & 0o7777;
    assert_eq!(
        (r, mode),
        (vec![libc::EPERM], 0o600),
        "a file outside the workspace was chmodded through a hard link"
    );
}

/// Checked: a landlocked run cannot create, in the workspace, a hard link to a file of a
/// read-only (or hidden) path: landlock requires REFER on the source's parent, and only
/// read-write grants carry it (same filesystem here, so EXDEV is landlock's doing).
#[test]
fn sound_landlock_refer_blocks_hardlinks_from_read_only_paths() {
    use crate::linux::landlock::{LandlockSpec, PreparedLandlock};
    if !is_root() || crate::linux::landlock::probe_abi().is_none() {
        return;
    }
    let (_t, parent, ws) = workspace();
    let ro = parent.join("ro");
    std::fs::create_dir(&ro).unwrap();
    let readable = ro.join("readable");
    std::fs::write(&readable, "x").unwrap();
    let hidden = parent.join("hidden");
    std::fs::write(&hidden, "x").unwrap();
    let ll = PreparedLandlock::prepare(&LandlockSpec {
        read_only: vec![ro.clone()],
        read_write: vec![ws.clone()],
        scope_signals: false,
        scope_abstract_unix: false,
        tcp_connect_ports: None,
    })
    .unwrap();
    let r = run_mediated(
        &ws,
        0,
        0,
        Some(ll.raw_fd()),
        &[
            Call::Link(cpath(&readable), cpath(&ws.join("l1"))),
            Call::Link(cpath(&hidden), cpath(&ws.join("l2"))),
            Call::LinkViaFd(cpath(&hidden), cpath(&ws.join("l3")), cpath(&ws.join("l4"))),
        ],
    );
    assert!(r.iter().all(|&e| e != 0), "a hard link was created: {r:?}");
    assert!(std::fs::read_dir(&ws).unwrap().next().is_none());
}

/// FINDING (low): the seccomp deny list predates `file_setattr` (Linux 6.17, nr 469),
/// which changes a file's fsxattr flags *by path* without opening it. Landlock does not
/// mediate it and the kernel only requires ownership, so a uid-0 run changes attributes
/// of root-owned files landlock hides from it (here: `FS_XFLAG_NODUMP` on a file outside
/// every grant; also `NOATIME`, `SYNC`, `DAX`, extent-size hints and — in the initial
/// user namespace — the project id; `IMMUTABLE`/`APPEND` still need CAP_LINUX_IMMUTABLE).
/// `FS_IOC_SETFLAGS`/`FS_IOC_FSSETXATTR` on a read-only fd of a readable system file are
/// the same class. SECURITY.md says the xattr family is denied for uid-0 runs.
#[test]
fn regression_file_setattr_changes_attributes_of_a_hidden_host_file() {
    use crate::linux::landlock::{LandlockSpec, PreparedLandlock};
    if !is_root() || crate::linux::landlock::probe_abi().is_none() {
        return;
    }
    let (_t, parent, ws) = workspace();
    let hidden = parent.join("hidden");
    std::fs::write(&hidden, "x").unwrap();
    let ll = PreparedLandlock::prepare(&LandlockSpec {
        read_only: vec![],
        read_write: vec![ws.clone()],
        scope_signals: false,
        scope_abstract_unix: false,
        tcp_connect_ports: None,
    })
    .unwrap();
    const FS_XFLAG_NODUMP: u64 = 0x80;
    let r = run_mediated(
        &ws,
        0,
        0,
        Some(ll.raw_fd()),
        &[Call::FileSetattr(cpath(&hidden), FS_XFLAG_NODUMP)],
    );
    let lsattr = std::process::Command::new("lsattr").arg(&hidden).output();
    println!("lsattr: {lsattr:?}");
    assert_ne!(
        r,
        vec![0],
        "file_setattr on a file outside every landlock grant succeeded"
    );
}
