//! Environment: rebuilt from the policy, never inherited. Per-call names are checked
//! against a deny list of loader, shell and interpreter injection variables and the proxy
//! settings the runner owns.

use crate::policy::EnvPolicy;
use crate::rejection::Rejection;
use crate::request::ProcessRunRequest;
use crate::validate::ValidateContext;

/// Denied name prefixes: dynamic loaders (glibc, macOS), git's configuration knobs, and
/// the functions bash imports from its environment.
pub const DENIED_ENV_PREFIXES: &[(&str, &str)] = &[
    ("LD_", "dynamic loader injection"),
    ("DYLD_", "dynamic loader injection"),
    ("GIT_CONFIG", "git configuration injection"),
    ("BASH_FUNC_", "bash imports it as a function"),
];

/// Denied names of the form `PREFIX…SUFFIX` (a target triple in the middle).
pub const DENIED_ENV_PATTERNS: &[(&str, &str, &str)] = &[
    ("CARGO_TARGET_", "_RUNNER", "cargo runs this program"),
    ("CARGO_TARGET_", "_LINKER", "cargo runs this program"),
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
    ("NODE_PATH", "Node.js resolves modules from here"),
    ("PYTHONSTARTUP", "interpreter injection"),
    ("PYTHONPATH", "interpreter injection"),
    ("PYTHONHOME", "interpreter injection"),
    ("PYTHONINSPECT", "interpreter injection"),
    (
        "PYTHONUSERBASE",
        "Python imports from here (user site-packages)",
    ),
    ("PERL5OPT", "interpreter injection"),
    ("PERL5LIB", "interpreter injection"),
    ("PERLLIB", "interpreter injection"),
    ("RUBYOPT", "interpreter injection"),
    ("RUBYLIB", "interpreter injection"),
    ("JAVA_TOOL_OPTIONS", "interpreter injection"),
    ("_JAVA_OPTIONS", "interpreter injection"),
    ("JDK_JAVA_OPTIONS", "interpreter injection"),
    (
        "GCONV_PATH",
        "glibc loads character-conversion modules from here",
    ),
    (
        "GLIBC_TUNABLES",
        "glibc loader tunables (a history of loader bugs)",
    ),
    (
        "OPENSSL_CONF",
        "OpenSSL loads the engines and providers this file names",
    ),
    (
        "SSLKEYLOGFILE",
        "TLS libraries write their session keys here",
    ),
    (
        "HOME",
        "redirects every program's dotfiles (git, ssh, npm and cargo configuration)",
    ),
    ("XDG_CONFIG_HOME", "redirects programs' configuration files"),
    ("XDG_CONFIG_DIRS", "redirects programs' configuration files"),
    (
        "GIT_DIR",
        "points git at another repository, with its configuration and hooks",
    ),
    ("GIT_WORK_TREE", "points git at another work tree"),
    (
        "GIT_COMMON_DIR",
        "points git at another repository's configuration and hooks",
    ),
    ("GIT_OBJECT_DIRECTORY", "points git at another object store"),
    (
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "adds object stores git reads from",
    ),
    ("GIT_INDEX_FILE", "points git at another index"),
    (
        "GIT_ALLOW_PROTOCOL",
        "enables git transports that run programs (ext::)",
    ),
    ("GIT_SSH", "git runs this program"),
    ("GIT_SSH_COMMAND", "git runs this program"),
    ("GIT_EXEC_PATH", "git runs programs from this directory"),
    ("GIT_TEMPLATE_DIR", "git copies hooks from this directory"),
    ("GIT_ASKPASS", "git runs this program"),
    ("GIT_EDITOR", "git runs this program"),
    ("GIT_SEQUENCE_EDITOR", "git runs this program"),
    ("GIT_PAGER", "git runs this program"),
    ("GIT_PROXY_COMMAND", "git runs this program"),
    ("GIT_EXTERNAL_DIFF", "git runs this program"),
    ("SSH_ASKPASS", "runs a program"),
    ("EDITOR", "runs a program"),
    ("VISUAL", "runs a program"),
    ("PAGER", "runs a program"),
    ("LESSOPEN", "less runs this program"),
    ("LESSCLOSE", "less runs this program"),
    ("MAKEFLAGS", "make takes options from it (--eval, SHELL=)"),
    ("MFLAGS", "make takes options from it (--eval, SHELL=)"),
    (
        "GNUMAKEFLAGS",
        "make takes options from it (--eval, SHELL=)",
    ),
    ("MAKEFILES", "make reads these makefiles first"),
    ("CC", "build tools run this program"),
    ("CXX", "build tools run this program"),
    ("RUSTC", "cargo runs this program"),
    ("RUSTDOC", "cargo runs this program"),
    ("RUSTC_WRAPPER", "cargo runs this program"),
    ("RUSTC_WORKSPACE_WRAPPER", "cargo runs this program"),
    ("CARGO_BUILD_RUSTC", "cargo runs this program"),
    ("CARGO_BUILD_RUSTDOC", "cargo runs this program"),
    ("CARGO_BUILD_RUSTC_WRAPPER", "cargo runs this program"),
    (
        "CARGO_BUILD_RUSTC_WORKSPACE_WRAPPER",
        "cargo runs this program",
    ),
    (
        "CARGO_HOME",
        "redirects cargo's configuration (wrappers, target runners)",
    ),
    (
        "GOFLAGS",
        "go takes flags from it (-toolexec runs a program)",
    ),
    (
        "NPM_CONFIG_SCRIPT_SHELL",
        "npm runs scripts with this program",
    ),
    ("NPM_CONFIG_USERCONFIG", "redirects npm's configuration"),
    ("NPM_CONFIG_GLOBALCONFIG", "redirects npm's configuration"),
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
/// assert!(is_denied_env_name("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER").is_some());
/// assert!(is_denied_env_name("RUST_LOG").is_none());
/// assert!(is_denied_env_name("CARGO_TARGET_DIR").is_none());
/// ```
pub fn is_denied_env_name(name: &str) -> Option<&'static str> {
    let upper = name.to_ascii_uppercase();
    DENIED_ENV_PREFIXES
        .iter()
        .find(|(p, _)| upper.starts_with(p))
        .map(|(_, reason)| *reason)
        .or_else(|| {
            DENIED_ENV_PATTERNS
                .iter()
                .find(|(p, s, _)| {
                    upper.len() > p.len() + s.len() && upper.starts_with(p) && upper.ends_with(s)
                })
                .map(|(_, _, reason)| *reason)
        })
        .or_else(|| {
            DENIED_ENV_EXACT
                .iter()
                .find(|(n, _)| *n == upper)
                .map(|(_, reason)| *reason)
        })
}

