//! `validate()`: a chain of small checks from a request to a [`Plan`].
//!
//! Order (SPEC §2.1): shape and caps → executable allowlist → interpreter guardrails →
//! workspace scope → environment → egress preflight → limits → tier → filesystem grants
//! → argument paths (checked against the filesystem the plan shows). The first failing
//! check returns its typed [`Rejection`]; nothing runs. One file per rule group:
//!
//! | file | rules |
//! |---|---|
//! | `shape.rs` | hard caps, NUL bytes, bare command |
//! | `stdin.rs` | the one source of stdin, its limit, inline bytes decoded and bounded |
//! | `exec.rs` | allowlist, program resolution in the sandbox PATH |
//! | `interpreter.rs` | interpreter denylist, wrappers, eval flags |
//! | `scope.rs` | workspace root, cwd, the grants every tier shares |
//! | `arg_paths.rs` | path-like arguments against what the run sees (never rewritten) |
//! | `git.rs` | the git redirect surface: protected entries of every repository found |
//! | `env.rs` | environment rebuild and deny list |
//! | `egress.rs` | host extraction and allowlist preflight |
//! | `limits.rs` | timeouts and limits against the policy |
//! | `tier.rs` | requested tier against the policy minimum |

mod arg_paths;
mod egress;
mod env;
mod exec;
mod git;
mod interpreter;
mod limits;
mod loader;
mod repo_scan;
mod scope;
mod shape;
mod stdin;
mod system;
mod tier;
mod wasm;
mod wasm_network;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use arg_paths::{
    ASSIGNMENT_PATH_KEYS, RUN_STDIO_PATHS, SANDBOX_MOUNTS, SCRATCH_ROOTS, sandbox_access,
};
pub use env::{DENIED_ENV_EXACT, DENIED_ENV_PATTERNS, DENIED_ENV_PREFIXES, is_denied_env_name};
pub use git::{COMMONDIR_PLACEHOLDER, DEFAULT_PROTECTED, placeholder_content, run_may_create};
pub use interpreter::{
    GIT_CODE_KEYS, INTERPRETERS, MAX_WRAPPER_DEPTH, WRAPPERS, git_key_runs_code,
    interpreter_base_name,
};
pub use loader::loader_of;
pub use repo_scan::{
    DEFAULT_MAX_PROTECTED_REPOS, DEFAULT_REPO_SCAN_MAX_ENTRIES, KEPT_DIRECTORIES, KEPT_WORKSPACES,
    MAX_MAX_PROTECTED_REPOS, MAX_REPO_SCAN_CACHE_BYTES, MAX_REPO_SCAN_MAX_ENTRIES,
    MAX_SCANNED_PATH_BYTES, PSEUDO_FILESYSTEMS, RACY_MARGIN, REPO_SCAN_CACHE_DIR, RepoScan,
    ScanIncomplete, ScanLimit, ScanLimits, forget_kept_search, scan_repos, scan_repos_in,
};
pub use scope::{MAX_SYMLINK_HOPS, REFUSED_WORKSPACE_DIRS, REFUSED_WORKSPACE_TREES};
pub use system::{
    MAX_CACHE_BYTES, SYSTEM_PATHS_CACHE_FILE, SystemPaths, system_paths, system_paths_in,
};
pub use wasm::{default_runtimes_dir, validate_tier_a, validate_wasm};

use crate::plan::{FsPlan, LimitsPlan, NetworkPlan, OutputPlan, Plan, RedactionPlan, TierPlan};
use crate::policy::Policy;
use crate::rejection::Rejection;
use crate::request::ProcessRunRequest;

/// System paths every run may read, when they exist on the host.
pub const SYSTEM_READ_ONLY_PATHS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];

