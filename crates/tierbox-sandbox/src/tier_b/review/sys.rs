//! The unsafe harness of the security review tests: forked children that make raw
//! system calls under a seccomp filter, and pidfd waits. Test-only.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::launch::mediate::SeccompMediator;
use crate::launch::sys;
use crate::linux::seccomp::{SeccompProgram, SeccompSpec};
use std::ffi::c_char;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use super::Call;

pub(super) fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        tierbox_test_support::skip_here("review tests need root");
    }
    root
}

// ---- child_setup: PR_SET_PDEATHSIG vs the uid switch --------------------------------

/// Clones `/usr/bin/sleep 30` with the real `clone_and_exec` from a thread that exits
/// right after; returns the child's pidfd.
pub(super) fn sleep_child_from_exiting_thread(change_ids: bool) -> OwnedFd {
    std::thread::spawn(move || {
        let program = c"/usr/bin/sleep";
        let argv: [*const c_char; 3] = [c"sleep".as_ptr(), c"30".as_ptr(), std::ptr::null()];
        let envp: [*const c_char; 1] = [std::ptr::null()];
        let stdin = crate::launch::pipes::open_dev_null().unwrap();
        let stdout = crate::launch::pipes::open_dev_null().unwrap();
        let stderr = crate::launch::pipes::open_dev_null().unwrap();
        let no_core = libc::rlimit64 {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let mut spec = sys::ChildSpec {
            drop_privileged: true,
            ids: change_ids.then_some((65534, 65534)),
            ..sys::ChildSpec::new(
                program.as_ptr(),
                argv.as_ptr(),
                envp.as_ptr(),
                c"/".as_ptr(),
                [stdin.as_raw_fd(), stdout.as_raw_fd(), stderr.as_raw_fd()],
                [(libc::RLIMIT_CORE as i32, no_core); sys::RLIMIT_COUNT],
            )
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
pub(super) fn died_within(pidfd: &OwnedFd, limit: Duration) -> Option<Result<i32, i32>> {
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

/// Writes `/proc/<who>/fd/<fd>` NUL-terminated into `buf`, by hand (the forked child
/// allocates nothing).
fn proc_fd_path(buf: &mut [u8; 48], who: &[u8], fd: i32) {
    let mut at = 0;
    for part in [b"/proc/".as_slice(), who, b"/fd/".as_slice()] {
        buf[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
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
        buf[at + i] = digits[k - 1 - i];
    }
    buf[at + k] = 0;
}

/// The filter of [`run_mediated`]'s child: chmod mediated, as for a Tier B run that keeps
/// uid 0.
fn mediated_spec() -> SeccompSpec {
    SeccompSpec {
        deny_namespaces: false,
        deny_file_metadata: true,
        mediate_chmod: true,
        deny_ipc: false,
        inet: crate::linux::seccomp::InetSockets::Any,
        allow_unix_sockets: true,
        // As in Tier B, the refusals follow the chmod calls to the supervisor: a setid
        // mode reaches the mediator, which must refuse it itself.
        notify_refusals: true,
        // As for a Tier B run that keeps uid 0 (gid 4242).
        chown_noop_gid: Some(4242),
    }
}

/// In [`run_mediated`]'s forked child: makes `call` with raw system calls; 0 or its errno.
///
/// # Safety
/// Only in that child: raw system calls on strings and buffers prepared before the fork.
unsafe fn call_in_child(call: &Call) -> i32 {
    // SAFETY: raw system calls on NUL-terminated strings the caller owns and on stack
    // buffers of the sizes passed; the caller is the forked child (see above).
    unsafe {
        let errno = || *libc::__errno_location();
        match call {
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
            Call::ChmodProcFd(p, flags, who, mode) => {
                let fd = libc::open(p.as_ptr(), *flags);
                if fd < 0 {
                    errno()
                } else {
                    let mut buf = [0u8; 48];
                    proc_fd_path(&mut buf, who, fd);
                    if libc::syscall(
                        libc::SYS_fchmodat,
                        libc::AT_FDCWD,
                        buf.as_ptr(),
                        *mode as libc::c_ulong,
                    ) == 0
                    {
                        0
                    } else {
                        errno()
                    }
                }
            }
            Call::Chown(p, owner, group) => {
                if libc::syscall(
                    libc::SYS_fchownat,
                    libc::AT_FDCWD,
                    p.as_ptr(),
                    *owner as libc::c_ulong,
                    *group as libc::c_ulong,
                    0,
                ) == 0
                {
                    0
                } else {
                    errno()
                }
            }
            Call::SetAcl(p) => {
                // A minimal access ACL (version 2, no entries): never reaches the
                // filesystem when the filter answers.
                let value = [2u8, 0, 0, 0];
                if libc::setxattr(
                    p.as_ptr(),
                    c"system.posix_acl_access".as_ptr(),
                    value.as_ptr().cast(),
                    value.len(),
                    0,
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
        }
    }
}

/// Control: a child that keeps uid 0 dies when the thread that cloned it exits.
/// Forks a child (uid 0, every capability dropped) that runs `calls` (raw syscalls only) under the chmod-mediating filter
/// (and, when `landlock` is given, that ruleset), with a `SeccompMediator` for `workspace`
/// and `uid` serving it. Returns 0 or the errno of each call.
pub(super) fn run_mediated(
    workspace: &Path,
    uid: u32,
    landlock: Option<i32>,
    calls: &[Call],
) -> Vec<i32> {
    let spec = mediated_spec();
    let prog = SeccompProgram::build(&spec).unwrap();
    let enforcing = std::sync::Arc::new(SeccompProgram::build(&spec.enforcing()).unwrap());
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
                let r = call_in_child(call);
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
    let mediator = SeccompMediator::new(listener, workspace, uid)
        .unwrap()
        .mediating_chmod()
        .refusing(enforcing, crate::launch::mediate::RefusalLog::default());
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
