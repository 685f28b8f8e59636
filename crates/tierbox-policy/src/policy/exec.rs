//! The `[exec]` and `[env]` sections: which programs may run, and the environment they
//! see.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::DEFAULT_SANDBOX_PATH;

/// Which programs may run.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ExecPolicy {
    /// Bare executable names that may run (compared after stripping directories). `"*"`
    /// means any, and is accepted only with `danger_allow_any_executable = true`.
    pub allowed_executables: Vec<String>,
    /// Accept `"*"` in `allowed_executables`.
    pub danger_allow_any_executable: bool,
    /// Allow shells and language runtimes (bash, python, node, …). The kernel layers, not
    /// this check, are the boundary; see SECURITY.md.
    pub allow_interpreters: bool,
    /// Allow inline-code flags (`-c`, `-e`, `--eval`, …) for allowed interpreters.
    pub allow_eval: bool,
    /// Allow `command` to be an absolute path (still checked against the allowlist by name).
    pub allow_command_paths: bool,
}

/// The child's environment. It is rebuilt from this; nothing is inherited implicitly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct EnvPolicy {
    /// Names copied from the supervisor's environment when present.
    pub pass: Vec<String>,
    /// Fixed values (applied after `pass`, before the request's own `env`). A value that
    /// starts with `~/` is taken relative to the supervisor's `HOME`.
    pub set: BTreeMap<String, String>,
    /// PATH inside the sandbox; also where the executable is resolved.
    pub path: String,
    /// Names of supervisor variables whose values are secrets: they are redacted from
    /// output wherever they appear (they are not passed unless also listed in `pass`).
    pub sensitive: Vec<String>,
    /// A directory of the workspace (relative to it) that is the run's `HOME` instead of
    /// a private empty one, created by the supervisor when missing: what a run writes
    /// there (`git config --global`, tool caches, shell history) is found by the next run
    /// of the same workspace. **Costs**: every later run reads it, so one run can plant
    /// configuration a later run executes (git aliases, `core.pager`, `.bashrc`); it is
    /// part of the workspace the host sees (and `git add -A` adds). Not under `.git`;
    /// overlay runs keep a private `HOME`. None (the default): a private `HOME` per run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_home: Option<String>,
}

impl Default for EnvPolicy {
    fn default() -> Self {
        Self {
            pass: ["HOME", "USER", "LANG", "LC_ALL", "TERM", "TZ"]
                .map(String::from)
                .to_vec(),
            set: BTreeMap::new(),
            path: DEFAULT_SANDBOX_PATH.to_owned(),
            sensitive: Vec::new(),
            workspace_home: None,
        }
    }
}
