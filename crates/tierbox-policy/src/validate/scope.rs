//! Workspace scope. (Being completed.)

use std::path::{Path, PathBuf};

use crate::rejection::Rejection;

pub(crate) fn canonical_workspace(root: &Path) -> Result<PathBuf, Rejection> {
    let canon = std::fs::canonicalize(root).map_err(|e| Rejection::WorkspaceInvalid {
        path: root.to_path_buf(),
        reason: e.to_string(),
    })?;
    if !canon.is_dir() {
        return Err(Rejection::WorkspaceInvalid { path: root.to_path_buf(), reason: "not a directory".to_owned() });
    }
    Ok(canon)
}

pub(crate) fn resolve_cwd(workspace: &Path, cwd: Option<&str>) -> Result<PathBuf, Rejection> {
    let Some(cwd) = cwd else { return Ok(workspace.to_path_buf()) };
    let joined = workspace.join(cwd);
    let canon = std::fs::canonicalize(&joined).map_err(|_| Rejection::CwdNotDirectory { cwd: cwd.to_owned() })?;
    if !canon.starts_with(workspace) {
        return Err(Rejection::CwdOutsideWorkspace { cwd: cwd.to_owned(), resolved: canon, workspace: workspace.to_path_buf() });
    }
    if !canon.is_dir() {
        return Err(Rejection::CwdNotDirectory { cwd: cwd.to_owned() });
    }
    Ok(canon)
}

pub(crate) fn check_args(_workspace: &Path, _cwd: &Path, _args: &[String]) -> Result<(), Rejection> {
    Ok(())
}