/// Host secrets under the system paths that no tier exposes, even though their parent is
/// readable: password hashes, sudo rules, host private keys and credential stores. A
/// process that keeps uid 0 (Tier B under a root supervisor) would otherwise read them
/// through plain file permissions.
pub const SYSTEM_SECRET_PATHS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/ssl/private",
    "/etc/security/opasswd",
    "/etc/credstore",
    "/etc/credstore.encrypted",
    "/etc/wireguard",
    "/etc/NetworkManager/system-connections",
    "/etc/openvpn",
    "/etc/docker",
    "/etc/containerd",
    "/etc/kubernetes",
    "/etc/libvirt",
    "/etc/ppp",
    "/etc/krb5.keytab",
];

/// Most entries walked under `/etc` when looking for files an unprivileged user could
/// not read; bounds the cost of a pathological `/etc`.
const MAX_SYSTEM_ENTRIES: usize = 20_000;

/// Deepest directory level walked under `/etc`.
const MAX_SYSTEM_DEPTH: usize = 16;

/// How often the cached expansion re-checks that no walked directory changed. A root-only
/// file created in `/etc` is hidden from runs that start at most this long after it.
pub const SYSTEM_PATHS_RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// The directory whose unreadable entries are carved out (the other system paths hold
/// programs and libraries, which are world-readable).
const SECRETS_ROOT: &str = "/etc";

/// What validation needs to know about the host it runs on.
#[derive(Debug, Clone)]
pub struct ValidateContext {
    /// The workspace root to use (the CLI's `--workspace`, else the policy's, else `.`).
    pub workspace: PathBuf,
    /// The supervisor's environment, source of `env.pass` and `env.sensitive` values.
    pub supervisor_env: BTreeMap<String, String>,
    /// Where relative `wasm.interpreters` paths are found (see [`default_runtimes_dir`]).
    pub runtimes_dir: PathBuf,
    /// The supervisor's state directory (signing key, module cache, spill files), which no
    /// workspace may contain. `None`: not known to the caller (nothing is checked).
    pub state_dir: Option<PathBuf>,
}

impl ValidateContext {
    /// A context for `workspace` with the current process's (UTF-8) environment.
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        let supervisor_env = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        Self::of(workspace.into(), supervisor_env)
    }

    fn of(workspace: PathBuf, supervisor_env: BTreeMap<String, String>) -> Self {
        let runtimes_dir = default_runtimes_dir(&supervisor_env);
        Self {
            workspace,
            supervisor_env,
            runtimes_dir,
            state_dir: None,
        }
    }

    /// A context for `workspace` with the variables of the current process's (UTF-8)
    /// environment that validating under `policy` reads ([`supervisor_env_names`]), and
    /// no others: validation behaves as with [`ValidateContext::new`] and skips copying
    /// the rest of the environment (a supervisor started from a build tool or a shell
    /// carries hundreds of variables).
    ///
    /// ```
    /// use tierbox_policy::{Policy, ValidateContext};
    ///
    /// let policy = Policy::builtin_default();
    /// let ctx = ValidateContext::for_policy("/tmp", &policy);
    /// assert!(ctx.supervisor_env.keys().all(|k| {
    ///     tierbox_policy::validate::supervisor_env_names(&policy).contains(k)
    /// }));
    /// ```
    pub fn for_policy(workspace: impl Into<PathBuf>, policy: &Policy) -> Self {
        let supervisor_env = supervisor_env_names(policy)
            .into_iter()
            .filter_map(|name| {
                let value = std::env::var_os(&name)?.into_string().ok()?;
                Some((name, value))
            })
            .collect();
        Self::of(workspace.into(), supervisor_env)
    }

    /// The same context with the supervisor's state directory, which the workspace may
    /// not contain.
    pub fn with_state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state_dir = Some(dir.into());
        self
    }

    /// The same context with an explicit supervisor environment (for tests and servers).
    pub fn with_env(mut self, env: BTreeMap<String, String>) -> Self {
        self.runtimes_dir = default_runtimes_dir(&env);
        self.supervisor_env = env;
        self
    }

    /// The same context with an explicit runtimes directory.
    pub fn with_runtimes_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.runtimes_dir = dir.into();
        self
    }

    fn home(&self) -> Option<PathBuf> {
        self.supervisor_env
            .get("HOME")
            .filter(|h| h.starts_with('/'))
            .map(PathBuf::from)
    }
}

