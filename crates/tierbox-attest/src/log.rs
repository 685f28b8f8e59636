//! The audit log: append-only JSON lines chained by SHA-256.
//!
//! Each line is the JCS encoding of a [`LogRecord`] followed by `\n`:
//! `{"digest":…,"prev":…,"record":{"kind":…},"seq":N}` where
//!
//! - `seq` counts records from 1 across rotations (a rotated-to file continues it);
//! - `prev` is the previous record's `digest`, or [`GENESIS`] for `seq` 1;
//! - `digest = sha256(LOG_DOMAIN || jcs({"prev","record","seq"}))`, hex.
//!
//! Invariants kept by [`AuditLog`]: one writer at a time (an exclusive `flock` on the
//! file around each append; a writer first verifies what others appended); each record is one `write(2)` on an `O_APPEND` descriptor followed by
//! `fsync` (`File::sync_data`) before `append` returns, so an acknowledged record
//! survives a crash; a failed write is cut back with `ftruncate` so no partial line is
//! left behind; the file is mode 0600 and opened with `O_NOFOLLOW`.
//!
//! What [`verify_log`] detects, with the 1-based line number: a modified record (digest
//! mismatch, or a broken `prev` link on the next line if the forger recomputed the
//! digest), a deleted, inserted or reordered record (`seq`/`prev` mismatch), a line that
//! is not exactly canonical, a torn last line (no trailing newline), and a bad signature.
//! What it cannot detect alone: removal of whole records *at the end* (a cut at a record
//! boundary) or replacement of the last record with a re-hashed one — a hash chain has
//! no secret. Pass the head recorded elsewhere ([`VerifyOptions::expected_head`]: e.g.
//! the last `(seq, digest)` returned by [`AuditLog::append`] and kept by the caller) to
//! catch those; with a trusted key, forged records need the signing key as well.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use ed25519_dalek::VerifyingKey;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::attestation::{SignedAttestation, VerifyError, verify_envelope};
use crate::jcs::{JcsError, jcs};
use crate::sha256_hex;

/// Domain-separation prefix of record digests.
pub const LOG_DOMAIN: &str = "tierbox.audit.v1\n";
/// `prev` of the first record of a chain: 64 zeros.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";
/// Longest accepted line, bytes (a signed attestation is a few KiB; this bounds memory
/// when verifying a hostile file).
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogRecord {
    /// Position in the chain, from 1.
    pub seq: u64,
    /// `digest` of the previous record, or [`GENESIS`].
    pub prev: String,
    /// The entry.
    pub record: Entry,
    /// `sha256(LOG_DOMAIN || jcs({"prev","record","seq"}))`, hex.
    pub digest: String,
}

/// What a log record holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Entry {
    /// A signed attestation of a run or of a rejection.
    Attestation {
        /// The envelope.
        envelope: Box<SignedAttestation>,
    },
    /// First record of a file started by [`AuditLog::rotate`]: anchors the chain to the
    /// last record of the rotated file.
    Rotation {
        /// File name the previous records were moved to.
        previous_file: String,
        /// `seq` of the last record there.
        previous_seq: u64,
        /// `digest` of the last record there (also this record's `prev`).
        previous_digest: String,
    },
}

/// A position in the chain: the last record's `seq` and `digest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    /// `seq` of the record.
    pub seq: u64,
    /// `digest` of the record.
    pub digest: String,
}

impl std::fmt::Display for Head {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "seq {} digest {}", self.seq, self.digest)
    }
}

/// What a verified log holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Number of records.
    pub records: u64,
    /// What the first record chains to: `(0, GENESIS)` for a fresh chain, or the
    /// rotated file's head.
    pub anchor: Head,
    /// The last record, or `None` for an empty file.
    pub head: Option<Head>,
}

/// Options of [`verify_log_with`]. The default checks every signature under the key
/// each envelope names, and nothing outside the file.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// Require every attestation to be signed by this key.
    pub trusted_key: Option<VerifyingKey>,
    /// Require the file to end at this record (detects a cut at a record boundary).
    pub expected_head: Option<Head>,
    /// Require the first record to chain to this head (the previous file's, when
    /// verifying rotated files in order).
    pub anchor: Option<Head>,
    /// Verify each envelope's digest and signature (default `true`).
    pub check_signatures: bool,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        Self {
            trusted_key: None,
            expected_head: None,
            anchor: None,
            check_signatures: true,
        }
    }
}

