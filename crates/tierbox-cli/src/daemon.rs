//! `tierbox run` through a local daemon: `tierbox serve --unix` on the per-user socket
//! `<state dir>/daemon.sock` (or `$TIERBOX_SOCKET`), started with `tierbox daemon start`.
//!
//! A run goes to the daemon only when the daemon's runner is the one the CLI would use
//! itself ([`RunnerIdentity`]: the same policy, workspace, state directory, uid and values
//! of every supervisor variable validation reads; the run request carries its digest and
//! the daemon refuses it unrun when its own differs); otherwise — no daemon, another
//! identity, a busy or unreachable daemon, `TIERBOX_DAEMON=off` — the CLI runs in process.
//! Either way the output, the exit status and the JSON are the same, and `--json` says
//! which one ran it (`"via"`). With `--stdin`, the run goes in the streamed-stdin form of
//! the HTTP API (the request line, then the bytes as they arrive, chunked): this process
//! reads none of its stdin until the daemon has accepted the run, so a daemon that refuses
//! it unrun leaves all of it to the run in process. The socket is created 0600 and the daemon answers only its
//! own uid (`SO_PEERCRED`); the bearer token is read from the state directory (owner-only)
//! or `$TIERBOX_HTTP_TOKEN`.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;
use tierbox_runner::{Outcome, OutputEvent, RunRequest, Runner, RunnerIdentity, StdinSource};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// Environment variable naming the daemon's socket.
pub const SOCKET_ENV: &str = "TIERBOX_SOCKET";

/// Environment variable that turns the daemon off for a call (`off`).
pub const MODE_ENV: &str = "TIERBOX_DAEMON";

/// The socket's file name in the state directory.
pub const SOCKET_FILE: &str = "daemon.sock";

/// The daemon's log (its stdout and stderr) in the state directory.
pub const LOG_FILE: &str = "daemon.log";

/// How long `daemon start` waits for the daemon to answer.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How long `daemon stop` waits for the daemon to exit (its shutdown grace, and a margin).
pub const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// How long connecting to the daemon (and, for a check, asking its identity) may take
/// before the CLI runs in process instead.
pub const IDENTITY_TIMEOUT: Duration = Duration::from_secs(2);

/// Longest response head read from the daemon, in bytes.
pub const MAX_HEAD_BYTES: usize = 64 << 10;

/// Longest line of a streamed reply read from the daemon, in bytes: an outcome holds two
/// streams of at most the hard output cap each, and JSON takes at most 6 bytes per byte
/// of a stream's text (`\u0000`) plus 4/3 for its `bytes_base64`, so 16 per byte of the
/// cap covers both streams and the rest of the outcome.
pub const MAX_LINE_BYTES: usize = 16 * tierbox_policy::policy::HARD_MAX_OUTPUT_BYTES as usize;

/// The daemon's socket for the state directory `state_dir`.
pub fn socket_path(state_dir: &Path) -> PathBuf {
    match std::env::var_os(SOCKET_ENV).filter(|v| !v.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => state_dir.join(SOCKET_FILE),
    }
}

/// Whether this call may use a daemon (`TIERBOX_DAEMON` is not `off`).
pub fn enabled() -> bool {
    std::env::var(MODE_ENV).map_or(true, |v| v != "off")
}

/// What became of a hand-off.
pub enum Handoff {
    /// The daemon ran the request: its outcome, or the error it answered with (a
    /// rejection's or the run's `{code, message}`).
    Ran(std::result::Result<Box<Outcome>, ApiError>),
    /// The daemon did not run it, and why (the CLI runs it in process).
    NotUsed(String),
    /// A termination signal arrived while the daemon ran it: the connection was closed,
    /// which kills the run.
    Interrupted(i32),
}

/// An error the daemon answered with.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// Its stable code (a rejection's code, `run.failed`, …).
    pub code: String,
    /// Its message.
    pub message: String,
}

