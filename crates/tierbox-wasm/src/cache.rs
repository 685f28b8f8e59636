//! The on-disk cache of compiled code.
//!
//! Layout: `<dir>/<module sha256>-<engine fingerprint>.cwasm` and, next to it, `….sha256`
//! holding the SHA-256 of the `.cwasm` bytes. Both are written under a temporary name and
//! renamed into place. A load checks that the directory is private to this user and that
//! the digest matches before handing the bytes to wasmtime; anything else (missing,
//! mismatched, unreadable) is a miss and the module is compiled again.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Mode of the cache directory: only its owner may read or write compiled code.
pub const CACHE_DIR_MODE: u32 = 0o700;

/// Largest compiled file accepted from the cache, in bytes (1 GiB). Protects memory
/// when a file is corrupt; a real entry for a 256 MiB module stays far below it.
const MAX_CACHED_BYTES: u64 = 1 << 30;

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

#[derive(Debug, Clone)]
pub(crate) struct DiskCache {
    dir: PathBuf,
    fingerprint: String,
}

impl DiskCache {
    pub(crate) fn new(dir: PathBuf, fingerprint: String) -> Self {
        Self { dir, fingerprint }
    }

    fn path(&self, digest: &str, ext: &str) -> PathBuf {
        self.dir
            .join(format!("{digest}-{}.{ext}", self.fingerprint))
    }

    /// The directory exists (created 0700 if absent), is owned by the effective uid and is
    /// not accessible to others.
    fn usable_dir(&self) -> bool {
        if !self.dir.is_dir() {
            let _ = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(CACHE_DIR_MODE)
                .create(&self.dir);
        }
        match std::fs::symlink_metadata(&self.dir) {
            Ok(m) => {
                m.is_dir()
                    && m.uid() == rustix::process::geteuid().as_raw()
                    && m.permissions().mode() & 0o077 == 0
            }
            Err(_) => false,
        }
    }

    /// The verified compiled bytes for `digest`, if present.
    pub(crate) fn get(&self, digest: &str) -> Option<Vec<u8>> {
        if !self.usable_dir() {
            return None;
        }
        let expected = std::fs::read_to_string(self.path(digest, "sha256")).ok()?;
        let path = self.path(digest, "cwasm");
        let meta = std::fs::symlink_metadata(&path).ok()?;
        if !meta.is_file() || meta.len() > MAX_CACHED_BYTES {
            return None;
        }
        let bytes = std::fs::read(&path).ok()?;
        (sha256_hex(&bytes) == expected.trim()).then_some(bytes)
    }

    /// Stores compiled bytes for `digest`. Failures only cost a recompilation later.
    pub(crate) fn put(&self, digest: &str, compiled: &[u8]) {
        if !self.usable_dir() {
            return;
        }
        let _ = write_atomic(&self.path(digest, "cwasm"), compiled).and_then(|()| {
            write_atomic(
                &self.path(digest, "sha256"),
                sha256_hex(compiled).as_bytes(),
            )
        });
    }
}

fn write_atomic(dest: &Path, bytes: &[u8]) -> std::io::Result<()> {
    // Unique per process and call: concurrent writers never share a temporary file.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut name = dest.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.{n}.tmp", std::process::id()));
    let tmp = dest.with_file_name(name);
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_data()?;
        std::fs::rename(&tmp, dest)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_corruption_is_a_miss() {
        let root = tempfile::tempdir().unwrap();
        let cache = DiskCache::new(root.path().join("c"), "fp".to_owned());
        assert_eq!(cache.get("abc"), None);
        cache.put("abc", b"compiled code");
        assert_eq!(cache.get("abc").as_deref(), Some(&b"compiled code"[..]));
        let mode = std::fs::metadata(root.path().join("c"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, CACHE_DIR_MODE);

        std::fs::write(root.path().join("c/abc-fp.cwasm"), b"compiled cod3").unwrap();
        assert_eq!(cache.get("abc"), None, "a flipped byte must not load");

        cache.put("abc", b"compiled code");
        std::fs::set_permissions(
            root.path().join("c"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        assert_eq!(
            cache.get("abc"),
            None,
            "a directory others can read is not trusted"
        );
    }
}
