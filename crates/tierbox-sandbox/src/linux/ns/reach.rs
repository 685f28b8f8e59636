//! What crosses a Tier C sandbox's network namespace besides the egress proxy, as the
//! backend hands it to the supervisor ([`SandboxReach`]):
//!
//! - **host ports** (`egress.host_ports`): a listener on `127.0.0.1:PORT` *inside* the
//!   namespace for each, made before the program exists (by pid 1 in the native backend,
//!   by the supervisor in the namespace bwrap starts in), served by the supervisor, which
//!   connects each accepted connection to the host's `127.0.0.1:PORT`. The namespace has
//!   only `lo`, so nothing else on the host is reachable: not another port, not `::1` or
//!   `127.0.0.2`, not UDP.
//! - **published ports** (`egress.publish`): the supervisor listens on the host's
//!   `127.0.0.1:HOSTPORT` and connects each accepted connection to `127.0.0.1:SANDBOXPORT`
//!   inside, through an [`InsideConnector`]: the socket is made in the sandbox's namespace
//!   (a socket belongs to the namespace it was created in) by a thread of the supervisor
//!   that joined it — which takes `CAP_SYS_ADMIN` in the supervisor's user namespace —
//!   or, for a supervisor without it, by a helper process that joined the sandbox's user
//!   namespace (its uid owns it) and its network namespace, from fds pid 1 sent
//!   (`SocketFactory`); the supervisor connects it.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::{Mutex, PoisonError, mpsc};
use std::time::Duration;

use super::sys as nsys;

/// Longest the supervisor waits for a connection to the program's port inside the
/// sandbox (loopback: it is accepted or refused at once, unless the program's accept
/// queue is full).
pub const INSIDE_CONNECT_TIMEOUT_MS: u64 = 2_000;

/// A reply to one [`InsideConnector::connect`].
pub type InsideReply = Box<dyn FnOnce(io::Result<TcpStream>) + Send>;

/// Makes connections to ports inside one sandbox's network namespace: a thread that
/// joined it, one connect at a time. Dropping it ends the thread, which lets go of the
/// namespace.
pub struct InsideConnector {
    jobs: Mutex<mpsc::Sender<(u16, InsideReply)>>,
}

impl std::fmt::Debug for InsideConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InsideConnector").finish_non_exhaustive()
    }
}

impl InsideConnector {
    /// A thread in the network namespace of `ns` (a namespace fd, or a pidfd of a process
    /// in it), once it has joined.
    pub fn spawn(ns: OwnedFd) -> io::Result<Self> {
        let (jobs, queue) = mpsc::channel::<(u16, InsideReply)>();
        let (joined_tx, joined) = mpsc::channel::<io::Result<()>>();
        std::thread::Builder::new()
            .name("tierbox-publish".to_owned())
            .spawn(move || {
                let entered = nsys::setns_net(&ns);
                drop(ns);
                let ok = entered.is_ok();
                let _ = joined_tx.send(entered);
                if !ok {
                    return;
                }
                let timeout = Duration::from_millis(INSIDE_CONNECT_TIMEOUT_MS);
                while let Ok((port, reply)) = queue.recv() {
                    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
                    reply(TcpStream::connect_timeout(&addr, timeout));
                }
            })?;
        joined.recv().map_err(|_| {
            io::Error::other("the thread that joins the sandbox's network namespace ended")
        })??;
        Ok(Self {
            jobs: Mutex::new(jobs),
        })
    }

    /// Connections made with sockets of a `SocketFactory` in the sandbox's user
    /// namespace `userns` and network namespace `netns` (fds pid 1 sent of its own): for
    /// a supervisor that may not join the network namespace itself. The thread that
    /// connects stays in the supervisor's namespaces.
    pub fn spawn_with_helper(userns: &OwnedFd, netns: &OwnedFd) -> io::Result<Self> {
        let factory = nsys::SocketFactory::start(userns, netns)?;
        let (jobs, queue) = mpsc::channel::<(u16, InsideReply)>();
        std::thread::Builder::new()
            .name("tierbox-publish".to_owned())
            .spawn(move || {
                let timeout = Duration::from_millis(INSIDE_CONNECT_TIMEOUT_MS);
                while let Ok((port, reply)) = queue.recv() {
                    let stream = factory
                        .socket()
                        .and_then(|fd| nsys::connect_loopback(fd, port, timeout));
                    reply(stream);
                }
            })?;
        Ok(Self {
            jobs: Mutex::new(jobs),
        })
    }

    /// Connects to `127.0.0.1:port` inside the namespace; `reply` gets the connected
    /// stream or the error (called on the connector's thread, or here with an error when
    /// the thread is gone).
    pub fn connect(&self, port: u16, reply: InsideReply) {
        let jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(mpsc::SendError((_, reply))) = jobs.send((port, reply)) {
            reply(Err(io::Error::other(
                "the sandbox's network namespace is no longer joined",
            )));
        }
    }
}

/// What a Tier C launch hands the supervisor for a plan with reach.
#[derive(Debug, Default)]
pub struct SandboxReach {
    /// For each `egress.host_ports` entry, in order: the port and its listener inside the
    /// sandbox's namespace on `127.0.0.1:PORT`.
    pub host_ports: Vec<(u16, TcpListener)>,
    /// Connections to the sandbox's ports, when the plan publishes any.
    pub inside: Option<InsideConnector>,
}

/// Whether this process may join another network namespace (`CAP_SYS_ADMIN` in its own
/// user namespace: root on the host, or root in a container), which publishing a port
/// from a sandbox takes. Read once per process (the supervisor never changes its own
/// capabilities); a launch asks several times.
pub fn supervisor_can_join_namespaces() -> bool {
    static CAN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CAN.get_or_init(|| {
        let cap_sys_admin = 1u64 << crate::linux::userns::CAP_SYS_ADMIN;
        crate::linux::sys::read_cap_eff_from_status().is_some_and(|eff| eff & cap_sys_admin != 0)
    })
}

/// Binds `127.0.0.1:port` for each of `ports` in the calling thread's network namespace.
pub(crate) fn loopback_listeners(ports: &[u16]) -> io::Result<Vec<(u16, TcpListener)>> {
    ports
        .iter()
        .map(|&p| TcpListener::bind((Ipv4Addr::LOCALHOST, p)).map(|l| (p, l)))
        .collect()
}
