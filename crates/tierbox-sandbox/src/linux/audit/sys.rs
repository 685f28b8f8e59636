//! The kernel audit netlink socket: the only `unsafe` of [`super`].
//!
//! Supervisor side only (never called between `clone` and `execve`): every function may
//! allocate and returns [`std::io::Error`].

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// `NETLINK_AUDIT`: the audit protocol of `AF_NETLINK`.
const NETLINK_AUDIT: libc::c_int = 9;
/// `AUDIT_NLGRP_READLOG`'s bit in `nl_groups`: the read-only multicast group every
/// audit record is copied to (needs `CAP_AUDIT_READ`).
const AUDIT_NLGRP_READLOG_MASK: u32 = 1;
/// `AUDIT_GET`: read the kernel's audit status.
pub(super) const AUDIT_GET: u16 = 1000;
/// `AUDIT_SET`: set parts of it (here: enabled).
#[cfg(feature = "test-support")]
const AUDIT_SET: u16 = 1001;
/// `AUDIT_STATUS_ENABLED`: the `mask` bit of `AUDIT_SET` for `enabled`.
#[cfg(feature = "test-support")]
const AUDIT_STATUS_ENABLED: u32 = 1;
/// `AUDIT_ADD_RULE`: add a filter rule (`struct audit_rule_data`).
const AUDIT_ADD_RULE: u16 = 1011;
/// `AUDIT_DEL_RULE`: delete the rule equal to the one given.
const AUDIT_DEL_RULE: u16 = 1012;
/// `AUDIT_LIST_RULES`: list the filter rules (one message per rule, then `NLMSG_DONE`).
const AUDIT_LIST_RULES: u16 = 1013;
/// `NLMSG_ERROR`: an acknowledgement or an error.
const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`: the end of a multi-part answer.
const NLMSG_DONE: u16 = 3;
/// Size of `struct nlmsghdr`.
pub(super) const NLMSG_HDRLEN: usize = 16;
/// Size of `struct audit_status` as this code reads it (eleven `u32`s, kernel 5.x+).
const AUDIT_STATUS_LEN: usize = 44;

/// What `AUDIT_GET` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct AuditStatus {
    /// 0 off, 1 on, 2 on and locked.
    pub enabled: u32,
    /// Records the kernel dropped since boot (queue full or rate limit).
    pub lost: u32,
}

/// An `AF_NETLINK` / `NETLINK_AUDIT` socket.
#[derive(Debug)]
pub(super) struct AuditSocket {
    fd: OwnedFd,
    seq: std::sync::atomic::AtomicU32,
}

impl AuditSocket {
    /// A control socket (unicast to the kernel), its receive calls timing out after
    /// `timeout` so a kernel that never answers cannot hang a run.
    pub fn control(timeout: Duration) -> io::Result<Self> {
        let s = Self::open(0)?;
        s.set_timeout(timeout)?;
        Ok(s)
    }

    /// A socket bound to the read-only multicast group (`CAP_AUDIT_READ`), with a receive
    /// buffer of `rcvbuf` bytes (`SO_RCVBUFFORCE` when permitted, else `SO_RCVBUF`).
    pub fn readlog(rcvbuf: usize) -> io::Result<Self> {
        let s = Self::open(AUDIT_NLGRP_READLOG_MASK)?;
        let size = libc::c_int::try_from(rcvbuf).unwrap_or(libc::c_int::MAX);
        if s.setsockopt_int(libc::SO_RCVBUFFORCE, size).is_err() {
            s.setsockopt_int(libc::SO_RCVBUF, size)?;
        }
        Ok(s)
    }

    fn open(groups: u32) -> io::Result<Self> {
        // SAFETY: socket with constant arguments; on success we own the returned fd.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                NETLINK_AUDIT,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh fd the kernel just returned, owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: an all-zero sockaddr_nl is valid; the fields set below are plain integers.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        addr.nl_groups = groups;
        // SAFETY: `addr` is a live sockaddr_nl of the size passed.
        let ret = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                std::ptr::from_ref(&addr).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if ret != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            fd,
            seq: std::sync::atomic::AtomicU32::new(1),
        })
    }

    fn setsockopt_int(&self, opt: libc::c_int, value: libc::c_int) -> io::Result<()> {
        self.setsockopt(opt, &value)
    }

    fn set_timeout(&self, timeout: Duration) -> io::Result<()> {
        let tv = libc::timeval {
            tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_usec: libc::suseconds_t::from(timeout.subsec_micros()),
        };
        self.setsockopt(libc::SO_RCVTIMEO, &tv)
    }

    /// `setsockopt(SOL_SOCKET, opt, value)` for a plain-data `value`.
    fn setsockopt<T: Copy>(&self, opt: libc::c_int, value: &T) -> io::Result<()> {
        // SAFETY: `value` is a live, initialised `T` of the size passed, and `T: Copy`
        // (plain data: an int or a timeval here) is what the option reads.
        let ret = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                std::ptr::from_ref(value).cast(),
                std::mem::size_of::<T>() as libc::socklen_t,
            )
        };
        if ret == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Sends one message of type `ty` to the kernel; returns its sequence number.
    pub fn send(&self, ty: u16, ack: bool, payload: &[u8]) -> io::Result<u32> {
        let seq = self.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let len = NLMSG_HDRLEN + payload.len();
        let flags = (libc::NLM_F_REQUEST | if ack { libc::NLM_F_ACK } else { 0 }) as u16;
        let mut msg = Vec::with_capacity(len.next_multiple_of(4));
        msg.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_ne_bytes());
        msg.extend_from_slice(&ty.to_ne_bytes());
        msg.extend_from_slice(&flags.to_ne_bytes());
        msg.extend_from_slice(&seq.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(payload);
        msg.resize(len.next_multiple_of(4), 0);
        // SAFETY: an all-zero sockaddr_nl addresses the kernel (nl_pid 0).
        let mut to: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        to.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: `msg` and `to` are live for the call, with the sizes passed.
        let ret = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                msg.as_ptr().cast(),
                msg.len(),
                0,
                std::ptr::from_ref(&to).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(seq)
    }

    /// Attaches a socket filter that keeps only the netlink messages of `types` (each
    /// record the kernel multicasts is a datagram of one message): the others are
    /// dropped by the kernel before they wake a reader. At most 255 types.
    pub fn keep_types(&self, types: &[u16]) -> io::Result<()> {
        let n =
            u8::try_from(types.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // `ldh [4]`: nlmsg_type, which the kernel writes in host order, read by the
        // filter in network order.
        let mut prog = vec![libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_H | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: 4,
        }];
        for (i, ty) in types.iter().enumerate() {
            // Equal: jump over the remaining comparisons and the drop to the accept.
            let to_accept = n - u8::try_from(i).unwrap_or(n);
            prog.push(libc::sock_filter {
                code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
                jt: to_accept,
                jf: 0,
                k: u32::from(u16::from_be_bytes(ty.to_ne_bytes())),
            });
        }
        prog.push(libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        });
        prog.push(libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: u32::MAX,
        });
        let fprog = libc::sock_fprog {
            len: u16::try_from(prog.len())
                .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
            filter: prog.as_mut_ptr(),
        };
        // SAFETY: `fprog` points at `prog`, `len` initialised instructions that live until
        // the call returns; the kernel copies the program.
        let ret = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ATTACH_FILTER,
                std::ptr::from_ref(&fprog).cast(),
                std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
            )
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Receives one datagram into `buf` if one is queued (`WouldBlock` otherwise); its
    /// length.
    pub fn try_recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is a live, writable buffer of the length passed.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }

    /// Waits until a datagram (or an error, such as an overflow) is queued.
    pub fn wait_readable(&self) -> io::Result<()> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd on our stack, no timeout.
        let n = unsafe { libc::poll(&mut pfd, 1, -1) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Receives one datagram into `buf`; its length.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is a live, writable buffer of the length passed.
        let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }

    /// `AUDIT_GET`.
    pub fn status(&self) -> io::Result<AuditStatus> {
        let seq = self.send(AUDIT_GET, false, &[])?;
        let mut buf = vec![0u8; 8192];
        loop {
            let n = self.recv(&mut buf)?;
            for (ty, msg_seq, payload) in messages(&buf[..n]) {
                if msg_seq != seq {
                    continue;
                }
                if ty == NLMSG_ERROR {
                    return Err(nl_error(payload));
                }
                if ty == AUDIT_GET && payload.len() >= AUDIT_STATUS_LEN {
                    let word = |i: usize| {
                        u32::from_ne_bytes([
                            payload[i * 4],
                            payload[i * 4 + 1],
                            payload[i * 4 + 2],
                            payload[i * 4 + 3],
                        ])
                    };
                    return Ok(AuditStatus {
                        enabled: word(1),
                        lost: word(6),
                    });
                }
            }
        }
    }

    /// `AUDIT_SET` of `enabled` (`CAP_AUDIT_CONTROL`), acknowledged.
    #[cfg(feature = "test-support")]
    pub fn set_enabled(&self, enabled: bool) -> io::Result<()> {
        let mut status = [0u8; AUDIT_STATUS_LEN];
        status[..4].copy_from_slice(&AUDIT_STATUS_ENABLED.to_ne_bytes());
        status[4..8].copy_from_slice(&u32::from(enabled).to_ne_bytes());
        self.acknowledged(AUDIT_SET, &status)
    }

    /// `AUDIT_ADD_RULE` of an encoded `struct audit_rule_data` (`CAP_AUDIT_CONTROL`),
    /// acknowledged.
    pub fn add_rule(&self, rule: &[u8]) -> io::Result<()> {
        self.acknowledged(AUDIT_ADD_RULE, rule)
    }

    /// `AUDIT_DEL_RULE` of a rule, encoded as it was added or as it was listed.
    pub fn del_rule(&self, rule: &[u8]) -> io::Result<()> {
        self.acknowledged(AUDIT_DEL_RULE, rule)
    }

    /// `AUDIT_LIST_RULES`: every rule the kernel holds, each an encoded
    /// `struct audit_rule_data`.
    pub fn list_rules(&self) -> io::Result<Vec<Vec<u8>>> {
        let seq = self.send(AUDIT_LIST_RULES, false, &[])?;
        let mut buf = vec![0u8; 64 * 1024];
        let mut rules = Vec::new();
        loop {
            let n = self.recv(&mut buf)?;
            for (ty, msg_seq, payload) in messages(&buf[..n]) {
                if msg_seq != seq {
                    continue;
                }
                match ty {
                    AUDIT_LIST_RULES => rules.push(payload.to_vec()),
                    NLMSG_DONE => return Ok(rules),
                    NLMSG_ERROR => {
                        let e = nl_error(payload);
                        if e.raw_os_error() != Some(0) {
                            return Err(e);
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// Sends a request of type `ty` asking for an acknowledgement and waits for it.
    fn acknowledged(&self, ty: u16, payload: &[u8]) -> io::Result<()> {
        let seq = self.send(ty, true, payload)?;
        let mut buf = vec![0u8; 8192];
        loop {
            let n = self.recv(&mut buf)?;
            for (ty, msg_seq, payload) in messages(&buf[..n]) {
                if msg_seq == seq && ty == NLMSG_ERROR {
                    let e = nl_error(payload);
                    return if e.raw_os_error() == Some(0) {
                        Ok(())
                    } else {
                        Err(e)
                    };
                }
            }
        }
    }
}

/// The netlink messages in one datagram: `(type, seq, payload)`.
pub(super) fn messages(mut buf: &[u8]) -> impl Iterator<Item = (u16, u32, &[u8])> {
    std::iter::from_fn(move || {
        if buf.len() < NLMSG_HDRLEN {
            return None;
        }
        let len = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        let ty = u16::from_ne_bytes([buf[4], buf[5]]);
        let seq = u32::from_ne_bytes([buf[8], buf[9], buf[10], buf[11]]);
        // Audit records are sent with a length that may or may not count the header's
        // padding: take what the datagram holds, never past it.
        let end = len.clamp(NLMSG_HDRLEN, buf.len());
        let payload = &buf[NLMSG_HDRLEN..end];
        buf = &buf[end.next_multiple_of(4).min(buf.len())..];
        Some((ty, seq, payload))
    })
}

/// The errno of an `NLMSG_ERROR` payload (0 for an acknowledgement).
fn nl_error(payload: &[u8]) -> io::Error {
    let code = payload.get(..4).map_or(-libc::EPROTO, |b| {
        i32::from_ne_bytes([b[0], b[1], b[2], b[3]])
    });
    io::Error::from_raw_os_error(-code)
}