/// The part after the home of a `~`, `~/…`, `$HOME` or `$HOME/…` path (`""` for the home
/// itself); `None` for any other path.
pub(crate) fn home_relative(path: &str) -> Option<&str> {
    for home in ["~", "$HOME"] {
        if let Some(rest) = path.strip_prefix(home) {
            if rest.is_empty() {
                return Some("");
            }
            if let Some(rest) = rest.strip_prefix('/') {
                return Some(rest);
            }
        }
    }
    None
}

/// Every variable of the supervisor's environment that validation may read under
/// `policy`: `HOME` (`~` in paths), `TIERBOX_RUNTIMES_DIR` and `XDG_DATA_HOME` (where
/// Tier A runtimes are found), and the names in `env.pass`, `env.sensitive` and
/// `wasm.allow_env`. Two supervisors whose values of these agree validate a request alike
/// (with the same policy, workspace and state directory).
///
/// ```
/// let policy = tierbox_policy::Policy::builtin_default();
/// let names = tierbox_policy::validate::supervisor_env_names(&policy);
/// assert!(names.contains("HOME"));
/// ```
pub fn supervisor_env_names(policy: &Policy) -> std::collections::BTreeSet<String> {
    ["HOME", "TIERBOX_RUNTIMES_DIR", "XDG_DATA_HOME"]
        .into_iter()
        .map(str::to_owned)
        .chain(policy.env.pass.iter().cloned())
        .chain(policy.env.sensitive.iter().cloned())
        .chain(policy.wasm.allow_env.iter().cloned())
        .chain(
            policy
                .egress
                .unix_sockets
                .iter()
                .filter_map(|e| e.parse::<crate::unix_sockets::SocketEntry>().ok())
                .filter_map(|e| e.variable().map(str::to_owned)),
        )
        .collect()
}

/// The stdin fields of a `process_run` request.
pub(crate) fn stdin_fields(req: &ProcessRunRequest) -> stdin::StdinFields<'_> {
    stdin::StdinFields {
        text: req.stdin.as_deref(),
        base64: req.stdin_base64.as_deref(),
        limit_bytes: req.stdin_limit_bytes,
        stream: req.stdin_stream,
        background: req.background,
    }
}

