//! Tier A validation: a `wasm_run` request, or a `process_run` of an interpreter mapped to
//! a WASI build, into a [`WasmPlan`].
//!
//! Order, as for process runs: shape and caps → module → grants (network, workspace,
//! directories, environment) → limits. Every grant is checked against the policy's
//! `[wasm]` section and a grant outside it is a [`Rejection::WasmGrantDenied`] naming it.

use std::path::{Path, PathBuf};

use super::{ValidateContext, scope};
use crate::plan::{OutputPlan, RedactionPlan};
use crate::policy::Policy;
use crate::rejection::Rejection;
use crate::request::*;
use crate::wasm::*;

/// Validates a `wasm_run` request and resolves it into a [`WasmPlan`].
///
/// ```
/// use tierbox_policy::{Policy, ValidateContext};
/// use tierbox_policy::validate::validate_wasm;
/// use tierbox_policy::wasm::WasmRunRequest;
///
/// let ws = tempfile::tempdir().unwrap();
/// std::fs::write(ws.path().join("tool.wasm"), b"\0asm\x01\0\0\0").unwrap();
/// let policy = Policy::default();
/// let ctx = ValidateContext::new(ws.path());
///
/// let plan = validate_wasm(&policy, &WasmRunRequest::module("tool.wasm"), &ctx).unwrap();
/// assert_eq!(plan.argv, ["tool.wasm"]);
/// assert_eq!(plan.preopens[0].guest, "/workspace");
///
/// let mut req = WasmRunRequest::module("tool.wasm");
/// req.env.insert("TOKEN".into(), "x".into());
/// let err = validate_wasm(&policy, &req, &ctx).unwrap_err();
/// assert_eq!(err.code(), "wasm.grant_denied");
/// ```
pub fn validate_wasm(
    policy: &Policy,
    req: &WasmRunRequest,
    ctx: &ValidateContext,
) -> Result<WasmPlan, Rejection> {
    check_common_shape(&req.args, &req.env, req.timeout_ms)?;
    let stdin = super::stdin::resolve(
        policy.limits.stdin_bytes,
        super::stdin::StdinFields {
            text: req.stdin.as_deref(),
            base64: req.stdin_base64.as_deref(),
            limit_bytes: req.stdin_limit_bytes,
            stream: req.stdin_stream,
            background: false,
        },
    )?;
    if req.grants.fs.len() > MAX_FS_GRANTS {
        return Err(grant_denied(
            "fs",
            format!(
                "{} directories asked for, more than the cap of {MAX_FS_GRANTS}",
                req.grants.fs.len()
            ),
        ));
    }
    if req.grants.env.len() > MAX_ENV_GRANTS {
        return Err(grant_denied(
            "env",
            format!(
                "{} names asked for, more than the cap of {MAX_ENV_GRANTS}",
                req.grants.env.len()
            ),
        ));
    }
    let entrypoint = req
        .entrypoint
        .clone()
        .unwrap_or_else(|| "_start".to_owned());
    if entrypoint.is_empty() || entrypoint.len() > MAX_ENTRYPOINT_BYTES || entrypoint.contains('\0')
    {
        return Err(Rejection::WasmModuleInvalid {
            module: "entrypoint".to_owned(),
            reason: format!("entrypoint {entrypoint:?} is empty, too long or contains NUL"),
        });
    }
    let workspace = scope::workspace_root(policy, ctx, &scope::own_paths(policy, ctx))?;
    let (module, name) = module_source(policy, req, &workspace)?;
    let network = super::wasm_network::grants(&policy.egress, &req.grants.network)?;
    let mut argv = Vec::with_capacity(req.args.len() + 1);
    argv.push(name);
    argv.extend(req.args.iter().cloned());
    let mut plan = base_plan(policy, ctx, workspace, module, argv, req.grants.workspace)?;
    plan.entrypoint = entrypoint;
    plan.network = network;
    plan.env = guest_env(policy, ctx, &req.env, &req.grants.env)?;
    for grant in &req.grants.fs {
        plan.preopens
            .push(fs_grant(policy, ctx, &plan.workspace, grant)?);
    }
    set_stdin(&mut plan, stdin);
    plan.limits.wall_timeout_ms = timeout(policy, req.timeout_ms)?;
    Ok(plan)
}

