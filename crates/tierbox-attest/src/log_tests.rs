#![allow(clippy::unwrap_used, clippy::expect_used)]

use ed25519_dalek::SigningKey;

use super::*;
use crate::attestation::{Attestation, Body, example_attestation, sign};

fn key() -> SigningKey {
    SigningKey::from_bytes(&[7; 32])
}

fn signed(n: u64) -> SignedAttestation {
    let mut a: Attestation = example_attestation();
    a.id = format!("{n:032x}");
    if n % 2 == 1 {
        a.body = Body::Rejection {
            code: "denied".to_owned(),
            message: format!("request {n}"),
        };
    }
    sign(a, &key()).unwrap()
}

/// A log of `n` records; returns its path (inside `dir`) and lines.
fn log_of(dir: &Path, n: u64) -> (PathBuf, Vec<String>) {
    let path = dir.join("audit.jsonl");
    let mut log = AuditLog::open(&path).unwrap();
    for i in 1..=n {
        let head = log.append(signed(i)).unwrap();
        assert_eq!(head.seq, i);
    }
    let text = std::fs::read_to_string(&path).unwrap();
    (path, text.lines().map(str::to_owned).collect())
}

fn write_lines(path: &Path, lines: &[String]) {
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(path, text).unwrap();
}

fn err_line(e: &LogError) -> Option<u64> {
    match e {
        LogError::Truncated { line }
        | LogError::Malformed { line, .. }
        | LogError::NotCanonical { line }
        | LogError::DigestMismatch { line }
        | LogError::SeqMismatch { line, .. }
        | LogError::PrevMismatch { line }
        | LogError::BadRotation { line }
        | LogError::Attestation { line, .. } => Some(*line),
        _ => None,
    }
}

#[test]
fn appended_log_verifies_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let (path, lines) = log_of(dir.path(), 5);
    assert_eq!(lines.len(), 5);
    let s = verify_log(&path).unwrap();
    assert_eq!(s.records, 5);
    assert_eq!(s.anchor.digest, GENESIS);
    let mut log = AuditLog::open(&path).unwrap();
    assert_eq!(log.head(), s.head.as_ref().unwrap());
    let head = log.append(signed(6)).unwrap();
    assert_eq!(head.seq, 6);
    drop(log);
    let opts = VerifyOptions {
        trusted_key: Some(key().verifying_key()),
        expected_head: Some(head),
        ..VerifyOptions::default()
    };
    assert_eq!(verify_log_with(&path, &opts).unwrap().records, 6);
    // The first record chains to genesis.
    let first: LogRecord = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!((first.seq, first.prev.as_str()), (1, GENESIS));
}

#[test]
fn interleaved_writers_and_a_rotation_keep_one_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let mut a = AuditLog::open(&path).unwrap();
    let mut b = AuditLog::open(&path).unwrap();
    a.append(signed(1)).unwrap();
    // b has not seen a's record: it catches up (and verifies it) before appending.
    assert_eq!(b.append(signed(2)).unwrap().seq, 2);
    assert_eq!(a.append(signed(3)).unwrap().seq, 3);
    let rotated = b.rotate().unwrap();
    // a still holds the rotated-away file: it follows the path to the new file.
    let head = a.append(signed(4)).unwrap();
    assert_eq!(head.seq, 5, "the rotation record is seq 4");
    let files = [rotated, path.clone()];
    let s = verify_log_files(&files, &VerifyOptions::default()).unwrap();
    assert_eq!(s.head, Some(head));
    // Threads appending at once lose no record and never fork the chain.
    std::thread::scope(|scope| {
        for _ in 0..4 {
            let path = &path;
            scope.spawn(move || {
                let mut log = AuditLog::open(path).unwrap();
                for n in 0..5 {
                    log.append(signed(n)).unwrap();
                }
            });
        }
    });
    let s = verify_log(&path).unwrap();
    assert_eq!((s.records, s.head.unwrap().seq), (22, 25));
}

#[test]
fn a_writer_refuses_records_another_writer_broke() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let mut a = AuditLog::open(&path).unwrap();
    a.append(signed(1)).unwrap();
    // A forged line appended behind a's back.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut f, b"{\"forged\":true}\n").unwrap();
    assert!(matches!(
        a.append(signed(2)),
        Err(LogError::Malformed { .. })
    ));
}

#[test]
fn modified_record_detected_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let (path, lines) = log_of(dir.path(), 5);
    for i in 0..5 {
        let mut l = lines.clone();
        l[i] = l[i].replacen("\"id\":\"0", "\"id\":\"1", 1);
        assert_ne!(l[i], lines[i]);
        write_lines(&path, &l);
        let e = verify_log(&path).unwrap_err();
        assert!(matches!(e, LogError::DigestMismatch { .. }), "{e}");
        assert_eq!(err_line(&e), Some(i as u64 + 1), "{e}");
    }
}

