//! Opening a module file exactly once, as validation saw it.
//!
//! Validation resolves a `module` path to a canonical file inside the workspace; the run
//! opens it later. In between, a guest (or any process that can write the workspace) may
//! swap a component for a symlink leading out. A module inside the workspace is therefore
//! opened component by component from the workspace directory, each component with
//! `O_NOFOLLOW` (the canonical path has no symlinks, so any symlink found is a swap), and
//! its identity and content are taken from that one descriptor. A swap is a rejection
//! that names the module path only: never the content or the existence of what it now
//! points at.

use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use tierbox_policy::Rejection;

/// What identifies a module file's content without reading it: the opened file's
/// device, inode, size, mtime and ctime (ctime cannot be set back by the file's owner).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileIdentity {
    pub(crate) path: PathBuf,
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

/// A module file, opened.
pub(crate) struct ModuleFile {
    /// The path validation resolved, for messages.
    pub(crate) name: String,
    file: File,
    /// Its identity, from the descriptor.
    pub(crate) identity: FileIdentity,
}

impl ModuleFile {
    /// Opens `path` — beneath `workspace` without following any symlink when it lies
    /// there, else (an interpreter from the runtimes directory the policy names) as it is
    /// — and checks it is a regular file of at most `max` bytes.
    pub(crate) fn open(path: &Path, workspace: &Path, max: u64) -> Result<Self, Rejection> {
        let name = path.display().to_string();
        let invalid = |reason: String| Rejection::WasmModuleInvalid {
            module: name.clone(),
            reason,
        };
        let fd = match path.strip_prefix(workspace) {
            Ok(rel) => open_beneath(workspace, rel).map_err(|e| {
                invalid(match e {
                    rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => {
                        "it changed since it was validated (a component is now a symlink or not a directory)".to_owned()
                    }
                    e => format!("it cannot be opened in the workspace: {e}"),
                })
            })?,
            Err(_) => rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
                .map_err(|e| invalid(format!("it cannot be opened: {e}")))?,
        };
        let file = File::from(fd);
        let meta = file
            .metadata()
            .map_err(|e| invalid(format!("it cannot be read: {e}")))?;
        if !meta.is_file() {
            return Err(invalid("it is not a regular file".to_owned()));
        }
        if meta.len() > max {
            return Err(too_big(&name, max));
        }
        use std::os::unix::fs::MetadataExt;
        let identity = FileIdentity {
            path: path.to_path_buf(),
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
        };
        Ok(Self {
            name,
            file,
            identity,
        })
    }

    /// The content, at most `max` bytes.
    pub(crate) fn read(self, max: u64) -> Result<(String, Vec<u8>), Rejection> {
        let mut bytes = Vec::new();
        self.file
            .take(max.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| Rejection::WasmModuleInvalid {
                module: self.name.clone(),
                reason: format!("it cannot be read: {e}"),
            })?;
        if bytes.len() as u64 > max {
            return Err(too_big(&self.name, max));
        }
        Ok((self.name, bytes))
    }
}

fn too_big(name: &str, max: u64) -> Rejection {
    Rejection::WasmModuleInvalid {
        module: name.to_owned(),
        reason: format!("it is more than the policy's wasm.max_module_bytes of {max}"),
    }
}

/// Opens `rel` (relative, no `..`) beneath the directory `root`, one component at a
/// time, never following a symlink.
fn open_beneath(root: &Path, rel: &Path) -> Result<OwnedFd, rustix::io::Errno> {
    let dir_flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut dir = rustix::fs::open(root, dir_flags, Mode::empty())?;
    let parts: Vec<_> = rel.components().collect();
    let Some((last, ancestors)) = parts.split_last() else {
        return Err(rustix::io::Errno::ISDIR);
    };
    let name = |c: &Component<'_>| match c {
        Component::Normal(n) => Ok(n.to_os_string()),
        _ => Err(rustix::io::Errno::INVAL),
    };
    for c in ancestors {
        dir = rustix::fs::openat(&dir, name(c)?, dir_flags | OFlags::NOFOLLOW, Mode::empty())?;
    }
    rustix::fs::openat(
        &dir,
        name(last)?,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK,
        Mode::empty(),
    )
}