fn set_stdin(plan: &mut WasmPlan, stdin: super::stdin::ResolvedStdin) {
    plan.stdin = stdin.data;
    plan.stdin_streamed = stdin.streamed;
    plan.limits.stdin_bytes = stdin.limit_bytes;
}

/// Validates a `process_run` request for Tier A. `command` is either an interpreter the
/// policy maps to a WASI build (`wasm.interpreters`), which then runs with the request's
/// arguments and the workspace preopened, or the path of a `.wasm`/`.wat` module in the
/// workspace (validated as a `wasm_run` request with no extra grants). Interpreter
/// guardrails do not apply: the guest has no host system calls, so `python3 -c …` is as
/// contained as a script.
///
/// ```
/// use tierbox_policy::{Policy, ProcessRunRequest, ValidateContext};
/// use tierbox_policy::validate::validate_tier_a;
///
/// let ws = tempfile::tempdir().unwrap();
/// let runtimes = tempfile::tempdir().unwrap();
/// std::fs::write(runtimes.path().join("python.wasm"), b"\0asm\x01\0\0\0").unwrap();
/// let policy = Policy::from_toml(
///     "version = 1\n[wasm.interpreters]\npython3 = \"python.wasm\"\n",
/// ).unwrap();
/// let ctx = ValidateContext::new(ws.path()).with_runtimes_dir(runtimes.path());
///
/// let mut req = ProcessRunRequest::new("python3");
/// req.args = vec!["-c".into(), "print(1)".into()];
/// let plan = validate_tier_a(&policy, &req, &ctx).unwrap();
/// assert_eq!(plan.argv, ["python3", "-c", "print(1)"]);
///
/// let err = validate_tier_a(&policy, &ProcessRunRequest::new("ls"), &ctx);
/// assert_eq!(err.unwrap_err().code(), "wasm.not_mapped");
/// ```
pub fn validate_tier_a(
    policy: &Policy,
    req: &ProcessRunRequest,
    ctx: &ValidateContext,
) -> Result<WasmPlan, Rejection> {
    super::shape::check(req)?;
    let unsupported = |feature: &str, reason: &str| Rejection::TierUnsupported {
        tier: crate::policy::Tier::A,
        feature: feature.to_owned(),
        reason: reason.to_owned(),
    };
    if req.background {
        return Err(unsupported(
            "background",
            "tier a runs to completion; start background processes in tier b or c",
        ));
    }
    if let Some(cwd) = req
        .cwd
        .as_deref()
        .filter(|c| !matches!(*c, "" | "." | "./"))
    {
        return Err(unsupported(
            &format!("cwd {cwd:?}"),
            "WASI guests resolve relative paths against the workspace root; pass paths \
             relative to it",
        ));
    }
    if !req.requested_egress_hosts.is_empty() {
        return Err(network_unsupported(&req.requested_egress_hosts.join(", ")));
    }
    let mapped = || {
        let names: Vec<&str> = policy
            .wasm
            .interpreters
            .keys()
            .map(String::as_str)
            .collect();
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    };
    let Some(target) = policy.wasm.interpreters.get(&req.command) else {
        if req.command.ends_with(".wasm") || req.command.ends_with(".wat") {
            let module = WasmRunRequest {
                module: Some(req.command.clone()),
                args: req.args.clone(),
                env: req.env.clone(),
                stdin: req.stdin.clone(),
                stdin_base64: req.stdin_base64.clone(),
                stdin_limit_bytes: req.stdin_limit_bytes,
                stdin_stream: req.stdin_stream,
                timeout_ms: req.timeout_ms,
                ..WasmRunRequest::default()
            };
            return validate_wasm(policy, &module, ctx);
        }
        return Err(Rejection::WasmNotMapped {
            command: req.command.clone(),
            mapped: mapped(),
        });
    };
    let path = match target.strip_prefix("~/") {
        Some(rest) => ctx.home().map(|h| h.join(rest)),
        None if target.starts_with('/') => Some(PathBuf::from(target)),
        None => Some(ctx.runtimes_dir.join(target)),
    };
    let missing = |path: PathBuf| Rejection::WasmRuntimeMissing {
        command: req.command.clone(),
        path,
    };
    let path = path.ok_or_else(|| missing(PathBuf::from(target)))?;
    let meta = std::fs::metadata(&path).map_err(|_| missing(path.clone()))?;
    if !meta.is_file() {
        return Err(missing(path));
    }
    module_size(&path.display().to_string(), meta.len(), policy)?;
    let workspace = scope::workspace_root(policy, ctx, &scope::own_paths(policy, ctx))?;
    let mut argv = Vec::with_capacity(req.args.len() + 1);
    argv.push(req.command.clone());
    argv.extend(req.args.iter().cloned());
    let mut plan = base_plan(policy, ctx, workspace, ModuleSource::File(path), argv, None)?;
    plan.env = guest_env(policy, ctx, &req.env, &[])?;
    set_stdin(
        &mut plan,
        super::stdin::resolve(policy.limits.stdin_bytes, super::stdin_fields(req))?,
    );
    plan.limits.wall_timeout_ms = timeout(policy, req.timeout_ms)?;
    Ok(plan)
}