/// Validates `req` against `policy` and resolves it into a [`Plan`].
///
/// See the module documentation for the order of checks.
pub fn validate(
    policy: &Policy,
    req: &ProcessRunRequest,
    ctx: &ValidateContext,
) -> Result<Plan, Rejection> {
    shape::check(req)?;
    let stdin = stdin::resolve(policy.limits.stdin_bytes, stdin_fields(req))?;
    // A denied interpreter is reported as such even when it is also not allowlisted: the
    // more specific rule tells the caller that allowlisting alone would not help.
    if !policy.exec.allow_interpreters
        && let Some(base) = interpreter_base_name(&req.command)
        && !matches!(base, "busybox" | "toybox")
    {
        return Err(Rejection::InterpreterDenied {
            name: req.command.clone(),
            via: String::new(),
        });
    }
    let path = env::expanded_path(&policy.env.path, ctx);
    let program = exec::resolve_program(&policy.exec, &req.command, &path)?;
    let inline_code = interpreter::check(
        &policy.exec,
        &req.command,
        &program,
        &req.args,
        &path,
        stdin.given(),
    )?;
    let own = scope::own_paths(policy, ctx);
    let workspace = scope::workspace_root(policy, ctx, &own)?;
    let workspace = scope::narrow_workspace(&workspace, req.workspace.as_deref())?;
    let cwd = scope::resolve_cwd(&workspace, req.cwd.as_deref())?;
    let mut env = env::build(&policy.env, req, ctx)?;
    let mut network = egress::check(&policy.egress, req, &req.command)?;
    let (mut limits, background) = limits::resolve(policy, req)?;
    limits.stdin_bytes = stdin.limit_bytes;
    let tier = tier::check(policy, req)?;
    let workspace_mode = tier::workspace_mode(policy, req, &tier)?;

    let mut argv = Vec::with_capacity(req.args.len() + 1);
    argv.push(req.command.clone());
    argv.extend(req.args.iter().cloned());

    let sensitive_values = policy
        .env
        .sensitive
        .iter()
        .filter_map(|name| ctx.supervisor_env.get(name))
        .filter(|v| !v.is_empty())
        .cloned()
        .collect();

    let mut filesystem = filesystem_plan(policy, ctx, &workspace, &own)?;
    program_is_granted(&program, &workspace, &filesystem)?;
    network.unix_sockets = egress::unix_sockets(&policy.egress, ctx, &filesystem.deny_read)?;
    // An entry that is a variable tells the program where its socket is.
    for grant in &network.unix_sockets {
        if let Some(name) = &grant.variable {
            env.retain(|(k, _)| k != name);
            env.push((name.clone(), grant.path.to_string_lossy().into_owned()));
        }
    }
    filesystem.private_home = !home_is_granted(&env, &filesystem, &workspace);
    // A HOME the runs of this workspace share; an overlay run's writes would not persist,
    // so it keeps its private one.
    if let Some(rel) = &policy.env.workspace_home
        && workspace_mode == crate::policy::WorkspaceMode::Direct
    {
        let home = workspace.join(rel);
        env.retain(|(k, _)| k != "HOME");
        env.push(("HOME".to_owned(), home.to_string_lossy().into_owned()));
        filesystem.private_home = false;
        filesystem.workspace_home = Some(home);
    }
    let run_home = match env.iter().find(|(k, _)| k == "HOME") {
        Some((_, home)) if !filesystem.private_home => {
            arg_paths::RunHome::At(std::fs::canonicalize(home).unwrap_or_else(|_| home.into()))
        }
        _ => arg_paths::RunHome::Private,
    };
    if filesystem.private_home {
        env.retain(|(k, _)| k != "HOME");
    }
    // After the filesystem plan, so that an argument is judged by what the run sees.
    let visible = arg_paths::Visible::new(
        &workspace,
        &filesystem,
        &policy.filesystem,
        ctx.home().as_deref(),
        run_home,
        &own,
    )
    .with_scratch(SCRATCH_ROOTS);
    let mut text_args = inline_code;
    text_args.extend(arg_paths::link_targets(&req.command, &program, &req.args));
    filesystem.scratch_args = arg_paths::check_args(&visible, &cwd, &req.args, &text_args)?;

    Ok(Plan {
        program,
        argv,
        env,
        cwd,
        filesystem,
        stdin: stdin.data,
        stdin_streamed: stdin.streamed,
        redaction: RedactionPlan {
            enabled: policy.redaction.enabled,
            sensitive_names: policy.env.sensitive.clone(),
            sensitive_values,
        },
        background,
        workspace_mode,
        keep_changes_for_secs: (workspace_mode == crate::policy::WorkspaceMode::Overlay)
            .then_some(policy.workspace.keep_changes_for_secs),
        keep_changes_caps: (workspace_mode == crate::policy::WorkspaceMode::Overlay)
            .then(|| policy.workspace.keep_caps()),
        ..grantless_plan(policy, workspace, network, limits, tier)
    })
}

