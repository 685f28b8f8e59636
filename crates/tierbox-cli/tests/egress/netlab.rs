//! A private "internet" on this machine for the egress tests.
//!
//! One lab per test binary ([`NetLab::shared`]): a `lab_server.py` process in a network
//! namespace of its own, reached from the host over a veth pair. Inside, three lab hosts
//! ("allowed", "blocked", and "other", which tests that allow a second host use) each
//! have an IPv4 and an IPv6 address and serve plain HTTP
//! on TCP 80, HTTPS on TCP 443 and a UDP echo on 53; the server logs everything it sees
//! ([`NetLab::log`]), so a test can prove where a connection did or did not land.
//!
//! The lab's own self-checks (the `lab_*` tests) connect from a reserved pair of source
//! addresses ([`NetLab::self_check`]) that [`NetLab::saw_tcp`] and [`NetLab::saw_udp`]
//! ignore: a self-check that fetches a page from "blocked" must not break a proxy test
//! asserting that nothing under test ever reached "blocked". Nothing picks those sources
//! by accident: the IPv4 one is a secondary address and the IPv6 one is deprecated, so
//! the kernel only uses them when a client binds to them.
//!
//! Invariants:
//! - Nothing outlives the test process. The namespace belongs to the server process, so
//!   it, its end of the veth pair and therefore the host end too vanish when the server
//!   exits; the server exits by itself when the test process is gone (EOF on the stdin
//!   pipe the static keeps open, or a changed parent pid, polled every 200 ms), and then
//!   removes the lab's temporary directory, which the static would never drop.
//! - Only addresses in 10.231.0.0/16 and fd31:4242::/32 are configured, on an interface
//!   named `tbx<pid in hex>`; nothing else on the host is touched except that a stale
//!   interface of that name is deleted first.
//! - Prerequisites missing (not root, a tool not on PATH) means skip, except under
//!   `CI=true`, where it is a panic: CI must not pass by skipping. A lab that cannot be
//!   built although the prerequisites are there is always a panic.

use std::fs;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The server, written out next to the certificate at lab creation.
const LAB_SERVER_PY: &str = include_str!("lab_server.py");

/// Tools the lab runs (and `curl`, which the tests run against it); each must be on PATH.
const REQUIRED_TOOLS: [&str; 6] = ["ip", "unshare", "nsenter", "python3", "openssl", "curl"];

/// How long setup waits for the server to bind its sockets, and then for the lab
/// addresses to answer, before it gives up. Generous: it only bounds a broken setup.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a helper waits for a peer that stopped talking; bounds a hung test, it is not
/// an assertion about speed.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Name of the veth end inside the lab namespace (the namespace is private, so a fixed
/// name cannot collide).
const LAB_LINK: &str = "lab0";

/// The lab shared by every test of this binary.
static LAB: OnceLock<Result<NetLab, Unavailable>> = OnceLock::new();

/// A running lab; see the module docs.
#[derive(Debug)]
pub struct NetLab {
    /// Holds the server script, certificate, log and ready file. Never dropped (it lives
    /// in a static); the server removes it when it exits.
    dir: TempDir,
    ca_cert: PathBuf,
    hosts: Vec<LabHost>,
    self_check: LabHost,
    /// Number of log lines written by setup's own reachability probes, which
    /// [`NetLab::log`] leaves out.
    setup_lines: usize,
    /// Kept so the server stays our child; never waited for, the server exits by itself.
    server: Child,
    /// The write end of the server's stdin. The server exits on EOF, which the kernel
    /// delivers when this process exits, however it exits.
    _lifeline: ChildStdin,
}

/// One host of the lab: a name and the two addresses it serves on (or, for
/// [`NetLab::self_check`], the two addresses the lab's self-checks connect from).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabHost {
    pub name: &'static str,
    pub v4: Ipv4Addr,
    pub v6: Ipv6Addr,
}

