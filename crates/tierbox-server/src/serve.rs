//! Running the servers: the bearer token, binding (loopback or a private unix socket),
//! and graceful shutdown.

use std::future::Future;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::sync::Notify;

use crate::http::{HttpConfig, router};
use crate::service::Service;

/// File name of the generated token in the state directory.
pub const TOKEN_FILE: &str = "http-token";

/// Shortest token accepted from a file or the environment, in bytes: 128 bits of hex.
pub const MIN_TOKEN_BYTES: usize = 32;

/// How long a shutdown waits for running requests before their runs are killed.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Environment variable that may carry the token.
pub const TOKEN_ENV: &str = "TIERBOX_HTTP_TOKEN";

/// `n` random bytes from the kernel, hex encoded. Fails rather than degrade.
fn random_hex(n: usize) -> Result<String> {
    let mut b = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .context("reading /dev/urandom for the HTTP token")?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

fn check_token(token: &str, source: &str) -> Result<String> {
    let t = token.trim();
    if t.len() < MIN_TOKEN_BYTES || !t.bytes().all(|b| b.is_ascii_graphic()) {
        bail!(
            "the token from {source} must be at least {MIN_TOKEN_BYTES} printable characters \
             without spaces"
        );
    }
    Ok(t.to_owned())
}

/// Where the token comes from, and whether it was just created.
#[derive(Debug)]
pub struct Token {
    /// The token.
    pub value: String,
    /// The file it was created in, when it was generated now (print it once).
    pub created: Option<PathBuf>,
}

/// The bearer token: from `token_file`, else `$TIERBOX_HTTP_TOKEN`, else
/// `<state_dir>/http-token`, generated (32 random bytes, hex, mode 0600) when absent.
pub fn load_token(token_file: Option<&Path>, state_dir: &Path) -> Result<Token> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
    if let Some(f) = token_file {
        // Refused like ssh refuses a private key others can read: the token is the API's
        // only credential.
        let meta = std::fs::metadata(f)
            .with_context(|| format!("reading the token file {}", f.display()))?;
        if meta.permissions().mode() & 0o077 != 0 {
            bail!(
                "the token file {} is readable or writable by group or others (mode {:04o}); \
                 chmod 600 it",
                f.display(),
                meta.permissions().mode() & 0o7777
            );
        }
        // Ours (or root's) and every directory above it writable by nobody else.
        tierbox_policy::trust::check_file(f, "the token file").map_err(anyhow::Error::new)?;
        let text = std::fs::read_to_string(f)
            .with_context(|| format!("reading the token file {}", f.display()))?;
        return Ok(Token {
            value: check_token(&text, &f.display().to_string())?,
            created: None,
        });
    }
    if let Ok(t) = std::env::var(TOKEN_ENV) {
        return Ok(Token {
            value: check_token(&t, TOKEN_ENV)?,
            created: None,
        });
    }
    let path = state_dir.join(TOKEN_FILE);
    if state_dir.exists() {
        tierbox_policy::trust::check_dir(state_dir, "the state directory")
            .map_err(anyhow::Error::new)?;
    }
    match std::fs::symlink_metadata(&path) {
        Ok(meta) => {
            if !meta.is_file()
                || meta.uid() != rustix::process::geteuid().as_raw()
                || meta.permissions().mode() & 0o077 != 0
            {
                bail!(
                    "{} must be a regular file owned by this user with mode 0600; remove it \
                     to have a new token generated",
                    path.display()
                );
            }
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            Ok(Token {
                value: check_token(&text, &path.display().to_string())?,
                created: None,
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(tierbox_runner::supervisor::STATE_DIR_MODE)
                    .create(state_dir)
                    .with_context(|| format!("creating {}", state_dir.display()))?;
            }
            tierbox_policy::trust::check_dir(state_dir, "the state directory")
                .map_err(anyhow::Error::new)?;
            let value = random_hex(32)?;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
                .with_context(|| format!("creating {}", path.display()))?;
            f.write_all(format!("{value}\n").as_bytes())?;
            Ok(Token {
                value,
                created: Some(path),
            })
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Where the HTTP API listens.
#[derive(Debug, Clone)]
pub enum Bind {
    /// A TCP address; loopback unless `allow_remote`.
    Tcp {
        /// The address.
        addr: SocketAddr,
        /// The operator's explicit, loud consent to a non-loopback address.
        allow_remote: bool,
    },
    /// A unix socket, created with mode 0600.
    Unix(PathBuf),
}

/// Refuses a non-loopback TCP address without explicit consent.
pub fn check_bind(bind: &Bind) -> Result<()> {
    if let Bind::Tcp {
        addr,
        allow_remote: false,
    } = bind
        && !addr.ip().is_loopback()
    {
        bail!(
            "refusing to listen on {addr}: it is not a loopback address, and anyone who can \
             reach it and steal the token can run commands here. Use 127.0.0.1 or --unix, or \
             pass --dangerously-allow-remote if you really mean it"
        );
    }
    Ok(())
}

fn bind_unix(path: &Path) -> Result<tokio::net::UnixListener> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            bail!("{} exists and is not a socket", path.display());
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            bail!("{} is in use by a running server", path.display());
        }
        // A stale socket of a server that died.
        std::fs::remove_file(path).with_context(|| format!("removing {}", path.display()))?;
    }
    // The socket is created 0600 (no window where others could connect).
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o177));
    let listener = tokio::net::UnixListener::bind(path);
    rustix::process::umask(old);
    listener.with_context(|| format!("binding {}", path.display()))
}

