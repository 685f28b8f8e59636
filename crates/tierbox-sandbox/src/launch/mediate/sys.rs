//! The system calls of [`super`]: the seccomp listener's ioctls, the notifying
//! process's memory read, and the path-only opens and chmod a mediated call is served with.

use std::ffi::{c_int, c_void};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

/// Whether a seccomp listener has a pending notification, and whether every task using
/// the filter is gone (`POLLHUP`). Never blocks.
pub(crate) fn notif_poll(listener: &OwnedFd) -> io::Result<(bool, bool)> {
    use std::os::fd::AsRawFd;
    let mut pfd = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll on one valid pollfd with a zero timeout.
    if unsafe { libc::poll(&mut pfd, 1, 0) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok((
        pfd.revents & libc::POLLIN != 0,
        pfd.revents & (libc::POLLHUP | libc::POLLERR) != 0,
    ))
}

/// `ioctl(SECCOMP_IOCTL_NOTIF_RECV)`; call only when [`notif_poll`] reported a pending
/// notification (the ioctl blocks otherwise).
pub(crate) fn notif_recv(listener: &OwnedFd) -> io::Result<libc::seccomp_notif> {
    use std::os::fd::AsRawFd;
    // SAFETY: the kernel requires a zeroed struct and fills it in.
    let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: RECV writes one seccomp_notif into `n`.
    if unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_RECV as _,
            &mut n,
        )
    } == -1
    {
        return Err(io::Error::last_os_error());
    }
    Ok(n)
}

/// `ioctl(SECCOMP_IOCTL_NOTIF_ID_VALID)`: the notifying task still waits for this id, so
/// what was read from its `/proc` entries and memory belongs to it.
pub(crate) fn notif_id_valid(listener: &OwnedFd, id: u64) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: ID_VALID reads one u64 from the pointer.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID as _,
            &id,
        ) == 0
    }
}

/// `ioctl(SECCOMP_IOCTL_NOTIF_SEND)`: the call returns `val`, or fails with `errno` when
/// non-zero.
pub(crate) fn notif_send(listener: &OwnedFd, id: u64, val: i64, errno: i32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let resp = libc::seccomp_notif_resp {
        id,
        val,
        error: -errno,
        flags: 0,
    };
    // SAFETY: SEND reads one seccomp_notif_resp.
    if unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND as _,
            &resp,
        )
    } == -1
    {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads a NUL-terminated string of at most `max` bytes at `addr` in `pid`'s memory with
/// `process_vm_readv`, page by page (a string may end just before an unmapped page).
pub(crate) fn read_remote_cstr(pid: libc::pid_t, addr: u64, max: usize) -> io::Result<Vec<u8>> {
    const PAGE: u64 = 4096;
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < max {
        let chunk = (PAGE - at % PAGE).min((max - out.len()) as u64) as usize;
        let mut buf = vec![0u8; chunk];
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr() as *mut c_void,
            iov_len: chunk,
        };
        let remote = libc::iovec {
            iov_base: at as *mut c_void,
            iov_len: chunk,
        };
        // SAFETY: one local iovec over `buf` (owned, `chunk` bytes) and one remote iovec;
        // the kernel checks the remote range and our access to the process.
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        if n <= 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        if let Some(end) = buf[..n].iter().position(|b| *b == 0) {
            out.extend_from_slice(&buf[..end]);
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
        at += n as u64;
    }
    Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG))
}

/// `openat2(dirfd, path, O_PATH | O_CLOEXEC [| O_NOFOLLOW], RESOLVE_BENEATH |
/// RESOLVE_NO_MAGICLINKS)`: the result is guaranteed to lie beneath `dirfd` (no `..`
/// escape, no absolute or escaping symlink, no `/proc` magic link).
pub(crate) fn openat2_beneath(
    dirfd: &OwnedFd,
    path: &std::ffi::CStr,
    nofollow: bool,
) -> io::Result<OwnedFd> {
    use std::os::fd::AsRawFd;
    let mut how: libc::open_how = unsafe_zeroed_open_how();
    how.flags =
        (libc::O_PATH | libc::O_CLOEXEC | if nofollow { libc::O_NOFOLLOW } else { 0 }) as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: openat2 with a valid dirfd, a NUL-terminated path and a fully initialised
    // open_how of the size we pass.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dirfd.as_raw_fd() as libc::c_ulong,
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd owned by us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as c_int) })
}

fn unsafe_zeroed_open_how() -> libc::open_how {
    // SAFETY: open_how is plain integers; all-zero is its documented default.
    unsafe { std::mem::zeroed() }
}

/// `fchmodat(AT_FDCWD, "/proc/self/fd/<fd>", mode, 0)`: changes the mode of the file an
/// `O_PATH` fd refers to (fchmod does not accept `O_PATH` fds).
pub(crate) fn chmod_path_fd(fd: &OwnedFd, mode: u32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let path = std::ffi::CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(io::Error::other)?;
    // SAFETY: fchmodat with a NUL-terminated path.
    if unsafe { libc::fchmodat(libc::AT_FDCWD, path.as_ptr(), mode, 0) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC)`: a handle on a file (not a directory) that
/// is only ever used as a whole, never as a base for lookups.
pub(crate) fn open_file_path(path: &std::ffi::CStr) -> io::Result<OwnedFd> {
    // SAFETY: open with a NUL-terminated path.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd owned by us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens a directory `O_PATH | O_DIRECTORY | O_CLOEXEC` (the workspace root for
/// `openat2_beneath`).
pub(crate) fn open_dir_path(path: &std::ffi::CStr) -> io::Result<OwnedFd> {
    // SAFETY: open with a NUL-terminated path.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd owned by us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