/// The policy's `env.path` with each `~/…` or `$HOME/…` entry under the supervisor's
/// home (the directories a policy grants read-only, such as `~/.cargo/bin`); without a
/// known home such an entry is left out, never kept relative.
pub(crate) fn expanded_path(path: &str, ctx: &ValidateContext) -> String {
    let home = ctx.home();
    let mut out: Vec<String> = Vec::new();
    for dir in path.split(':') {
        match (super::home_relative(dir), &home) {
            (None, _) => out.push(dir.to_owned()),
            (Some(""), Some(home)) => out.push(home.to_string_lossy().into_owned()),
            (Some(rest), Some(home)) => out.push(home.join(rest).to_string_lossy().into_owned()),
            (Some(_), None) => {}
        }
    }
    out.join(":")
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
    env.insert("PATH".to_owned(), expanded_path(&policy.path, ctx));
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

#[cfg(test)]
mod path_tests {
    use super::*;

    fn ctx(home: Option<&str>) -> ValidateContext {
        let env = home
            .map(|h| ("HOME".to_owned(), h.to_owned()))
            .into_iter()
            .collect();
        ValidateContext::new("/tmp").with_env(env)
    }

    #[test]
    fn home_entries_of_env_path_follow_the_supervisor_s_home() {
        let path = "~/.cargo/bin:$HOME/go/bin:~:/usr/bin:/home/~x";
        assert_eq!(
            expanded_path(path, &ctx(Some("/home/ada"))),
            "/home/ada/.cargo/bin:/home/ada/go/bin:/home/ada:/usr/bin:/home/~x"
        );
        // No home (or a relative one): those entries are left out, never kept relative.
        assert_eq!(expanded_path(path, &ctx(None)), "/usr/bin:/home/~x");
        assert_eq!(expanded_path(path, &ctx(Some("rel"))), "/usr/bin:/home/~x");
    }
}
