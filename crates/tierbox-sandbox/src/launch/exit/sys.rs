//! The system calls of [`super`]: pidfds, `waitid`, `kill`.

use std::ffi::c_void;
use std::io;
use std::os::fd::OwnedFd;

use super::ExitInfo;

/// Whether the process behind `pidfd` has exited (it may not be reaped yet): a
/// `waitid(P_PIDFD, fd, WEXITED | WNOHANG | WNOWAIT)` that leaves the zombie in place for
/// the real wait.
pub fn pidfd_has_exited(pidfd: &OwnedFd) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: a zeroed siginfo_t is a valid out-parameter.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid with a valid pidfd and a valid out-pointer; WNOWAIT leaves the child
    // waitable, WNOHANG makes the call return at once.
    let ret = unsafe {
        libc::waitid(
            libc::P_PIDFD,
            pidfd.as_raw_fd() as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: si_pid is valid to read after a successful waitid (0 when none exited).
    ret == 0 && unsafe { info.si_pid() } != 0
}

/// `waitid(P_PIDFD, fd, WEXITED [| WNOHANG], rusage)`. `Ok(None)` when `nohang` and the
/// child is still running.
pub fn wait_pidfd(pidfd: &OwnedFd, nohang: bool) -> io::Result<Option<ExitInfo>> {
    use std::os::fd::AsRawFd;
    // SAFETY: zeroed siginfo_t and rusage are valid out-parameters.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | if nohang { libc::WNOHANG } else { 0 };
    loop {
        // SAFETY: the raw waitid syscall takes a fifth rusage argument that glibc's wrapper
        // hides; both out-pointers are valid for writes.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_waitid,
                libc::P_PIDFD,
                pidfd.as_raw_fd(),
                &mut info as *mut _,
                flags,
                &mut usage as *mut _,
            )
        };
        if ret == -1 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        break;
    }
    // SAFETY: si_pid/si_status are valid to read after a successful waitid.
    let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
    if pid == 0 {
        return Ok(None);
    }
    let (code, signal) = match info.si_code {
        libc::CLD_EXITED => (Some(status), None),
        _ => (None, Some(status)),
    };
    Ok(Some(ExitInfo {
        code,
        signal,
        user_us: timeval_us(usage.ru_utime),
        sys_us: timeval_us(usage.ru_stime),
        max_rss_bytes: (usage.ru_maxrss as u64) * 1024,
    }))
}

/// A `timeval` in microseconds (negative fields count as 0; saturating, never panics:
/// also used by the sandbox's pid 1).
pub fn timeval_us(t: libc::timeval) -> u64 {
    (t.tv_sec.max(0) as u64)
        .saturating_mul(1_000_000)
        .saturating_add(t.tv_usec.max(0) as u64)
}

/// `pidfd_send_signal(fd, sig)`.
pub fn pidfd_signal(pidfd: &OwnedFd, sig: i32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: pidfd_send_signal with a valid pidfd and a null siginfo.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null_mut::<c_void>(),
            0,
        )
    };
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `pidfd_open(pid, 0)`: a pidfd (close-on-exec) for the process `pid`.
#[cfg(test)]
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open with integer arguments; it returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd as std::os::fd::RawFd) })
}

/// `kill(pid, sig)`; `pid < 0` signals a process group.
pub fn kill(pid: libc::pid_t, sig: i32) -> io::Result<()> {
    // SAFETY: kill with integer arguments.
    if unsafe { libc::kill(pid, sig) } == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `waitpid(pid, WNOHANG)`: reaps `pid` if it has exited. Returns whether it was reaped.
pub fn reap_nohang(pid: libc::pid_t) -> bool {
    let mut status = 0;
    // SAFETY: waitpid on a specific pid with a valid status pointer.
    unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) == pid }
}

/// Whether some child of this process has exited and waits to be reaped
/// (`waitid(P_ALL, WEXITED | WNOHANG | WNOWAIT)`). Reaps nothing.
pub fn exited_child_waiting() -> bool {
    // SAFETY: an all-zero siginfo_t is a valid value (waitid leaves `si_pid` zero when no
    // child is waitable, which is why it starts zeroed).
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid writes into the siginfo_t we own; WNOWAIT leaves the child waitable.
    let r = unsafe {
        libc::waitid(
            libc::P_ALL,
            0,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: after a successful waitid the pid field of the SIGCHLD layout is set.
    r == 0 && unsafe { info.si_pid() } != 0
}

/// Registers an owned fd (a pidfd or a pipe end) with the tokio reactor for readiness.
///
/// Must be called within a tokio runtime.
pub fn register_readable(fd: OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: an `OwnedFd` is a valid open descriptor that stays open, and always returns
    // the same number from `as_raw_fd`, for as long as the `AsyncFd` owns it.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}
