//! The on-disk cache of compiled code.
//!
//! Layout: `<dir>/<module sha256>-<engine fingerprint>.cwasm` and, next to it, `….mac`
//! holding the HMAC-SHA256 of the entry (its name and its bytes) under the cache's key.
//! The key is 32 random bytes in `<dir>.key` (beside the directory, mode 0600, made once).
//! A compiled module is native code that wasmtime runs as it is, so an entry is loaded
//! only when its MAC verifies: a sandbox that could rewrite both the code and a plain
//! digest beside it would otherwise run code in the supervisor. Neither the directory nor
//! the key is reachable from a run (validation refuses every grant of the state
//! directory); the MAC holds even if one were. Both files are written under a temporary
//! name and renamed into place. A load also checks that the directory and the entry are
//! private to this user; anything else (missing, mismatched, unreadable) is a miss and the
//! module is compiled again, and an entry that exists but fails its check is reported
//! ([`Lookup::Refused`]).

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// Mode of the cache directory: only its owner may read or write compiled code.
pub const CACHE_DIR_MODE: u32 = 0o700;

/// Mode of the cache's MAC key file.
pub const CACHE_KEY_MODE: u32 = 0o600;

/// Length of the cache's MAC key, in bytes (the HMAC-SHA256 block-sized secret).
const CACHE_KEY_BYTES: usize = 32;

/// Largest compiled file accepted from the cache, in bytes (1 GiB). Protects memory
/// when a file is corrupt; a real entry for a 256 MiB module stays far below it.
const MAX_CACHED_BYTES: u64 = 1 << 30;

/// Domain separation of the MAC input, with its format version.
const MAC_CONTEXT: &[u8] = b"tierbox-wasm-cache-v1\0";

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// What the disk cache holds for a module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Verified compiled bytes.
    Hit(Vec<u8>),
    /// No usable entry (none, or no usable cache).
    Miss,
    /// An entry exists but failed its checks: never loaded; why.
    Refused(String),
}

#[derive(Clone)]
pub(crate) struct DiskCache {
    dir: PathBuf,
    fingerprint: String,
    /// `None`: the key could not be read or made safely, and the cache is off.
    key: Option<[u8; CACHE_KEY_BYTES]>,
}

impl std::fmt::Debug for DiskCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskCache")
            .field("dir", &self.dir)
            .field("fingerprint", &self.fingerprint)
            .field("key", &self.key.map(|_| "<set>"))
            .finish()
    }
}

impl DiskCache {
    pub(crate) fn new(dir: PathBuf, fingerprint: String) -> Self {
        let key = Self::usable_dir_at(&dir)
            .then(|| load_or_create_key(&key_path(&dir)))
            .flatten();
        Self {
            dir,
            fingerprint,
            key,
        }
    }

    fn path(&self, digest: &str, ext: &str) -> PathBuf {
        self.dir
            .join(format!("{digest}-{}.{ext}", self.fingerprint))
    }

    /// The directory exists (created 0700 if absent), is owned by the effective uid and is
    /// not accessible to others.
    fn usable_dir_at(dir: &Path) -> bool {
        if !dir.is_dir() {
            let _ = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(CACHE_DIR_MODE)
                .create(dir);
        }
        std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && private(&m))
    }

    /// The MAC of entry `digest` holding `compiled`.
    fn mac(&self, key: &[u8], digest: &str, compiled: &[u8]) -> Option<Hmac<Sha256>> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).ok()?;
        for part in [
            MAC_CONTEXT,
            digest.as_bytes(),
            b"\0",
            self.fingerprint.as_bytes(),
            b"\0",
        ] {
            mac.update(part);
        }
        mac.update(compiled);
        Some(mac)
    }

    /// The verified compiled bytes for `digest`, if present.
    pub(crate) fn get(&self, digest: &str) -> Lookup {
        let Some(key) = &self.key else {
            return Lookup::Miss;
        };
        if !Self::usable_dir_at(&self.dir) {
            return Lookup::Miss;
        }
        let path = self.path(digest, "cwasm");
        let Some(bytes) = read_private(&path) else {
            return if std::fs::symlink_metadata(&path).is_ok() {
                Lookup::Refused(format!(
                    "{}: not a regular file of this user's, private and at most {MAX_CACHED_BYTES} bytes",
                    path.display()
                ))
            } else {
                Lookup::Miss
            };
        };
        let tag = read_private(&self.path(digest, "mac"))
            .and_then(|t| String::from_utf8(t).ok())
            .and_then(|t| parse_hex(t.trim()));
        let verified = match (tag, self.mac(key, digest, &bytes)) {
            (Some(tag), Some(mac)) => mac.verify_slice(&tag).is_ok(),
            _ => false,
        };
        if verified {
            Lookup::Hit(bytes)
        } else {
            Lookup::Refused(format!(
                "{}: its MAC does not verify (changed since Tierbox stored it)",
                path.display()
            ))
        }
    }

    /// Stores compiled bytes for `digest`. Failures only cost a recompilation later.
    pub(crate) fn put(&self, digest: &str, compiled: &[u8]) {
        let Some(key) = &self.key else {
            return;
        };
        if !Self::usable_dir_at(&self.dir) {
            return;
        }
        let Some(mac) = self.mac(key, digest, compiled) else {
            return;
        };
        let tag = hex(&mac.finalize().into_bytes());
        let _ = write_atomic(&self.path(digest, "cwasm"), compiled)
            .and_then(|()| write_atomic(&self.path(digest, "mac"), tag.as_bytes()));
    }
}