/// The default runtimes directory: `$TIERBOX_RUNTIMES_DIR`, else
/// `$XDG_DATA_HOME/tierbox/runtimes`, else `~/.local/share/tierbox/runtimes`.
pub fn default_runtimes_dir(env: &std::collections::BTreeMap<String, String>) -> PathBuf {
    let set = |name: &str| env.get(name).filter(|v| v.starts_with('/'));
    if let Some(dir) = set("TIERBOX_RUNTIMES_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(data) = set("XDG_DATA_HOME") {
        return Path::new(data).join("tierbox/runtimes");
    }
    match set("HOME") {
        Some(home) => Path::new(home).join(".local/share/tierbox/runtimes"),
        None => PathBuf::from("/usr/local/share/tierbox/runtimes"),
    }
}

fn grant_denied(grant: impl Into<String>, reason: String) -> Rejection {
    Rejection::WasmGrantDenied {
        grant: grant.into(),
        reason,
    }
}

fn network_unsupported(hosts: &str) -> Rejection {
    Rejection::TierUnsupported {
        tier: crate::policy::Tier::A,
        feature: format!("network access ({hosts})"),
        reason: "a mapped interpreter runs as a WASI preview 1 module, which has no sockets; \
                 give a component grants.network (wasm_run), or run networked tools in tier \
                 b or c with egress.mode = \"strict\""
            .to_owned(),
    }
}

/// The caps shared with `process_run`: argument count and size, environment shape, a
/// zero timeout.
fn check_common_shape(
    args: &[String],
    env: &std::collections::BTreeMap<String, String>,
    timeout_ms: Option<u64>,
) -> Result<(), Rejection> {
    let mut probe = ProcessRunRequest::new("wasm");
    probe.args = args.to_vec();
    probe.env = env.clone();
    probe.timeout_ms = timeout_ms;
    super::shape::check(&probe)
}

fn module_size(module: &str, bytes: u64, policy: &Policy) -> Result<(), Rejection> {
    let max = policy.wasm.max_module_bytes;
    if bytes > max {
        return Err(Rejection::WasmModuleInvalid {
            module: module.to_owned(),
            reason: format!(
                "it is {bytes} bytes, more than the policy's wasm.max_module_bytes of {max}"
            ),
        });
    }
    Ok(())
}

