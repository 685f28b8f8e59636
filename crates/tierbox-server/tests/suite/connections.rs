//! No local client can lock others out of the HTTP server. The server runs in a child
//! process (this test binary again, in [`child_server`]) whose descriptor limit is
//! [`CHILD_NOFILE`]; one local client holds hundreds of connections that each sent half
//! a request head, and a new client's `/v1/health` must still be answered within
//! [`NEWCOMER_BOUND`] — over TCP loopback and over the unix socket, and also when the
//! server's descriptor table is already full (as when runs hold what the reserve did not
//! foresee). A connection whose request is running (a run, a streamed run) is never
//! closed to make room.
//!
//! Regression: the connections given up to make room were shut down gracefully, and
//! hyper keeps a connection that has sent part of its first request head until the
//! header-read timeout (10 s) even then, so they kept their descriptors; 300 half
//! requests filled the table, `accept` failed with EMFILE, and `/v1/health` timed out for
//! everyone.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tierbox_policy::Policy;
use tierbox_runner::{RunOptions, Runner};
use tierbox_server::http::HttpConfig;
use tierbox_server::serve::{Bind, serve_http};
use tierbox_server::service::Service;

/// The child server's descriptor limit, soft and hard: the issue's.
const CHILD_NOFILE: u64 = 256;

/// How soon a new client's `/v1/health` must be answered, from its `connect`, however
/// many connections the flood holds: the acceptance bound (an unloaded server answers in
/// about a millisecond).
const NEWCOMER_BOUND: Duration = Duration::from_secs(1);

/// How long a client waits for a connection or an answer before giving up: a bound on a
/// hang, not a timing assertion.
const PATIENCE: Duration = Duration::from_secs(10);

/// Descriptors the child leaves free when asked to fill its table.
const LEFT_FREE: usize = 4;

/// A request head cut off in the middle: the flood sends this on each connection.
const HALF_REQUEST: &[u8] = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n";

const HEALTH: &[u8] = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef";

/// The child's environment: `tcp`, or the unix socket's path.
const CHILD_BIND: &str = "TIERBOX_SERVER_TEST_CHILD_BIND";
const CHILD_WORKSPACE: &str = "TIERBOX_SERVER_TEST_CHILD_WORKSPACE";
const CHILD_STATE: &str = "TIERBOX_SERVER_TEST_CHILD_STATE";
/// Set: once listening, the child takes every descriptor but [`LEFT_FREE`].
const CHILD_FILL: &str = "TIERBOX_SERVER_TEST_CHILD_FILL";

/// What the child prints when it listens, followed by `http://ADDR` or `unix:PATH`.
const READY: &str = "child server listening on ";

