//! Ed25519 signing keys: loading, first-use creation, and public-key export.
//!
//! Invariants: a key file is used only if it is a regular file (not a symlink: opened
//! with `O_NOFOLLOW`), owned by the effective uid, and not readable or writable by group
//! or others (mode `& 0o077 == 0`); checks are made on the opened descriptor, so the
//! file cannot be swapped between check and read. A created key is written with
//! `create_new` + `O_NOFOLLOW` + mode 0600 and fsynced, as is its directory.
//!
//! File format: PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`), the format of
//! `openssl genpkey -algorithm ed25519`, so `openssl pkey -in attest-key -pubout` prints
//! the public key. Public keys are exported as 64 hex digits or as SubjectPublicKeyInfo
//! PEM (`openssl pkey -pubin -in key.pem` reads it).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use ed25519_dalek::{SigningKey, VerifyingKey};

/// Name of the key created on first use in the state directory.
pub const KEY_FILE: &str = "attest-key";

/// DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410 §4), followed by the 32-byte key.
const SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];
/// DER prefix of an Ed25519 PKCS#8 v1 private key (RFC 8410 §7), followed by the 32-byte seed.
const PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

/// Why a key could not be loaded, created or parsed.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// An I/O error on `path`.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done (`"opening"`, `"reading"`, …).
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The key file is not a regular file owned by this user with mode 0600 (or stricter).
    #[error(
        "{path} must be a regular file owned by uid {euid} with no group/other access \
         (found uid {uid}, mode {mode:o}); fix or remove it"
    )]
    InsecureFile {
        /// The key file.
        path: PathBuf,
        /// Its owner.
        uid: u32,
        /// Its mode bits.
        mode: u32,
        /// The effective uid.
        euid: u32,
    },
    /// The content is not an Ed25519 key in the expected format.
    #[error("{what} is not an ed25519 {expected}")]
    Format {
        /// Where the text came from.
        what: String,
        /// What was expected.
        expected: &'static str,
    },
}

/// Loads a signing key from `path` (PKCS#8 PEM, or 64 hex digits of the seed).
pub fn load_signing_key(path: &Path) -> Result<SigningKey, KeyError> {
    let io = |op, source| KeyError::Io {
        op,
        path: path.to_owned(),
        source,
    };
    // O_NONBLOCK: a FIFO planted at the path must not hang the open; it is then
    // refused as not a regular file.
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| io("opening", e))?;
    let meta = f.metadata().map_err(|e| io("inspecting", e))?;
    let euid = rustix::process::geteuid().as_raw();
    if !meta.is_file() || meta.uid() != euid || meta.mode() & 0o077 != 0 {
        return Err(KeyError::InsecureFile {
            path: path.to_owned(),
            uid: meta.uid(),
            mode: meta.mode() & 0o7777,
            euid,
        });
    }
    let mut text = String::new();
    // A key file is a few hundred bytes; cap the read so a wrong path cannot exhaust memory.
    Read::by_ref(&mut f)
        .take(16 * 1024)
        .read_to_string(&mut text)
        .map_err(|e| io("reading", e))?;
    parse_signing_key(&text, &path.display().to_string())
}

/// Parses a signing key: PKCS#8 PEM (`openssl genpkey -algorithm ed25519`) or the
/// 32-byte seed as 64 hex digits.
pub fn parse_signing_key(text: &str, what: &str) -> Result<SigningKey, KeyError> {
    let err = || KeyError::Format {
        what: what.to_owned(),
        expected: "private key (PKCS#8 PEM or 64 hex digits)",
    };
    let t = text.trim();
    let seed: [u8; 32] = if t.starts_with("-----BEGIN") {
        let der = pem_decode(t, "PRIVATE KEY").ok_or_else(err)?;
        der.strip_prefix(&PKCS8_PREFIX[..])
            .and_then(|s| <[u8; 32]>::try_from(s).ok())
            .ok_or_else(err)?
    } else {
        parse_hex(t).ok_or_else(err)?
    };
    Ok(SigningKey::from_bytes(&seed))
}