/// Raises a listening socket's backlog to [`crate::conns::LISTEN_BACKLOG`] (tokio listens
/// with 128). `listen` on a socket that already listens only changes its backlog.
fn deepen_backlog(listener: &impl std::os::fd::AsFd) -> Result<()> {
    rustix::net::listen(listener, crate::conns::LISTEN_BACKLOG)
        .context("listen: setting the backlog")
}

/// Serves the HTTP API until `shutdown` resolves; then stops accepting, waits up to
/// [`SHUTDOWN_GRACE`] for running requests, kills every background process and waits for
/// them. Requests still running after the grace are dropped with the runtime, which kills
/// their sandboxes. Connections are admitted as [`crate::conns`] describes, within what
/// the descriptor limit leaves after [`crate::conns::fd_reserve`] for the runs that may
/// be going at once: `config.max_concurrent` requests and the policy's
/// `background.max_total` processes.
pub async fn serve_http(
    service: Service,
    bind: Bind,
    config: HttpConfig,
    shutdown: impl Future<Output = ()>,
    on_ready: impl FnOnce(String),
) -> Result<()> {
    check_bind(&bind)?;
    // Descriptors are kept for every run the server may have going at once: the
    // requests it serves at a time and the background processes the policy allows.
    let runs = config.max_concurrent.max(1)
        + usize::try_from(service.runner().policy().background.max_total).unwrap_or(usize::MAX);
    let limits = crate::conns::Limits::for_this_process(runs);
    let app = router(service.clone(), config);
    let stop = Arc::new(Notify::new());
    let server = match &bind {
        Bind::Tcp { addr, .. } => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding {addr}"))?;
            deepen_backlog(&listener)?;
            on_ready(format!("http://{}", listener.local_addr()?));
            tokio::spawn(crate::conns::serve(listener, app, limits, stop.clone()))
        }
        Bind::Unix(path) => {
            let listener = bind_unix(path)?;
            deepen_backlog(&listener)?;
            on_ready(format!("unix:{}", path.display()));
            tokio::spawn(crate::conns::serve(listener, app, limits, stop.clone()))
        }
    };
    let sweeper = sweep_spill_files(&service);
    shutdown.await;
    sweeper.abort();
    stop.notify_one();
    let finished = tokio::time::timeout(SHUTDOWN_GRACE, server).await;
    service.shutdown().await;
    if let Bind::Unix(path) = &bind {
        let _ = std::fs::remove_file(path);
    }
    match finished {
        Ok(Ok(r)) => r.context("serving HTTP"),
        Ok(Err(join)) => Err(anyhow::anyhow!("the HTTP server task failed: {join}")),
        Err(_) => Ok(()),
    }
}