/// Hands `req` (a `process_run` or a `wasm_run`) to the daemon on `socket` if there is one
/// whose identity is `runner`'s. `stdin` (the request has `stdin_stream` set) is taken
/// only when the daemon has accepted the run; otherwise it is left for the run in process.
pub fn hand_off(
    runner: &Runner,
    req: RunRequest<'_>,
    socket: &Path,
    live: Option<&mut crate::live::Live>,
    stdin: &mut Option<StdinSource>,
) -> Handoff {
    let (route, body) = match req {
        RunRequest::Process(r) => ("/v1/process/run", serde_json::to_vec(r)),
        RunRequest::Wasm(r) => ("/v1/wasm/run", serde_json::to_vec(r)),
    };
    let body = match body {
        Ok(b) => b,
        Err(e) => return Handoff::NotUsed(format!("encoding the request: {e}")),
    };
    // The identity goes with the run: the daemon refuses it unrun when its own differs,
    // which saves asking for its identity first on every call.
    with_daemon(
        runner,
        socket,
        Exchange::WithRequest,
        Handoff::NotUsed,
        async |mut conn, own| {
            let route = format!("{route}?stream=true&identity={}", own.digest());
            tokio::select! {
                r = conn.run(&route, &body, own, live, stdin) => r,
                sig = crate::termination_signal() => Handoff::Interrupted(sig),
            }
        },
    )
}

/// What became of a check handed to the daemon.
pub enum Checked {
    /// The daemon answered: the check's body (`POST /v1/process/check`), or the error
    /// it answered with (a rejection's `{code, message}`).
    Answered(std::result::Result<Value, ApiError>),
    /// The daemon did not answer it, and why (the CLI checks in process).
    NotUsed(String),
}

/// Asks the daemon on `socket`, if there is one whose identity is `runner`'s, what a run
/// of `req` would do.
pub fn check(runner: &Runner, req: &tierbox_policy::ProcessRunRequest, socket: &Path) -> Checked {
    let body = match serde_json::to_vec(req) {
        Ok(b) => b,
        Err(e) => return Checked::NotUsed(format!("encoding the request: {e}")),
    };
    with_daemon(
        runner,
        socket,
        Exchange::First,
        Checked::NotUsed,
        async |mut conn, _| match conn
            .request("POST", "/v1/process/check", Some(&body), false)
            .await
        {
            Ok((200, v)) => Checked::Answered(Ok(v)),
            Ok((_, v)) => Checked::Answered(Err(error_of(&v))),
            Err(e) => Checked::NotUsed(format!("the daemon at {}: {e:#}", socket.display())),
        },
    )
}

/// How a call makes sure the daemon's identity is its runner's.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exchange {
    /// Ask for it (`GET /v1/daemon`) before sending anything else.
    First,
    /// The request carries it (`?identity=`) and the daemon refuses the request unrun
    /// when its own differs (a run: one round trip fewer per call).
    WithRequest,
}

/// Runs `then` with a connection to the daemon on `socket` and `runner`'s identity.
/// With [`Exchange::First`], only when the daemon answers within [`IDENTITY_TIMEOUT`]
/// with that identity; with [`Exchange::WithRequest`], once connected within it (`then`
/// sends the identity). Otherwise returns `not_used(why)`.
pub(crate) fn with_daemon<T>(
    runner: &Runner,
    socket: &Path,
    exchange: Exchange,
    not_used: impl Fn(String) -> T,
    then: impl AsyncFnOnce(Connection, &RunnerIdentity) -> T,
) -> T {
    if !socket.exists() {
        return not_used(format!("no daemon at {}", socket.display()));
    }
    let token = match token(&runner.options().state_dir) {
        Ok(t) => t,
        Err(e) => return not_used(format!("{e:#}")),
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return not_used(format!("starting the async runtime: {e}")),
    };
    let own = runner.identity();
    let result = rt.block_on(async {
        let conn = match tokio::time::timeout(IDENTITY_TIMEOUT, async {
            let mut conn = Connection::open(socket, &token).await?;
            let theirs = match exchange {
                Exchange::First => Some(conn.identity().await?.1),
                Exchange::WithRequest => None,
            };
            Ok::<_, anyhow::Error>((conn, theirs))
        })
        .await
        {
            Ok(Ok((conn, theirs))) => {
                if let Some(theirs) = theirs
                    && let Some(why) = conn.other_identity(&own, &theirs)
                {
                    return not_used(why);
                }
                conn
            }
            Ok(Err(e)) => {
                return not_used(format!("the daemon at {}: {e:#}", socket.display()));
            }
            Err(_) => {
                return not_used(format!(
                    "the daemon at {} did not answer within {} ms",
                    socket.display(),
                    IDENTITY_TIMEOUT.as_millis()
                ));
            }
        };
        then(conn, &own).await
    });
    // Nothing of the request is left on this side: no task to wait for.
    rt.shutdown_background();
    result
}

