//! Typed rejections: one variant per rule, each with a stable machine code.
//!
//! The code (`scope.path_outside_workspace`) is part of the public interface: the CLI
//! prints it, MCP returns it as the tool error, the HTTP API puts it in the problem body,
//! and the audit log records it. Codes are never reused for a different rule.

use std::path::PathBuf;

pub use self::path::{ArgAccess, GrantKey, PathFix, PolicyChange, Unreachable};
pub use self::workspace::{HostRule, OwnFile, WorkspaceFix, WorkspaceRule};
use crate::policy::Tier;

mod path;
mod workspace;

/// Why a request was refused before anything ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    // ---- input shape and hard caps -------------------------------------------------
    /// The request document is larger than [`crate::request::MAX_REQUEST_BYTES`].
    #[error("request is {bytes} bytes, more than the {max}-byte cap")]
    RequestTooLarge { bytes: usize, max: usize },
    /// The request is not a valid `process_run` object (bad JSON, unknown field, wrong type).
    #[error("request is malformed: {detail}")]
    Malformed { detail: String },
    /// `command` is empty.
    #[error("command is empty")]
    CommandEmpty,
    /// `command` is longer than the cap.
    #[error("command is {bytes} bytes, more than the {max}-byte cap")]
    CommandTooLong { bytes: usize, max: usize },
    /// `command` contains whitespace: it looks like a whole command line.
    #[error(
        "command {command:?} contains whitespace; pass the program alone as command and each \
         argument as its own entry in args"
    )]
    CommandNotBare { command: String },
    /// A string field contains a NUL byte, which cannot cross `execve`.
    #[error("{field} contains a NUL byte")]
    NulByte { field: String },
    /// More arguments than the cap.
    #[error("{count} args given, more than the cap of {max}")]
    TooManyArgs { count: usize, max: usize },
    /// One argument is longer than the cap.
    #[error("args[{index}] is {bytes} bytes, more than the {max}-byte cap")]
    ArgTooLong {
        index: usize,
        bytes: usize,
        max: usize,
    },
    /// More per-call environment entries than the cap.
    #[error("{count} env entries given, more than the cap of {max}")]
    TooManyEnv { count: usize, max: usize },
    /// An environment name is empty, too long, or contains `=`.
    #[error("env name {name:?} is invalid: {reason}")]
    EnvNameInvalid { name: String, reason: String },
    /// An environment value is longer than the cap.
    #[error("env value of {name} is {bytes} bytes, more than the {max}-byte cap")]
    EnvValueTooLong {
        name: String,
        bytes: usize,
        max: usize,
    },
    /// `cwd` is longer than the cap.
    #[error("cwd is {bytes} bytes, more than the {max}-byte cap")]
    CwdTooLong { bytes: usize, max: usize },
    /// An inline stdin (`stdin`, `stdin_base64` decoded, a `process_write_stdin` call's
    /// `data`) is larger than its limit: the run's stdin limit (`limits.stdin_bytes`,
    /// narrowed by the request's `stdin_limit_bytes`), or the per-call cap.
    #[error("stdin is {bytes} bytes, more than the {max}-byte limit")]
    StdinTooLarge { bytes: u64, max: u64 },
    /// More than one source of stdin was given (`stdin`, `stdin_base64`, a streamed
    /// stdin): which ones.
    #[error("{fields} were both given: a run's stdin comes from at most one of them")]
    StdinConflict { fields: String },
    /// `stdin_base64` is not standard base64.
    #[error(
        "stdin_base64 is not standard base64 (A-Z a-z 0-9 + /, '=' padding optional, no whitespace): {reason}"
    )]
    StdinBase64Invalid { reason: String },
    /// `timeout_ms` is zero.
    #[error("timeout_ms must be at least 1")]
    TimeoutZero,
    /// More `requested_egress_hosts` than the cap.
    #[error("{count} requested_egress_hosts given, more than the cap of {max}")]
    TooManyEgressHosts { count: usize, max: usize },
    /// `lifetime` was given for a foreground run.
    #[error("lifetime {lifetime} is only meaningful with background: true")]
    LifetimeWithoutBackground { lifetime: String },
    /// A background-process handle that is not 32 lowercase hex digits (handles are
    /// random ids, never pids).
    #[error("handle {id:?} is not a Tierbox handle (32 lowercase hex digits, never a pid)")]
    HandleInvalid { id: String },
    /// `max_bytes` of an output read is 0 or above the cap.
    #[error("max_bytes {bytes} is out of range: between 1 and {max}")]
    ReadSizeInvalid { bytes: usize, max: usize },

    // ---- executable ------------------------------------------------------------------
    /// `command` contains a path separator and the policy does not allow paths.
    #[error(
        "command {command:?} is a path; give a bare executable name (the policy does not allow paths)"
    )]
    CommandIsPath { command: String },
    /// The executable is not in the policy's allowlist.
    #[error("executable {name:?} is not in the policy's allowed_executables{via}")]
    ExecutableNotAllowed { name: String, via: String },
    /// `command` is an absolute path the policy allows, but not one that can run: it is
    /// relative, missing, not a regular file, or has no execute bit.
    #[error("command path {command:?} cannot be used: {reason}")]
    CommandPathInvalid { command: String, reason: String },
    /// The executable was not found in the sandbox PATH.
    #[error("executable {name:?} was not found in the sandbox PATH {path:?}")]
    ExecutableNotFound { name: String, path: String },
    /// The program was found, but no grant of the policy makes it readable in the
    /// sandbox, so it could not be executed there.
    #[error(
        "{program:?} would not be readable in the sandbox: no system path or grant of the \
         policy covers it (grant {dir:?} with filesystem.read_only)"
    )]
    ProgramNotGranted { program: PathBuf, dir: PathBuf },
    /// The program is readable, but what the kernel starts it with — its `#!` interpreter
    /// or its ELF dynamic loader — is not, so its exec would fail in the sandbox.
    #[error(
        "{program:?} is started by {loader:?}, which would not be readable in the sandbox: \
         no system path or grant of the policy covers it (grant {dir:?} with \
         filesystem.read_only)"
    )]
    LoaderNotGranted {
        program: PathBuf,
        loader: PathBuf,
        dir: PathBuf,
    },
    /// The program's `#!` interpreter or ELF dynamic loader does not exist.
    #[error("{program:?} is started by {loader:?}, which does not exist")]
    LoaderMissing { program: PathBuf, loader: PathBuf },
    /// The executable (or a program it wraps) is an interpreter and the policy denies them.
    #[error(
        "{name:?} is an interpreter or shell{via}; the policy denies interpreters \
         (allow_interpreters = false)"
    )]
    InterpreterDenied { name: String, via: String },
    /// An interpreter was given an inline-code flag and the policy denies eval.
    #[error(
        "{interpreter:?} is given the inline-code flag {flag:?} at args[{arg_index}]; the policy denies eval (allow_eval = false)"
    )]
    EvalFlag {
        interpreter: String,
        flag: String,
        arg_index: usize,
    },
    /// An allowed interpreter would read its program text from the request's `stdin`
    /// (no script operand, or `-`), which is inline code by another route.
    #[error(
        "{interpreter:?}{via} would read its program from the request's stdin; the policy \
         denies eval (allow_eval = false)"
    )]
    EvalFromStdin { interpreter: String, via: String },
    /// A wrapper program (`env`, `xargs`, `find -exec`, …) names no program we can check.
    #[error("{wrapper:?} runs a program that cannot be determined from its arguments: {reason}")]
    WrapperUnresolvable { wrapper: String, reason: String },
    /// A program that is not an interpreter is given an option or configuration that makes
    /// it run code the request supplies (a git `-c core.fsmonitor=…` value, tar's
    /// `--to-command`, make's `--eval`), and the policy allows no interpreters or no
    /// inline code.
    #[error(
        "{program:?}{via} is given {route} at args[{arg_index}], which makes it run code the request supplies; the policy allows {allowed}"
    )]
    CodeRoute {
        program: String,
        via: String,
        route: String,
        arg_index: usize,
        allowed: String,
    },

    // ---- workspace scope ---------------------------------------------------------------
    /// The workspace root is missing or not a directory.
    #[error("workspace root {path:?} is unusable: {reason}")]
    WorkspaceInvalid { path: PathBuf, reason: String },
    /// The workspace root is one no run may have: the filesystem root, a system directory,
    /// a home directory itself, or a directory holding Tierbox's own state. The message
    /// ends with what lifts that rule ([`WorkspaceRule::fixes`]).
    #[error("workspace root {path:?} is refused: {rule} (to fix: {})", rule.fix())]
    WorkspaceRefused { path: PathBuf, rule: WorkspaceRule },
    /// A `filesystem.read_only` or `filesystem.writable` entry no tier grants, or a
    /// `filesystem.deny_read` entry that would hide the workspace: the same answer in
    /// every tier, before anything runs.
    #[error("{key} entry {path:?} is refused: {rule}")]
    GrantRefused {
        key: String,
        path: PathBuf,
        rule: String,
    },
    /// An argument names a path outside the workspace that no grant of the policy lets
    /// the run see (or, for a written path, write); `fix` names the grant that does.
    #[error(
        "args[{arg_index}] {arg:?} resolves to {resolved:?}, which the run cannot {access}: it is outside the workspace {workspace:?} and no grant of the policy lets it {access} there (to fix: {fix})"
    )]
    PathOutsideWorkspace {
        arg_index: usize,
        arg: String,
        resolved: PathBuf,
        workspace: PathBuf,
        access: ArgAccess,
        fix: PathFix,
    },
    /// An argument names a path the policy hides (`filesystem.deny_read`), keeps
    /// read-only (`filesystem.protected`) or leaves empty (`filesystem.dev_shm`); `fix`
    /// names the change that lets it through.
    #[error(
        "args[{arg_index}] {arg:?} resolves to {resolved:?}, which the run cannot {access}: {rule} (to fix: {fix})"
    )]
    PathDenied {
        arg_index: usize,
        arg: String,
        resolved: PathBuf,
        access: ArgAccess,
        /// The policy entry that decides, in words.
        rule: String,
        fix: PathFix,
    },
    /// An argument names a host secret or one of Tierbox's own files: hidden in every
    /// tier, and no policy key grants it.
    #[error(
        "args[{arg_index}] {arg:?} resolves to {resolved:?}: {why}; no policy key can grant it"
    )]
    PathSecret {
        arg_index: usize,
        arg: String,
        resolved: PathBuf,
        why: Unreachable,
    },
    /// An argument names a path no policy key lets a run reach: a host device, a write
    /// into `/proc`, `/`, another user's `~`, a remote `file:` URL, a symlink loop.
    #[error(
        "args[{arg_index}] {arg:?} resolves to {resolved:?}, which no policy key lets a run {access}: {why}"
    )]
    PathNotGrantable {
        arg_index: usize,
        arg: String,
        resolved: PathBuf,
        access: ArgAccess,
        why: Unreachable,
    },
    /// An argument names a path in the run's own `/tmp`, and this launch cannot give the
    /// run one (`why`: a Tier B run of an unprivileged supervisor where user namespaces
    /// are refused); the host's `/tmp` stands in only when the policy grants it.
    #[error(
        "args[{arg_index}] {arg:?} names {resolved:?}, in the run's own /tmp, which this tier b run cannot have: {why} (to fix: filesystem.writable += \"/tmp\" to use the host's /tmp, or run in tier c (--tier c) where its namespaces are available)"
    )]
    PathNeedsPrivateTmp {
        arg_index: usize,
        arg: String,
        resolved: PathBuf,
        why: String,
    },
    /// `cwd` resolves outside the workspace.
    #[error("cwd {cwd:?} resolves to {resolved:?}, outside the workspace {workspace:?}")]
    CwdOutsideWorkspace {
        cwd: String,
        resolved: PathBuf,
        workspace: PathBuf,
    },
    /// `cwd` does not exist or is not a directory.
    #[error("cwd {cwd:?} is not an existing directory in the workspace")]
    CwdNotDirectory { cwd: String },
    /// The search for the workspace's nested git repositories, whose git directories are
    /// kept read-only, stopped at a limit: the run would be only partly protected.
    #[error("protected paths would be incomplete: {reason}")]
    ProtectionIncomplete {
        /// The limit, what was counted, and the key that raises it.
        reason: String,
        /// The policy key that raises the limit, when one does.
        key: Option<String>,
    },
    /// The request's `workspace` does not name a subdirectory of the runner's workspace.
    #[error("workspace {workspace:?} is not a subdirectory of the runner's workspace: {reason}")]
    WorkspaceSubdirInvalid { workspace: String, reason: String },

    // ---- environment -------------------------------------------------------------------
    /// A per-call variable is on the deny list (loader, shell and interpreter injection,
    /// proxy settings the runner owns).
    #[error("env {name} is denied: {reason}")]
    EnvDenied { name: String, reason: String },

    // ---- egress ------------------------------------------------------------------------
    /// A host named in the arguments or in `requested_egress_hosts` is not allowlisted.
    #[error(
        "egress denied: host {host} (from {source_desc}) is not in the policy's egress allowlist"
    )]
    EgressHostNotAllowed { host: String, source_desc: String },
    /// A host in `requested_egress_hosts` is not a valid host name or address.
    #[error("requested_egress_hosts entry {host:?} is not a valid host: {reason}")]
    EgressHostInvalid { host: String, reason: String },
    /// A `publish` entry of the request is malformed (`127.0.0.1:HOSTPORT:SANDBOXPORT`,
    /// loopback only, each port once).
    #[error("publish entry {entry:?} cannot be used: {reason}")]
    PublishInvalid { entry: String, reason: String },
    /// A `publish` entry of the request is not one the policy's `egress.publish` lists.
    #[error(
        "publish {entry} is not in the policy's egress.publish (it lists: {allowed}); a request publishes only ports the policy names"
    )]
    PublishNotAllowed { entry: String, allowed: String },
    /// An `egress.unix_sockets` entry names no socket this run can be given (a variable
    /// unset in the supervisor's environment, a missing path, not a socket, a denied
    /// path).
    #[error("egress.unix_sockets entry {entry:?} cannot be used: {reason}")]
    UnixSocketUnusable { entry: String, reason: String },
    /// An `egress.unix_sockets` entry is a socket whose peer controls the host, and the
    /// policy does not set `egress.danger_privileged_sockets`.
    #[error(
        "egress.unix_sockets entry {entry:?} is {path}, whose peer controls the host (a container engine, systemd, the system bus)"
    )]
    UnixSocketPrivileged { entry: String, path: String },
    /// A port a run needs on the host could not be had (a published host port another
    /// process holds). Nothing runs.
    #[error("{key} {port}: {reason}")]
    PortUnavailable {
        key: String,
        port: u16,
        reason: String,
    },

    // ---- limits ------------------------------------------------------------------------
    /// A requested limit is above what the policy allows.
    #[error("{field} = {requested} is above the policy maximum of {max}")]
    LimitAbovePolicy {
        field: String,
        requested: u64,
        max: u64,
    },

    // ---- tier a (wasm) ----------------------------------------------------------------
    /// The module cannot be used: no source or several, missing, too large, outside the
    /// workspace, or not decodable.
    #[error("wasm module {module} cannot be used: {reason}")]
    WasmModuleInvalid { module: String, reason: String },
    /// An inline module was sent and the policy does not accept them.
    #[error(
        "inline wasm modules ({field}) are not accepted by the policy \
         (wasm.allow_inline_modules = false); put the module in the workspace"
    )]
    WasmInlineDenied { field: String },
    /// A requested capability is outside what the policy's `[wasm]` section allows.
    #[error("wasm grant {grant} is denied: {reason}")]
    WasmGrantDenied { grant: String, reason: String },
    /// A Tier A run of a command that the policy maps to no WASI build.
    #[error(
        "{command:?} has no WASI build in the policy's wasm.interpreters (mapped: {mapped}); \
         tier a runs only .wasm/.wat modules from the workspace and mapped interpreters"
    )]
    WasmNotMapped { command: String, mapped: String },
    /// The WASI build an interpreter is mapped to is not on this host.
    #[error(
        "{command:?} maps to {path:?}, which is missing; run `tierbox wasm fetch-runtimes` \
         to install the Python and JavaScript runtimes"
    )]
    WasmRuntimeMissing { command: String, path: PathBuf },

    // ---- workspace -----------------------------------------------------------------------
    /// The request asked for a workspace mode the policy's is stronger than (`direct`
    /// under an `overlay` policy).
    #[error(
        "workspace mode \"{requested}\" is weaker than the policy's workspace.mode \"{policy}\": a request may narrow direct to overlay, never the reverse"
    )]
    WorkspaceModeWidened {
        requested: crate::policy::WorkspaceMode,
        policy: crate::policy::WorkspaceMode,
    },

    /// What the egress proxy needs to terminate TLS could not be had: a credential's
    /// secret (its variable unset, its file missing, not the supervisor's or root's,
    /// writable by others, reached through a symlink, inside a path the run can write,
    /// not a header value), an `egress.upstream_roots` file, or the host's trust store.
    /// Nothing runs without it. `key` names the policy entry (`egress.credentials
    /// "github"`).
    #[error("{key}: {reason}")]
    TerminationUnavailable { key: String, reason: String },

    // ---- tier --------------------------------------------------------------------------
    /// The request asked for a tier weaker than the policy's minimum.
    #[error("tier {requested} is weaker than the policy's minimum tier {minimum}")]
    TierBelowMinimum { requested: String, minimum: String },
    /// No tier at or above the minimum can be enforced on this host.
    #[error("tier {tier} cannot be enforced on this host: {reason}")]
    TierUnavailable { tier: Tier, reason: String },
    /// The request needs a feature the selected tier does not offer.
    #[error("{feature} is not supported in tier {tier}: {reason}")]
    TierUnsupported {
        tier: Tier,
        feature: String,
        reason: String,
    },
}