#[test]
fn modified_and_rehashed_record_breaks_the_next_link() {
    let dir = tempfile::tempdir().unwrap();
    let (path, lines) = log_of(dir.path(), 4);
    let mut rec: LogRecord = serde_json::from_str(&lines[1]).unwrap();
    rec.record = Entry::Attestation {
        envelope: Box::new(signed(99)),
    };
    let value = serde_json::to_value(&rec.record).unwrap();
    rec.digest = record_digest(rec.seq, &rec.prev, &value).unwrap();
    let mut l = lines.clone();
    l[1] = jcs(&serde_json::to_value(&rec).unwrap()).unwrap();
    write_lines(&path, &l);
    let e = verify_log(&path).unwrap_err();
    assert!(matches!(e, LogError::PrevMismatch { line: 3 }), "{e}");
}

#[test]
fn non_canonical_line_detected() {
    let dir = tempfile::tempdir().unwrap();
    let (path, lines) = log_of(dir.path(), 3);
    let mut l = lines.clone();
    l[2] = l[2].replacen("{", "{ ", 1);
    write_lines(&path, &l);
    assert!(matches!(
        verify_log(&path),
        Err(LogError::NotCanonical { line: 3 })
    ));
}

#[test]
fn deleted_record_detected() {
    let dir = tempfile::tempdir().unwrap();
    let (path, lines) = log_of(dir.path(), 5);
    for i in 0..4 {
        let mut l = lines.clone();
        l.remove(i);
        write_lines(&path, &l);
        let e = verify_log(&path).unwrap_err();
        assert_eq!(
            err_line(&e),
            Some(i as u64 + 1),
            "deleting line {}: {e}",
            i + 1
        );
    }
}

#[test]
fn inserted_record_detected() {
    let dir = tempfile::tempdir().unwrap();
    let (path, lines) = log_of(dir.path(), 4);
    for i in 0..=4 {
        // A duplicate of another line: a well-formed, correctly hashed record.
        let mut l = lines.clone();
        l.insert(i, lines[(i + 2) % 4].clone());
        write_lines(&path, &l);
        let e = verify_log(&path).unwrap_err();
        assert_eq!(
            err_line(&e),
            Some(i as u64 + 1),
            "inserting at line {}: {e}",
            i + 1
        );
    }
}

#[test]
fn reordered_records_detected() {
    let dir = tempfile::tempdir().unwrap();
    let (path, lines) = log_of(dir.path(), 5);
    for i in 0..4 {
        let mut l = lines.clone();
        l.swap(i, i + 1);
        write_lines(&path, &l);
        let e = verify_log(&path).unwrap_err();
        assert!(matches!(e, LogError::SeqMismatch { .. }), "{e}");
        assert_eq!(err_line(&e), Some(i as u64 + 1), "{e}");
    }
}

#[test]
fn truncation_detected() {
    let dir = tempfile::tempdir().unwrap();
    let (path, lines) = log_of(dir.path(), 3);
    let full = std::fs::read(&path).unwrap();
    // Any cut inside the last line, including just its newline.
    let last_start = full.len() - lines[2].len() - 1;
    for cut in [last_start + 1, last_start + 40, full.len() - 1] {
        std::fs::write(&path, &full[..cut]).unwrap();
        let e = verify_log(&path).unwrap_err();
        assert!(
            matches!(e, LogError::Truncated { line: 3 }),
            "cut at {cut}: {e}"
        );
        assert!(matches!(
            AuditLog::open(&path),
            Err(LogError::Truncated { line: 3 })
        ));
    }
    // A cut at a record boundary verifies on its own, and is caught by the expected head.
    std::fs::write(&path, &full[..last_start]).unwrap();
    assert_eq!(verify_log(&path).unwrap().records, 2);
    std::fs::write(&path, &full).unwrap();
    let head = verify_log(&path).unwrap().head;
    std::fs::write(&path, &full[..last_start]).unwrap();
    let opts = VerifyOptions {
        expected_head: head.clone(),
        ..VerifyOptions::default()
    };
    assert!(matches!(
        verify_log_with(&path, &opts),
        Err(LogError::HeadMismatch { .. })
    ));
    std::fs::write(&path, b"").unwrap();
    assert!(matches!(
        verify_log_with(&path, &opts),
        Err(LogError::HeadMismatch { .. })
    ));
}

#[test]
fn bad_signature_in_log_detected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let mut log = AuditLog::open(&path).unwrap();
    log.append(signed(1)).unwrap();
    let mut bad = signed(2);
    bad.attestation.started_unix_ms += 1;
    log.append(bad).unwrap();
    drop(log);
    let e = verify_log(&path).unwrap_err();
    assert!(matches!(e, LogError::Attestation { line: 2, .. }), "{e}");
    let other = SigningKey::from_bytes(&[1; 32]).verifying_key();
    let opts = VerifyOptions {
        trusted_key: Some(other),
        check_signatures: true,
        ..VerifyOptions::default()
    };
    assert!(matches!(
        verify_log_with(&path, &opts),
        Err(LogError::Attestation { line: 1, .. })
    ));
}