/// Runs `then` with a connection to whichever daemon answers on the socket for
/// `state_dir` (its identity is not asked: a term it holds is reached whatever policy it
/// runs with, and its owner checks decide what the caller sees). `Err(why)` when none
/// answers within [`IDENTITY_TIMEOUT`].
pub(crate) fn with_any_daemon<T>(
    state_dir: &Path,
    then: impl AsyncFnOnce(Connection) -> T,
) -> std::result::Result<T, Unreachable> {
    let socket = socket_path(state_dir);
    if !socket.exists() {
        return Err(Unreachable(format!("no daemon at {}", socket.display())));
    }
    let token = token(state_dir).map_err(|e| Unreachable(format!("{e:#}")))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Unreachable(format!("starting the async runtime: {e}")))?;
    let result = rt.block_on(async {
        let conn =
            match tokio::time::timeout(IDENTITY_TIMEOUT, Connection::open(&socket, &token)).await {
                Ok(Ok(conn)) => conn,
                Ok(Err(e)) => {
                    return Err(Unreachable(format!(
                        "the daemon at {}: {e:#}",
                        socket.display()
                    )));
                }
                Err(_) => {
                    return Err(Unreachable(format!(
                        "the daemon at {} did not answer within {} ms",
                        socket.display(),
                        IDENTITY_TIMEOUT.as_millis()
                    )));
                }
            };
        Ok(then(conn).await)
    });
    rt.shutdown_background();
    result
}

/// No daemon answered on the socket: what was found instead (no socket, no private
/// token, a refused or silent connection, a peer of another uid).
#[derive(Debug)]
pub(crate) struct Unreachable(String);

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The daemon's identity and pid on `socket`.
pub fn identity(socket: &Path, state_dir: &Path) -> Result<(u32, RunnerIdentity)> {
    let token = token(state_dir)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        tokio::time::timeout(IDENTITY_TIMEOUT, async {
            Connection::open(socket, &token).await?.identity().await
        })
        .await
        .map_err(|_| anyhow::anyhow!("no answer within {} ms", IDENTITY_TIMEOUT.as_millis()))?
    })
}

/// The bearer token: `$TIERBOX_HTTP_TOKEN`, else the state directory's token file, which
/// must be readable by its owner only.
fn token(state_dir: &Path) -> Result<String> {
    if let Ok(t) = std::env::var(tierbox_server::serve::TOKEN_ENV)
        && !t.trim().is_empty()
    {
        return Ok(t.trim().to_owned());
    }
    use std::os::unix::fs::MetadataExt;
    let path = state_dir.join(tierbox_server::serve::TOKEN_FILE);
    let meta = std::fs::symlink_metadata(&path)
        .with_context(|| format!("no token at {}", path.display()))?;
    if !meta.is_file() || meta.mode() & 0o077 != 0 {
        bail!("{} is not a private file (chmod 600)", path.display());
    }
    tierbox_policy::trust::check_file(&path, "the daemon's token file")
        .map_err(anyhow::Error::new)?;
    let mut t = String::new();
    std::fs::File::open(&path)
        .and_then(|f| f.take(4096).read_to_string(&mut t))
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(t.trim().to_owned())
}

/// The error a reply body (`{"error": {code, message}}`) carries.
fn error_of(reply: &Value) -> ApiError {
    api_error(&reply["error"])
}

/// An error object (`{code, message}`) as an [`ApiError`].
fn api_error(error: &Value) -> ApiError {
    ApiError {
        code: error["code"].as_str().unwrap_or("http.error").to_owned(),
        message: error["message"]
            .as_str()
            .unwrap_or("the daemon's reply was not a Tierbox error")
            .to_owned(),
    }
}

/// The code a daemon answers a run with when its runner identity is not the one the run
/// expects (`?identity=`); nothing ran.
const IDENTITY_MISMATCH: &str = "daemon.identity_mismatch";

/// One line of a streamed run's reply (`?stream=true`: `output`, then `result` or
/// `error`), decoded straight into its parts: the outcome is not built as a JSON tree
/// first and then converted.
#[derive(serde::Deserialize)]
struct StreamLine {
    event: String,
    #[serde(default)]
    outcome: Option<Box<Outcome>>,
    #[serde(default)]
    stream: Option<tierbox_policy::handle::Stream>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    bytes_base64: Option<String>,
    #[serde(default)]
    error: Value,
}