impl Rejection {
    /// The stable machine code of the rule that rejected the request.
    ///
    /// ```
    /// use tierbox_policy::Rejection;
    /// assert_eq!(Rejection::CommandEmpty.code(), "input.command_empty");
    /// ```
    pub fn code(&self) -> &'static str {
        match self {
            Self::RequestTooLarge { .. } => "input.too_large",
            Self::Malformed { .. } => "input.malformed",
            Self::CommandEmpty => "input.command_empty",
            Self::CommandTooLong { .. } => "input.command_too_long",
            Self::CommandNotBare { .. } => "input.command_not_bare",
            Self::NulByte { .. } => "input.nul_byte",
            Self::TooManyArgs { .. } => "input.too_many_args",
            Self::ArgTooLong { .. } => "input.arg_too_long",
            Self::TooManyEnv { .. } => "input.too_many_env",
            Self::EnvNameInvalid { .. } => "input.env_name_invalid",
            Self::EnvValueTooLong { .. } => "input.env_value_too_long",
            Self::CwdTooLong { .. } => "input.cwd_too_long",
            Self::StdinTooLarge { .. } => "input.stdin_too_large",
            Self::StdinConflict { .. } => "input.stdin_conflict",
            Self::StdinBase64Invalid { .. } => "input.stdin_encoding_invalid",
            Self::TimeoutZero => "input.timeout_zero",
            Self::TooManyEgressHosts { .. } => "input.too_many_egress_hosts",
            Self::LifetimeWithoutBackground { .. } => "input.lifetime_without_background",
            Self::HandleInvalid { .. } => "input.handle_invalid",
            Self::ReadSizeInvalid { .. } => "input.read_size_invalid",
            Self::CommandIsPath { .. } => "exec.command_is_path",
            Self::ExecutableNotAllowed { .. } => "exec.not_allowed",
            Self::CommandPathInvalid { .. } => "exec.command_path_invalid",
            Self::ExecutableNotFound { .. } => "exec.not_found",
            Self::ProgramNotGranted { .. } | Self::LoaderNotGranted { .. } => "exec.not_granted",
            Self::LoaderMissing { .. } => "exec.loader_missing",
            Self::InterpreterDenied { .. } => "exec.interpreter_denied",
            Self::EvalFlag { .. } => "exec.eval_flag",
            Self::EvalFromStdin { .. } => "exec.eval_stdin",
            Self::WrapperUnresolvable { .. } => "exec.wrapper_unresolvable",
            Self::CodeRoute { .. } => "exec.code_route",
            Self::WorkspaceInvalid { .. } => "scope.workspace_invalid",
            Self::WorkspaceRefused { .. } => "scope.workspace_refused",
            Self::GrantRefused { .. } => "scope.grant_refused",
            Self::PathOutsideWorkspace { .. } => "scope.path_outside_workspace",
            Self::PathDenied { .. } => "scope.path_denied",
            Self::PathSecret { .. } => "scope.path_secret",
            Self::PathNotGrantable { .. } => "scope.path_not_grantable",
            Self::PathNeedsPrivateTmp { .. } => "scope.path_needs_private_tmp",
            Self::WorkspaceSubdirInvalid { .. } => "scope.workspace_subdir_invalid",
            Self::CwdOutsideWorkspace { .. } => "scope.cwd_outside_workspace",
            Self::CwdNotDirectory { .. } => "scope.cwd_not_directory",
            Self::ProtectionIncomplete { .. } => "scope.protection_incomplete",
            Self::EnvDenied { .. } => "env.denied",
            Self::EgressHostNotAllowed { .. } => "egress.host_not_allowed",
            Self::EgressHostInvalid { .. } => "egress.host_invalid",
            Self::LimitAbovePolicy { .. } => "limits.above_policy",
            Self::WasmModuleInvalid { .. } => "wasm.module_invalid",
            Self::WasmInlineDenied { .. } => "wasm.inline_denied",
            Self::WasmGrantDenied { .. } => "wasm.grant_denied",
            Self::WasmNotMapped { .. } => "wasm.not_mapped",
            Self::WasmRuntimeMissing { .. } => "wasm.runtime_missing",
            Self::WorkspaceModeWidened { .. } => "workspace.mode_widened",
            Self::TierBelowMinimum { .. } => "tier.below_minimum",
            Self::TierUnavailable { .. } => "tier.unavailable",
            Self::TierUnsupported { .. } => "tier.unsupported",
            Self::TerminationUnavailable { .. } => "egress.termination_unavailable",
            Self::PublishInvalid { .. } => "egress.publish_invalid",
            Self::PublishNotAllowed { .. } => "egress.publish_not_allowed",
            Self::UnixSocketUnusable { .. } => "egress.unix_socket_unusable",
            Self::UnixSocketPrivileged { .. } => "egress.unix_socket_privileged",
            Self::PortUnavailable { .. } => "egress.port_unavailable",
        }
    }

    /// The rejection as a JSON object: `{"code": …, "message": …}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "code": self.code(), "message": self.to_string() })
    }

    /// What would let a rejected request through, for the rejection code `code`: the
    /// policy key to change, or the command that fixes the host; `None` when only the
    /// request itself can change (a malformed or oversized request), and when no policy
    /// key lifts the rule (`scope.path_secret`, `scope.path_not_grantable`: their messages
    /// say so, and why). Takes the code, so a
    /// client holding only a code and a message (the CLI talking to its daemon) can say it
    /// too.
    ///
    /// ```
    /// use tierbox_policy::Rejection;
    ///
    /// let fix = Rejection::fix_for("exec.not_allowed").unwrap();
    /// assert!(fix.contains("exec.allowed_executables"));
    /// assert_eq!(Rejection::fix_for("input.malformed"), None);
    /// ```
    pub fn fix_for(code: &str) -> Option<&'static str> {
        Some(match code {
            "exec.not_allowed" => {
                "to allow it, add the program's name to exec.allowed_executables in the policy"
            }
            "exec.not_found" => {
                "the program is not in the policy's env.path: list its directory there (and grant it with filesystem.read_only)"
            }
            "exec.loader_missing" => {
                "install the interpreter the program's #! line names (or correct that line); no policy can grant a file that does not exist"
            }
            "exec.not_granted" => {
                "grant the directory the message names with filesystem.read_only in the policy"
            }
            "exec.interpreter_denied" | "exec.code_route" => {
                "this runs code the allowlist cannot see: a policy allows it with exec.allow_interpreters = true (and inline code with exec.allow_eval = true)"
            }
            "exec.eval_flag" | "exec.eval_stdin" => {
                "inline code needs exec.allow_eval = true in the policy"
            }
            "scope.path_outside_workspace" => {
                "the message names the grant that lets the path through (filesystem.read_only, or filesystem.writable for a path the argument writes)"
            }
            "scope.path_denied" => {
                "the message names the filesystem.deny_read, filesystem.protected or filesystem.dev_shm change that lets the path through"
            }
            "scope.grant_refused" => "docs/policy.md lists what each filesystem key may name",
            "scope.path_needs_private_tmp" => {
                "grant the host's /tmp with filesystem.writable = [\"/tmp\"], or run in tier c (--tier c) on a host whose user namespaces work"
            }
            "scope.protection_incomplete" => {
                "raise the limit the message names in the policy (filesystem.repo_scan_max_entries, filesystem.max_protected_repos), or run in a smaller workspace"
            }
            "scope.workspace_invalid" => {
                "give a project directory with --workspace (or the policy's workspace_root)"
            }
            "scope.workspace_refused" => {
                "give a project directory with --workspace (or the policy's workspace_root); the message names the rule that refused this one and what else lifts it"
            }
            "env.denied" => {
                "no request may set this variable; the policy's own env.set may, if it must"
            }
            "egress.host_not_allowed" => "add the host to egress.allow in the policy",
            "egress.termination_unavailable" => {
                "the message names the policy entry: give the supervisor the secret its secret key names (the variable in its environment, or the file, owned by it or root, writable by no one else, outside every path the run can write), or correct the egress.upstream_roots file; docs/egress.md says how"
            }
            "egress.publish_not_allowed" => {
                "add the entry to egress.publish in the policy (\"127.0.0.1:HOSTPORT:SANDBOXPORT\")"
            }
            "egress.unix_socket_unusable" => {
                "start the service that owns the socket (ssh-agent sets SSH_AUTH_SOCK), set the variable in the environment tierbox runs in (the CLI's, or the server's when it starts), or correct egress.unix_sockets in the policy"
            }
            "egress.unix_socket_privileged" => {
                "whoever connects to it can run anything as root on the host; only egress.danger_privileged_sockets = true in the policy allows it"
            }
            "egress.port_unavailable" => {
                "another process holds that host port: stop it, or publish on a free port (a port the policy's egress.publish lists)"
            }
            "limits.above_policy" => {
                "the policy's limits are the most a request may ask for: raise the limits.* key in the policy"
            }
            "wasm.inline_denied" => "the policy allows it with wasm.allow_inline_modules = true",
            "wasm.grant_denied" => {
                "the policy's wasm.read_only, wasm.writable and wasm.allow_env bound what a request may grant, and its egress (egress.mode, egress.allow) the network grants; the message names the entry to add"
            }
            "wasm.not_mapped" => "map the interpreter to a WASI build in wasm.interpreters",
            "wasm.runtime_missing" => "`tierbox wasm fetch-runtimes` installs the WASI builds",
            "workspace.mode_widened" => {
                "the policy's workspace.mode is the weakest mode it accepts: change workspace.mode in the policy"
            }
            "tier.below_minimum" => "the policy's tier.minimum is the weakest tier it accepts",
            "tier.unavailable" | "tier.unsupported" => {
                "`tierbox doctor` shows what this host can enforce"
            }
            _ => return None,
        })
    }

    /// Every code, for documentation and for tests that prove each rule is reachable.
    pub const ALL_CODES: &'static [&'static str] = &[
        "input.too_large",
        "input.malformed",
        "input.command_empty",
        "input.command_too_long",
        "input.command_not_bare",
        "input.nul_byte",
        "input.too_many_args",
        "input.arg_too_long",
        "input.too_many_env",
        "input.env_name_invalid",
        "input.env_value_too_long",
        "input.cwd_too_long",
        "input.stdin_too_large",
        "input.stdin_conflict",
        "input.stdin_encoding_invalid",
        "input.timeout_zero",
        "input.too_many_egress_hosts",
        "input.lifetime_without_background",
        "input.handle_invalid",
        "input.read_size_invalid",
        "exec.command_is_path",
        "exec.not_allowed",
        "exec.command_path_invalid",
        "exec.not_found",
        "exec.not_granted",
        "exec.loader_missing",
        "exec.interpreter_denied",
        "exec.eval_flag",
        "exec.eval_stdin",
        "exec.wrapper_unresolvable",
        "exec.code_route",
        "scope.workspace_invalid",
        "scope.workspace_refused",
        "scope.grant_refused",
        "scope.path_outside_workspace",
        "scope.path_denied",
        "scope.path_secret",
        "scope.path_not_grantable",
        "scope.path_needs_private_tmp",
        "scope.cwd_outside_workspace",
        "scope.cwd_not_directory",
        "scope.workspace_subdir_invalid",
        "scope.protection_incomplete",
        "env.denied",
        "egress.host_not_allowed",
        "egress.host_invalid",
        "egress.termination_unavailable",
        "egress.publish_invalid",
        "egress.publish_not_allowed",
        "egress.unix_socket_unusable",
        "egress.unix_socket_privileged",
        "egress.port_unavailable",
        "limits.above_policy",
        "wasm.module_invalid",
        "wasm.inline_denied",
        "wasm.grant_denied",
        "wasm.not_mapped",
        "wasm.runtime_missing",
        "workspace.mode_widened",
        "tier.below_minimum",
        "tier.unavailable",
        "tier.unsupported",
    ];
}

