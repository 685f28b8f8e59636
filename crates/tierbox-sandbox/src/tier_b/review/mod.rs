//! Security review tests (Tier B child setup and chmod mediation).
//!
//! Tests named `regression_*` hold a property a security review found broken (each doc
//! says what was wrong); tests named `sound_*` hold a property the review found to hold.
//! All need root: without it each prints why it skipped, and under CI (`CI=true`, where
//! the machine is root) a skip is a failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

#[allow(unsafe_code)]
mod sys;
use sys::*;

/// Whether `test` can run here: it needs root (and `landlock` when asked). Otherwise it
/// says why it skipped; under CI (`CI=true`, a root machine with landlock) a skip fails.
#[track_caller]
fn runs_here(test: &str, needs_landlock: bool) -> bool {
    let missing = if !is_root() {
        Some("needs root")
    } else if needs_landlock && crate::linux::landlock::probe_abi().is_none() {
        Some("needs landlock")
    } else {
        None
    };
    let Some(why) = missing else {
        return true;
    };
    tierbox_test_support::skip(test, why);
    false
}

#[test]
fn sound_pdeathsig_kills_a_uid0_child_when_the_cloning_thread_exits() {
    if !runs_here(
        "sound_pdeathsig_kills_a_uid0_child_when_the_cloning_thread_exits",
        false,
    ) {
        return;
    }
    let pidfd = sleep_child_from_exiting_thread(false);
    assert_eq!(
        died_within(&pidfd, Duration::from_secs(3)),
        Some(Ok(libc::SIGKILL))
    );
}