/// The key file of the cache in `dir`: `<dir>.key`, beside it.
fn key_path(dir: &Path) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(".key");
    dir.with_file_name(name)
}

/// Owned by the effective uid, and neither group nor others may read or write it.
fn private(meta: &std::fs::Metadata) -> bool {
    meta.uid() == rustix::process::geteuid().as_raw() && meta.permissions().mode() & 0o077 == 0
}

/// The content of `path` when it is a regular file (never through a symlink), private
/// to this user and at most [`MAX_CACHED_BYTES`]; checked on the open descriptor.
fn read_private(path: &Path) -> Option<Vec<u8>> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(
            rustix::fs::OFlags::NOFOLLOW.bits() as i32 | rustix::fs::OFlags::NONBLOCK.bits() as i32,
        )
        .open(path)
        .ok()?;
    let meta = f.metadata().ok()?;
    if !meta.is_file() || !private(&meta) || meta.len() > MAX_CACHED_BYTES {
        return None;
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).ok()?);
    Read::by_ref(&mut f)
        .take(MAX_CACHED_BYTES)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(bytes)
}

/// The cache key at `path`, created from the OS's random source on first use (mode 0600,
/// never through a symlink); `None` when it exists but is not a private regular file of
/// [`CACHE_KEY_BYTES`] bytes, or cannot be made.
fn load_or_create_key(path: &Path) -> Option<[u8; CACHE_KEY_BYTES]> {
    if let Some(bytes) = read_private(path) {
        return <[u8; CACHE_KEY_BYTES]>::try_from(bytes.as_slice()).ok();
    }
    if std::fs::symlink_metadata(path).is_ok() {
        return None;
    }
    let mut key = [0u8; CACHE_KEY_BYTES];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut r| r.read_exact(&mut key))
        .ok()?;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(CACHE_KEY_MODE)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
    {
        Ok(mut f) => {
            f.write_all(&key).and_then(|()| f.sync_all()).ok()?;
            Some(key)
        }
        // Another process made it first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            read_private(path).and_then(|b| <[u8; CACHE_KEY_BYTES]>::try_from(b.as_slice()).ok())
        }
        Err(_) => None,
    }
}

fn parse_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
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

    fn hit(bytes: &[u8]) -> Lookup {
        Lookup::Hit(bytes.to_vec())
    }

    #[test]
    fn entries_round_trip_and_only_what_tierbox_stored_loads() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("c");
        let cache = DiskCache::new(dir.clone(), "fp".to_owned());
        assert_eq!(cache.get("abc"), Lookup::Miss);
        cache.put("abc", b"compiled code");
        assert_eq!(cache.get("abc"), hit(b"compiled code"));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), CACHE_DIR_MODE);
        assert_eq!(mode(&root.path().join("c.key")), CACHE_KEY_MODE);
        assert_eq!(
            std::fs::metadata(root.path().join("c.key")).unwrap().len(),
            32
        );
        // A second cache (another process) shares the key and the entries.
        let again = DiskCache::new(dir.clone(), "fp".to_owned());
        assert_eq!(again.get("abc"), hit(b"compiled code"));
        // Another engine fingerprint is another entry.
        assert_eq!(
            DiskCache::new(dir.clone(), "fq".to_owned()).get("abc"),
            Lookup::Miss
        );

        // Patched code with a digest sidecar rewritten to match (the attack on a plain
        // hash): refused, never loaded.
        let code = dir.join("abc-fp.cwasm");
        std::fs::write(&code, b"compiled cod3").unwrap();
        std::fs::write(dir.join("abc-fp.mac"), sha256_hex(b"compiled cod3")).unwrap();
        assert!(matches!(cache.get("abc"), Lookup::Refused(why) if why.contains("MAC")));
        // Code moved from another entry with its MAC: the MAC binds the name too.
        cache.put("other", b"other code");
        std::fs::copy(dir.join("other-fp.cwasm"), &code).unwrap();
        std::fs::copy(dir.join("other-fp.mac"), dir.join("abc-fp.mac")).unwrap();
        assert!(matches!(cache.get("abc"), Lookup::Refused(_)));
        // A symlinked entry is refused, even to a file that would verify.
        std::fs::remove_file(&code).unwrap();
        cache.put("abc", b"compiled code");
        std::fs::rename(&code, dir.join("real")).unwrap();
        std::os::unix::fs::symlink(dir.join("real"), &code).unwrap();
        assert!(matches!(cache.get("abc"), Lookup::Refused(_)));

        // A directory others can read is not trusted: the cache is off.
        std::fs::remove_file(&code).unwrap();
        cache.put("abc", b"compiled code");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(cache.get("abc"), Lookup::Miss);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(cache.get("abc"), hit(b"compiled code"));
    }

    #[test]
    fn a_key_others_can_read_or_of_the_wrong_size_turns_the_cache_off() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("c");
        let key = root.path().join("c.key");
        DiskCache::new(dir.clone(), "fp".to_owned()).put("abc", b"code");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let cache = DiskCache::new(dir.clone(), "fp".to_owned());
        assert!(cache.key.is_none());
        assert_eq!(cache.get("abc"), Lookup::Miss);
        std::fs::write(&key, b"short").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(DiskCache::new(dir.clone(), "fp".to_owned()).key.is_none());
        std::fs::remove_file(&key).unwrap();
        std::os::unix::fs::symlink(root.path().join("elsewhere"), &key).unwrap();
        assert!(DiskCache::new(dir, "fp".to_owned()).key.is_none());
        assert!(
            !root.path().join("elsewhere").exists(),
            "a key written through a symlink"
        );
    }
}