/// Why a log could not be written or did not verify. Line numbers are 1-based.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// An I/O error on `path`.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The last line has no trailing newline: a torn write or a truncated file.
    #[error("line {line}: truncated record (no trailing newline)")]
    Truncated {
        /// Line number.
        line: u64,
    },
    /// Not JSON, not a record, or too long.
    #[error("line {line}: malformed record: {reason}")]
    Malformed {
        /// Line number.
        line: u64,
        /// Why.
        reason: String,
    },
    /// Valid JSON but not byte-for-byte the JCS encoding of itself.
    #[error("line {line}: record is not in canonical form (modified)")]
    NotCanonical {
        /// Line number.
        line: u64,
    },
    /// The record's content does not hash to its `digest`.
    #[error("line {line}: digest mismatch (record modified)")]
    DigestMismatch {
        /// Line number.
        line: u64,
    },
    /// `seq` is not the expected next number.
    #[error(
        "line {line}: expected seq {expected}, found {found} (record deleted, inserted or reordered)"
    )]
    SeqMismatch {
        /// Line number.
        line: u64,
        /// Expected seq.
        expected: u64,
        /// Found seq.
        found: u64,
    },
    /// `prev` is not the previous record's digest.
    #[error("line {line}: prev does not match the previous record's digest (chain broken)")]
    PrevMismatch {
        /// Line number.
        line: u64,
    },
    /// A rotation record anywhere but the first line, or an inconsistent one.
    #[error("line {line}: misplaced or inconsistent rotation record")]
    BadRotation {
        /// Line number.
        line: u64,
    },
    /// An attestation in the log does not verify.
    #[error("line {line}: attestation does not verify: {source}")]
    Attestation {
        /// Line number.
        line: u64,
        /// Why.
        source: VerifyError,
    },
    /// The file does not end at the expected head (records cut from the end).
    #[error("log ends at {found}, expected {expected}")]
    HeadMismatch {
        /// The expected head.
        expected: Head,
        /// What the file ends at (`none` if empty).
        found: String,
    },
    /// The entry cannot be encoded.
    #[error("record cannot be canonicalized: {0}")]
    Jcs(#[from] JcsError),
    /// [`AuditLog::rotate`] on a log with no records.
    #[error("{0} has no records to rotate")]
    Empty(PathBuf),
}

fn record_digest(seq: u64, prev: &str, record: &Value) -> Result<String, JcsError> {
    let body = serde_json::json!({ "seq": seq, "prev": prev, "record": record });
    let mut bytes = LOG_DOMAIN.as_bytes().to_vec();
    bytes.extend_from_slice(jcs(&body)?.as_bytes());
    Ok(sha256_hex(&bytes))
}

/// Builds the canonical line (with its newline) for `entry` after `head`.
fn encode_record(after: &Head, entry: &Entry) -> Result<(String, Head), LogError> {
    let record = serde_json::to_value(entry).map_err(|e| LogError::Malformed {
        line: after.seq + 1,
        reason: e.to_string(),
    })?;
    let seq = after.seq + 1;
    let digest = record_digest(seq, &after.digest, &record)?;
    let line = jcs(&serde_json::json!({
        "seq": seq, "prev": after.digest, "record": record, "digest": digest,
    }))?;
    Ok((format!("{line}\n"), Head { seq, digest }))
}

fn genesis() -> Head {
    Head {
        seq: 0,
        digest: GENESIS.to_owned(),
    }
}

/// Verifies the log at `path` with the default [`VerifyOptions`].
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("audit.jsonl");
/// let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
/// let mut log = tierbox_attest::AuditLog::open(&path).unwrap();
/// let signed = tierbox_attest::sign(tierbox_attest::example_attestation(), &key).unwrap();
/// let head = log.append(signed).unwrap();
/// let summary = tierbox_attest::verify_log(&path).unwrap();
/// assert_eq!((summary.records, summary.head), (1, Some(head)));
/// ```
pub fn verify_log(path: &Path) -> Result<Summary, LogError> {
    verify_log_with(path, &VerifyOptions::default())
}

/// Verifies rotated files given oldest first (the current file last): each file must
/// verify and chain to the previous one's head.
pub fn verify_log_files(paths: &[PathBuf], options: &VerifyOptions) -> Result<Summary, LogError> {
    let mut total = 0;
    let mut first_anchor = None;
    let mut anchor = options.anchor.clone();
    let mut last = None;
    for (i, p) in paths.iter().enumerate() {
        let opts = VerifyOptions {
            anchor: anchor.clone(),
            expected_head: if i + 1 == paths.len() {
                options.expected_head.clone()
            } else {
                None
            },
            ..options.clone()
        };
        let s = verify_log_with(p, &opts)?;
        total += s.records;
        first_anchor.get_or_insert(s.anchor.clone());
        if s.head.is_some() {
            anchor = s.head.clone();
            last = s.head;
        }
    }
    Ok(Summary {
        records: total,
        anchor: first_anchor.unwrap_or_else(genesis),
        head: last,
    })
}