/// Removes the state directory's expired spill files every
/// [`tierbox_runner::spill::SPILL_SWEEP_INTERVAL_SECS`] while the server runs (runs sweep
/// too when they start; a server may go long without one): `output.spill_keep_secs` of
/// the server's policy after their last write.
fn sweep_spill_files(service: &Service) -> tokio::task::JoinHandle<()> {
    let state_dir = service.runner().options().state_dir.clone();
    let keep = service.runner().policy().output.spill_keep_secs;
    tokio::spawn(async move {
        let period =
            std::time::Duration::from_secs(tierbox_runner::spill::SPILL_SWEEP_INTERVAL_SECS);
        let mut tick = tokio::time::interval(period);
        loop {
            tick.tick().await;
            let dir = state_dir.clone();
            let _ = tokio::task::spawn_blocking(move || {
                tierbox_runner::spill::sweep_expired(&dir, keep)
            })
            .await;
        }
    })
}

/// Serves one MCP session over stdio until the client closes it or `shutdown` resolves;
/// then every background process is killed and awaited.
pub async fn serve_mcp_stdio(service: Service, shutdown: impl Future<Output = ()>) -> Result<()> {
    // Lines that are not JSON-RPC get a JSON-RPC error before the library sees them.
    let (input, output, _blocking_again) = stdio();
    let transport = crate::mcp_stdio::guard(input, output);
    let session = crate::mcp::serve_session(service.clone(), transport);
    let sweeper = sweep_spill_files(&service);
    let result = tokio::select! {
        r = session => r,
        () = shutdown => Ok(()),
    };
    sweeper.abort();
    service.shutdown().await;
    result
}

type Reader = Box<dyn tokio::io::AsyncRead + Unpin + Send>;
type Writer = Box<dyn tokio::io::AsyncWrite + Unpin + Send>;

/// This process's stdin and stdout for the MCP transport. Each that is a pipe (what an MCP
/// client starts the server with) is read or written as a non-blocking pipe on the
/// runtime's own reactor: tokio's stdio does every read and every write on a blocking
/// thread, a hand-off and a wake-up per message each way. Anything else (a terminal, a
/// file, a socket), and a stdout that is the same pipe as stderr — which must stay
/// blocking, or a full pipe would fail a diagnostic's write — keeps tokio's stdio. The
/// third value puts the pipes back in blocking mode when dropped (whoever else holds them,
/// such as a shell that runs something after the server, gets them as they were).
fn stdio() -> (Reader, Writer, BlockingAgain) {
    use std::os::fd::AsFd;
    let mut again = BlockingAgain::default();
    let stdin: Reader = match fifo(std::io::stdin().as_fd(), None)
        .and_then(|fd| tokio::net::unix::pipe::Receiver::from_owned_fd(fd).ok())
    {
        Some(pipe) => {
            again.0.push(rustix::stdio::stdin());
            Box::new(pipe)
        }
        None => Box::new(tokio::io::stdin()),
    };
    let stderr = std::io::stderr();
    let stdout: Writer = match fifo(std::io::stdout().as_fd(), Some(stderr.as_fd()))
        .and_then(|fd| tokio::net::unix::pipe::Sender::from_owned_fd(fd).ok())
    {
        Some(pipe) => {
            again.0.push(rustix::stdio::stdout());
            Box::new(pipe)
        }
        None => Box::new(tokio::io::stdout()),
    };
    (stdin, stdout, again)
}

