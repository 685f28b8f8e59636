//! Interpreter guardrails. (Being completed.)

use std::path::Path;

use crate::policy::ExecPolicy;
use crate::rejection::Rejection;

/// Shells and language runtimes denied unless `allow_interpreters`.
pub const INTERPRETERS: &[&str] = &["bash", "sh"];
/// Programs that run another program named in their arguments.
pub const WRAPPERS: &[&str] = &["env"];

/// The interpreter family of `name`, if it is one.
pub fn interpreter_base_name(name: &str) -> Option<&'static str> {
    INTERPRETERS.iter().copied().find(|i| *i == name)
}

pub(crate) fn check(
    policy: &ExecPolicy,
    command: &str,
    _program: &Path,
    _args: &[String],
    _path_var: &str,
) -> Result<(), Rejection> {
    if !policy.allow_interpreters && interpreter_base_name(command).is_some() {
        return Err(Rejection::InterpreterDenied { name: command.to_owned(), via: String::new() });
    }
    Ok(())
}