/// Verifies the log at `path`: every line canonical and correctly hashed, `seq`
/// consecutive, `prev` chained, attestations verified (see [`VerifyOptions`]).
pub fn verify_log_with(path: &Path, options: &VerifyOptions) -> Result<Summary, LogError> {
    let f = File::open(path).map_err(|source| LogError::Io {
        op: "opening",
        path: path.to_owned(),
        source,
    })?;
    verify_reader(BufReader::new(f), path, options)
}

fn verify_reader(
    mut r: impl BufRead,
    path: &Path,
    options: &VerifyOptions,
) -> Result<Summary, LogError> {
    let mut line_no = 0u64;
    let mut anchor: Option<Head> = None;
    let mut head: Option<Head> = None;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = (&mut r)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|source| LogError::Io {
                op: "reading",
                path: path.to_owned(),
                source,
            })?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let line = line_no;
        if buf.last() != Some(&b'\n') {
            if buf.len() > MAX_LINE_BYTES {
                return Err(LogError::Malformed {
                    line,
                    reason: format!("longer than {MAX_LINE_BYTES} bytes"),
                });
            }
            return Err(LogError::Truncated { line });
        }
        buf.pop();
        let malformed = |reason: String| LogError::Malformed { line, reason };
        let text = std::str::from_utf8(&buf).map_err(|e| malformed(e.to_string()))?;
        let value: Value =
            tierbox_policy::json::value(text).map_err(|e| malformed(e.to_string()))?;
        if jcs(&value).ok().as_deref() != Some(text) {
            return Err(LogError::NotCanonical { line });
        }
        let rec: LogRecord =
            serde_json::from_value(value.clone()).map_err(|e| malformed(e.to_string()))?;
        let actual = record_digest(rec.seq, &rec.prev, &value["record"])?;
        if actual != rec.digest {
            return Err(LogError::DigestMismatch { line });
        }
        let expected = match (&head, &anchor) {
            (Some(h), _) => h.clone(),
            (None, _) => {
                let a = first_anchor(&rec, line, options)?;
                anchor = Some(a.clone());
                a
            }
        };
        if rec.seq != expected.seq + 1 {
            return Err(LogError::SeqMismatch {
                line,
                expected: expected.seq + 1,
                found: rec.seq,
            });
        }
        if rec.prev != expected.digest {
            return Err(LogError::PrevMismatch { line });
        }
        match &rec.record {
            Entry::Rotation { .. } if line != 1 => return Err(LogError::BadRotation { line }),
            Entry::Rotation { .. } => {}
            Entry::Attestation { envelope } => {
                if options.check_signatures {
                    verify_envelope(envelope, options.trusted_key.as_ref())
                        .map_err(|source| LogError::Attestation { line, source })?;
                }
            }
        }
        head = Some(Head {
            seq: rec.seq,
            digest: rec.digest,
        });
    }
    if let Some(expected) = &options.expected_head
        && head.as_ref() != Some(expected)
    {
        return Err(LogError::HeadMismatch {
            expected: expected.clone(),
            found: head.as_ref().map_or("none".to_owned(), Head::to_string),
        });
    }
    Ok(Summary {
        records: line_no,
        anchor: anchor
            .or_else(|| options.anchor.clone())
            .unwrap_or_else(genesis),
        head,
    })
}

/// What the first record must chain to.
fn first_anchor(rec: &LogRecord, line: u64, options: &VerifyOptions) -> Result<Head, LogError> {
    if let Entry::Rotation {
        previous_seq,
        previous_digest,
        ..
    } = &rec.record
        && (*previous_seq + 1 != rec.seq || *previous_digest != rec.prev)
    {
        return Err(LogError::BadRotation { line });
    }
    if let Some(a) = &options.anchor {
        return Ok(a.clone());
    }
    match &rec.record {
        // A rotated-to file: the anchor is the rotated file's head, which this record
        // names (checked against that file only by `verify_log_files`).
        Entry::Rotation {
            previous_seq,
            previous_digest,
            ..
        } => Ok(Head {
            seq: *previous_seq,
            digest: previous_digest.clone(),
        }),
        // Otherwise the chain starts at genesis: a missing first record shows as a seq
        // or prev mismatch on line 1.
        Entry::Attestation { .. } => Ok(genesis()),
    }
}

