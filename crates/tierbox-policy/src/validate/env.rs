//! Environment: rebuilt from the policy, never inherited. Per-call names are checked
//! against a deny list of loader, shell and interpreter injection variables and the proxy
//! settings the runner owns.

use crate::policy::EnvPolicy;
use crate::rejection::Rejection;
use crate::request::ProcessRunRequest;
use crate::validate::ValidateContext;

/// Denied name prefixes: dynamic loaders (glibc, macOS) and git's hook/ssh/config knobs.
pub const DENIED_ENV_PREFIXES: &[(&str, &str)] = &[
    ("LD_", "dynamic loader injection"),
    ("DYLD_", "dynamic loader injection"),
    ("GIT_CONFIG", "git configuration injection"),
];

/// Denied exact names, each with the reason shown in the rejection.
pub const DENIED_ENV_EXACT: &[(&str, &str)] = &[
    ("BASH_ENV", "shell startup injection"),
    ("ENV", "shell startup injection"),
    ("PROMPT_COMMAND", "shell startup injection"),
    ("IFS", "shell word-splitting injection"),
    ("PS4", "shell trace injection"),
    ("SHELLOPTS", "shell option injection"),
    ("BASHOPTS", "shell option injection"),
    ("NODE_OPTIONS", "interpreter injection"),
    ("PYTHONSTARTUP", "interpreter injection"),
    ("PYTHONPATH", "interpreter injection"),
    ("PYTHONHOME", "interpreter injection"),
    ("PYTHONINSPECT", "interpreter injection"),
    ("PERL5OPT", "interpreter injection"),
    ("PERL5LIB", "interpreter injection"),
    ("PERLLIB", "interpreter injection"),
    ("RUBYOPT", "interpreter injection"),
    ("RUBYLIB", "interpreter injection"),
    ("JAVA_TOOL_OPTIONS", "interpreter injection"),
    ("_JAVA_OPTIONS", "interpreter injection"),
    ("JDK_JAVA_OPTIONS", "interpreter injection"),
    ("GIT_SSH", "git runs this program"),
    ("GIT_SSH_COMMAND", "git runs this program"),
    ("GIT_EXEC_PATH", "git runs programs from this directory"),
    ("GIT_TEMPLATE_DIR", "git copies hooks from this directory"),
    ("GIT_ASKPASS", "git runs this program"),
    ("GIT_EDITOR", "git runs this program"),
    ("GIT_PAGER", "git runs this program"),
    ("GIT_PROXY_COMMAND", "git runs this program"),
    ("GIT_EXTERNAL_DIFF", "git runs this program"),
    ("SSH_ASKPASS", "runs a program"),
    ("EDITOR", "runs a program"),
    ("VISUAL", "runs a program"),
    ("PAGER", "runs a program"),
    ("PATH", "the sandbox PATH is fixed by the policy"),
    ("HTTP_PROXY", "the runner owns proxy settings"),
    ("HTTPS_PROXY", "the runner owns proxy settings"),
    ("ALL_PROXY", "the runner owns proxy settings"),
    ("NO_PROXY", "the runner owns proxy settings"),
    ("FTP_PROXY", "the runner owns proxy settings"),
    ("NPM_CONFIG_PROXY", "the runner owns proxy settings"),
    ("NPM_CONFIG_HTTPS_PROXY", "the runner owns proxy settings"),
    ("PIP_PROXY", "the runner owns proxy settings"),
    ("CARGO_HTTP_PROXY", "the runner owns proxy settings"),
    ("YARN_HTTP_PROXY", "the runner owns proxy settings"),
    ("YARN_HTTPS_PROXY", "the runner owns proxy settings"),
];

/// Why `name` may not be set per call, or `None` when it may. Case-insensitive, because
/// several programs read both spellings (`http_proxy`, `HTTP_PROXY`).
///
/// ```
/// use tierbox_policy::validate::is_denied_env_name;
/// assert!(is_denied_env_name("LD_PRELOAD").is_some());
/// assert!(is_denied_env_name("https_proxy").is_some());
/// assert!(is_denied_env_name("RUST_LOG").is_none());
/// ```
pub fn is_denied_env_name(name: &str) -> Option<&'static str> {
    let upper = name.to_ascii_uppercase();
    DENIED_ENV_PREFIXES
        .iter()
        .find(|(p, _)| upper.starts_with(p))
        .or_else(|| DENIED_ENV_EXACT.iter().find(|(n, _)| *n == upper))
        .map(|(_, reason)| *reason)
}

/// Builds the child's complete environment: policy `pass` (from the supervisor), policy
/// `set`, the fixed PATH, then the request's own variables (each checked).
pub(crate) fn build(
    policy: &EnvPolicy,
    req: &ProcessRunRequest,
    ctx: &ValidateContext,
) -> Result<Vec<(String, String)>, Rejection> {
    let mut env = std::collections::BTreeMap::new();
    for name in &policy.pass {
        if name == "PATH" {
            continue;
        }
        if let Some(v) = ctx.supervisor_env.get(name) {
            env.insert(name.clone(), v.clone());
        }
    }
    for (k, v) in &policy.set {
        // `~/` names the supervisor's home (a toolchain the policy grants read-only, such
        // as `RUSTUP_HOME = "~/.rustup"`, while the run gets a private HOME).
        let value = match (v.strip_prefix("~/"), ctx.home()) {
            (Some(rest), Some(home)) => home.join(rest).to_string_lossy().into_owned(),
            _ => v.clone(),
        };
        env.insert(k.clone(), value);
    }
    env.insert("PATH".to_owned(), policy.path.clone());
    for (name, value) in &req.env {
        if let Some(reason) = is_denied_env_name(name) {
            return Err(Rejection::EnvDenied {
                name: name.clone(),
                reason: reason.to_owned(),
            });
        }
        env.insert(name.clone(), value.clone());
    }
    Ok(env.into_iter().collect())
}