/// A Tier B child switched to another uid still dies with the thread that cloned it.
///
/// Regression: `child_setup` set `PR_SET_PDEATHSIG` before switching uid/gid, and the
/// kernel clears the parent-death signal on any change of credentials (`commit_creds`),
/// so with a root supervisor and a non-root workspace owner the child outlived the
/// supervisor.
#[test]
fn regression_pdeathsig_survives_the_uid_switch() {
    if !runs_here("regression_pdeathsig_survives_the_uid_switch", false) {
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
    /// `fd = open(path, flags)`, then `fchmodat(AT_FDCWD, "/proc/<who>/fd/<fd>", mode)`:
    /// glibc's `fchmodat(AT_SYMLINK_NOFOLLOW)` without `fchmodat2` (`who` = `self`).
    ChmodProcFd(CString, i32, &'static [u8], u32),
    /// `fchownat(AT_FDCWD, path, owner, group, 0)`.
    Chown(CString, u32, u32),
    /// `setxattr(path, "system.posix_acl_access", …)`, as `install -m` and `cp -p` try.
    SetAcl(CString),
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
    if !runs_here("sound_mediator_allows_inside_and_refuses_outside", false) {
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

/// The chmod mediator never sets setuid or setgid, on a file or a directory, whatever
/// its group: nothing a run leaves behind may carry either bit.
///
/// Regression: the mediator, which acts with CAP_FSETID, set S_ISGID on a directory of a
/// foreign group (the kernel would have dropped it for the caller), and kept setuid and
/// setgid on the run's own files: `chmod 4755` of a copied binary left a setuid-root
/// file in a root-owned workspace.
#[test]
fn regression_mediator_sets_setid_bits() {
    if !runs_here("regression_mediator_sets_setid_bits", false) {
        return;
    }
    let (_t, _parent, ws) = workspace();
    let dir = ws.join("d");
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(0), Some(4242)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let file = ws.join("x");
    std::fs::write(&file, "x").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
    let r = run_mediated(
        &ws,
        0,
        None,
        &[
            Call::Chmod(cpath(&dir), 0o2755),
            Call::Chmod(cpath(&file), 0o4755),
            Call::Chmod(cpath(&file), 0o2711),
            Call::Chmod(cpath(&file), 0o700),
        ],
    );
    assert_eq!(r, vec![libc::EPERM, libc::EPERM, libc::EPERM, 0]);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
    assert_eq!((mode(&dir), mode(&file)), (0o755, 0o700));
}

/// The chmod mediator refuses a file with more than one hard link: "beneath the
/// workspace" is a property of the path, and a link left in the workspace by earlier
/// tooling (`cp -al`, package stores, backup trees) to a root-owned file elsewhere would
/// let a uid-0 run change that file's mode (`chmod 0644` of a secret, `chmod u+s` of a
/// binary). The run cannot create such a link itself (see
/// `sound_landlock_refer_blocks_hardlinks_from_read_only_paths`).
///
/// Regression: the mediator checked only the path.
#[test]
fn regression_mediator_chmods_an_outside_file_through_a_hardlink() {
    if !runs_here(
        "regression_mediator_chmods_an_outside_file_through_a_hardlink",
        false,
    ) {
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
    if !runs_here(
        "sound_landlock_refer_blocks_hardlinks_from_read_only_paths",
        true,
    ) {
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

/// `file_setattr` (Linux 6.17) is denied: it changes a file's fsxattr flags *by path*
/// without opening it, landlock does not mediate it and the kernel only requires
/// ownership, so a uid-0 run could change attributes (`FS_XFLAG_NODUMP`, `NOATIME`,
/// `SYNC`, `DAX`, extent-size hints, the project id) of root-owned files landlock hides
/// from it.
///
/// Regression: the seccomp deny list predated the call.
#[test]
fn regression_file_setattr_changes_attributes_of_a_hidden_host_file() {
    use crate::linux::landlock::{LandlockSpec, PreparedLandlock};
    if !runs_here(
        "regression_file_setattr_changes_attributes_of_a_hidden_host_file",
        true,
    ) {
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

/// tar's `chmod("/proc/self/fd/N")` (glibc's `fchmodat(AT_SYMLINK_NOFOLLOW)` without
/// `fchmodat2`) changes the mode of the entry the caller's fd N refers to when it lies
/// beneath the workspace, under the same rules as any chmod: no setuid or setgid, nothing
/// outside, no symlink followed, and no other process's fd link.
///
/// Regression: the mediator took the path for a name outside every grant and refused it
/// (`EPERM`), so `tar -x` run as uid 0 could not restore a directory's mode.
#[test]
fn regression_mediator_refuses_chmod_through_the_callers_proc_fd_link() {
    if !runs_here(
        "regression_mediator_refuses_chmod_through_the_callers_proc_fd_link",
        false,
    ) {
        return;
    }
    let (_t, parent, ws) = workspace();
    let dir = ws.join("d");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let file = ws.join("f");
    std::fs::write(&file, "x").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let outside = parent.join("outside");
    std::fs::write(&outside, "x").unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o600)).unwrap();
    let link_out = ws.join("link-out");
    std::os::unix::fs::symlink(&outside, &link_out).unwrap();
    let path_fd = libc::O_PATH | libc::O_CLOEXEC;
    let r = run_mediated(
        &ws,
        0,
        None,
        &[
            Call::ChmodProcFd(cpath(&dir), path_fd | libc::O_DIRECTORY, b"self", 0o750),
            Call::ChmodProcFd(cpath(&file), libc::O_RDONLY, b"thread-self", 0o600),
            Call::ChmodProcFd(cpath(&file), path_fd, b"self", 0o4755),
            Call::ChmodProcFd(cpath(&file), path_fd, b"self", 0o2755),
            Call::ChmodProcFd(cpath(&outside), path_fd, b"self", 0o644),
            Call::ChmodProcFd(cpath(&link_out), path_fd | libc::O_NOFOLLOW, b"self", 0o644),
            // Another process's fd link is not the caller's fd.
            Call::ChmodProcFd(cpath(&file), path_fd, b"1", 0o640),
        ],
    );
    let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
    assert_eq!(
        &r[..5],
        &[0, 0, libc::EPERM, libc::EPERM, libc::EPERM],
        "{r:?}"
    );
    assert_ne!(r[5], 0, "a symlink's fd: {r:?}");
    assert_eq!(r[6], libc::EPERM, "another process's fd link: {r:?}");
    assert_eq!(
        (mode(&dir), mode(&file), mode(&outside)),
        (0o750, 0o600, 0o600)
    );
}

/// A run that keeps uid 0: a chown to root's own ids (or its own gid) answers success and
/// changes nothing; any other owner is refused; the ACL attribute coreutils writes first
/// is "not supported", so it falls back to chmod.
///
/// Regression: every chown and attribute write got `EPERM`, so `cp -a` and `tar -x`
/// failed to preserve ownership and `install -m` failed to set permissions.
#[test]
fn regression_uid0_run_chown_to_root_fails_and_acl_write_is_eperm() {
    if !runs_here(
        "regression_uid0_run_chown_to_root_fails_and_acl_write_is_eperm",
        false,
    ) {
        return;
    }
    let (_t, _parent, ws) = workspace();
    let file = ws.join("f");
    std::fs::write(&file, "x").unwrap();
    std::os::unix::fs::chown(&file, Some(0), Some(4242)).unwrap();
    let r = run_mediated(
        &ws,
        0,
        None,
        &[
            Call::Chown(cpath(&file), 0, 0),
            Call::Chown(cpath(&file), u32::MAX, 4242),
            Call::Chown(cpath(&file), 1000, 1000),
            Call::Chown(cpath(&file), 0, 1000),
            Call::SetAcl(cpath(&file)),
        ],
    );
    assert_eq!(
        r,
        vec![0, 0, libc::EPERM, libc::EPERM, libc::EOPNOTSUPP],
        "chown to root, chown of the run's gid, to another user, to another group, ACL"
    );
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid()),
        (0, 4242),
        "a no-op changed the owner"
    );
}