/// An open audit log. Several writers — threads of one server, or separate `tierbox run`
/// processes — may append to the same file: each append takes an exclusive `flock`,
/// catches up with (and verifies the chain of) records other writers added since its
/// last append, follows a rotation by reopening the path, then writes its record.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    file: File,
    head: Head,
    /// File length after the last record this writer saw or wrote.
    known_len: u64,
}

fn open_append(path: &Path, create_new: bool) -> Result<File, LogError> {
    let mut o = OpenOptions::new();
    o.append(true)
        .read(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    if create_new {
        o.create_new(true);
    } else {
        o.create(true);
    }
    o.open(path).map_err(|source| LogError::Io {
        op: "opening",
        path: path.to_owned(),
        source,
    })
}

/// Holds the exclusive writer lock on a log file until dropped.
struct WriteLock<'a>(&'a File);

impl<'a> WriteLock<'a> {
    /// Blocks until this process holds the lock.
    fn take(file: &'a File, path: &Path) -> Result<Self, LogError> {
        rustix::fs::flock(file, rustix::fs::FlockOperation::LockExclusive).map_err(|e| {
            LogError::Io {
                op: "locking",
                path: path.to_owned(),
                source: e.into(),
            }
        })?;
        Ok(Self(file))
    }
}

impl Drop for WriteLock<'_> {
    fn drop(&mut self) {
        let _ = rustix::fs::flock(self.0, rustix::fs::FlockOperation::Unlock);
    }
}

fn sync_parent(path: &Path) -> Result<(), LogError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| LogError::Io {
            op: "syncing",
            path: dir.to_owned(),
            source,
        })
}

/// Whether `file` is still the file at `path` (not rotated away or replaced).
fn is_current(file: &File, path: &Path) -> Result<bool, LogError> {
    use std::os::unix::fs::MetadataExt;
    let io = |op, source| LogError::Io {
        op,
        path: path.to_owned(),
        source,
    };
    let open = file.metadata().map_err(|e| io("inspecting", e))?;
    match std::fs::symlink_metadata(path) {
        Ok(now) => Ok(now.dev() == open.dev() && now.ino() == open.ino()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io("inspecting", e)),
    }
}

impl AuditLog {
    /// Opens (creating, mode 0600) the log at `path` and verifies the existing records'
    /// chain to find the head (signatures are not re-checked here; use [`verify_log`]).
    /// Refuses a log that does not verify, e.g. one with a torn last line, rather than
    /// extending a broken chain.
    pub fn open(path: &Path) -> Result<Self, LogError> {
        let existed = path.exists();
        let file = open_append(path, false)?;
        if !existed {
            sync_parent(path)?;
        }
        let mut log = Self {
            path: path.to_owned(),
            file,
            head: genesis(),
            known_len: 0,
        };
        let lock = WriteLock::take(&log.file, path)?;
        let (head, len) = log.catch_up(0, &genesis(), true)?;
        drop(lock);
        log.head = head;
        log.known_len = len;
        Ok(log)
    }

    /// The last record's position (`seq` 0 and [`GENESIS`] when empty). Keep it outside
    /// the log to detect a later cut at a record boundary.
    pub fn head(&self) -> &Head {
        &self.head
    }

    /// Appends a signed attestation: one write, then `fsync`. Returns the new head.
    pub fn append(&mut self, envelope: SignedAttestation) -> Result<Head, LogError> {
        self.append_entry(&Entry::Attestation {
            envelope: Box::new(envelope),
        })
    }

    /// Reads and verifies the records from byte `from` to the end of the file, chaining
    /// from `after` (`from_start`: the whole file, where the first record may anchor
    /// itself as a rotated-to file does). Returns the new head and the file length.
    fn catch_up(&self, from: u64, after: &Head, from_start: bool) -> Result<(Head, u64), LogError> {
        use std::io::{Seek, SeekFrom};
        let io = |op, source| LogError::Io {
            op,
            path: self.path.clone(),
            source,
        };
        let len = self.file.metadata().map_err(|e| io("inspecting", e))?.len();
        if len < from {
            return Err(LogError::HeadMismatch {
                expected: after.clone(),
                found: format!("a file cut to {len} bytes"),
            });
        }
        if len == from {
            return Ok((after.clone(), len));
        }
        let mut reader = &self.file;
        reader
            .seek(SeekFrom::Start(from))
            .map_err(|e| io("reading", e))?;
        let options = VerifyOptions {
            check_signatures: false,
            anchor: (!from_start).then(|| after.clone()),
            ..VerifyOptions::default()
        };
        let summary = verify_reader(
            BufReader::new(reader.take(len - from)),
            &self.path,
            &options,
        )?;
        Ok((summary.head.unwrap_or_else(|| after.clone()), len))
    }

