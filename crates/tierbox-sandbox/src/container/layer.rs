//! Review mode on podman: the overlay's upper layer as a size-limited tmpfs the supervisor
//! mounts on the host, which podman's overlay volume (`-v ws:ws:O,upperdir=…,workdir=…`)
//! writes into. Needs a root supervisor (mounting a tmpfs on the host).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use rustix::mount::{MountFlags, UnmountFlags};

use super::{LAYER_UPPER as UPPER, LAYER_WORK as WORK};

/// A tmpfs mounted on the host for one run's upper layer; unmounted (lazily: an open fd
/// keeps its content readable) and removed when dropped.
#[derive(Debug)]
pub struct LayerMount {
    dir: PathBuf,
}

impl LayerMount {
    /// Mounts a tmpfs of `size_bytes` on the new directory `dir` (mode 0700, `nosuid`,
    /// `nodev`) with `upper` owned by `owner` (uid, gid, permission bits: the workspace
    /// root's, which the overlay's root shows) and `work`; returns it and an `O_PATH` fd
    /// of its root.
    pub fn create(
        dir: &Path,
        size_bytes: u64,
        owner: (u32, u32, u32),
    ) -> std::io::Result<(Self, OwnedFd)> {
        std::fs::create_dir(dir)?;
        let layer = Self {
            dir: dir.to_path_buf(),
        };
        let data = std::ffi::CString::new(format!("size={size_bytes},mode=700"))
            .map_err(std::io::Error::other)?;
        rustix::mount::mount(
            "tmpfs",
            dir,
            "tmpfs",
            MountFlags::NOSUID | MountFlags::NODEV,
            Some(data.as_c_str()),
        )?;
        let upper = dir.join(UPPER);
        std::fs::create_dir(&upper)?;
        std::fs::create_dir(dir.join(WORK))?;
        let (uid, gid, mode) = owner;
        rustix::fs::chown(
            &upper,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
        )?;
        rustix::fs::chmod(&upper, Mode::from_raw_mode(mode & 0o7777))?;
        let fd = rustix::fs::open(
            dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok((layer, fd))
    }

    /// The tmpfs's mount point.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for LayerMount {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount(&self.dir, UnmountFlags::DETACH);
        let _ = std::fs::remove_dir(&self.dir);
    }
}