/// Mode a state directory is created with when the key is its first content: the owner
/// has everything, others may only traverse (the runner's `STATE_DIR_MODE`).
pub const STATE_DIR_MODE: u32 = 0o711;

/// Loads `<state_dir>/attest-key`, creating it (and `state_dir`, mode
/// [`STATE_DIR_MODE`]) on first use.
/// Returns the key and, if it was just created, its path.
pub fn load_or_create_signing_key(
    state_dir: &Path,
) -> Result<(SigningKey, Option<PathBuf>), KeyError> {
    let path = state_dir.join(KEY_FILE);
    match load_signing_key(&path) {
        Err(KeyError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
        other => return other.map(|k| (k, None)),
    }
    let io = |op, p: &Path, source| KeyError::Io {
        op,
        path: p.to_owned(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(STATE_DIR_MODE)
        .create(state_dir)
        .map_err(|e| io("creating", state_dir, e))?;
    let mut seed = [0u8; 32];
    os_random(&mut seed).map_err(|e| io("reading", Path::new("/dev/urandom"), e))?;
    let key = SigningKey::from_bytes(&seed);
    seed.fill(0);
    let created = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path);
    let mut f = match created {
        Ok(f) => f,
        // Another process created it first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return load_signing_key(&path).map(|k| (k, None));
        }
        Err(e) => return Err(io("creating", &path, e)),
    };
    f.write_all(signing_key_pem(&key).as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| io("writing", &path, e))?;
    File::open(state_dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io("syncing", state_dir, e))?;
    Ok((key, Some(path)))
}

/// The private key as PKCS#8 PEM.
pub fn signing_key_pem(key: &SigningKey) -> String {
    let mut der = PKCS8_PREFIX.to_vec();
    der.extend_from_slice(key.as_bytes());
    pem_encode("PRIVATE KEY", &der)
}

/// The public key as 64 lowercase hex digits.
///
/// ```
/// let key = ed25519_dalek::SigningKey::from_bytes(&[0; 32]);
/// assert_eq!(
///     tierbox_attest::public_key_hex(&key.verifying_key()),
///     "3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29"
/// );
/// ```
pub fn public_key_hex(key: &VerifyingKey) -> String {
    hex(key.as_bytes())
}

/// The public key as SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`).
///
/// ```
/// let key = ed25519_dalek::SigningKey::from_bytes(&[0; 32]);
/// let pem = tierbox_attest::public_key_pem(&key.verifying_key());
/// assert_eq!(
///     pem,
///     "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAO2onvM62pC1io6jQKm8Nc2UyFXcd4kOmOsBIoYtZ2ik=\n-----END PUBLIC KEY-----\n"
/// );
/// assert_eq!(tierbox_attest::parse_public_key(&pem, "pem").unwrap(), key.verifying_key());
/// ```
pub fn public_key_pem(key: &VerifyingKey) -> String {
    let mut der = SPKI_PREFIX.to_vec();
    der.extend_from_slice(key.as_bytes());
    pem_encode("PUBLIC KEY", &der)
}

/// Parses a public key given as 64 hex digits or as SubjectPublicKeyInfo PEM.
pub fn parse_public_key(text: &str, what: &str) -> Result<VerifyingKey, KeyError> {
    let err = || KeyError::Format {
        what: what.to_owned(),
        expected: "public key (64 hex digits or PEM SubjectPublicKeyInfo)",
    };
    let t = text.trim();
    let bytes: [u8; 32] = if t.starts_with("-----BEGIN") {
        let der = pem_decode(t, "PUBLIC KEY").ok_or_else(err)?;
        der.strip_prefix(&SPKI_PREFIX[..])
            .and_then(|s| <[u8; 32]>::try_from(s).ok())
            .ok_or_else(err)?
    } else {
        parse_hex(t).ok_or_else(err)?
    };
    VerifyingKey::from_bytes(&bytes).map_err(|_| err())
}

/// Fills `buf` from `/dev/urandom`, opened once per process (every attestation draws
/// its id from it).
pub(crate) fn os_random(buf: &mut [u8]) -> std::io::Result<()> {
    static URANDOM: std::sync::OnceLock<File> = std::sync::OnceLock::new();
    let file = match URANDOM.get() {
        Some(f) => f,
        None => {
            let opened = File::open("/dev/urandom")?;
            URANDOM.get_or_init(|| opened)
        }
    };
    (&*file).read_exact(buf)
}

/// Lowercase hex.
pub(crate) use crate::jcs::hex;

/// Parses exactly `N` bytes of lowercase hex.
pub(crate) fn parse_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let s = s.as_bytes();
    if s.len() != 2 * N {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = nibble(s[2 * i])? << 4 | nibble(s[2 * i + 1])?;
    }
    Some(out)
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn pem_encode(label: &str, der: &[u8]) -> String {
    let mut b64 = String::new();
    for chunk in der.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &b)| acc | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                b64.push(char::from(B64[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                b64.push('=');
            }
        }
    }
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

fn pem_decode(text: &str, label: &str) -> Option<Vec<u8>> {
    let body = text
        .trim()
        .strip_prefix(&format!("-----BEGIN {label}-----"))?
        .strip_suffix(&format!("-----END {label}-----"))?;
    let chars: Vec<u8> = body.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if !chars.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::new();
    for quad in chars.chunks(4) {
        let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 {
            return None;
        }
        let mut n = 0u32;
        for (i, &c) in quad.iter().enumerate() {
            let v = if i >= 4 - pad {
                0
            } else {
                u32::try_from(B64.iter().position(|&x| x == c)?).ok()?
            };
            n |= v << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..4 - pad]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn pem_round_trips_every_length() {
        for len in 0..70u8 {
            let der: Vec<u8> = (0..len).map(|i| i.wrapping_mul(37)).collect();
            assert_eq!(
                pem_decode(&pem_encode("X", &der), "X").unwrap(),
                der,
                "{len}"
            );
        }
    }

    #[test]
    fn created_on_first_use_then_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let (k1, created) = load_or_create_signing_key(&state).unwrap();
        let path = created.unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let (k2, again) = load_or_create_signing_key(&state).unwrap();
        assert!(again.is_none());
        assert_eq!(k1.to_bytes(), k2.to_bytes());
        assert_eq!(load_signing_key(&path).unwrap().to_bytes(), k1.to_bytes());
    }

    #[test]
    fn group_readable_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (_, created) = load_or_create_signing_key(dir.path()).unwrap();
        let path = created.unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let err = load_or_create_signing_key(dir.path()).unwrap_err();
        assert!(
            matches!(err, KeyError::InsecureFile { mode: 0o640, .. }),
            "{err}"
        );
    }

    #[test]
    fn symlinked_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::write(&real, hex(&[1; 32])).unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join(KEY_FILE)).unwrap();
        let err = load_or_create_signing_key(dir.path()).unwrap_err();
        assert!(matches!(err, KeyError::Io { op: "opening", .. }), "{err}");
        assert!(load_signing_key(&real).is_ok());
    }

    #[test]
    fn hex_and_pem_public_keys_parse() {
        let k = SigningKey::from_bytes(&[9; 32]).verifying_key();
        assert_eq!(parse_public_key(&public_key_hex(&k), "x").unwrap(), k);
        assert_eq!(parse_public_key(&public_key_pem(&k), "x").unwrap(), k);
        assert!(parse_public_key("zz", "x").is_err());
        assert!(parse_public_key(&public_key_hex(&k).to_uppercase(), "x").is_err());
    }

    #[test]
    fn openssl_reads_our_keys_when_present() {
        if std::process::Command::new("openssl")
            .arg("version")
            .output()
            .is_err()
        {
            tierbox_test_support::skip_here("openssl not installed");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let (key, created) = load_or_create_signing_key(dir.path()).unwrap();
        let out = std::process::Command::new("openssl")
            .args(["pkey", "-pubout", "-in"])
            .arg(created.unwrap())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            public_key_pem(&key.verifying_key())
        );
    }
}
