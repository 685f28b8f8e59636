//! Security review tests (Tier B child setup and chmod mediation).
//!
//! Tests named `bug_*` demonstrate a finding and FAIL on the current code; tests named
//! `sound_*` check a property the review found to hold (they pass). All need root and
//! skip (pass with a message) otherwise.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ffi::{CString, c_char};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicU32};
use std::time::Duration;

use super::mediate::ChmodMediator;
use super::sys;
use crate::linux::seccomp::{SeccompProgram, SeccompSpec};

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        println!("SKIP: review tests need root");
    }
    root
}

// ---- child_setup: PR_SET_PDEATHSIG vs the uid switch --------------------------------

/// Clones `/usr/bin/sleep 30` with the real `clone_and_exec` from a thread that exits
/// right after; returns the child's pidfd.
fn sleep_child_from_exiting_thread(change_ids: bool) -> OwnedFd {
    std::thread::spawn(move || {
        let program = c"/usr/bin/sleep";
        let argv: [*const c_char; 3] = [c"sleep".as_ptr(), c"30".as_ptr(), std::ptr::null()];
        let envp: [*const c_char; 1] = [std::ptr::null()];
        let stdin = sys::open_dev_null().unwrap();
        let stdout = sys::open_dev_null().unwrap();
        let stderr = sys::open_dev_null().unwrap();
        let mut spec = sys::ChildSpec {
            program: program.as_ptr(),
            argv: argv.as_ptr(),
            envp: envp.as_ptr(),
            cwd: c"/".as_ptr(),
            stdin_fd: stdin.as_raw_fd(),
            stdout_fd: stdout.as_raw_fd(),
            stderr_fd: stderr.as_raw_fd(),
            cgroup_fds: [-1; sys::MAX_CGROUP_FDS],
            n_cgroup_fds: 0,
            rlimits: [(
                libc::RLIMIT_CORE as i32,
                libc::rlimit64 {
                    rlim_cur: 0,
                    rlim_max: 0,
                },
            ); sys::RLIMIT_COUNT],
            drop_privileged: true,
            change_ids,
            uid: 65534,
            gid: 65534,
            last_cap: crate::linux::caps::last_cap(),
            landlock_fd: -1,
            seccomp: std::ptr::null(),
            seccomp_listener_sock: -1,
            parent_pid: sys::getpid(),
            inherit_fd: (-1, -1),
            keep_caps: false,
            fail_step: AtomicU32::new(0),
            fail_errno: AtomicI32::new(0),
        };
        let mut stack = sys::ChildStack::new();
        let cloned = sys::with_all_signals_blocked(|| sys::clone_and_exec(&mut spec, &mut stack))
            .unwrap_or_else(|(step, e)| panic!("child setup failed at {step:?}: errno {e}"));
        cloned.pidfd
        // The thread exits here: PR_SET_PDEATHSIG must now kill the child.
    })
    .join()
    .unwrap()
}

/// Waits up to `limit` for the child to end; returns its terminating signal (or exit
/// code as `Err`), or `None` if it is still running (it is then killed and reaped).
fn died_within(pidfd: &OwnedFd, limit: Duration) -> Option<Result<i32, i32>> {
    let mut pfd = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, limit.as_millis() as i32) };
    if n == 1 {
        let info = sys::wait_pidfd(pidfd, false).unwrap().unwrap();
        return Some(match info.signal {
            Some(s) => Ok(s),
            None => Err(info.code.unwrap_or(-1)),
        });
    }
    let _ = sys::pidfd_signal(pidfd, libc::SIGKILL);
    let _ = sys::wait_pidfd(pidfd, false);
    None
}

/// Control: a child that keeps uid 0 dies when the thread that cloned it exits.
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

