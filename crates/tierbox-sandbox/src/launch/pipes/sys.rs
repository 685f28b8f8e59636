//! The system calls of [`super`]: pipes, `/dev/null`, fds moved above stdio, and one fd
//! passed over a socket pair (`SCM_RIGHTS`).

use std::ffi::{c_int, c_void};
use std::io;
use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd};

/// `pipe2(O_CLOEXEC)` with both ends moved to fds >= 3, returning (read, write).
pub(crate) fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: pipe2 writes two fds into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds are fresh and owned by us.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((above_stdio(r)?, above_stdio(w)?))
}

/// Opens `/dev/null` read-only, close-on-exec, at an fd >= 3.
pub(crate) fn open_dev_null() -> io::Result<OwnedFd> {
    // SAFETY: open with a static NUL-terminated path.
    let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh fd owned by us.
    above_stdio(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Moves `fd` to a number >= 3 (so the child's dup2 onto 0/1/2 cannot clobber it).
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    use std::os::fd::AsRawFd;
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC on an fd we own.
    let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if new == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh fd owned by us; the old one is closed when `fd` drops.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// A close-on-exec duplicate of `fd` at number `min` or above.
pub(crate) fn dup_at_least(fd: BorrowedFd<'_>, min: c_int) -> io::Result<OwnedFd> {
    use std::os::fd::AsRawFd;
    // SAFETY: F_DUPFD_CLOEXEC on an fd the caller borrows for the call; it is only read.
    let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) };
    if new == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh fd returned by the kernel, now ours.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// `socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC)`, both ends at fds >= 3.
pub(crate) fn socketpair_seqpacket() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: socketpair writes two fds into the array.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } == -1
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds are fresh and owned by us.
    let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((above_stdio(a)?, above_stdio(b)?))
}

/// Receives one fd sent with `SCM_RIGHTS` (non-blocking; the child sent it before exec).
pub(crate) fn recv_fd(sock: &OwnedFd) -> io::Result<OwnedFd> {
    use std::os::fd::AsRawFd;
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr() as *mut c_void,
        iov_len: 1,
    };
    let mut control = [0u64; 4];
    // SAFETY: as in `send_fd_raw`: all pointers target live stack memory; the kernel
    // writes at most `msg_controllen` bytes of control data; we read one int from the
    // first cmsg only after checking its level, type and length.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr() as *mut c_void;
        msg.msg_controllen = std::mem::size_of_val(&control);
        let n = libc::recvmsg(
            sock.as_raw_fd(),
            &mut msg,
            libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
        );
        if n == -1 {
            return Err(io::Error::last_os_error());
        }
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
            || (*cmsg).cmsg_len < libc::CMSG_LEN(std::mem::size_of::<c_int>() as u32) as usize
        {
            return Err(io::Error::other("no descriptor received"));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const c_int);
        Ok(OwnedFd::from_raw_fd(fd))
    }
}