/// One thing a lab server saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabEvent {
    /// "tcp" or "udp".
    pub proto: String,
    /// The lab address and port the connection or datagram arrived on.
    pub local: SocketAddr,
    /// Where it came from.
    pub peer: SocketAddr,
    /// The request line for an HTTP request (e.g. `GET / HTTP/1.1`); empty for an
    /// accepted connection and for a datagram.
    pub detail: String,
}

#[derive(Debug)]
enum Unavailable {
    /// A prerequisite is missing: skip (or panic under CI).
    Missing(String),
    /// The prerequisites are there but the lab could not be built: always a panic.
    Broken(String),
}

impl NetLab {
    /// The lab shared by every test of this binary, created on first use.
    ///
    /// Returns `None` after printing `SKIP <test>: <reason>` when this host cannot make a
    /// lab (not root; `ip`, `unshare`, `nsenter`, `python3`, `openssl` or `curl` not on
    /// PATH). Panics instead when the environment variable `CI` is `true`, and whenever a
    /// lab could not be built although the prerequisites are present; the first test to
    /// call this builds the lab, the others wait for it and share the outcome.
    pub fn shared(test: &str) -> Option<&'static NetLab> {
        match LAB.get_or_init(NetLab::create) {
            Ok(lab) => Some(lab),
            Err(Unavailable::Missing(reason)) => {
                tierbox_test_support::skip(test, reason);
                None
            }
            Err(Unavailable::Broken(reason)) => panic!("{test}: egress lab setup failed: {reason}"),
        }
    }

    /// The lab host called `name` ("allowed", "blocked" or "other"); panics for any other
    /// name.
    pub fn host(&self, name: &str) -> &LabHost {
        self.hosts
            .iter()
            .find(|h| h.name == name)
            .unwrap_or_else(|| panic!("no lab host named {name:?}"))
    }

    /// Everything the servers saw since the lab became ready, oldest first, from every
    /// test of this binary (they share the lab, so filter by address or detail).
    ///
    /// A connection that got an HTTP response, or a datagram that got its echo, is in
    /// the log by the time the client has the answer. A bare connect is logged by the
    /// server's accept loop, which may run a moment after the client's `connect`
    /// returned: a test that asserts something did *not* arrive should first complete an
    /// exchange that shows the path it expected was taken.
    pub fn log(&self) -> Vec<LabEvent> {
        let path = self.log_path();
        let text = fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read lab log {}: {e}", path.display()));
        complete_lines(&text)
            .skip(self.setup_lines)
            .map(|line| parse_event(line).unwrap_or_else(|e| panic!("lab log: {e}")))
            .collect()
    }

    /// Whether any TCP connection was accepted on `ip`:`port` of the lab, not counting
    /// the lab's self-checks (connections from [`NetLab::self_check`]).
    pub fn saw_tcp(&self, ip: IpAddr, port: u16) -> bool {
        self.saw("tcp", SocketAddr::new(ip, port))
    }

    /// Whether any UDP datagram arrived on `ip`:`port` of the lab, not counting the lab's
    /// self-checks (datagrams from [`NetLab::self_check`]).
    pub fn saw_udp(&self, ip: IpAddr, port: u16) -> bool {
        self.saw("udp", SocketAddr::new(ip, port))
    }

    /// The self-signed certificate (PEM) of the HTTPS servers; use it as the CA. It names
    /// `allowed.test`, `blocked.test` and both hosts' addresses.
    pub fn ca_cert(&self) -> &Path {
        &self.ca_cert
    }

    /// The lab servers' certificate and key (a leaf of [`NetLab::ca_cert`] for the lab's
    /// names: `allowed.test`, `blocked.test`, `other.test`, and `api.test`, `git.test`,
    /// `pypi.test`, `npm.test` for servers a test runs in the lab's namespace).
    pub fn leaf(&self) -> (PathBuf, PathBuf) {
        (
            self.dir.path().join("cert.pem"),
            self.dir.path().join("key.pem"),
        )
    }

    /// `program` run inside the lab's network namespace (`nsenter --net`), where it can
    /// bind a lab host's address.
    pub fn in_namespace(&self, program: &str) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/proc/{}/ns/net", self.server.id()))
            .arg("--")
            .arg(program);
        cmd
    }

    /// The host-side source addresses reserved for the lab's own self-checks (name
    /// "self-check"). Bind to them (`curl --interface`, [`raw_tcp_exchange`]) to talk to
    /// the lab without showing up in [`NetLab::saw_tcp`] or [`NetLab::saw_udp`]; such
    /// traffic is still in [`NetLab::log`], with this address as the peer.
    pub fn self_check(&self) -> &LabHost {
        &self.self_check
    }

    fn saw(&self, proto: &str, local: SocketAddr) -> bool {
        counts_as_seen(&self.log(), &self.self_check, proto, local)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("events.jsonl")
    }

    fn create() -> Result<NetLab, Unavailable> {
        check_prerequisites().map_err(Unavailable::Missing)?;
        build().map_err(Unavailable::Broken)
    }
}