    fn append_entry(&mut self, entry: &Entry) -> Result<Head, LogError> {
        loop {
            let lock = WriteLock::take(&self.file, &self.path)?;
            let (head, len) = self.catch_up(self.known_len, &self.head, false)?;
            self.head = head;
            self.known_len = len;
            if !is_current(&self.file, &self.path)? {
                // Another writer rotated the log (under this lock, so `head` is the old
                // file's last record): continue in the file now at the path.
                drop(lock);
                self.file = open_append(&self.path, false)?;
                self.known_len = 0;
                continue;
            }
            let (line, next) = encode_record(&self.head, entry)?;
            if let Err(e) = (&self.file)
                .write_all(line.as_bytes())
                .and_then(|()| self.file.sync_data())
            {
                // Leave no torn line behind; if this fails too, `open` will report it.
                let _ = self.file.set_len(len);
                return Err(LogError::Io {
                    op: "appending to",
                    path: self.path.clone(),
                    source: e,
                });
            }
            self.head = next.clone();
            self.known_len = len + line.len() as u64;
            return Ok(next);
        }
    }

    /// Moves the current file to `<path>.<last seq>` (refusing to overwrite) and starts a
    /// new file at `path` whose first record is an [`Entry::Rotation`] anchoring the
    /// chain to the moved file's head. The new file is written and fsynced before it
    /// replaces `path` (by `rename`), so `path` always holds a valid log. Other writers
    /// are held off by the lock and then follow the rename.
    pub fn rotate(&mut self) -> Result<PathBuf, LogError> {
        let lock = WriteLock::take(&self.file, &self.path)?;
        let (head, len) = self.catch_up(self.known_len, &self.head, false)?;
        self.head = head;
        self.known_len = len;
        if self.head.seq == 0 {
            return Err(LogError::Empty(self.path.clone()));
        }
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let rotated = self
            .path
            .with_file_name(format!("{name}.{}", self.head.seq));
        let fresh = self.path.with_file_name(format!("{name}.new"));
        let io = |op, p: &Path, source| LogError::Io {
            op,
            path: p.to_owned(),
            source,
        };
        // The new file first, with its rotation record, under the write lock: a `.new`
        // left by a rotation that died is ours to replace (no other rotation can run).
        match std::fs::remove_file(&fresh) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io("removing", &fresh, e));
            }
            _ => {}
        }
        let file = open_append(&fresh, true)?;
        let mut next = Self {
            path: fresh.clone(),
            file,
            head: self.head.clone(),
            known_len: 0,
        };
        let written = next.append_entry(&Entry::Rotation {
            previous_file: format!("{name}.{}", self.head.seq),
            previous_seq: self.head.seq,
            previous_digest: self.head.digest.clone(),
        });
        if let Err(e) = written {
            let _ = std::fs::remove_file(&fresh);
            return Err(e);
        }
        // Then the old records under their new name. A hard link fails if `rotated`
        // exists, unlike rename — except when it already is this very file: the link of a
        // rotation that died before its rename, which this one completes.
        if let Err(e) = std::fs::hard_link(&self.path, &rotated) {
            let same_file = |a: &Path, b: &Path| {
                use std::os::unix::fs::MetadataExt;
                match (std::fs::symlink_metadata(a), std::fs::symlink_metadata(b)) {
                    (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
                    _ => false,
                }
            };
            if !same_file(&self.path, &rotated) {
                let _ = std::fs::remove_file(&fresh);
                return Err(io("linking", &rotated, e));
            }
        }
        if let Err(e) = std::fs::rename(&fresh, &self.path) {
            // Undone: the live log keeps its name and its records, the link goes.
            let _ = std::fs::remove_file(&rotated);
            let _ = std::fs::remove_file(&fresh);
            return Err(io("renaming", &fresh, e));
        }
        sync_parent(&self.path)?;
        next.path = self.path.clone();
        drop(lock);
        *self = next;
        Ok(rotated)
    }
}

/// Opens the log at `path` and rotates it (see [`AuditLog::rotate`]); returns where the
/// old records now are.
pub fn rotate(path: &Path) -> Result<PathBuf, LogError> {
    AuditLog::open(path)?.rotate()
}

#[cfg(test)]
#[path = "log_tests.rs"]
mod tests;
