//! Executable allowlist and program resolution.
//!
//! Invariants this module keeps:
//! - `command` is a bare name unless the policy sets `allow_command_paths`; even then it
//!   must be an absolute path to an existing regular executable file, and its file name
//!   must still be in `allowed_executables`;
//! - bare names are compared exactly against `allowed_executables` (`*` allows any; the
//!   policy loader accepts it only with `danger_allow_any_executable`);
//! - a bare name is looked up only in the absolute directories of the policy's sandbox
//!   PATH, in order, never in the cwd or the workspace. An empty or relative PATH entry
//!   (which a shell would read as "the current directory") is skipped;
//! - only a regular file with an execute bit counts, the same test `execvp` applies;
//! - the path returned is the PATH directory joined with the name, not canonicalised, so a
//!   plan shows `/usr/bin/python3` rather than `/usr/bin/python3.11`. Checks that must see
//!   through symlinks (`sh -> dash`, `cc -> gcc`) use [`canonical_program`].

use std::fs::Metadata;
use std::path::{Path, PathBuf};

use crate::policy::ExecPolicy;
use crate::rejection::Rejection;

/// The `allowed_executables` entry that allows any program (only accepted by the policy
/// loader together with `danger_allow_any_executable = true`).
pub const ANY_EXECUTABLE: &str = "*";

/// Checks `command` against the path rule and the allowlist, then resolves it: a bare
/// name in the sandbox PATH (`path_var`), an allowed absolute path as given.
pub(crate) fn resolve_program(
    policy: &ExecPolicy,
    command: &str,
    path_var: &str,
) -> Result<PathBuf, Rejection> {
    let name = allowed_name(policy, command)?;
    if command.contains('/') {
        return checked_command_path(command);
    }
    find_in_path(name, path_var).ok_or_else(|| Rejection::ExecutableNotFound {
        name: name.to_owned(),
        path: path_var.to_owned(),
    })
}

/// Applies the path rule and the allowlist to a program word and returns its bare name
/// (the file name, for an allowed absolute path).
pub(crate) fn allowed_name<'a>(
    policy: &ExecPolicy,
    command: &'a str,
) -> Result<&'a str, Rejection> {
    let name = if command.contains('/') {
        command_path_name(policy, command)?
    } else {
        command
    };
    if is_allowlisted(policy, name) {
        Ok(name)
    } else {
        Err(Rejection::ExecutableNotAllowed {
            name: name.to_owned(),
            via: String::new(),
        })
    }
}

/// Whether the bare `name` is in the policy's allowlist (or the allowlist holds `*`).
pub(crate) fn is_allowlisted(policy: &ExecPolicy, name: &str) -> bool {
    policy
        .allowed_executables
        .iter()
        .any(|a| a == name || a == ANY_EXECUTABLE)
}

/// The file name of an absolute command path, if the policy allows command paths.
fn command_path_name<'a>(policy: &ExecPolicy, command: &'a str) -> Result<&'a str, Rejection> {
    if !policy.allow_command_paths {
        return Err(Rejection::CommandIsPath {
            command: command.to_owned(),
        });
    }
    let invalid = |reason: &str| Rejection::CommandPathInvalid {
        command: command.to_owned(),
        reason: reason.to_owned(),
    };
    if !command.starts_with('/') {
        return Err(invalid("it is not an absolute path"));
    }
    Path::new(command)
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| invalid("it does not end in a file name"))
}

/// An allowed absolute command path, once it is known to be a regular executable file.
pub(crate) fn checked_command_path(command: &str) -> Result<PathBuf, Rejection> {
    let invalid = |reason: &str| Rejection::CommandPathInvalid {
        command: command.to_owned(),
        reason: reason.to_owned(),
    };
    let meta = std::fs::metadata(command).map_err(|_| invalid("it does not exist"))?;
    if !meta.is_file() {
        return Err(invalid("it is not a regular file"));
    }
    if !has_exec_bit(&meta) {
        return Err(invalid("it is not executable"));
    }
    Ok(PathBuf::from(command))
}

/// Finds the bare `name` in the absolute directories of `path_var`, in order; the first
/// regular executable file wins. Returns the joined path, not canonicalised.
pub(crate) fn find_in_path(name: &str, path_var: &str) -> Option<PathBuf> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return None;
    }
    path_var
        .split(':')
        .filter(|dir| dir.starts_with('/'))
        .map(|dir| Path::new(dir).join(name))
        .find(|candidate| is_executable_file(candidate))
}