/// The program must be readable in the sandbox (a system path, the workspace or a grant,
/// not hidden), or its exec would fail there with nothing but `EACCES`/`ENOENT`: refused
/// here instead, naming the path and the key that grants it. Most programs are under a
/// system root, checked first without building the whole model.
///
/// The same holds for what starts a program outside the system roots: its `#!`
/// interpreter or ELF dynamic loader ([`loader_of`]), which the kernel opens at `execve`.
fn program_is_granted(program: &Path, workspace: &Path, fs: &FsPlan) -> Result<(), Rejection> {
    let system = |path: &Path| {
        let under = |roots: &[PathBuf]| roots.iter().any(|r| path.starts_with(r));
        under(&fs.system_roots) && !under(&fs.system_hidden) && !under(&fs.deny_read)
    };
    if system(program) {
        return Ok(());
    }
    let model = crate::access::AccessModel::new(workspace, fs);
    let readable = |path: &Path| model.access(path) != crate::access::Access::None;
    let dir = |path: &Path| path.parent().unwrap_or(path).to_path_buf();
    if !readable(program) {
        return Err(Rejection::ProgramNotGranted {
            program: program.to_path_buf(),
            dir: dir(program),
        });
    }
    match loader_of(program) {
        Some(loader) if !loader.exists() => Err(Rejection::LoaderMissing {
            program: program.to_path_buf(),
            loader,
        }),
        Some(loader) if !system(&loader) && !readable(&loader) => {
            Err(Rejection::LoaderNotGranted {
                program: program.to_path_buf(),
                dir: dir(&loader),
                loader,
            })
        }
        _ => Ok(()),
    }
}

/// What `policy`'s filesystem grants resolve to in `ctx`'s workspace, as a [`Plan`] of
/// no program (empty `program` and `argv`, no environment, the policy's default limits
/// and tier, a private home): for checks that look only at the filesystem, such as
/// `tierbox policy check`, which asks each backend what it would refuse at launch.
///
/// ```
/// use tierbox_policy::{Policy, ValidateContext, validate::grants_plan};
///
/// let ws = tempfile::tempdir().unwrap();
/// let mut policy = Policy::builtin_default();
/// policy.filesystem.writable = vec!["/dev".to_owned()];
/// let err = grants_plan(&policy, &ValidateContext::new(ws.path())).unwrap_err();
/// assert_eq!(err.code(), "scope.grant_refused");
/// ```
pub fn grants_plan(policy: &Policy, ctx: &ValidateContext) -> Result<Plan, Rejection> {
    let req = ProcessRunRequest::default();
    let own = scope::own_paths(policy, ctx);
    let workspace = scope::workspace_root(policy, ctx, &own)?;
    let network = egress::check(&policy.egress, &req, &req.command)?;
    let (limits, _) = limits::resolve(policy, &req)?;
    let tier = tier::check(policy, &req)?;
    let mut filesystem = filesystem_plan(policy, ctx, &workspace, &own)?;
    filesystem.private_home = true;
    Ok(Plan {
        filesystem,
        ..grantless_plan(policy, workspace, network, limits, tier)
    })
}

/// What a run of `policy` would see of its workspace, as a [`Plan`] of no program (see
/// [`grants_plan`]): the runner's workspace (`ctx.workspace`) after the scope rules,
/// narrowed to `sub` as a request's `workspace` narrows it (plain names, no symlink on
/// the way), with the filesystem grants, protected paths and denials resolved there, and
/// the workspace mode a request's `workspace_mode` (`mode`) asks for, never widened. For
/// what acts on the workspace for an agent without running a program (the runner's file
/// face), so that it answers to the rules a run answers to.
///
/// ```
/// use tierbox_policy::{Policy, ValidateContext, WorkspaceMode, validate::workspace_plan};
///
/// let ws = tempfile::tempdir().unwrap();
/// std::fs::create_dir(ws.path().join("app")).unwrap();
/// let policy = Policy::builtin_default();
/// let ctx = ValidateContext::new(ws.path());
/// let plan = workspace_plan(&policy, &ctx, Some("app"), None).unwrap();
/// assert!(plan.workspace.ends_with("app"));
/// assert!(plan.filesystem.protected.contains(&plan.workspace.join(".git")));
/// let err = workspace_plan(&policy, &ctx, Some("../etc"), None).unwrap_err();
/// assert_eq!(err.code(), "scope.workspace_subdir_invalid");
/// let overlay = workspace_plan(&policy, &ctx, None, Some(WorkspaceMode::Overlay)).unwrap();
/// assert_eq!(overlay.workspace_mode, WorkspaceMode::Overlay);
/// ```
pub fn workspace_plan(
    policy: &Policy,
    ctx: &ValidateContext,
    sub: Option<&str>,
    mode: Option<crate::policy::WorkspaceMode>,
) -> Result<Plan, Rejection> {
    let workspace_mode = tier::asked_mode(policy, mode)?;
    let req = ProcessRunRequest::default();
    let own = scope::own_paths(policy, ctx);
    let workspace = scope::workspace_root(policy, ctx, &own)?;
    let workspace = scope::narrow_workspace(&workspace, sub)?;
    let network = egress::check(&policy.egress, &req, &req.command)?;
    let (limits, _) = limits::resolve(policy, &req)?;
    let tier = tier::check(policy, &req)?;
    let mut filesystem = filesystem_plan(policy, ctx, &workspace, &own)?;
    filesystem.private_home = true;
    let overlay = workspace_mode == crate::policy::WorkspaceMode::Overlay;
    Ok(Plan {
        filesystem,
        workspace_mode,
        keep_changes_for_secs: overlay.then_some(policy.workspace.keep_changes_for_secs),
        keep_changes_caps: overlay.then(|| policy.workspace.keep_caps()),
        ..grantless_plan(policy, workspace, network, limits, tier)
    })
}

