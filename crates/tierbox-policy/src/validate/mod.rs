//! `validate()`: a chain of small checks from a request to a [`Plan`].
//!
//! Order (SPEC §2.1): shape and caps → executable allowlist → interpreter guardrails →
//! workspace scope → environment → egress preflight → limits → tier. The first failing
//! check returns its typed [`Rejection`]; nothing runs. One file per rule group:
//!
//! | file | rules |
//! |---|---|
//! | `shape.rs` | hard caps, NUL bytes, bare command |
//! | `exec.rs` | allowlist, program resolution in the sandbox PATH |
//! | `interpreter.rs` | interpreter denylist, wrappers, eval flags |
//! | `scope.rs` | workspace root, cwd, path-like arguments (never rewritten) |
//! | `env.rs` | environment rebuild and deny list |
//! | `egress.rs` | host extraction and allowlist preflight |
//! | `limits.rs` | timeouts and limits against the policy |
//! | `tier.rs` | requested tier against the policy minimum |

mod egress;
mod env;
mod exec;
mod interpreter;
mod limits;
mod scope;
mod shape;
mod tier;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use env::{is_denied_env_name, DENIED_ENV_EXACT, DENIED_ENV_PREFIXES};
pub use interpreter::{interpreter_base_name, INTERPRETERS, WRAPPERS};

use crate::plan::{FsPlan, OutputPlan, Plan, RedactionPlan};
use crate::policy::Policy;
use crate::rejection::Rejection;
use crate::request::ProcessRunRequest;

/// System paths every run may read, when they exist on the host.
pub const SYSTEM_READ_ONLY_PATHS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];

/// What validation needs to know about the host it runs on.
#[derive(Debug, Clone)]
pub struct ValidateContext {
    /// The workspace root to use (the CLI's `--workspace`, else the policy's, else `.`).
    pub workspace: PathBuf,
    /// The supervisor's environment, source of `env.pass` and `env.sensitive` values.
    pub supervisor_env: BTreeMap<String, String>,
}

impl ValidateContext {
    /// A context for `workspace` with the current process's (UTF-8) environment.
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        let supervisor_env = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        Self { workspace: workspace.into(), supervisor_env }
    }

    /// The same context with an explicit supervisor environment (for tests and servers).
    pub fn with_env(mut self, env: BTreeMap<String, String>) -> Self {
        self.supervisor_env = env;
        self
    }

    fn home(&self) -> Option<PathBuf> {
        self.supervisor_env.get("HOME").filter(|h| h.starts_with('/')).map(PathBuf::from)
    }
}

/// Validates `req` against `policy` and resolves it into a [`Plan`].
///
/// See the module documentation for the order of checks.
pub fn validate(policy: &Policy, req: &ProcessRunRequest, ctx: &ValidateContext) -> Result<Plan, Rejection> {
    shape::check(req)?;
    let program = exec::resolve_program(&policy.exec, &req.command, &policy.env.path)?;
    interpreter::check(&policy.exec, &req.command, &program, &req.args, &policy.env.path)?;
    let workspace = scope::canonical_workspace(&ctx.workspace)?;
    let cwd = scope::resolve_cwd(&workspace, req.cwd.as_deref())?;
    scope::check_args(&workspace, &cwd, &req.args)?;
    let env = env::build(&policy.env, req, ctx)?;
    let network = egress::check(&policy.egress, req)?;
    let (limits, background) = limits::resolve(policy, req)?;
    let tier = tier::check(&policy.tier, req)?;

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

    Ok(Plan {
        program,
        argv,
        env,
        cwd,
        filesystem: filesystem_plan(policy, ctx, &workspace),
        workspace,
        network,
        limits,
        output: OutputPlan {
            max_bytes: policy.output.max_bytes,
            mode: policy.output.mode,
            spill: policy.output.spill,
        },
        stdin: req.stdin.as_ref().map(|s| s.as_bytes().to_vec()),
        tier,
        redaction: RedactionPlan {
            enabled: policy.redaction.enabled,
            sensitive_names: policy.env.sensitive.clone(),
            sensitive_values,
        },
        background,
    })
}

/// Expands `~/` and keeps the paths that exist, canonicalised (a policy may list a
/// toolchain that is not installed on every host).
fn existing_paths(list: &[String], home: Option<&Path>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = list
        .iter()
        .filter_map(|p| match p.strip_prefix("~/") {
            Some(rest) => home.map(|h| h.join(rest)),
            None => Some(PathBuf::from(p)),
        })
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    out.sort();
    out.dedup();
    out
}

fn filesystem_plan(policy: &Policy, ctx: &ValidateContext, workspace: &Path) -> FsPlan {
    let home = ctx.home();
    let fs = &policy.filesystem;
    let system: Vec<String> = SYSTEM_READ_ONLY_PATHS.iter().map(|s| (*s).to_owned()).collect();
    FsPlan {
        system_read_only: existing_paths(&system, None),
        read_only: existing_paths(&fs.read_only, home.as_deref()),
        writable: existing_paths(&fs.writable, home.as_deref()),
        deny_read: fs
            .deny_read
            .iter()
            .filter_map(|p| match p.strip_prefix("~/") {
                Some(rest) => home.as_ref().map(|h| h.join(rest)),
                None => Some(PathBuf::from(p)),
            })
            .collect(),
        protected: fs.protected.iter().map(|p| workspace.join(p)).collect(),
    }
}