/// Exactly one of `module`, `module_wat`, `module_base64`; returns the source and the
/// guest's `argv[0]`.
fn module_source(
    policy: &Policy,
    req: &WasmRunRequest,
    workspace: &Path,
) -> Result<(ModuleSource, String), Rejection> {
    let given = [
        req.module.is_some(),
        req.module_wat.is_some(),
        req.module_base64.is_some(),
    ];
    if given.iter().filter(|g| **g).count() != 1 {
        return Err(Rejection::WasmModuleInvalid {
            module: "(request)".to_owned(),
            reason: "give exactly one of module, module_wat, module_base64".to_owned(),
        });
    }
    let inline = |field: &str, bytes: Vec<u8>| {
        if !policy.wasm.allow_inline_modules {
            return Err(Rejection::WasmInlineDenied {
                field: field.to_owned(),
            });
        }
        module_size(field, bytes.len() as u64, policy)?;
        Ok((ModuleSource::Inline(bytes), "module.wasm".to_owned()))
    };
    if let Some(text) = &req.module_wat {
        check_inline_len("module_wat", text)?;
        return inline("module_wat", text.clone().into_bytes());
    }
    if let Some(text) = &req.module_base64 {
        check_inline_len("module_base64", text)?;
        if !policy.wasm.allow_inline_modules {
            return Err(Rejection::WasmInlineDenied {
                field: "module_base64".to_owned(),
            });
        }
        let bytes = decode_base64(text).ok_or_else(|| Rejection::WasmModuleInvalid {
            module: "module_base64".to_owned(),
            reason: "it is not standard base64".to_owned(),
        })?;
        return inline("module_base64", bytes);
    }
    let path = req.module.as_deref().unwrap_or_default();
    let invalid = |reason: String| Rejection::WasmModuleInvalid {
        module: path.to_owned(),
        reason,
    };
    if path.is_empty() || path.len() > MAX_MODULE_PATH_BYTES || path.contains('\0') {
        return Err(invalid(format!(
            "the path is empty, longer than {MAX_MODULE_PATH_BYTES} bytes or contains NUL"
        )));
    }
    // One answer for a path that does not resolve and one that resolves outside: the
    // rejection must not tell the caller whether a file outside the workspace exists.
    let not_inside = || {
        invalid(format!(
            "it does not name an existing file inside the workspace {}",
            workspace.display()
        ))
    };
    let resolved = std::fs::canonicalize(workspace.join(path)).map_err(|_| not_inside())?;
    if !resolved.starts_with(workspace) {
        return Err(not_inside());
    }
    let meta = std::fs::metadata(&resolved).map_err(|e| invalid(e.to_string()))?;
    if !meta.is_file() {
        return Err(invalid("it is not a regular file".to_owned()));
    }
    module_size(path, meta.len(), policy)?;
    let name = resolved
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "module.wasm".to_owned());
    Ok((ModuleSource::File(resolved), name))
}

fn check_inline_len(field: &str, text: &str) -> Result<(), Rejection> {
    if text.is_empty() || text.len() > MAX_INLINE_MODULE_BYTES {
        return Err(Rejection::WasmModuleInvalid {
            module: field.to_owned(),
            reason: format!(
                "it is {} bytes; inline modules are 1..={MAX_INLINE_MODULE_BYTES} bytes",
                text.len()
            ),
        });
    }
    Ok(())
}

/// The plan every Tier A run starts from: the workspace preopen (as the policy allows,
/// narrowed by the request), the limits, the output and redaction rules.
fn base_plan(
    policy: &Policy,
    ctx: &ValidateContext,
    workspace: PathBuf,
    module: ModuleSource,
    argv: Vec<String>,
    requested: Option<DirAccess>,
) -> Result<WasmPlan, Rejection> {
    let allowed = policy.wasm.workspace;
    let access = requested.unwrap_or(allowed);
    if rank(access) > rank(allowed) {
        return Err(grant_denied(
            format!("workspace {}", access.name()),
            format!("the policy's wasm.workspace is {}", allowed.name()),
        ));
    }
    let mut preopens = Vec::new();
    if access != DirAccess::None {
        for guest in [WORKSPACE_GUEST_PATH, "."] {
            preopens.push(Preopen {
                host: workspace.clone(),
                guest: guest.to_owned(),
                writable: access == DirAccess::ReadWrite,
            });
        }
    }
    let w = &policy.wasm;
    Ok(WasmPlan {
        module,
        entrypoint: "_start".to_owned(),
        argv,
        env: Vec::new(),
        workspace,
        preopens,
        limits: WasmLimitsPlan {
            wall_timeout_ms: policy.limits.timeout_ms,
            fuel: w.fuel,
            memory_bytes: w.memory_bytes,
            table_elements: w.table_elements,
            instances: w.instances,
            max_module_bytes: w.max_module_bytes,
            stdin_bytes: policy.limits.stdin_bytes,
        },
        output: OutputPlan {
            max_bytes: policy.output.max_bytes,
            mode: policy.output.mode,
            spill: policy.output.spill,
            spill_keep_secs: policy.output.spill_keep_secs,
            spill_total_bytes: policy.output.spill_total_bytes,
        },
        stdin: None,
        stdin_streamed: false,
        redaction: RedactionPlan {
            enabled: policy.redaction.enabled,
            sensitive_names: policy.env.sensitive.clone(),
            sensitive_values: policy
                .env
                .sensitive
                .iter()
                .filter_map(|name| ctx.supervisor_env.get(name))
                .filter(|v| !v.is_empty())
                .cloned()
                .collect(),
        },
        network: Vec::new(),
    })
}