/// A [`Plan`] of the policy's output rules, in `workspace`, with the given network,
/// limits and tier; the rest is empty (no program, environment, grants or stdin) for the
/// caller to fill in.
fn grantless_plan(
    policy: &Policy,
    workspace: PathBuf,
    network: NetworkPlan,
    limits: LimitsPlan,
    tier: TierPlan,
) -> Plan {
    Plan {
        program: PathBuf::new(),
        argv: Vec::new(),
        env: Vec::new(),
        cwd: workspace.clone(),
        workspace,
        workspace_mode: policy.workspace.mode,
        keep_changes_for_secs: (policy.workspace.mode == crate::policy::WorkspaceMode::Overlay)
            .then_some(policy.workspace.keep_changes_for_secs),
        keep_changes_caps: (policy.workspace.mode == crate::policy::WorkspaceMode::Overlay)
            .then(|| policy.workspace.keep_caps()),
        filesystem: FsPlan::default(),
        network,
        limits,
        output: OutputPlan {
            max_bytes: policy.output.max_bytes,
            mode: policy.output.mode,
            spill: policy.output.spill,
            spill_keep_secs: policy.output.spill_keep_secs,
            spill_total_bytes: policy.output.spill_total_bytes,
        },
        stdin: None,
        stdin_streamed: false,
        tier,
        redaction: RedactionPlan::default(),
        background: None,
    }
}

/// Whether the `HOME` the child would get is inside a path the run may use (the
/// workspace, or a declared read-only or writable path).
fn home_is_granted(env: &[(String, String)], fs: &FsPlan, workspace: &Path) -> bool {
    let Some((_, home)) = env.iter().find(|(k, _)| k == "HOME") else {
        return false;
    };
    let Ok(home) = std::fs::canonicalize(home) else {
        return false;
    };
    std::iter::once(workspace)
        .chain(fs.read_only.iter().map(PathBuf::as_path))
        .chain(fs.writable.iter().map(PathBuf::as_path))
        .any(|g| home.starts_with(g))
}