/// How a streamed run ended on the wire.
enum Streamed {
    /// Its outcome, or the error the daemon answered with.
    Done(std::result::Result<Box<Outcome>, ApiError>),
    /// The daemon's queue is full (429): nothing ran.
    Busy,
    /// The daemon's identity is not the one sent: nothing ran.
    OtherIdentity,
    /// The daemon does not know `?identity=` (its message): nothing ran.
    OlderDaemon(String),
    /// The request could not be written (why), and no answer came: nothing ran.
    Unsent(String),
}

/// The daemon closed a connection before any byte of its reply: it took nothing from the
/// request (it closes only idle connections, and between requests).
#[derive(Debug)]
struct Unanswered;

impl std::fmt::Display for Unanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the daemon closed the connection before answering")
    }
}

impl std::error::Error for Unanswered {}

/// Whether writing a request failed because the daemon's end of the connection was gone
/// (or no byte of a reply came: [`Unanswered`]).
fn unanswered(e: &anyhow::Error) -> bool {
    e.downcast_ref::<Unanswered>().is_some()
        || e.downcast_ref::<std::io::Error>().is_some_and(|e| {
            matches!(
                e.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            )
        })
}

/// One keep-alive HTTP/1.1 connection to the daemon.
pub(crate) struct Connection {
    io: BufReader<UnixStream>,
    token: String,
    /// The socket, to name the daemon in messages.
    socket: PathBuf,
    /// A reply was read on it: the daemon may since have closed it as idle
    /// (`tierbox_server::conns::HEADER_READ_TIMEOUT`), and [`Self::request`] then opens
    /// another.
    reused: bool,
}

impl Connection {
    async fn open(socket: &Path, token: &str) -> Result<Self> {
        // Nothing is sent to a socket another user could have put there, nor to a peer
        // that is not this user or root.
        tierbox_policy::trust::check_socket(socket, "the daemon's socket")
            .map_err(anyhow::Error::new)?;
        let io = UnixStream::connect(socket)
            .await
            .with_context(|| format!("connecting to {}", socket.display()))?;
        let peer = io.peer_cred().with_context(|| {
            format!(
                "reading the credentials of the daemon at {}",
                socket.display()
            )
        })?;
        if !tierbox_policy::trust::trusted_uid(peer.uid()) {
            bail!(
                "the daemon at {} runs as uid {}, neither this user (uid {}) nor root: nothing was sent to it",
                socket.display(),
                peer.uid(),
                tierbox_policy::trust::euid()
            );
        }
        Ok(Self {
            io: BufReader::new(io),
            token: token.to_owned(),
            socket: socket.to_owned(),
            reused: false,
        })
    }

    /// Whether the daemon has closed this connection (it closes a keep-alive connection
    /// that stays idle past its header timeout) or it is otherwise unusable: the daemon
    /// never speaks first, so anything readable between requests (the end of the stream,
    /// stray bytes, an error) means another connection is needed.
    fn closed_by_daemon(&self) -> bool {
        if !self.io.buffer().is_empty() {
            return true;
        }
        let mut probe = [0u8; 1];
        !matches!(
            self.io.get_ref().try_read(&mut probe),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
        )
    }

    /// A new connection to the same daemon, checked as [`Self::open`] checks one, as a
    /// plain stream: for a WebSocket handshake, whose request carries its own ticket.
    pub(crate) async fn raw_stream(&self) -> Result<UnixStream> {
        Ok(Self::open(&self.socket, &self.token).await?.io.into_inner())
    }

