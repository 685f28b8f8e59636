//! A review mode write kept as a change set of its own: the staged file
//! ([`super::Staged`]) is laid out as an overlay's upper layer would hold it — the file at
//! its path, each directory on the way with the workspace's permission bits (new ones
//! with [`NEW_DIRECTORY_MODE`]) — in a private staging directory of the state directory,
//! then kept by [`ChangeStore::keep`] exactly as an overlay run's changes are (the same
//! scan, flags, fingerprints of what the workspace holds, caps and eviction), and the
//! staging directory removed. Nothing of the workspace is written; `changes apply`
//! applies the set with every check an applied run's set gets.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use super::{FileError, FileFace, FileWritten, NEW_DIRECTORY_MODE, Staged};
use crate::review::{ChangeStore, Keeping};

/// Where, under the state directory, a staged write's upper layer is laid out before its
/// change set is kept (mode 0700; each staging is removed when its set is kept or not).
pub const FILE_STAGING_DIR: &str = "file-writes";

/// Age after which a staging directory is taken as left by a process that died during
/// a write (10 minutes; a staging lives for milliseconds), and removed by the next write.
const STAGING_STALE: Duration = Duration::from_secs(600);

/// Keeps `staged` (of the write of `data` to `path` through `face`) as a change set of
/// `owner`'s under `state_dir`; what the file will be once the set is applied.
pub(super) fn keep(
    state_dir: &Path,
    owner: &str,
    face: &FileFace,
    path: &str,
    staged: Staged,
    data: &[u8],
) -> Result<FileWritten, FileError> {
    let io = |what: &'static str| {
        move |e: std::io::Error| FileError::Io {
            what,
            path: path.to_owned(),
            source: e,
        }
    };
    let base = state_dir.join(FILE_STAGING_DIR);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&base)
        .map_err(io("make the staging directory for"))?;
    sweep_stale(&base);
    let id = crate::supervisor::new_run_id();
    let upper = base.join(&id);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&upper)
        .map_err(io("make the staging directory for"))?;
    let laid = lay_out(&upper, &staged).map_err(io("stage"));
    let kept = laid.map(|()| {
        let (secs, caps) = face.keeping();
        let how = Keeping {
            owner,
            keep_for: Duration::from_secs(secs),
            caps,
        };
        ChangeStore::new(state_dir).keep(&id, &upper, face.workspace(), SystemTime::now(), &how)
    });
    remove_staging(&upper, &staged);
    let kept = kept?;
    let set = kept.changes.map_err(|e| FileError::NotKept {
        path: path.to_owned(),
        why: e.to_string(),
        code: e.code(),
    })?;
    let (uid, gid) = face.owner();
    Ok(FileWritten {
        path: staged.rel.to_string_lossy().into_owned(),
        bytes_written: data.len() as u64,
        size: staged.content.len() as u64,
        sha256: tierbox_attest::jcs::hex(&Sha256::digest(&staged.content)),
        mode: staged.mode,
        uid,
        gid,
        created: staged.created,
        appended: staged.appended,
        kept_as: (!set.is_empty()).then_some(id),
        evicted: kept.evicted.into_iter().map(|e| e.run_id).collect(),
        audit_error: None,
    })
}

/// The file and the directories on its way under `upper`, as an overlay's upper layer
/// holds them; the directories get their modes last (deepest first), so one without the
/// owner's write bit is still filled.
fn lay_out(upper: &Path, staged: &Staged) -> std::io::Result<()> {
    let mut dirs: Vec<(PathBuf, u32)> = Vec::new();
    let mut at = upper.to_path_buf();
    let parent = staged.rel.parent().unwrap_or(Path::new(""));
    for (i, name) in parent.iter().enumerate() {
        at.push(name);
        std::fs::DirBuilder::new().mode(0o700).create(&at)?;
        let mode = staged
            .dir_modes
            .get(i)
            .copied()
            .unwrap_or(NEW_DIRECTORY_MODE);
        dirs.push((at.clone(), mode));
    }
    let file = upper.join(&staged.rel);
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&file)?;
    out.write_all(&staged.content)?;
    out.set_permissions(std::fs::Permissions::from_mode(staged.mode))?;
    drop(out);
    for (dir, mode) in dirs.iter().rev() {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(*mode))?;
    }
    Ok(())
}

/// Removes the staging `upper`, giving its directories back the owner's write bit first
/// (a workspace directory without it was mirrored).
fn remove_staging(upper: &Path, staged: &Staged) {
    let mut at = upper.to_path_buf();
    for name in staged.rel.parent().unwrap_or(Path::new("")).iter() {
        at.push(name);
        let _ = std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o700));
    }
    let _ = std::fs::remove_dir_all(upper);
}

/// Removes the staging directories under `base` older than [`STAGING_STALE`].
fn sweep_stale(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > STAGING_STALE);
        if old {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