/// Expands `~/` and keeps the paths that exist, canonicalised (a policy may list a
/// toolchain that is not installed on every host), checked by [`scope::check_grant`]:
/// a device every tier provides is dropped, a path no tier grants refuses the run.
fn existing_paths(
    key: &str,
    list: &[String],
    home: Option<&Path>,
    workspace: &Path,
    own: &[scope::OwnPath],
) -> Result<Vec<PathBuf>, Rejection> {
    let mut out = Vec::new();
    for p in list {
        let path = match p.strip_prefix("~/") {
            Some(rest) => match home {
                Some(h) => h.join(rest),
                None => continue,
            },
            None => PathBuf::from(p),
        };
        let Ok(path) = std::fs::canonicalize(path) else {
            continue;
        };
        if scope::check_grant(key, &path, workspace, own)? {
            out.push(path);
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The system read-only paths as grantable entries, with host secrets carved out
/// ([`SystemPaths::grants`]).
pub fn system_read_only_paths() -> Vec<PathBuf> {
    system_paths().grants.to_vec()
}

fn filesystem_plan(
    policy: &Policy,
    ctx: &ValidateContext,
    workspace: &Path,
    own: &[scope::OwnPath],
) -> Result<FsPlan, Rejection> {
    let home = ctx.home();
    let fs = &policy.filesystem;
    let mut deny_read: Vec<PathBuf> = fs
        .deny_read
        .iter()
        .filter_map(|p| match p.strip_prefix("~/") {
            Some(rest) => home.as_ref().map(|h| h.join(rest)),
            None => Some(PathBuf::from(p)),
        })
        .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
        .collect();
    if let Some(d) = deny_read.iter().find(|d| workspace.starts_with(d)) {
        return Err(Rejection::GrantRefused {
            key: "filesystem.deny_read".to_owned(),
            path: d.clone(),
            rule: format!(
                "it would hide the workspace {} (a denied path hides everything below it)",
                workspace.display()
            ),
        });
    }
    let system = system_paths_in(ctx.state_dir.as_deref());
    // Tierbox's own secret files under a system path (a state directory in /etc) are
    // hidden there like the host's secrets; every other grant of them is refused.
    deny_read.extend(
        own.iter()
            .filter_map(scope::OwnPath::secret_path)
            .filter(|p| system.roots.iter().any(|r| p.starts_with(r)))
            .map(Path::to_path_buf),
    );
    // Denied paths are carved out of every grant (as host secrets are out of /etc), so a
    // tier that can only grant — landlock — enforces them too; see `crate::access`.
    let carve = |grants: Vec<PathBuf>| -> Vec<PathBuf> {
        if deny_read.is_empty() {
            return grants;
        }
        crate::access::carve(&grants, &deny_read, crate::access::Links::Never)
    };
    let repos = scan_repos_in(workspace, ScanLimits::of(fs), ctx.state_dir.as_deref())
        .map_err(|e| {
            let key = match &e {
                ScanIncomplete::Limit { limit, .. } => limit.key().map(str::to_owned),
                ScanIncomplete::Unreadable { .. } => None,
            };
            Rejection::ProtectionIncomplete {
                reason: e.to_string(),
                key,
            }
        })?
        .repos;
    // Denial wins (`crate::access`): a grant inside a denied path grants nothing.
    let outside_denials = |mut grants: Vec<PathBuf>| {
        grants.retain(|g| !deny_read.iter().any(|d| g.starts_with(d)));
        grants
    };
    let read_only_roots = outside_denials(existing_paths(
        "filesystem.read_only",
        &fs.read_only,
        home.as_deref(),
        workspace,
        own,
    )?);
    let writable_roots = outside_denials(existing_paths(
        "filesystem.writable",
        &fs.writable,
        home.as_deref(),
        workspace,
        own,
    )?);
    Ok(FsPlan {
        system_read_only: if deny_read.is_empty() {
            system.grants
        } else {
            carve(system.grants.to_vec()).into()
        },
        system_roots: system.roots,
        system_hidden: system.hidden,
        read_only: carve(read_only_roots.clone()),
        // Writable grants are carved around the read-only grants inside them too: landlock
        // would otherwise let the writable rule reach into them.
        writable: {
            let mut narrower = deny_read.clone();
            narrower.extend(
                read_only_roots
                    .iter()
                    .filter(|r| writable_roots.iter().any(|w| r.starts_with(w) && *r != w))
                    .cloned(),
            );
            if narrower.is_empty() {
                writable_roots.clone()
            } else {
                crate::access::carve(&writable_roots, &narrower, crate::access::Links::Never)
            }
        },
        read_only_roots,
        writable_roots,
        deny_read,
        protected: git::protected_paths(workspace, &fs.protected, &repos),
        dev_shm: fs.dev_shm,
        git_repos: repos,
        repo_scan: ScanLimits::of(fs),
        private_home: false,
        workspace_home: None,
        scratch_args: Vec::new(),
    })
}

#[cfg(test)]
mod system_paths_tests {
    use super::*;

    #[test]
    fn deny_read_is_carved_out_of_the_grants() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let tools = std::fs::canonicalize(dir.path())
            .unwrap_or_else(|e| panic!("{e}"))
            .join("tools");
        std::fs::create_dir_all(tools.join("bin")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(tools.join("secret.key"), "k").unwrap_or_else(|e| panic!("{e}"));
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap_or_else(|e| panic!("{e}"));
        let mut policy = Policy::default();
        policy.filesystem.read_only = vec![tools.display().to_string()];
        policy.filesystem.deny_read = vec![tools.join("secret.key").display().to_string()];
        let ctx = ValidateContext::new(&ws).with_env(BTreeMap::new());
        let own = scope::own_paths(&policy, &ctx);
        let fs = filesystem_plan(&policy, &ctx, &ws, &own).unwrap();
        let granted = |p: &Path| fs.read_only.iter().any(|g| p.starts_with(g));
        assert!(!granted(&tools.join("secret.key")), "{:?}", fs.read_only);
        assert!(granted(&tools.join("bin")), "{:?}", fs.read_only);
    }

    #[test]
    fn host_secrets_are_carved_out_and_ordinary_files_kept() {
        let paths = system_read_only_paths();
        let granted = |p: &str| paths.iter().any(|g| Path::new(p).starts_with(g));
        for secret in [
            "/etc/shadow",
            "/etc/gshadow",
            "/etc/sudoers",
            "/etc/ssl/private",
        ] {
            assert!(!granted(secret), "{secret} must not be granted");
        }
        if Path::new("/etc/passwd").exists() {
            assert!(granted("/etc/passwd"));
        }
        assert!(granted("/usr/bin"));
    }

    #[test]
    fn files_others_cannot_read_are_hidden() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let open = dir.path().join("open");
        let closed = dir.path().join("closed");
        std::fs::write(&open, "x").unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(&closed, "x").unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o600))
            .unwrap_or_else(|e| panic!("{e}"));
        let (mut hidden, mut walked, mut budget) = (Vec::new(), Vec::new(), 100);
        system::find_unreadable(dir.path(), 0, &mut budget, &mut hidden, &mut walked);
        assert_eq!(hidden, std::slice::from_ref(&closed));
        let out = crate::access::carve(
            &[dir.path().to_path_buf()],
            &hidden,
            crate::access::Links::UnlessHidden,
        );
        assert_eq!(out, [open]);
    }

    #[test]
    fn a_context_of_the_policy_names_validates_like_the_whole_environment() {
        let ws = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut policy = Policy::builtin_default();
        policy.exec.allowed_executables = vec!["true".to_owned()];
        // Variables every test process has, passed and marked sensitive.
        policy.env.pass = vec!["PATH".to_owned(), "HOME".to_owned()];
        policy.env.sensitive = vec!["HOME".to_owned()];
        let req = ProcessRunRequest::new("true");
        let whole = ValidateContext::new(ws.path());
        let narrow = ValidateContext::for_policy(ws.path(), &policy);
        let names = supervisor_env_names(&policy);
        assert!(narrow.supervisor_env.keys().all(|k| names.contains(k)));
        assert!(narrow.supervisor_env.contains_key("HOME"));
        assert_eq!(narrow.runtimes_dir, whole.runtimes_dir);
        let a = validate(&policy, &req, &whole).unwrap_or_else(|e| panic!("{e}"));
        let b = validate(&policy, &req, &narrow).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
    }
}