    /// Sends a JSON request and reads the whole reply: its body, or the error the daemon
    /// answered with.
    pub(crate) async fn call(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<std::result::Result<Value, ApiError>> {
        let body = body.map(serde_json::to_vec).transpose()?;
        let (status, reply) = self.request(method, path, body.as_deref(), false).await?;
        Ok(match status {
            200 => Ok(reply),
            _ => Err(error_of(&reply)),
        })
    }

    /// Why the daemon is not used when its identity `theirs` is not `own`.
    fn other_identity(&self, own: &RunnerIdentity, theirs: &RunnerIdentity) -> Option<String> {
        let differ = own.differences(theirs);
        (!differ.is_empty()).then(|| {
            format!(
                "the daemon at {} runs with another {}",
                self.socket.display(),
                differ.join(", ")
            )
        })
    }

    /// `GET /v1/daemon`: the daemon's pid and its runner's identity.
    async fn identity(&mut self) -> Result<(u32, RunnerIdentity)> {
        let (status, reply) = self.request("GET", "/v1/daemon", None, false).await?;
        if status != 200 {
            bail!(
                "the daemon answered {status} to its identity: {}",
                error_of(&reply).message
            );
        }
        let pid = reply["pid"]
            .as_u64()
            .and_then(|p| u32::try_from(p).ok())
            .context("the daemon's pid")?;
        let id = serde_json::from_value(reply["identity"].clone()).context("its identity")?;
        Ok((pid, id))
    }

    /// Sends a request and reads the response head; returns the status and, unless
    /// `streamed`, the whole JSON body (a streamed body is read by the caller).
    async fn request(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        streamed: bool,
    ) -> Result<(u16, Value)> {
        // A connection the daemon closed as idle is replaced before the request goes out;
        // one it closes while the request is on its way (the same timeout, a moment
        // later) took nothing from it — no byte of a reply came — so the request is sent
        // again, once, on a new connection.
        if self.reused && self.closed_by_daemon() {
            self.reopen().await?;
        }
        let reused = self.reused;
        match self.send(method, path, body).await {
            Err(e) if reused && unanswered(&e) => {
                self.reopen().await?;
                self.send(method, path, body).await?;
            }
            r => r?,
        }
        let reply = match self.reply(streamed).await {
            Err(e) if reused && e.downcast_ref::<Unanswered>().is_some() => {
                self.reopen().await?;
                self.send(method, path, body).await?;
                self.reply(streamed).await
            }
            r => r,
        };
        self.reused = reply.is_ok();
        reply
    }

    /// Replaces this connection with a new one to the same daemon.
    async fn reopen(&mut self) -> Result<()> {
        *self = Self::open(&self.socket, &self.token).await?;
        Ok(())
    }

    /// Writes a request: head and body in one buffer, so a daemon that answers from the
    /// head alone (and may close) has the whole request when it reads.
    async fn send(&mut self, method: &str, path: &str, body: Option<&[u8]>) -> Result<()> {
        let body = body.unwrap_or_default();
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: tierbox\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.token,
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(body);
        self.io.get_mut().write_all(&request).await?;
        Ok(())
    }

    /// Writes the head of a run in the streamed-stdin form and its first chunk, the request
    /// line (`line` and a line feed); the stdin follows in chunks ([`pump_stdin`]).
    async fn send_streamed(&mut self, path: &str, line: &[u8]) -> Result<()> {
        let mut request = format!(
            "POST {path} HTTP/1.1\r\nHost: tierbox\r\nAuthorization: Bearer {}\r\n\
             Content-Type: {}\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n",
            self.token,
            tierbox_server::http::STDIN_STREAM_MEDIA_TYPE,
            line.len() + 1
        )
        .into_bytes();
        request.extend_from_slice(line);
        request.extend_from_slice(b"\n\r\n");
        self.io.get_mut().write_all(&request).await?;
        Ok(())
    }

    /// A second handle on the connection for writing a streamed stdin while the reply is
    /// read from this one.
    fn writer(&self) -> Result<UnixStream> {
        use std::os::fd::AsFd;
        let fd = self.io.get_ref().as_fd().try_clone_to_owned()?;
        let std = std::os::unix::net::UnixStream::from(fd);
        std.set_nonblocking(true)?;
        Ok(UnixStream::from_std(std)?)
    }

    /// Reads a reply: see [`Self::request`].
    async fn reply(&mut self, streamed: bool) -> Result<(u16, Value)> {
        let (status, headers) = self.read_head().await?;
        let chunked = headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
        if streamed && status == 200 {
            if !chunked {
                bail!("the daemon's stream is not chunked");
            }
            return Ok((status, Value::Null));
        }
        let bytes = if chunked {
            let mut all = Vec::new();
            while let Some(chunk) = self.read_chunk().await? {
                all.extend_from_slice(&chunk);
                if all.len() > MAX_LINE_BYTES {
                    bail!("the daemon's reply is longer than {MAX_LINE_BYTES} bytes");
                }
            }
            all
        } else {
            let len: usize = headers
                .iter()
                .find(|(k, _)| k == "content-length")
                .and_then(|(_, v)| v.parse().ok())
                .context("a reply without a length")?;
            if len > MAX_LINE_BYTES {
                bail!("the daemon's reply is longer than {MAX_LINE_BYTES} bytes");
            }
            let mut buf = vec![0; len];
            self.io.read_exact(&mut buf).await?;
            buf
        };
        let value = serde_json::from_slice(&bytes).context("the daemon's reply is not JSON")?;
        Ok((status, value))
    }

    /// The status line and headers (names lowercased).
    async fn read_head(&mut self) -> Result<(u16, Vec<(String, String)>)> {
        let mut headers = Vec::new();
        let mut status = 0;
        let mut read = 0;
        loop {
            let mut line = String::new();
            let n = match self.io.read_line(&mut line).await {
                Ok(n) => n,
                Err(e) if read == 0 && e.kind() == std::io::ErrorKind::ConnectionReset => {
                    return Err(Unanswered.into());
                }
                Err(e) => return Err(e.into()),
            };
            if n == 0 && read == 0 {
                return Err(Unanswered.into());
            }
            read += n;
            if n == 0 || read > MAX_HEAD_BYTES {
                bail!("the daemon closed the connection or sent an oversized head");
            }
            let line = line.trim_end();
            if status == 0 {
                status = line
                    .split_whitespace()
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .context("a malformed status line")?;
                continue;
            }
            if line.is_empty() {
                return Ok((status, headers));
            }
            if let Some((k, v)) = line.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
            }
        }
    }

