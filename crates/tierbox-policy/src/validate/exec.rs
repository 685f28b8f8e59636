//! Executable allowlist and program resolution. (Being completed.)

use std::path::PathBuf;

use crate::policy::ExecPolicy;
use crate::rejection::Rejection;

/// Checks `command` against the allowlist and resolves it in the sandbox PATH.
pub(crate) fn resolve_program(policy: &ExecPolicy, command: &str, path_var: &str) -> Result<PathBuf, Rejection> {
    if command.contains('/') && !policy.allow_command_paths {
        return Err(Rejection::CommandIsPath { command: command.to_owned() });
    }
    let name = command.rsplit('/').next().unwrap_or(command);
    if !policy.allowed_executables.iter().any(|a| a == name || a == "*") {
        return Err(Rejection::ExecutableNotAllowed { name: name.to_owned(), via: String::new() });
    }
    for dir in path_var.split(':') {
        let candidate = std::path::Path::new(dir).join(name);
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(Rejection::ExecutableNotFound { name: name.to_owned(), path: path_var.to_owned() })
}
