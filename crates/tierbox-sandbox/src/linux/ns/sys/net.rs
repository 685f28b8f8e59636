//! The sandbox's network identity (hostname, loopback), the egress proxy's listener,
//! and passing fds over unix sockets.

use super::raw::*;
use super::*;

pub(super) fn sethostname(name: &[u8]) -> Result<(), i32> {
    // SAFETY: `name` is a valid slice; the kernel reads `len` bytes.
    check(unsafe { libc::syscall(libc::SYS_sethostname, name.as_ptr(), name.len()) }).map(drop)
}

/// `struct ifreq` with the flags member (uapi `linux/if.h`, 40 bytes on 64-bit).
#[repr(C)]
pub(super) struct IfreqFlags {
    name: [u8; libc::IFNAMSIZ],
    flags: i16,
    pad: [u8; 22],
}

pub(super) fn loopback_up() -> Result<(), i32> {
    // SAFETY: integer arguments.
    let sock = check(unsafe {
        libc::syscall(
            libc::SYS_socket,
            libc::AF_INET,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
        )
    })? as RawFd;
    let mut req = IfreqFlags {
        name: [0; libc::IFNAMSIZ],
        flags: 0,
        pad: [0; 22],
    };
    req.name[..2].copy_from_slice(b"lo");
    // SAFETY: SIOCGIFFLAGS reads the name and writes the flags of one ifreq on our stack.
    let r = check(unsafe {
        libc::syscall(
            libc::SYS_ioctl,
            sock,
            libc::SIOCGIFFLAGS as libc::c_ulong,
            &mut req as *mut IfreqFlags,
        )
    })
    .and_then(|_| {
        req.flags |= libc::IFF_UP as i16;
        // SAFETY: SIOCSIFFLAGS reads one ifreq on our stack.
        check(unsafe {
            libc::syscall(
                libc::SYS_ioctl,
                sock,
                libc::SIOCSIFFLAGS as libc::c_ulong,
                &req as *const IfreqFlags,
            )
        })
    });
    close(sock);
    r.map(drop)
}

/// Backlog of the egress proxy's listener: connections the program may open before the
/// supervisor accepts them.
pub(super) const PROXY_BACKLOG: c_int = 128;

/// One `SCM_RIGHTS` control message carrying one fd, laid out as `CMSG_SPACE(4)`.
#[repr(C)]
pub(super) struct FdCmsg {
    hdr: libc::cmsghdr,
    fd: c_int,
    pad: c_int,
}

/// `cmsg_len` of a control message carrying one fd (`CMSG_LEN(sizeof(int))`).
pub(super) const FD_CMSG_LEN: usize =
    std::mem::size_of::<libc::cmsghdr>() + std::mem::size_of::<c_int>();

pub(super) fn send_loopback_listener(sock: RawFd, port: u16) -> Result<(), i32> {
    let (listener, addr) = lsys::loopback_tcp_socket(port)?;
    // SAFETY: `addr` is a sockaddr_in on our stack, with its exact size.
    let r = check(unsafe {
        libc::syscall(
            libc::SYS_bind,
            listener,
            &addr as *const libc::sockaddr_in,
            std::mem::size_of::<libc::sockaddr_in>(),
        )
    })
    // SAFETY: integer arguments.
    .and_then(|_| check(unsafe { libc::syscall(libc::SYS_listen, listener, PROXY_BACKLOG) }))
    .and_then(|_| send_fd(sock, listener));
    close(listener);
    r.map(drop)
}

/// Sends `fd` over the unix socket `sock` (one byte of data, one `SCM_RIGHTS` message).
pub(super) fn send_fd(sock: RawFd, fd: RawFd) -> Result<libc::c_long, i32> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr() as *mut c_void,
        iov_len: 1,
    };
    // SAFETY: cmsghdr is plain data; all-zero is a valid value, filled in below.
    let mut cmsg: FdCmsg = unsafe { std::mem::zeroed() };
    cmsg.hdr.cmsg_len = FD_CMSG_LEN as _;
    cmsg.hdr.cmsg_level = libc::SOL_SOCKET;
    cmsg.hdr.cmsg_type = libc::SCM_RIGHTS;
    cmsg.fd = fd;
    // SAFETY: msghdr is plain data; all-zero is a valid value, filled in below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = &mut cmsg as *mut FdCmsg as *mut c_void;
    msg.msg_controllen = std::mem::size_of::<FdCmsg>() as _;
    // SAFETY: `msg` points at the iovec and control buffer on our stack, which outlive
    // the call.
    check(unsafe {
        libc::syscall(
            libc::SYS_sendmsg,
            sock,
            &msg as *const libc::msghdr,
            libc::MSG_NOSIGNAL,
        )
    })
}

/// Receives one fd sent with `SCM_RIGHTS` on `sock` (blocking), close-on-exec.
pub fn recv_fd(sock: &OwnedFd) -> io::Result<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr() as *mut c_void,
        iov_len: 1,
    };
    // SAFETY: plain data; all-zero is a valid value.
    let mut cmsg: FdCmsg = unsafe { std::mem::zeroed() };
    // SAFETY: plain data; all-zero is a valid value, filled in below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = &mut cmsg as *mut FdCmsg as *mut c_void;
    msg.msg_controllen = std::mem::size_of::<FdCmsg>() as _;
    loop {
        // SAFETY: `msg` points at buffers on our stack that outlive the call.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    let carried = msg.msg_controllen as usize >= FD_CMSG_LEN
        && cmsg.hdr.cmsg_level == libc::SOL_SOCKET
        && cmsg.hdr.cmsg_type == libc::SCM_RIGHTS
        && cmsg.hdr.cmsg_len as usize == FD_CMSG_LEN
        && msg.msg_flags & libc::MSG_CTRUNC == 0;
    if !carried || cmsg.fd < 0 {
        return Err(io::Error::other("no file descriptor in the message"));
    }
    // SAFETY: the kernel installed this fd in our table for this message; we own it.
    Ok(unsafe { OwnedFd::from_raw_fd(cmsg.fd) })
}

/// A connected pair of `SOCK_SEQPACKET` unix sockets, close-on-exec.
pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1 as c_int; 2];
    // SAFETY: `fds` is a writable array of two ints.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: on success both fds are fresh and ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