    /// The next chunk of a chunked body, `None` at its end.
    async fn read_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        let mut size_line = String::new();
        if self.io.read_line(&mut size_line).await? == 0 {
            bail!("the daemon closed the connection mid-reply");
        }
        let size_hex = size_line.trim().split(';').next().unwrap_or("");
        let size = usize::from_str_radix(size_hex, 16).context("a malformed chunk size")?;
        if size > MAX_LINE_BYTES {
            bail!("a chunk longer than {MAX_LINE_BYTES} bytes");
        }
        let mut chunk = vec![0; size];
        self.io.read_exact(&mut chunk).await?;
        let mut crlf = [0u8; 2];
        self.io.read_exact(&mut crlf).await?;
        if size == 0 {
            return Ok(None);
        }
        Ok(Some(chunk))
    }

    /// Runs `body` (a `process_run` or `wasm_run` request for `route`) streamed, and returns
    /// its result line.
    ///
    /// Streaming keeps the run tied to this connection: when it closes (this process is
    /// interrupted or killed), the daemon kills the run. `route` carries `own`'s digest
    /// (`?identity=`): a daemon of another identity refuses the run unrun, and is then
    /// asked for its identity to say how it differs.
    async fn run(
        &mut self,
        route: &str,
        body: &[u8],
        own: &RunnerIdentity,
        live: Option<&mut crate::live::Live>,
        stdin: &mut Option<StdinSource>,
    ) -> Handoff {
        match self.run_streamed(route, body, live, stdin).await {
            Ok(Streamed::Done(result)) => Handoff::Ran(result),
            Ok(Streamed::Busy) => Handoff::NotUsed("the daemon is busy".to_owned()),
            Ok(Streamed::OtherIdentity) => Handoff::NotUsed(
                match self.identity().await {
                    Ok((_, theirs)) => self.other_identity(own, &theirs),
                    Err(_) => None,
                }
                .unwrap_or_else(|| {
                    format!(
                        "the daemon at {} runs with another identity",
                        self.socket.display()
                    )
                }),
            ),
            Ok(Streamed::Unsent(why)) => Handoff::NotUsed(format!(
                "the daemon at {} closed the connection before it had the request: {why}",
                self.socket.display()
            )),
            Ok(Streamed::OlderDaemon(message)) => Handoff::NotUsed(format!(
                "the daemon at {} is of an older build ({message}); restart it: \
                 `tierbox daemon stop`, then `tierbox daemon start`",
                self.socket.display()
            )),
            Err(e) => Handoff::Ran(Err(ApiError {
                code: "daemon.failed".to_owned(),
                message: format!("the daemon did not finish the run: {e:#}"),
            })),
        }
    }

    async fn run_streamed(
        &mut self,
        route: &str,
        body: &[u8],
        mut live: Option<&mut crate::live::Live>,
        stdin: &mut Option<StdinSource>,
    ) -> Result<Streamed> {
        let sent = match stdin {
            None => self.send("POST", route, Some(body)).await,
            Some(_) => self.send_streamed(route, body).await,
        };
        let (status, reply) = match sent {
            Ok(()) => self.reply(true).await?,
            // The daemon closed the connection before it had the whole request, so it
            // runs nothing; it may have answered first (an older daemon refusing
            // `?identity=` from the head alone).
            Err(e) => match self.reply(true).await {
                Ok(answered) => answered,
                Err(_) => return Ok(Streamed::Unsent(format!("{e:#}"))),
            },
        };
        if status == 429 {
            return Ok(Streamed::Busy);
        }
        if status != 200 {
            let error = error_of(&reply);
            return Ok(match (status, error.code.as_str()) {
                (409, IDENTITY_MISMATCH) => Streamed::OtherIdentity,
                // A daemon from before `?identity=` refuses the unknown parameter: it has
                // run nothing.
                (400, "input.malformed") if error.message.starts_with("query string:") => {
                    Streamed::OlderDaemon(error.message)
                }
                _ => Streamed::Done(Err(error)),
            });
        }
        // The daemon runs it: from here on the stdin is the daemon's run's. Its writer lives
        // until the reply ends (the runtime is then shut down with it).
        if let Some(source) = stdin.take() {
            tokio::spawn(pump_stdin(self.writer()?, source));
        }
        let mut pending = Vec::new();
        while let Some(chunk) = self.read_chunk().await? {
            pending.extend_from_slice(&chunk);
            if pending.len() > MAX_LINE_BYTES {
                bail!("a reply line longer than {MAX_LINE_BYTES} bytes");
            }
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let event: StreamLine =
                    serde_json::from_slice(&line).context("a reply line is not a stream event")?;
                match event.event.as_str() {
                    "result" => {
                        let outcome = event.outcome.context("a result line without its outcome")?;
                        return Ok(Streamed::Done(Ok(outcome)));
                    }
                    "error" => {
                        return Ok(Streamed::Done(Err(api_error(&event.error))));
                    }
                    // Output as it happens, to the live printer (`--json` has none).
                    "output" => {
                        if let (Some(live), Some(text)) = (live.as_mut(), event.text) {
                            let stream = event.stream.context("an output event's stream")?;
                            live.print(
                                OutputEvent::from_wire(
                                    stream,
                                    &text,
                                    event.bytes_base64.as_deref(),
                                )
                                .context("an output event's bytes")?,
                            );
                        }
                    }
                    _ => {}
                }
            }
        }
        bail!("the daemon ended the reply without a result")
    }
}