fn rank(a: DirAccess) -> u8 {
    match a {
        DirAccess::None => 0,
        DirAccess::ReadOnly => 1,
        DirAccess::ReadWrite => 2,
    }
}

/// The guest environment: the request's own values and the granted supervisor variables,
/// each name in `wasm.allow_env`. Nothing else.
fn guest_env(
    policy: &Policy,
    ctx: &ValidateContext,
    set: &std::collections::BTreeMap<String, String>,
    pass: &[String],
) -> Result<Vec<(String, String)>, Rejection> {
    let allowed = |name: &str| policy.wasm.allow_env.iter().any(|a| a == name);
    let mut env = std::collections::BTreeMap::new();
    for name in pass {
        if !allowed(name) {
            return Err(grant_denied(
                format!("env {name}"),
                "the name is not in the policy's wasm.allow_env".to_owned(),
            ));
        }
        if let Some(value) = ctx.supervisor_env.get(name) {
            env.insert(name.clone(), value.clone());
        }
    }
    for (name, value) in set {
        if !allowed(name) {
            return Err(grant_denied(
                format!("env {name}"),
                "the name is not in the policy's wasm.allow_env".to_owned(),
            ));
        }
        env.insert(name.clone(), value.clone());
    }
    Ok(env.into_iter().collect())
}

/// Resolves a policy or request path: `~/…` against the supervisor's home, relative
/// against the workspace.
fn host_path(ctx: &ValidateContext, workspace: &Path, path: &str) -> Option<PathBuf> {
    match path.strip_prefix("~/") {
        Some(rest) => ctx.home().map(|h| h.join(rest)),
        None => Some(workspace.join(path)),
    }
}

fn fs_grant(
    policy: &Policy,
    ctx: &ValidateContext,
    workspace: &Path,
    grant: &FsGrant,
) -> Result<Preopen, Rejection> {
    let name = format!(
        "fs {} ({})",
        grant.path,
        if grant.write {
            "read_write"
        } else {
            "read_only"
        }
    );
    if grant.path.is_empty()
        || grant.path.len() > MAX_MODULE_PATH_BYTES
        || grant.path.contains('\0')
    {
        return Err(grant_denied(
            name,
            "the path is empty, too long or contains NUL".to_owned(),
        ));
    }
    let resolved = host_path(ctx, workspace, &grant.path)
        .and_then(|p| std::fs::canonicalize(p).ok())
        .filter(|p| p.is_dir())
        .ok_or_else(|| grant_denied(name.clone(), "it is not an existing directory".to_owned()))?;
    if resolved == workspace {
        return Err(grant_denied(
            name,
            "the workspace itself is granted through grants.workspace".to_owned(),
        ));
    }
    if let Some(own) = super::scope::reaches_own(
        &super::scope::own_paths(policy, ctx),
        &resolved,
        grant.write,
    ) {
        return Err(grant_denied(name, own.rule(&resolved)));
    }
    let covers = |entries: &[String]| {
        entries.iter().any(|entry| {
            host_path(ctx, workspace, entry)
                .and_then(|p| std::fs::canonicalize(p).ok())
                .is_some_and(|root| resolved.starts_with(root))
        })
    };
    let w = &policy.wasm;
    let permitted = if grant.write {
        covers(&w.writable)
    } else {
        covers(&w.writable) || covers(&w.read_only)
    };
    if !permitted {
        return Err(grant_denied(
            name,
            format!(
                "{} is not under a directory the policy's wasm.{} lists",
                resolved.display(),
                if grant.write {
                    "writable"
                } else {
                    "read_only or wasm.writable"
                }
            ),
        ));
    }
    let guest = match resolved.strip_prefix(workspace) {
        Ok(rel) => format!("{WORKSPACE_GUEST_PATH}/{}", rel.display()),
        Err(_) => resolved.display().to_string(),
    };
    Ok(Preopen {
        host: resolved,
        guest,
        writable: grant.write,
    })
}

fn timeout(policy: &Policy, requested: Option<u64>) -> Result<u64, Rejection> {
    match requested {
        Some(t) if t > policy.limits.max_timeout_ms => Err(Rejection::LimitAbovePolicy {
            field: "timeout_ms".to_owned(),
            requested: t,
            max: policy.limits.max_timeout_ms,
        }),
        Some(t) => Ok(t),
        None => Ok(policy.limits.timeout_ms),
    }
}