/// Whether `events` hold a `proto` event on `local` that did not come from a self-check
/// source: the rule behind [`NetLab::saw_tcp`] and [`NetLab::saw_udp`].
fn counts_as_seen(
    events: &[LabEvent],
    self_check: &LabHost,
    proto: &str,
    local: SocketAddr,
) -> bool {
    let from_self_check =
        |peer: IpAddr| peer == IpAddr::V4(self_check.v4) || peer == IpAddr::V6(self_check.v6);
    events
        .iter()
        .any(|e| e.proto == proto && e.local == local && !from_self_check(e.peer.ip()))
}

/// Runs `curl` with `args`, with every proxy variable removed from its environment so
/// that it talks to exactly what the arguments say (pass `-x` for a proxy).
pub fn curl(args: &[&str]) -> Output {
    let mut cmd = Command::new("curl");
    for var in [
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "no_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
    ] {
        cmd.env_remove(var);
    }
    cmd.args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run curl {args:?}: {e}"))
}

/// Connects from `source` (port chosen by the kernel) to `addr`, sends `request`,
/// half-closes and returns everything the server sends back until it closes (lossily
/// decoded as UTF-8), waiting at most [`IO_TIMEOUT`] for each read.
///
/// A small python3 client does the work because std's `TcpStream` cannot bind before it
/// connects.
pub fn raw_tcp_exchange(source: IpAddr, addr: SocketAddr, request: &[u8]) -> String {
    const CLIENT: &str = "import socket, sys
src, dst, port, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
s = socket.socket(socket.AF_INET6 if ':' in dst else socket.AF_INET)
s.settimeout(timeout)
s.bind((src, 0))
s.connect((dst, port))
s.sendall(sys.stdin.buffer.read())
try:
    s.shutdown(socket.SHUT_WR)
except OSError:
    pass  # the server may already have answered and closed
while chunk := s.recv(65536):
    sys.stdout.buffer.write(chunk)
";
    let mut child = Command::new("python3")
        .args(["-c", CLIENT])
        .arg(source.to_string())
        .arg(addr.ip().to_string())
        .arg(addr.port().to_string())
        .arg(IO_TIMEOUT.as_secs().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn python3 tcp client: {e}"));
    let mut stdin = child
        .stdin
        .take()
        .unwrap_or_else(|| panic!("client stdin not piped"));
    stdin
        .write_all(request)
        .unwrap_or_else(|e| panic!("write request for {addr}: {e}"));
    drop(stdin);
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("wait for python3 tcp client: {e}"));
    assert!(
        out.status.success(),
        "tcp client {source} -> {addr}: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Addresses of the lab with number `n` (20..=219): on the host end of the veth pair the
/// gateway (.1, ::1) and the self-check sources (.254, ::fe), inside the namespace the
/// lab hosts. The third IPv6 group has the value `n` (so it prints in hex).
struct Plan {
    link: String,
    n: u8,
    gateway_v4: Ipv4Addr,
    gateway_v6: Ipv6Addr,
    hosts: Vec<LabHost>,
    self_check: LabHost,
}

impl Plan {
    fn for_pid(pid: u32) -> Plan {
        // Binaries running at the same time get different subnets, unless their pids
        // are equal modulo 200.
        let n = u8::try_from(pid % 200 + 20).unwrap_or(u8::MAX);
        let v4 = |last| Ipv4Addr::new(10, 231, n, last);
        let v6 = |last| Ipv6Addr::new(0xfd31, 0x4242, u16::from(n), 0, 0, 0, 0, last);
        Plan {
            // "tbx" + at most 6 hex digits (pid_max is 2^22): within IFNAMSIZ.
            link: format!("tbx{pid:x}"),
            n,
            gateway_v4: v4(1),
            gateway_v6: v6(1),
            self_check: LabHost {
                name: "self-check",
                v4: v4(254),
                v6: v6(0xfe),
            },
            hosts: vec![
                LabHost {
                    name: "allowed",
                    v4: v4(2),
                    v6: v6(2),
                },
                LabHost {
                    name: "blocked",
                    v4: v4(3),
                    v6: v6(3),
                },
                LabHost {
                    name: "other",
                    v4: v4(4),
                    v6: v6(4),
                },
            ],
        }
    }

    /// Every address of every lab host, IPv4 first.
    fn host_addrs(&self) -> Vec<IpAddr> {
        let v4 = self.hosts.iter().map(|h| IpAddr::V4(h.v4));
        let v6 = self.hosts.iter().map(|h| IpAddr::V6(h.v6));
        v4.chain(v6).collect()
    }
}

fn check_prerequisites() -> Result<(), String> {
    if !effective_uid_is_root()? {
        return Err("not root (the lab needs CAP_NET_ADMIN in the host namespace)".into());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for tool in REQUIRED_TOOLS {
        if !std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()) {
            return Err(format!("{tool} not found on PATH"));
        }
    }
    Ok(())
}

fn effective_uid_is_root() -> Result<bool, String> {
    let status = fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("read /proc/self/status: {e}"))?;
    // "Uid:\t<real>\t<effective>\t<saved>\t<fs>"
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .ok_or("no Uid line in /proc/self/status")?;
    Ok(euid == "0")
}

/// Builds the lab. Steps 1-3 leave nothing behind on failure but the temporary directory
/// (removed as `dir` drops); a failure in [`connect_server`] kills the server.
fn build() -> Result<NetLab, String> {
    let plan = Plan::for_pid(std::process::id());
    let dir = tempfile::Builder::new()
        .prefix("tierbox-netlab-")
        .tempdir()
        .map_err(|e| format!("create lab directory: {e}"))?;
    // 1. Certificate first: the server loads it at start.
    make_certificate(dir.path(), &plan)?;
    // 2. A stale host link of our name (a previous process with our pid that died during
    //    setup) would make `ip link add` fail; it is ours to remove.
    let _ = Command::new("ip")
        .args(["link", "del", &plan.link])
        .stderr(Stdio::null())
        .status();
    // 3. The server. It waits for its addresses before binding (see lab_server.py's
    //    `bind`), so it must exist before the veth pair does.
    let mut server = spawn_server(dir.path(), &plan)?;
    let lifeline = server.stdin.take().ok_or("server stdin was not piped")?;
    let setup_lines = match connect_server(&plan, dir.path(), &mut server) {
        Ok(lines) => lines,
        Err(e) => {
            // The namespace, and any half-built veth pair, go with the server.
            let _ = server.kill();
            let _ = server.wait();
            return Err(e);
        }
    };
    Ok(NetLab {
        ca_cert: dir.path().join("ca.pem"),
        dir,
        hosts: plan.hosts,
        self_check: plan.self_check,
        setup_lines,
        server,
        _lifeline: lifeline,
    })
}

/// Wires the running server to the host, in this order; returns the number of log lines
/// setup wrote (see [`probe`]).
fn connect_server(plan: &Plan, dir: &Path, server: &mut Child) -> Result<usize, String> {
    // 1. Its namespace before any `netns <pid>`: until unshare(2) has run, that pid is
    //    still in our namespace, and the veth end would land on the host.
    wait_for_namespace(server, dir)?;
    // 2. The veth pair and addresses, which the server is waiting for.
    configure_links(plan, server.id())?;
    // 3. Ready means every socket is bound, which needed the addresses of step 2.
    wait_ready(server, dir)?;
    // 4. The host reaches every lab address, from the source unbound clients get.
    probe(plan, dir, server)
}

/// The lab's CA (`ca.pem`, what clients trust) and the servers' certificate signed by it
/// (`cert.pem`, `key.pem`): a leaf for the lab's names and addresses, as a real host's
/// is (verifiers refuse a CA certificate presented as a server's).
fn make_certificate(dir: &Path, plan: &Plan) -> Result<(), String> {
    let mut san = String::from(
        "subjectAltName=DNS:allowed.test,DNS:blocked.test,DNS:other.test,\
         DNS:api.test,DNS:git.test,DNS:pypi.test,DNS:npm.test",
    );
    for ip in plan.host_addrs() {
        san.push_str(&format!(",IP:{ip}"));
    }
    let ca_key = dir.join("ca-key.pem");
    let ca = dir.join("ca.pem");
    run(Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-subj", "/CN=tierbox test lab CA"])
        .args(["-addext", "basicConstraints=critical,CA:TRUE"])
        .args(["-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        .arg("-keyout")
        .arg(&ca_key)
        .arg("-out")
        .arg(&ca))?;
    let ext = dir.join("leaf.ext");
    fs::write(
        &ext,
        format!("{san}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"),
    )
    .map_err(|e| format!("write {}: {e}", ext.display()))?;
    let csr = dir.join("leaf.csr");
    run(Command::new("openssl")
        .args(["req", "-newkey", "rsa:2048", "-nodes"])
        .args(["-subj", "/CN=allowed.test"])
        .arg("-keyout")
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(&csr))?;
    run(Command::new("openssl")
        .args(["x509", "-req", "-days", "2", "-in"])
        .arg(&csr)
        .arg("-CA")
        .arg(&ca)
        .arg("-CAkey")
        .arg(&ca_key)
        .args(["-set_serial", "1"])
        .arg("-extfile")
        .arg(&ext)
        .arg("-out")
        .arg(dir.join("cert.pem")))
}

fn spawn_server(dir: &Path, plan: &Plan) -> Result<Child, String> {
    let script = dir.join("lab_server.py");
    fs::write(&script, LAB_SERVER_PY).map_err(|e| format!("write {}: {e}", script.display()))?;
    let stderr_path = dir.join("server.stderr");
    let stderr = fs::File::create(&stderr_path)
        .map_err(|e| format!("create {}: {e}", stderr_path.display()))?;
    let mut cmd = Command::new("unshare");
    // Without --fork, unshare execs python3, so the server is our direct child and its
    // parent-pid poll watches this process.
    cmd.args(["--net", "--", "python3"])
        .arg(&script)
        .arg("--log")
        .arg(dir.join("events.jsonl"))
        .arg("--cert")
        .arg(dir.join("cert.pem"))
        .arg("--key")
        .arg(dir.join("key.pem"))
        .arg("--ready")
        .arg(dir.join("ready"))
        .arg("--cleanup-dir")
        .arg(dir);
    for host in &plan.hosts {
        cmd.arg("--host")
            .arg(format!("{}={},{}", host.name, host.v4, host.v6));
    }
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("spawn unshare --net -- python3 lab_server.py: {e}"))
}

/// Waits until the server's network namespace differs from ours, i.e. unshare(2) ran.
fn wait_for_namespace(server: &mut Child, dir: &Path) -> Result<(), String> {
    let ours = fs::read_link("/proc/self/ns/net")
        .map_err(|e| format!("readlink /proc/self/ns/net: {e}"))?;
    let theirs = format!("/proc/{}/ns/net", server.id());
    wait_for(server, dir, "its own network namespace", || {
        fs::read_link(&theirs).is_ok_and(|ns| ns != ours)
    })
}

/// Waits until the server has bound every socket.
fn wait_ready(server: &mut Child, dir: &Path) -> Result<(), String> {
    let ready = dir.join("ready");
    wait_for(server, dir, "ready", || ready.exists())
}

/// Polls `done` until it holds, the server exits or [`SETUP_TIMEOUT`] passes; the errors
/// carry the server's stderr.
fn wait_for(
    server: &mut Child,
    dir: &Path,
    what: &str,
    mut done: impl FnMut() -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + SETUP_TIMEOUT;
    let stderr = || fs::read_to_string(dir.join("server.stderr")).unwrap_or_default();
    loop {
        if done() {
            return Ok(());
        }
        if let Ok(Some(status)) = server.try_wait() {
            return Err(format!(
                "lab_server.py exited ({status}) before {what}: {}",
                stderr()
            ));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "lab_server.py not {what} after {SETUP_TIMEOUT:?}: {}",
                stderr()
            ));
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Creates and addresses the veth pair: the host end in this namespace, the other end
/// in the server's. IPv6 addresses skip duplicate address detection so they are usable
/// at once. The gateway addresses go first, so that they are the ones the kernel picks
/// as source; the self-check sources are added after them as an IPv4 secondary and a
/// deprecated IPv6 address (`preferred_lft 0`), which the kernel picks only when a
/// socket binds to them.
fn configure_links(plan: &Plan, server_pid: u32) -> Result<(), String> {
    let pid = server_pid.to_string();
    let link = plan.link.as_str();
    let host = |args: &[&str]| run(Command::new("ip").args(args));
    let lab = |args: &[&str]| {
        run(Command::new("nsenter")
            .args(["--target", &pid, "--net", "ip"])
            .args(args))
    };
    let v4 = |ip: Ipv4Addr| format!("{ip}/24");
    let v6 = |ip: Ipv6Addr| format!("{ip}/64");

    host(&[
        "link", "add", link, "type", "veth", "peer", "name", LAB_LINK, "netns", &pid,
    ])?;
    host(&["addr", "add", &v4(plan.gateway_v4), "dev", link])?;
    host(&["addr", "add", &v6(plan.gateway_v6), "dev", link, "nodad"])?;
    host(&["addr", "add", &v4(plan.self_check.v4), "dev", link])?;
    host(&[
        "addr",
        "add",
        &v6(plan.self_check.v6),
        "dev",
        link,
        "nodad",
        "preferred_lft",
        "0",
    ])?;
    host(&["link", "set", link, "up"])?;
    lab(&["link", "set", "lo", "up"])?;
    for h in &plan.hosts {
        lab(&["addr", "add", &v4(h.v4), "dev", LAB_LINK])?;
        lab(&["addr", "add", &v6(h.v6), "dev", LAB_LINK, "nodad"])?;
    }
    lab(&["link", "set", LAB_LINK, "up"])
}

/// Connects once to port 80 of every lab address (retrying until [`SETUP_TIMEOUT`]),
/// checks that the kernel chose the gateway address as source, waits until the server has logged each probe, and returns how many log lines setup
/// wrote, so that [`NetLab::log`] can leave them out.
fn probe(plan: &Plan, dir: &Path, server: &mut Child) -> Result<usize, String> {
    let deadline = Instant::now() + SETUP_TIMEOUT;
    let mut probes = Vec::new();
    for ip in plan.host_addrs() {
        let target = SocketAddr::new(ip, 80);
        let stream = loop {
            match TcpStream::connect_timeout(&target, Duration::from_secs(1)) {
                Ok(stream) => break stream,
                Err(e) if Instant::now() > deadline => {
                    return Err(format!(
                        "lab {target} unreachable from the host (lab {}): {e}",
                        plan.n
                    ));
                }
                Err(_) => thread::sleep(Duration::from_millis(20)),
            }
        };
        let source = stream
            .local_addr()
            .map_err(|e| format!("probe local address: {e}"))?;
        // What makes saw_tcp trustworthy: unbound clients never appear as self-checks.
        if source.ip() != IpAddr::V4(plan.gateway_v4) && source.ip() != IpAddr::V6(plan.gateway_v6)
        {
            return Err(format!(
                "the kernel chose source {source} for {target}, not the gateway"
            ));
        }
        probes.push(source);
    }
    let log = dir.join("events.jsonl");
    loop {
        let text = fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = complete_lines(&text).collect();
        let seen = lines
            .iter()
            .filter_map(|l| parse_event(l).ok())
            .filter(|e| probes.contains(&e.peer))
            .count();
        if seen == probes.len() {
            return Ok(lines.len());
        }
        if let Ok(Some(status)) = server.try_wait() {
            return Err(format!("lab_server.py exited during setup ({status})"));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "lab log shows {seen} of {} setup probes",
                probes.len()
            ));
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Lines terminated by '\n'; a last line the server is still writing is left out.
fn complete_lines(text: &str) -> impl Iterator<Item = &str> {
    let end = text.rfind('\n').map_or(0, |i| i + 1);
    text[..end].lines()
}

fn parse_event(line: &str) -> Result<LabEvent, String> {
    let v: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("{e} in {line:?}"))?;
    let text = |key: &str| {
        v[key]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("no string {key:?} in {line:?}"))
    };
    let addr = |key: &str| {
        text(key)?
            .parse::<SocketAddr>()
            .map_err(|e| format!("{key} in {line:?}: {e}"))
    };
    Ok(LabEvent {
        proto: text("proto")?,
        local: addr("local")?,
        peer: addr("peer")?,
        detail: text("detail")?,
    })
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("spawn {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// saw_tcp/saw_udp must see traffic from anywhere but the self-check sources, or the
    /// proxy tests' "never reached" assertions would pass vacuously. (Setup checks that an
    /// unbound client's source is the gateway, not a self-check address.)
    #[test]
    fn lab_saw_counts_everything_but_self_checks() {
        let plan = Plan::for_pid(4242);
        let blocked = plan.hosts[1].clone();
        let event = |proto: &str, local: SocketAddr, peer: IpAddr| LabEvent {
            proto: proto.to_owned(),
            local,
            peer: SocketAddr::new(peer, 40000),
            detail: String::new(),
        };
        let http4 = SocketAddr::new(IpAddr::V4(blocked.v4), 80);
        let http6 = SocketAddr::new(IpAddr::V6(blocked.v6), 80);
        let dns4 = SocketAddr::new(IpAddr::V4(blocked.v4), 53);
        let gateway4 = IpAddr::V4(plan.gateway_v4);
        let gateway6 = IpAddr::V6(plan.gateway_v6);
        let check4 = IpAddr::V4(plan.self_check.v4);
        let check6 = IpAddr::V6(plan.self_check.v6);
        let seen = |events: &[LabEvent], proto, local| {
            counts_as_seen(events, &plan.self_check, proto, local)
        };

        assert!(seen(&[event("tcp", http4, gateway4)], "tcp", http4));
        assert!(seen(&[event("tcp", http6, gateway6)], "tcp", http6));
        assert!(seen(&[event("udp", dns4, gateway4)], "udp", dns4));
        assert!(!seen(&[event("tcp", http4, check4)], "tcp", http4));
        assert!(!seen(&[event("tcp", http6, check6)], "tcp", http6));
        assert!(!seen(&[event("udp", dns4, check4)], "udp", dns4));
        assert!(!seen(&[event("udp", dns4, gateway4)], "tcp", dns4));
        assert!(!seen(&[event("tcp", http4, gateway4)], "tcp", http6));
    }
}