/// The file a resolved program finally is, with every symlink followed
/// (`/usr/bin/python3` → `/usr/bin/python3.11`). Falls back to `program` itself when it
/// cannot be canonicalised (it vanished after resolution).
pub(crate) fn canonical_program(program: &Path) -> PathBuf {
    std::fs::canonicalize(program).unwrap_or_else(|_| program.to_path_buf())
}

fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && has_exec_bit(&m))
}

#[cfg(unix)]
fn has_exec_bit(meta: &Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn has_exec_bit(_meta: &Metadata) -> bool {
    // No execute bit to read; a regular file is the best this platform offers.
    true
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt, symlink};

    use super::*;

    fn exec_policy(allowed: &[&str]) -> ExecPolicy {
        ExecPolicy {
            allowed_executables: allowed.iter().map(|s| (*s).to_owned()).collect(),
            ..ExecPolicy::default()
        }
    }

    fn make_exe(dir: &Path, name: &str, mode: u32) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, "#!/bin/true\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn bare_name_resolves_in_path_order_without_canonicalising() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let real = make_exe(b.path(), "python3.11", 0o755);
        symlink(&real, a.path().join("python3")).unwrap();
        make_exe(b.path(), "python3", 0o755);
        let path = format!("{}:{}", a.path().display(), b.path().display());
        let got = resolve_program(&exec_policy(&["python3"]), "python3", &path).unwrap();
        assert_eq!(got, a.path().join("python3"));
        assert_eq!(
            canonical_program(&got),
            std::fs::canonicalize(&real).unwrap()
        );
    }

    #[test]
    fn non_executable_and_directories_are_skipped() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        make_exe(a.path(), "tool", 0o644);
        std::fs::create_dir(a.path().join("dir")).unwrap();
        make_exe(b.path(), "tool", 0o700);
        let path = format!("{}:{}", a.path().display(), b.path().display());
        assert_eq!(find_in_path("tool", &path), Some(b.path().join("tool")));
        assert_eq!(find_in_path("dir", &path), None);
    }

    #[test]
    fn relative_and_empty_path_entries_are_never_searched() {
        let cwd = std::env::current_dir().unwrap();
        let dir = tempfile::tempdir_in(&cwd).unwrap();
        make_exe(dir.path(), "planted", 0o755);
        let rel = dir.path().strip_prefix(&cwd).unwrap().display().to_string();
        assert_eq!(find_in_path("planted", &format!(":{rel}:.")), None);
    }

    #[test]
    fn allowlist_is_exact_and_star_allows_any() {
        assert!(is_allowlisted(&exec_policy(&["git"]), "git"));
        assert!(!is_allowlisted(&exec_policy(&["git"]), "Git"));
        assert!(!is_allowlisted(&exec_policy(&["git"]), "git2"));
        assert!(is_allowlisted(&exec_policy(&["*"]), "anything"));
    }

    #[test]
    fn command_paths_need_the_knob_and_an_absolute_executable() {
        let dir = tempfile::tempdir().unwrap();
        let tool = make_exe(dir.path(), "tool", 0o755);
        let plain = make_exe(dir.path(), "plain", 0o644);
        let tool = tool.to_str().unwrap();
        let mut p = exec_policy(&["tool", "plain", "missing"]);
        let err = resolve_program(&p, tool, "/usr/bin").unwrap_err();
        assert_eq!(err.code(), "exec.command_is_path");
        p.allow_command_paths = true;
        assert_eq!(
            resolve_program(&p, tool, "/usr/bin").unwrap(),
            PathBuf::from(tool)
        );
        for bad in ["./tool", "bin/tool"] {
            assert_eq!(
                resolve_program(&p, bad, "/usr/bin").unwrap_err().code(),
                "exec.command_path_invalid"
            );
        }
        let missing = dir.path().join("missing");
        let err = resolve_program(&p, missing.to_str().unwrap(), "/usr/bin").unwrap_err();
        assert_eq!(err.code(), "exec.command_path_invalid");
        let err = resolve_program(&p, plain.to_str().unwrap(), "/usr/bin").unwrap_err();
        assert_eq!(err.code(), "exec.command_path_invalid");
        let other = dir.path().join("other");
        std::fs::copy(tool, &other).unwrap();
        let err = resolve_program(&p, other.to_str().unwrap(), "/usr/bin").unwrap_err();
        assert_eq!(
            err,
            Rejection::ExecutableNotAllowed {
                name: "other".into(),
                via: String::new()
            }
        );
    }
}