/// The server under test when this binary is started by [`ChildServer::start`] (which
/// sets [`CHILD_BIND`]); otherwise it does nothing and passes.
#[test]
fn child_server() {
    let Ok(bind) = std::env::var(CHILD_BIND) else {
        return;
    };
    use rustix::process::{Resource, Rlimit, setrlimit};
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(CHILD_NOFILE),
            maximum: Some(CHILD_NOFILE),
        },
    )
    .expect("lowering RLIMIT_NOFILE");
    let ws = std::env::var(CHILD_WORKSPACE).unwrap();
    let state = std::env::var(CHILD_STATE).unwrap();
    let fill = std::env::var_os(CHILD_FILL).is_some();
    let mut policy = Policy::builtin_default();
    policy.exec.allowed_executables = vec!["sleep".to_owned()];
    let runner = Runner::new(policy)
        .with_workspace(&ws)
        .with_options(RunOptions {
            state_dir: PathBuf::from(state),
        });
    let bind = if bind == "tcp" {
        Bind::Tcp {
            addr: "127.0.0.1:0".parse().unwrap(),
            allow_remote: false,
        }
    } else {
        Bind::Unix(PathBuf::from(bind))
    };
    let config = HttpConfig {
        token: TOKEN.to_owned(),
        max_concurrent: 4,
        queue: 8,
        ws: Default::default(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let served = rt.block_on(serve_http(
        Service::new(runner),
        bind,
        config,
        std::future::pending(),
        |at| {
            if fill {
                let mut files = Vec::new();
                while let Ok(f) = std::fs::File::open("/dev/null") {
                    files.push(f);
                }
                files.truncate(files.len().saturating_sub(LEFT_FREE));
                // Held for the rest of the process, as a run holds its descriptors.
                std::mem::forget(files);
            }
            println!("{READY}{at}");
        },
    ));
    served.unwrap();
}

#[derive(Debug, Clone, Copy)]
enum Transport {
    Tcp,
    Unix,
}

#[derive(Debug)]
enum At {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// A client connection over either transport.
enum Client {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Read for Client {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Self::Tcp(s) => s.read(buf),
            Self::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Client {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::Tcp(s) => s.write(buf),
            Self::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Client {
    fn set_read_timeout(&self, t: Duration) {
        match self {
            Self::Tcp(s) => s.set_read_timeout(Some(t)),
            Self::Unix(s) => s.set_read_timeout(Some(t)),
        }
        .unwrap();
    }

    /// Whether the server has closed this connection (end of file or reset), looked at
    /// without waiting.
    fn closed_by_server(&mut self) -> bool {
        match self {
            Self::Tcp(s) => s.set_nonblocking(true),
            Self::Unix(s) => s.set_nonblocking(true),
        }
        .unwrap();
        let mut b = [0u8; 1];
        !matches!(self.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }

    /// Everything the server sends until it closes (or [`PATIENCE`] passes in silence).
    fn read_all(mut self) -> String {
        self.set_read_timeout(PATIENCE);
        let mut out = Vec::new();
        let err = self.read_to_end(&mut out).err();
        let mut text = String::from_utf8_lossy(&out).into_owned();
        match err {
            Some(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                text.push_str(&format!("<no answer within {PATIENCE:?}>"));
            }
            Some(e) => text.push_str(&format!("<read failed: {e}>")),
            None => {}
        }
        text
    }
}

/// A server under test in a child process; killed when dropped.
struct ChildServer {
    child: Child,
    at: At,
    _dirs: [tempfile::TempDir; 3],
}

impl ChildServer {
    /// A server on `transport`; `fill`: with its descriptor table full but
    /// [`LEFT_FREE`].
    fn start(transport: Transport, fill: bool) -> Self {
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let sock_dir = tempfile::tempdir().unwrap();
        let bind = match transport {
            Transport::Tcp => PathBuf::from("tcp"),
            Transport::Unix => sock_dir.path().join("s.sock"),
        };
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            "suite::connections::child_server",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_BIND, &bind)
        .env(CHILD_WORKSPACE, ws.path())
        .env(CHILD_STATE, state.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
        if fill {
            cmd.env(CHILD_FILL, "1");
        } else {
            cmd.env_remove(CHILD_FILL);
        }
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(at) = line.split(READY).nth(1) {
                    let _ = tx.send(at.to_owned());
                }
            }
        });
        let at = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the child server said where it listens");
        let at = match at.strip_prefix("http://") {
            Some(addr) => At::Tcp(addr.parse().unwrap()),
            None => At::Unix(PathBuf::from(at.strip_prefix("unix:").unwrap())),
        };
        Self {
            child,
            at,
            _dirs: [ws, state, sock_dir],
        }
    }

    fn connect(&self) -> std::io::Result<Client> {
        match &self.at {
            At::Tcp(addr) => TcpStream::connect_timeout(addr, PATIENCE).map(Client::Tcp),
            At::Unix(path) => {
                // A unix `connect` blocks while the listener's backlog is full: bounded
                // here so a server that stopped accepting fails the test, not hangs it.
                let (tx, rx) = mpsc::channel();
                let path = path.clone();
                std::thread::spawn(move || {
                    let _ = tx.send(UnixStream::connect(path));
                });
                rx.recv_timeout(PATIENCE)
                    .unwrap_or_else(|_| {
                        Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "connect timed out",
                        ))
                    })
                    .map(Client::Unix)
            }
        }
    }

    /// Up to `n` connections from this one local client, each having sent
    /// [`HALF_REQUEST`]; it stops at the first `connect` that fails (a server that lets
    /// connections wait [`PATIENCE`] in its backlog has failed already).
    fn flood(&self, n: usize) -> Vec<Client> {
        let mut held = Vec::with_capacity(n);
        for _ in 0..n {
            let Ok(mut c) = self.connect() else {
                break;
            };
            // The server may have closed it already to make room: that is fine.
            let _ = c.write_all(HALF_REQUEST);
            held.push(c);
        }
        held
    }

    /// A new client's `/v1/health`: the answer (or why there is none) and how long it
    /// took from `connect`.
    fn health(&self) -> (String, Duration) {
        let started = Instant::now();
        let answer = match self.connect() {
            Ok(mut c) => match c.write_all(HEALTH) {
                Ok(()) => c.read_all(),
                Err(e) => format!("<write failed: {e}>"),
            },
            Err(e) => format!("<connect failed: {e}>"),
        };
        (answer, started.elapsed())
    }

    /// Sends `POST /v1/process/run[?stream=true]` running `argv` and reads the answer on
    /// a thread of its own.
    fn run(&self, argv: [&str; 2], stream: bool) -> std::thread::JoinHandle<String> {
        let body = format!(r#"{{"command":"{}","args":["{}"]}}"#, argv[0], argv[1]);
        let query = if stream { "?stream=true" } else { "" };
        let req = format!(
            "POST /v1/process/run{query} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n\
             {body}",
            body.len()
        );
        let mut c = self.connect().unwrap();
        c.write_all(req.as_bytes()).unwrap();
        std::thread::spawn(move || c.read_all())
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// This process may open the flood's connections: its soft descriptor limit is raised to
/// the hard one, which must allow them.
fn enough_descriptors(needed: u64) {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut lim = getrlimit(Resource::Nofile);
    lim.current = lim.maximum;
    let _ = setrlimit(Resource::Nofile, lim);
    let have = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    assert!(
        have >= needed,
        "the test opens {needed} connections; its hard descriptor limit is {have}"
    );
}

fn status_line(answer: &str) -> &str {
    answer.lines().next().unwrap_or("<nothing>")
}

/// Floods a fresh server on `transport` with `n` half requests and asks `/v1/health`
/// from a new client; prints what happened, then checks it.
fn flood_then_health(transport: Transport, n: usize, fill: bool) {
    let s = ChildServer::start(transport, fill);
    let flood_started = Instant::now();
    let mut held = s.flood(n);
    let flood_took = flood_started.elapsed();
    let (answer, took) = s.health();
    let closed = held
        .iter_mut()
        .filter_map(|c| c.closed_by_server().then_some(()))
        .count();
    let table = if fill { ", descriptor table full" } else { "" };
    println!(
        "{transport:?}{table}: {n} half requests ({} connected in {flood_took:?}, {closed} \
         of them closed by the server since): /v1/health {:?} after {took:?}",
        held.len(),
        status_line(&answer),
    );
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "{transport:?}{table}: /v1/health with {n} half requests held: {answer}"
    );
    assert!(
        took < NEWCOMER_BOUND,
        "{transport:?}{table}: /v1/health took {took:?} with {n} half requests held"
    );
}

fn no_local_client_locks_others_out(transport: Transport) {
    enough_descriptors(1100);
    for n in [300, 1000] {
        flood_then_health(transport, n, false);
    }
    flood_then_health(transport, 300, true);
}

#[test]
fn a_flood_of_half_requests_over_tcp_loopback_does_not_lock_out_a_new_client() {
    no_local_client_locks_others_out(Transport::Tcp);
}

#[test]
fn a_flood_of_half_requests_over_the_unix_socket_does_not_lock_out_a_new_client() {
    no_local_client_locks_others_out(Transport::Unix);
}

/// Pids whose argv is exactly `argv` and that are not zombies, read from /proc (from
/// outside every sandbox).
fn running(argv: &[&str]) -> bool {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc").unwrap().flatten().any(|d| {
        std::fs::read(d.path().join("cmdline")).is_ok_and(|c| c == want)
            && std::fs::read_to_string(d.path().join("stat")).is_ok_and(|st| {
                !st.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
    })
}

fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// A run in progress keeps its connection through a flood of 1000 half requests: the
/// plain run answers its outcome and the streamed run its result line, both exit 0.
fn a_running_request_keeps_its_connection(
    transport: Transport,
    plain: [&str; 2],
    streamed: [&str; 2],
) {
    enough_descriptors(1100);
    let s = ChildServer::start(transport, false);
    let plain_run = s.run(plain, false);
    let streamed_run = s.run(streamed, true);
    if !wait_for(Duration::from_secs(30), || {
        running(&plain) && running(&streamed)
    }) {
        let (a, b) = (plain_run.join().unwrap(), streamed_run.join().unwrap());
        if a.contains("\"tier.") || b.contains("\"tier.") {
            tierbox_test_support::skip_here(&format!("no tier runs `sleep` here: {a}"));
            return;
        }
        panic!("the runs did not start: {a} / {b}");
    }
    let flood_started = Instant::now();
    let held = s.flood(1000);
    let (answer, took) = s.health();
    // The flood came while both runs were in progress (else it proves nothing).
    let both_running = running(&plain) && running(&streamed);
    let flood_took = flood_started.elapsed();
    let (a, b) = (plain_run.join().unwrap(), streamed_run.join().unwrap());
    println!(
        "{transport:?}: two runs in progress, 1000 half requests ({} connected, in \
         {flood_took:?}): /v1/health {:?} after {took:?}; the plain run answered {:?}, the \
         streamed run {:?}",
        held.len(),
        status_line(&answer),
        status_line(&a),
        status_line(&b),
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(took < NEWCOMER_BOUND, "/v1/health took {took:?}");
    assert!(
        both_running,
        "a run ended during the flood ({flood_took:?}): {a} / {b}"
    );
    assert!(
        a.starts_with("HTTP/1.1 200") && a.contains(r#""exit_code":0"#),
        "the plain run: {a}"
    );
    assert!(
        b.starts_with("HTTP/1.1 200")
            && b.contains(r#"{"event":"result""#)
            && b.contains(r#""exit_code":0"#),
        "the streamed run: {b}"
    );
    drop(held);
}

#[test]
fn a_connection_running_a_request_is_never_given_up_over_tcp_loopback() {
    a_running_request_keeps_its_connection(Transport::Tcp, ["sleep", "6.011"], ["sleep", "6.012"]);
}

#[test]
fn a_connection_running_a_request_is_never_given_up_over_the_unix_socket() {
    a_running_request_keeps_its_connection(Transport::Unix, ["sleep", "6.021"], ["sleep", "6.022"]);
}