/// Sends `stdin`'s chunks on `conn` as the chunks of a streamed-stdin request body, then
/// its end. A failed read of this process's stdin cuts the body short instead, which the
/// daemon reports as the stdin's `source_error`. Written with `MSG_NOSIGNAL`: a daemon that
/// closes the connection (its run ended before its stdin did) makes a write fail, never
/// ends this process with `SIGPIPE`.
async fn pump_stdin(conn: UnixStream, mut stdin: StdinSource) {
    loop {
        let chunk = match stdin.next_chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(_) => {
                let _ = rustix::net::shutdown(&conn, rustix::net::Shutdown::Write);
                return;
            }
        };
        let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
        framed.extend_from_slice(&chunk);
        framed.extend_from_slice(b"\r\n");
        if send_all(&conn, &framed).await.is_err() {
            return;
        }
    }
    let _ = send_all(&conn, b"0\r\n\r\n").await;
}

/// Writes all of `bytes` to `conn` with `send(MSG_NOSIGNAL)`.
async fn send_all(conn: &UnixStream, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        conn.writable().await?;
        match conn.try_io(tokio::io::Interest::WRITABLE, || {
            rustix::net::send(conn, bytes, rustix::net::SendFlags::NOSIGNAL)
                .map_err(std::io::Error::from)
        }) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `tierbox daemon start`: starts `tierbox serve --unix` in the background on the socket
/// for `state_dir`, logging to `<state dir>/daemon.log`, and waits until it answers.
pub fn start(serve_args: &[std::ffi::OsString], state_dir: &Path) -> Result<(u32, PathBuf)> {
    let socket = socket_path(state_dir);
    if identity(&socket, state_dir).is_ok() {
        bail!("a daemon already answers on {}", socket.display());
    }
    std::fs::create_dir_all(state_dir)
        .with_context(|| format!("creating {}", state_dir.display()))?;
    let log_path = state_dir.join(LOG_FILE);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("opening {}", log_path.display()))?;
    let exe = std::env::current_exe().context("finding the tierbox binary")?;
    let mut child = std::process::Command::new(exe)
        .arg("serve")
        .arg("--unix")
        .arg(&socket)
        .args(serve_args)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        // Its own process group: a Ctrl-C in the terminal that started it does not stop it.
        .process_group(0)
        .spawn()
        .context("starting tierbox serve")?;
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok((pid, _)) = identity(&socket, state_dir) {
            return Ok((pid, socket));
        }
        if let Some(status) = child.try_wait()? {
            bail!(
                "the daemon exited at start ({status}); see {}",
                log_path.display()
            );
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!(
                "the daemon did not answer within {} s; see {}",
                START_TIMEOUT.as_secs(),
                log_path.display()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `tierbox daemon stop`: asks the daemon on the socket for `state_dir` to shut down
/// (SIGTERM: running requests get its grace, background processes are killed) and waits
/// until it is gone. Returns its pid.
pub fn stop(state_dir: &Path) -> Result<u32> {
    let socket = socket_path(state_dir);
    let (pid, _) = identity(&socket, state_dir)
        .with_context(|| format!("no daemon answers on {}", socket.display()))?;
    let target = rustix::process::Pid::from_raw(i32::try_from(pid)?)
        .context("the daemon's pid is not a process id")?;
    rustix::process::kill_process(target, rustix::process::Signal::TERM)
        .with_context(|| format!("signalling the daemon (pid {pid})"))?;
    let deadline = Instant::now() + STOP_TIMEOUT;
    while socket.exists() || rustix::process::test_kill_process(target).is_ok() {
        if Instant::now() > deadline {
            bail!(
                "the daemon (pid {pid}) did not exit within {} s",
                STOP_TIMEOUT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(pid)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A connection whose daemon end has already `reply` queued (or nothing) and is closed.
    async fn answered_and_closed(reply: Option<&str>) -> Connection {
        let (client, mut daemon) = UnixStream::pair().unwrap();
        if let Some(reply) = reply {
            daemon.write_all(reply.as_bytes()).await.unwrap();
        }
        drop(daemon);
        Connection {
            io: BufReader::new(client),
            token: "t".to_owned(),
            socket: PathBuf::from("/run/test.sock"),
            reused: false,
        }
    }

    fn http(status: &str, body: &str) -> String {
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
    }

    /// What a run makes of a daemon that sends `answer` (nothing: `None`) and closes
    /// while it is handed a request.
    async fn run_on_closing(answer: Option<&str>, own: &RunnerIdentity) -> Handoff {
        let mut conn = answered_and_closed(answer).await;
        conn.run(
            "/v1/process/run?stream=true&identity=00",
            b"{}",
            own,
            None,
            &mut None,
        )
        .await
    }

    /// A daemon that answers from the head alone and closes (an older one refusing
    /// `?identity=`) makes the request's write fail; its answer still decides, and the
    /// call runs in process instead of failing.
    #[tokio::test]
    async fn a_daemon_that_answered_and_closed_before_the_body_is_not_used() {
        let own = RunnerIdentity {
            version: "0".to_owned(),
            uid: 0,
            policy_digest: String::new(),
            workspace: PathBuf::from("/w"),
            state_dir: PathBuf::from("/s"),
            environment: String::new(),
        };
        let older = http(
            "400 Bad Request",
            r#"{"error":{"code":"input.malformed","message":"query string: unknown field `identity`, expected `stream`"}}"#,
        );
        match run_on_closing(Some(&older), &own).await {
            Handoff::NotUsed(why) => assert!(why.contains("older build"), "{why}"),
            _ => panic!("an older daemon's refusal must leave the run to the CLI"),
        }
        // Closed without an answer: not sent, so not run there either.
        match run_on_closing(None, &own).await {
            Handoff::NotUsed(why) => assert!(why.contains("before it had the request"), "{why}"),
            _ => panic!("a request that was never sent must leave the run to the CLI"),
        }
        // A refusal of the request itself is the run's answer.
        let refused = http(
            "422 Unprocessable Entity",
            r#"{"error":{"code":"exec.not_allowed","message":"no"}}"#,
        );
        match run_on_closing(Some(&refused), &own).await {
            Handoff::Ran(Err(e)) => assert_eq!(e.code, "exec.not_allowed"),
            _ => panic!("the daemon's refusal is the answer"),
        }
    }
}
