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

/// A process of the supervisor's inside one sandbox's user and network namespaces that
/// makes TCP sockets there for it: an unprivileged supervisor cannot join the network
/// namespace itself (`setns` takes `CAP_SYS_ADMIN` in the caller's own user namespace),
/// but a single-threaded child of it may join the sandbox's user namespace — which the
/// supervisor's uid owns — and then its network namespace. A socket belongs to the
/// namespace it was made in, wherever it is used: the supervisor connects it.
///
/// Protocol over a `SOCK_SEQPACKET` pair: after joining, the helper sends 4 bytes (0, or
/// the errno of the `setns` that failed); then each 1-byte request is answered with one
/// message carrying a new unconnected `AF_INET` stream socket (`SCM_RIGHTS`), or 4 bytes
/// of errno without a descriptor. It ends when the supervisor's end closes — on drop, or
/// when the supervisor dies, whatever its threads do (a death signal would follow the
/// thread that forked); it keeps no fd but its end of the pair.
#[derive(Debug)]
pub struct SocketFactory {
    pid: libc::pid_t,
    sock: OwnedFd,
}

impl SocketFactory {
    /// Starts the helper in `userns` and `netns` (fds of the sandbox's namespaces, which
    /// pid 1 sends: nobody else may open a non-dumpable process's, and `setns` by its
    /// pidfd asks for the same access).
    pub fn start(userns: &OwnedFd, netns: &OwnedFd) -> io::Result<Self> {
        let (ours, theirs) = seqpacket_pair()?;
        let (user, net, sock) = (userns.as_raw_fd(), netns.as_raw_fd(), theirs.as_raw_fd());
        // SAFETY: fork in a multi-threaded process: the child only makes raw system calls
        // on stack data (no allocation, no locks) and ends with `_exit`.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            factory_main(user, net, sock);
        }
        drop(theirs);
        let factory = Self { pid, sock: ours };
        let mut status = [0u8; 4];
        // SAFETY: a 4-byte buffer on our stack.
        let n = unsafe {
            libc::recv(
                factory.sock.as_raw_fd(),
                status.as_mut_ptr() as *mut c_void,
                status.len(),
                0,
            )
        };
        match (n, i32::from_le_bytes(status)) {
            (4, 0) => Ok(factory),
            (4, e) => Err(io::Error::from_raw_os_error(e)),
            _ => Err(io::Error::other("the socket helper ended before it joined")),
        }
    }

    /// A new unconnected TCP socket (IPv4) in the sandbox's network namespace.
    pub fn socket(&self) -> io::Result<OwnedFd> {
        let ask = [1u8];
        // SAFETY: a 1-byte buffer on our stack.
        let sent = unsafe {
            libc::send(
                self.sock.as_raw_fd(),
                ask.as_ptr() as *const c_void,
                1,
                libc::MSG_NOSIGNAL,
            )
        };
        if sent != 1 {
            return Err(io::Error::last_os_error());
        }
        recv_fd(&self.sock)
    }
}

impl Drop for SocketFactory {
    fn drop(&mut self) {
        // SAFETY: shutdown of our end: the helper's recv sees the end and it exits.
        unsafe { libc::shutdown(self.sock.as_raw_fd(), libc::SHUT_RDWR) };
        let mut status = 0;
        // SAFETY: reaps our own child; a pointer to a local int.
        unsafe { libc::waitpid(self.pid, &mut status, 0) };
    }
}

/// The helper's whole life (see [`SocketFactory`]). Raw system calls only.
fn factory_main(userns: RawFd, netns: RawFd, sock: RawFd) -> ! {
    let exit = |code: c_int| -> ! {
        // SAFETY: _exit ends this process at once.
        unsafe { libc::_exit(code) }
    };
    // SAFETY: setns with fds of the sandbox's namespaces and constant flags: the user
    // namespace first (its owner's uid gets every capability in it), then the network
    // namespace it owns.
    let joined = unsafe {
        match libc::setns(userns, libc::CLONE_NEWUSER) == 0
            && libc::setns(netns, libc::CLONE_NEWNET) == 0
        {
            true => 0,
            false => errno(),
        }
    };
    // Nothing of the supervisor's but the pair's end stays open here.
    // SAFETY: dup3 of our own fd onto 3 (closing whatever 3 was, in this process only).
    if sock != 3 && unsafe { libc::dup3(sock, 3, 0) } != 3 {
        exit(1);
    }
    super::pid1::close_range(4, libc::c_ulong::from(u32::MAX));
    let reply = |bytes: &[u8; 4]| {
        // SAFETY: a 4-byte buffer on our stack.
        unsafe { libc::send(3, bytes.as_ptr() as *const c_void, 4, libc::MSG_NOSIGNAL) };
    };
    reply(&joined.to_le_bytes());
    if joined != 0 {
        exit(1);
    }
    let mut ask = [0u8; 1];
    loop {
        // SAFETY: a 1-byte buffer on our stack.
        let n = unsafe { libc::recv(3, ask.as_mut_ptr() as *mut c_void, 1, 0) };
        if n <= 0 {
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            exit(0);
        }
        // SAFETY: integer arguments.
        let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        if s < 0 {
            reply(&errno().to_le_bytes());
            continue;
        }
        if send_fd(3, s).is_err() {
            exit(1);
        }
        close(s);
    }
}

/// Connects the stream socket `fd` to `127.0.0.1:port`, waiting at most `timeout`; the
/// connected stream, back in blocking mode.
pub fn connect_loopback(
    fd: OwnedFd,
    port: u16,
    timeout: std::time::Duration,
) -> io::Result<std::net::TcpStream> {
    let raw = fd.as_raw_fd();
    let last = || io::Error::last_os_error();
    // SAFETY: fcntl with integer arguments on our own fd.
    let flags = unsafe { libc::fcntl(raw, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(raw, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(last());
    }
    let addr = lsys::loopback_addr(port);
    // SAFETY: a sockaddr_in on our stack with its exact size.
    let r = unsafe {
        libc::connect(
            raw,
            &addr as *const libc::sockaddr_in as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if r != 0 {
        let e = last();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
        let mut p = libc::pollfd {
            fd: raw,
            events: libc::POLLOUT,
            revents: 0,
        };
        let ms = c_int::try_from(timeout.as_millis()).unwrap_or(c_int::MAX);
        // SAFETY: one pollfd on our stack.
        match unsafe { libc::poll(&mut p, 1, ms) } {
            0 => return Err(io::Error::from(io::ErrorKind::TimedOut)),
            n if n < 0 => return Err(last()),
            _ => {}
        }
        let mut err: c_int = 0;
        let mut len = std::mem::size_of::<c_int>() as libc::socklen_t;
        // SAFETY: SO_ERROR writes one int into our buffer of that size.
        let r = unsafe {
            libc::getsockopt(
                raw,
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                &mut err as *mut c_int as *mut c_void,
                &mut len,
            )
        };
        if r != 0 {
            return Err(last());
        }
        if err != 0 {
            return Err(io::Error::from_raw_os_error(err));
        }
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(raw, libc::F_SETFL, flags) } < 0 {
        return Err(last());
    }
    Ok(std::net::TcpStream::from(fd))
}