#[cfg(test)]
mod fix_tests {
    use super::Rejection;

    /// What a policy decides has a fix that names the policy key; what only the request
    /// can change has none.
    #[test]
    fn policy_decisions_name_the_key_that_changes_them() {
        for (code, key) in [
            ("exec.not_allowed", "exec.allowed_executables"),
            ("exec.interpreter_denied", "exec.allow_interpreters"),
            ("exec.eval_flag", "exec.allow_eval"),
            ("scope.path_outside_workspace", "filesystem.read_only"),
            ("egress.host_not_allowed", "egress.allow"),
            ("egress.publish_not_allowed", "egress.publish"),
            (
                "egress.unix_socket_privileged",
                "egress.danger_privileged_sockets",
            ),
            ("limits.above_policy", "limits."),
            ("tier.below_minimum", "tier.minimum"),
            ("workspace.mode_widened", "workspace.mode"),
            ("wasm.not_mapped", "wasm.interpreters"),
        ] {
            let fix = Rejection::fix_for(code).unwrap_or_default();
            assert!(fix.contains(key), "{code}: {fix:?}");
        }
        for code in Rejection::ALL_CODES
            .iter()
            .filter(|c| c.starts_with("input."))
        {
            assert_eq!(Rejection::fix_for(code), None, "{code}");
        }
    }
}

#[cfg(test)]
mod size_tests {
    /// Rejections are returned by value everywhere (`Result<_, Rejection>`): clippy's
    /// `result_large_err` refuses an error of 128 bytes or more, and a Windows path is 8
    /// bytes larger than a Unix one, so a variant holding three paths (`scope.`'s
    /// argument refusals) is 24 bytes larger there. 112 bytes here is what passes the
    /// Windows lint (`.ci/run` runs it); a variant that grows fails here first.
    #[test]
    fn a_rejection_stays_small_enough_to_return_on_every_target() {
        let size = std::mem::size_of::<super::Rejection>();
        assert!(size <= 112, "Rejection is {size} bytes");
    }
}