/// Forks a child (uid 0, every capability dropped) that runs `calls` (raw syscalls only) under the chmod-mediating filter
/// (and, when `landlock` is given, that ruleset), with a `ChmodMediator` for `workspace`
/// and `uid:gid` serving it. Returns 0 or the errno of each call.
fn run_mediated(
    workspace: &Path,
    uid: u32,
    gid: u32,
    landlock: Option<i32>,
    calls: &[Call],
) -> Vec<i32> {
    let prog = SeccompProgram::build(&SeccompSpec {
        deny_namespaces: false,
        deny_file_metadata: true,
        mediate_chmod: true,
        allow_inet_sockets: true,
        allow_unix_sockets: true,
        inet_stream_only: false,
    })
    .unwrap();
    let fprog = prog.as_fprog();
    let (mut to_parent, mut go, mut results) = ([0i32; 2], [0i32; 2], [0i32; 2]);
    // SAFETY: pipe writes two fds.
    unsafe {
        assert_eq!(libc::pipe(to_parent.as_mut_ptr()), 0);
        assert_eq!(libc::pipe(go.as_mut_ptr()), 0);
        assert_eq!(libc::pipe(results.as_mut_ptr()), 0);
    }
    // SAFETY: fork; the child only makes raw system calls on memory prepared above and
    // exits with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: raw syscalls only, then _exit.
        unsafe {
            let errno = || *libc::__errno_location();
            if let Some(fd) = landlock {
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
                if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0 {
                    libc::_exit(3);
                }
            }
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
            // Like a Tier B child that keeps uid 0: no capabilities at all.
            if crate::linux::sys::capset_zero().is_err() {
                libc::_exit(4);
            }
            let listener = libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                &fprog as *const libc::sock_fprog,
            ) as i32;
            libc::write(to_parent[1], (&listener as *const i32).cast(), 4);
            let mut b = 0u8;
            libc::read(go[0], (&mut b as *mut u8).cast(), 1);
            for call in calls {
                let r: i32 = match call {
                    Call::Chmod(p, mode) => {
                        if libc::syscall(
                            libc::SYS_fchmodat,
                            libc::AT_FDCWD,
                            p.as_ptr(),
                            *mode as libc::c_ulong,
                        ) == 0
                        {
                            0
                        } else {
                            errno()
                        }
                    }
                    Call::FileSetattr(p, xflags) => {
                        let attr: [u64; 3] = [*xflags, 0, 0];
                        if libc::syscall(
                            469,
                            libc::AT_FDCWD,
                            p.as_ptr(),
                            attr.as_ptr(),
                            24usize,
                            0u32,
                        ) == 0
                        {
                            0
                        } else {
                            errno()
                        }
                    }
                    Call::Link(a, b) => {
                        if libc::link(a.as_ptr(), b.as_ptr()) == 0 {
                            0
                        } else {
                            errno()
                        }
                    }
                    Call::LinkViaFd(src, new1, new2) => {
                        let fd = libc::open(src.as_ptr(), libc::O_PATH);
                        if fd < 0 {
                            errno()
                        } else {
                            // "/proc/self/fd/" + decimal fd, by hand.
                            let mut buf = [0u8; 32];
                            let prefix = b"/proc/self/fd/";
                            buf[..prefix.len()].copy_from_slice(prefix);
                            let mut digits = [0u8; 10];
                            let (mut n, mut k) = (fd as u32, 0);
                            loop {
                                digits[k] = b'0' + (n % 10) as u8;
                                k += 1;
                                n /= 10;
                                if n == 0 {
                                    break;
                                }
                            }
                            for i in 0..k {
                                buf[prefix.len() + i] = digits[k - 1 - i];
                            }
                            let r1 = libc::linkat(
                                libc::AT_FDCWD,
                                buf.as_ptr().cast(),
                                libc::AT_FDCWD,
                                new1.as_ptr(),
                                libc::AT_SYMLINK_FOLLOW,
                            );
                            let e1 = errno();
                            let r2 = libc::linkat(
                                fd,
                                c"".as_ptr(),
                                libc::AT_FDCWD,
                                new2.as_ptr(),
                                libc::AT_EMPTY_PATH,
                            );
                            let e2 = errno();
                            if r1 == 0 || r2 == 0 {
                                0
                            } else if e1 == e2 {
                                e1
                            } else {
                                // Encode both.
                                e1 * 1000 + e2
                            }
                        }
                    }
                };
                libc::write(results[1], (&r as *const i32).cast(), 4);
            }
            libc::_exit(0);
        }
    }
    // SAFETY: closing our copies of the child's ends.
    unsafe {
        libc::close(to_parent[1]);
        libc::close(go[0]);
        libc::close(results[1]);
    }
    let read_i32 = |fd: i32| -> i32 {
        let mut v = 0i32;
        // SAFETY: reads 4 bytes into `v`.
        let n = unsafe { libc::read(fd, (&mut v as *mut i32).cast(), 4) };
        assert_eq!(n, 4, "short read from the child");
        v
    };
    let child_listener = read_i32(to_parent[0]);
    assert!(
        child_listener >= 0,
        "seccomp NEW_LISTENER failed in the child"
    );
    // SAFETY: pidfd_open/pidfd_getfd with integer arguments; root may take the fd.
    let listener = unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as i32;
        assert!(pidfd >= 0);
        let fd = libc::syscall(libc::SYS_pidfd_getfd, pidfd, child_listener, 0) as i32;
        assert!(fd >= 0);
        libc::close(pidfd);
        OwnedFd::from_raw_fd(fd)
    };
    let mediator = ChmodMediator::new(listener, workspace, uid, gid).unwrap();
    let serving = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(mediator.serve());
    });
    // SAFETY: one byte to the child.
    unsafe { libc::write(go[1], b"g".as_ptr().cast(), 1) };
    let out: Vec<i32> = calls.iter().map(|_| read_i32(results[0])).collect();
    let mut status = 0;
    // SAFETY: reaping our child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    serving.join().unwrap();
    // SAFETY: closing our ends.
    unsafe {
        libc::close(to_parent[0]);
        libc::close(go[1]);
        libc::close(results[0]);
    }
    out
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