#[test]
fn rotation_keeps_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = log_of(dir.path(), 3);
    let before = verify_log(&path).unwrap().head.unwrap();
    let rotated = rotate(&path).unwrap();
    assert_eq!(rotated, dir.path().join("audit.jsonl.3"));
    assert_eq!(verify_log(&rotated).unwrap().head.as_ref(), Some(&before));
    let mut log = AuditLog::open(&path).unwrap();
    assert_eq!(log.head().seq, 4);
    let head = log.append(signed(5)).unwrap();
    assert_eq!(head.seq, 5);
    drop(log);
    let s = verify_log(&path).unwrap();
    assert_eq!((s.records, s.anchor.clone()), (2, before.clone()));
    let all =
        verify_log_files(&[rotated.clone(), path.clone()], &VerifyOptions::default()).unwrap();
    assert_eq!((all.records, all.head), (5, Some(head)));
    // Rotating again does not overwrite.
    let second = rotate(&path).unwrap();
    assert_eq!(second, dir.path().join("audit.jsonl.5"));
    // A rotated file from another chain does not link.
    let other_dir = tempfile::tempdir().unwrap();
    let other = other_dir.path().join("audit.jsonl");
    let mut other_log = AuditLog::open(&other).unwrap();
    for i in 11..=13 {
        other_log.append(signed(i)).unwrap();
    }
    drop(other_log);
    let other_rotated = rotate(&other).unwrap();
    let e =
        verify_log_files(&[rotated.clone(), other.clone()], &VerifyOptions::default()).unwrap_err();
    assert!(matches!(e, LogError::PrevMismatch { line: 1 }), "{e}");
    let _ = other_rotated;
    // Deleting the rotation record is detected.
    let text = std::fs::read_to_string(&second).unwrap();
    let rest: Vec<String> = text.lines().skip(1).map(str::to_owned).collect();
    write_lines(&second, &rest);
    let e = verify_log(&second).unwrap_err();
    assert!(
        matches!(
            e,
            LogError::SeqMismatch { line: 1, .. } | LogError::PrevMismatch { line: 1 }
        ),
        "{e}"
    );
    // Rotating an empty log is refused.
    let empty = dir.path().join("empty.jsonl");
    assert!(matches!(rotate(&empty), Err(LogError::Empty(_))));
}

/// A rotation that died part way — leaving `audit.jsonl.new`, or the rotated name
/// already linked to the live log — is completed by the next one, and the rotated set
/// verifies. Regression: a leftover `.new` made `audit rotate` fail after linking the
/// rotated name to the live log, after which every rotation and the verification of the
/// rotated set failed.
#[test]
fn rotation_recovers_from_one_that_died() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = log_of(dir.path(), 3);
    std::fs::write(dir.path().join("audit.jsonl.new"), "half a record").unwrap();
    let rotated = rotate(&path).unwrap();
    let mut log = AuditLog::open(&path).unwrap();
    log.append(signed(5)).unwrap();
    drop(log);
    verify_log_files(&[rotated.clone(), path.clone()], &VerifyOptions::default()).unwrap();
    assert!(!dir.path().join("audit.jsonl.new").exists());

    // Died between its link and its rename: the rotated name is the live file.
    std::fs::hard_link(&path, dir.path().join("audit.jsonl.5")).unwrap();
    std::fs::write(dir.path().join("audit.jsonl.new"), "").unwrap();
    let second = rotate(&path).unwrap();
    assert_eq!(second, dir.path().join("audit.jsonl.5"));
    let all =
        verify_log_files(&[rotated, second, path.clone()], &VerifyOptions::default()).unwrap();
    assert_eq!(all.records, 6);
    // A rotated name that is another file is never overwritten.
    let mut log = AuditLog::open(&path).unwrap();
    log.append(signed(7)).unwrap();
    drop(log);
    std::fs::write(dir.path().join("audit.jsonl.7"), "someone else's").unwrap();
    assert!(matches!(
        rotate(&path),
        Err(LogError::Io { op: "linking", .. })
    ));
    assert!(!dir.path().join("audit.jsonl.new").exists());
    verify_log(&path).unwrap();
}

#[test]
fn rotation_record_mid_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = log_of(dir.path(), 2);
    let mut log = AuditLog::open(&path).unwrap();
    let head = log.head().clone();
    log.append_entry(&Entry::Rotation {
        previous_file: "x".to_owned(),
        previous_seq: head.seq,
        previous_digest: head.digest,
    })
    .unwrap();
    drop(log);
    assert!(matches!(
        verify_log(&path),
        Err(LogError::BadRotation { line: 3 })
    ));
}

#[test]
fn log_file_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = log_of(dir.path(), 1);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

/// Golden digest of a first record (the example attestation signed with the seed
/// `[7; 32]`), computed independently with Python (json, hashlib, cryptography).
#[test]
fn golden_record_digest() {
    let env = sign(example_attestation(), &key()).unwrap();
    let (line, head) = encode_record(
        &genesis(),
        &Entry::Attestation {
            envelope: Box::new(env),
        },
    )
    .unwrap();
    assert_eq!(head.seq, 1);
    assert_eq!(
        head.digest,
        "62e6f88b69e026197548fbe1eb29b0a3b84601d1304abeffd1c50b1b852e1760"
    );
    assert!(line.starts_with("{\"digest\":\""), "{line}");
    assert!(line.ends_with("\"seq\":1}\n"), "{line}");
}