/// The descriptors [`stdio`] made non-blocking; dropping it clears `O_NONBLOCK` on them
/// again.
#[derive(Default)]
struct BlockingAgain(Vec<std::os::fd::BorrowedFd<'static>>);

impl Drop for BlockingAgain {
    fn drop(&mut self) {
        for fd in &self.0 {
            if let Ok(flags) = rustix::fs::fcntl_getfl(fd) {
                let _ = rustix::fs::fcntl_setfl(fd, flags - rustix::fs::OFlags::NONBLOCK);
            }
        }
    }
}

/// A copy of `fd` when it is a pipe and not the pipe `unless` is.
fn fifo(
    fd: std::os::fd::BorrowedFd<'_>,
    unless: Option<std::os::fd::BorrowedFd<'_>>,
) -> Option<std::os::fd::OwnedFd> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let identity = |fd: std::os::fd::BorrowedFd<'_>| {
        let meta = std::fs::File::from(fd.try_clone_to_owned().ok()?)
            .metadata()
            .ok()?;
        Some((meta.file_type().is_fifo(), meta.dev(), meta.ino()))
    };
    let (is_fifo, dev, ino) = identity(fd)?;
    let shared = unless
        .and_then(identity)
        .is_some_and(|(_, d, i)| (d, i) == (dev, ino));
    (is_fifo && !shared).then(|| fd.try_clone_to_owned().ok())?
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_a_pipe_that_is_not_stderrs_becomes_non_blocking() {
        use std::os::fd::AsFd;
        let (r, w) = std::io::pipe().unwrap();
        let (other_r, _other_w) = std::io::pipe().unwrap();
        assert!(fifo(r.as_fd(), None).is_some());
        assert!(fifo(w.as_fd(), Some(other_r.as_fd())).is_some());
        // The same pipe as `unless` (stdout dup'd onto stderr): left alone.
        assert!(fifo(w.as_fd(), Some(r.as_fd())).is_none());
        let file = tempfile::tempfile().unwrap();
        assert!(fifo(file.as_fd(), None).is_none());
        // The copy is non-blocking once tokio takes it, and so is the original.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = rt.enter();
        let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(fifo(r.as_fd(), None).unwrap());
        assert!(pipe.is_ok());
        let nonblocking = || {
            rustix::fs::fcntl_getfl(&r)
                .unwrap()
                .contains(rustix::fs::OFlags::NONBLOCK)
        };
        assert!(nonblocking());
        // Put back in blocking mode when the session is over.
        let r: &'static std::os::fd::OwnedFd = Box::leak(Box::new(r.into()));
        drop(BlockingAgain(vec![r.as_fd()]));
        assert!(
            !rustix::fs::fcntl_getfl(r)
                .unwrap()
                .contains(rustix::fs::OFlags::NONBLOCK)
        );
    }

    #[test]
    fn non_loopback_needs_consent() {
        let remote: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let v6: SocketAddr = "[::1]:8080".parse().unwrap();
        let tcp = |addr, allow_remote| Bind::Tcp { addr, allow_remote };
        assert!(check_bind(&tcp(remote, false)).is_err());
        assert!(check_bind(&tcp(remote, true)).is_ok());
        assert!(check_bind(&tcp(local, false)).is_ok());
        assert!(check_bind(&tcp(v6, false)).is_ok());
    }

    #[test]
    fn the_token_is_generated_once_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let first = load_token(None, dir.path()).unwrap();
        assert_eq!(first.value.len(), 64);
        let path = first.created.clone().unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let again = load_token(None, dir.path()).unwrap();
        assert_eq!((again.value, again.created), (first.value, None));
        // A token file others can read is refused, not used.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(load_token(None, dir.path()).is_err());
        // A short supplied token is refused.
        let short = dir.path().join("short");
        std::fs::write(&short, "hunter2\n").unwrap();
        std::fs::set_permissions(&short, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(load_token(Some(&short), dir.path()).is_err());
    }

    /// A supplied `--token-file` that group or others can read is refused, as `ssh`
    /// refuses such a private key; the same file at mode 0600 is used.
    #[test]
    fn a_token_file_others_can_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, format!("{}\n", "ab".repeat(32))).unwrap();
        for mode in [0o644, 0o640, 0o604, 0o660] {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = load_token(Some(&file), dir.path()).unwrap_err().to_string();
            assert!(err.contains("chmod 600"), "mode {mode:o}: {err}");
        }
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(
            load_token(Some(&file), dir.path()).unwrap().value,
            "ab".repeat(32)
        );
    }
}
