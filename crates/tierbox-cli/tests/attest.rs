//! `tierbox attest` and `tierbox audit`, driven through the built binary, plus
//! third-party verification of the documented bytes with Python `cryptography` and
//! OpenSSL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tierbox_attest::{AuditLog, SigningKey};

fn tierbox(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tierbox"))
        .args(args)
        .output()
        .unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A failure: exit 1 and exactly one line on stderr containing `needle`.
fn assert_fails_with(o: &Output, needle: &str) {
    let err = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(1),
        "stdout {} stderr {err}",
        stdout(o)
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(needle), "expected {needle:?} in {err}");
}

/// Writes the example attestation signed with the state-dir key; returns its path.
fn example(dir: &Path) -> PathBuf {
    let o = tierbox(&["attest", "example", "--state-dir", s(&dir.join("state"))]);
    assert!(o.status.success(), "{}", stderr(&o));
    let path = dir.join("attestation.json");
    std::fs::write(&path, &o.stdout).unwrap();
    path
}

fn pubkey_hex(dir: &Path) -> String {
    let o = tierbox(&["attest", "pubkey", "--state-dir", s(&dir.join("state"))]);
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o).trim().to_owned()
}

#[test]
fn pubkey_is_created_once_and_exported_as_hex_and_pem() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let first = tierbox(&["attest", "pubkey", "--state-dir", s(&state)]);
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(stderr(&first).contains("created attestation key"));
    let hex = stdout(&first).trim().to_owned();
    assert_eq!(hex.len(), 64);
    let again = tierbox(&["attest", "pubkey", "--state-dir", s(&state)]);
    assert_eq!(stdout(&again).trim(), hex);
    assert!(stderr(&again).is_empty(), "{}", stderr(&again));
    let by_path = tierbox(&["attest", "pubkey", "--key", s(&state.join("attest-key"))]);
    assert_eq!(stdout(&by_path).trim(), hex);

    let pem = tierbox(&["attest", "pubkey", "--state-dir", s(&state), "--pem"]);
    let pem = stdout(&pem);
    assert!(pem.starts_with("-----BEGIN PUBLIC KEY-----\n"), "{pem}");
    let parsed = tierbox_attest::parse_public_key(&pem, "pem").unwrap();
    assert_eq!(tierbox_attest::public_key_hex(&parsed), hex);
}

#[test]
fn attest_verify_accepts_the_signed_file_and_names_failures() {
    let dir = tempfile::tempdir().unwrap();
    let file = example(dir.path());
    let hex = pubkey_hex(dir.path());

    let ok = tierbox(&["attest", "verify", s(&file)]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert!(
        stdout(&ok).starts_with("ok: attestation "),
        "{}",
        stdout(&ok)
    );
    let ok = tierbox(&["attest", "verify", s(&file), "--pubkey", &hex]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert!(stdout(&ok).contains("(trusted)"));
    // --pubkey as a PEM file.
    let pem_file = dir.path().join("pub.pem");
    let pem = tierbox(&[
        "attest",
        "pubkey",
        "--state-dir",
        s(&dir.path().join("state")),
        "--pem",
    ]);
    std::fs::write(&pem_file, &pem.stdout).unwrap();
    assert!(
        tierbox(&["attest", "verify", s(&file), "--pubkey", s(&pem_file)])
            .status
            .success()
    );

    // Another key.
    let other = tierbox_attest::public_key_hex(&SigningKey::from_bytes(&[1; 32]).verifying_key());
    assert_fails_with(
        &tierbox(&["attest", "verify", s(&file), "--pubkey", &other]),
        "expected the trusted key",
    );

    // A modified field.
    let text = std::fs::read_to_string(&file).unwrap();
    let tampered = dir.path().join("tampered.json");
    std::fs::write(&tampered, text.replace("1767225600012", "1767225600013")).unwrap();
    assert_fails_with(
        &tierbox(&["attest", "verify", s(&tampered)]),
        "digest mismatch",
    );

    // A modified signature.
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let sig = v["signature"].as_str().unwrap().to_owned();
    let flipped = if sig.starts_with('0') {
        sig.replacen('0', "1", 1)
    } else {
        format!("0{}", &sig[1..])
    };
    v["signature"] = flipped.into();
    std::fs::write(&tampered, v.to_string()).unwrap();
    assert_fails_with(
        &tierbox(&["attest", "verify", s(&tampered)]),
        "bad signature",
    );

    // Not an attestation at all.
    std::fs::write(&tampered, "{\"attestation\": 1}").unwrap();
    assert_fails_with(
        &tierbox(&["attest", "verify", s(&tampered)]),
        "not a signed attestation",
    );
}

/// A log of `n` records signed with the seed `[7; 32]`; returns its path and lines.
fn log_of(dir: &Path, n: u64) -> (PathBuf, Vec<String>, tierbox_attest::Head) {
    let key = SigningKey::from_bytes(&[7; 32]);
    let path = dir.join("audit.jsonl");
    let mut log = AuditLog::open(&path).unwrap();
    let mut head = log.head().clone();
    for i in 0..n {
        let mut a = tierbox_attest::example_attestation();
        a.id = format!("{i:032x}");
        head = log.append(tierbox_attest::sign(a, &key).unwrap()).unwrap();
    }
    let lines = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    (path, lines, head)
}

#[test]
fn audit_verify_reports_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let (path, lines, head) = log_of(dir.path(), 4);
    let ok = tierbox(&["audit", "verify", s(&path)]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert!(
        stdout(&ok).starts_with("ok: 4 records, head seq 4 "),
        "{}",
        stdout(&ok)
    );
    let key = tierbox_attest::public_key_hex(&SigningKey::from_bytes(&[7; 32]).verifying_key());
    let expect = format!("{}:{}", head.seq, head.digest);
    let ok = tierbox(&[
        "audit",
        "verify",
        s(&path),
        "--pubkey",
        &key,
        "--expect-head",
        &expect,
    ]);
    assert!(ok.status.success(), "{}", stderr(&ok));

    let write = |l: &[String]| std::fs::write(&path, format!("{}\n", l.join("\n"))).unwrap();
    let mut deleted = lines.clone();
    deleted.remove(1);
    write(&deleted);
    assert_fails_with(&tierbox(&["audit", "verify", s(&path)]), "line 2:");

    let mut swapped = lines.clone();
    swapped.swap(2, 3);
    write(&swapped);
    assert_fails_with(&tierbox(&["audit", "verify", s(&path)]), "line 3:");

    let mut modified = lines.clone();
    modified[3] = modified[3].replacen("\"duration_ms\":12", "\"duration_ms\":13", 1);
    write(&modified);
    assert_fails_with(
        &tierbox(&["audit", "verify", s(&path)]),
        "line 4: digest mismatch",
    );

    // Cut at a record boundary: only the expected head catches it.
    write(&lines[..3]);
    assert!(tierbox(&["audit", "verify", s(&path)]).status.success());
    assert_fails_with(
        &tierbox(&["audit", "verify", s(&path), "--expect-head", &expect]),
        "expected seq 4",
    );
    // A torn last line.
    let text = format!("{}\n{}", lines[..3].join("\n"), &lines[3][..50]);
    std::fs::write(&path, text).unwrap();
    assert_fails_with(
        &tierbox(&["audit", "verify", s(&path)]),
        "line 4: truncated",
    );
    // Signed by another key than the trusted one.
    write(&lines);
    let other = tierbox_attest::public_key_hex(&SigningKey::from_bytes(&[1; 32]).verifying_key());
    assert_fails_with(
        &tierbox(&["audit", "verify", s(&path), "--pubkey", &other]),
        "line 1: attestation does not verify",
    );
}

#[test]
fn audit_verify_checks_rotated_files_chain() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _, _) = log_of(dir.path(), 3);
    let rotated = tierbox_attest::rotate(&path).unwrap();
    let ok = tierbox(&["audit", "verify", s(&rotated), s(&path)]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert!(
        stdout(&ok).starts_with("ok: 4 records, head seq 4 "),
        "{}",
        stdout(&ok)
    );
    // Out of order: the current file does not chain to nothing before it.
    assert_fails_with(
        &tierbox(&["audit", "verify", s(&path), s(&rotated)]),
        "line 1:",
    );
}

/// The documented Python check (docs/attestation.md): recompute the signed bytes, the
/// digest, the signature, and the audit chain, with only the standard library and
/// `cryptography`.
const PYTHON_VERIFY: &str = r#"
import hashlib, json, sys
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

def jcs(v):  # equals RFC 8785 for values with integer numbers and BMP keys
    return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()

def verify_envelope(env, trusted_hex):
    msg = b"tierbox.attestation.v1\n" + jcs(env["attestation"])
    assert hashlib.sha256(msg).hexdigest() == env["digest"], "digest"
    assert env["public_key"] == trusted_hex, "signer"
    Ed25519PublicKey.from_public_bytes(bytes.fromhex(env["public_key"])).verify(
        bytes.fromhex(env["signature"]), msg)  # raises InvalidSignature

attestation, log, trusted = sys.argv[1], sys.argv[2], sys.argv[3]
verify_envelope(json.load(open(attestation)), trusted)
prev = "0" * 64
for n, line in enumerate(open(log, "rb"), 1):
    rec = json.loads(line)
    assert line == jcs(rec) + b"\n", f"line {n}: not canonical"
    body = {"seq": rec["seq"], "prev": rec["prev"], "record": rec["record"]}
    assert rec["seq"] == n and rec["prev"] == prev, f"line {n}: chain"
    assert hashlib.sha256(b"tierbox.audit.v1\n" + jcs(body)).hexdigest() == rec["digest"], f"line {n}: digest"
    verify_envelope(rec["record"]["envelope"], trusted)
    prev = rec["digest"]
print("verified", n, "records")
"#;

#[test]
fn python_cryptography_verifies_the_documented_bytes() {
    let has_module = Command::new("python3")
        .args(["-c", "import cryptography"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_module {
        tierbox_test_support::skip_here(
            "python3 `cryptography` module not available (pip install cryptography)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (log, _, _) = log_of(dir.path(), 3);
    let key = tierbox_attest::public_key_hex(&SigningKey::from_bytes(&[7; 32]).verifying_key());
    // The CLI's example attestation is signed with the state-dir key; re-sign it with the
    // log's key so one trusted key covers both.
    let file = example(dir.path());
    let env: tierbox_attest::SignedAttestation =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let resigned =
        tierbox_attest::sign(env.attestation, &SigningKey::from_bytes(&[7; 32])).unwrap();
    std::fs::write(&file, serde_json::to_string_pretty(&resigned).unwrap()).unwrap();

    let run = |attestation: &Path, trusted: &str| {
        Command::new("python3")
            .args(["-c", PYTHON_VERIFY, s(attestation), s(&log), trusted])
            .output()
            .unwrap()
    };
    let ok = run(&file, &key);
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert_eq!(stdout(&ok).trim(), "verified 3 records");
    // And Python rejects what the CLI rejects.
    let tampered = dir.path().join("tampered.json");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &tampered,
        text.replace("\"duration_ms\": 12", "\"duration_ms\": 13"),
    )
    .unwrap();
    assert!(!run(&tampered, &key).status.success());
}

#[test]
fn openssl_verifies_the_signature_when_present() {
    if Command::new("openssl").arg("version").output().is_err() {
        tierbox_test_support::skip_here("openssl not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = example(dir.path());
    let env: tierbox_attest::SignedAttestation =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let msg = dir.path().join("msg.bin");
    let sig = dir.path().join("sig.bin");
    let pem = dir.path().join("pub.pem");
    std::fs::write(
        &msg,
        tierbox_attest::signed_bytes(&env.attestation).unwrap(),
    )
    .unwrap();
    let sig_bytes: Vec<u8> = (0..64)
        .map(|i| u8::from_str_radix(&env.signature[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    std::fs::write(&sig, sig_bytes).unwrap();
    let o = tierbox(&[
        "attest",
        "pubkey",
        "--state-dir",
        s(&dir.path().join("state")),
        "--pem",
    ]);
    std::fs::write(&pem, &o.stdout).unwrap();
    let verify = |m: &Path| {
        Command::new("openssl")
            .args([
                "pkeyutl",
                "-verify",
                "-pubin",
                "-inkey",
                s(&pem),
                "-rawin",
                "-in",
                s(m),
                "-sigfile",
                s(&sig),
            ])
            .output()
            .unwrap()
    };
    let ok = verify(&msg);
    assert!(ok.status.success(), "{} {}", stdout(&ok), stderr(&ok));
    let mut bad = std::fs::read(&msg).unwrap();
    let last = bad.len() - 2;
    bad[last] ^= 1;
    std::fs::write(&msg, bad).unwrap();
    assert!(!verify(&msg).status.success());
}

/// `tierbox run` with an audit log in the policy: the `--json` outcome carries a signed
/// attestation that `tierbox attest verify` accepts (and rejects once the output is
/// edited), rejections are recorded too, and `tierbox audit verify` checks the chain.
#[test]
fn tierbox_run_attests_into_the_outcome_and_the_audit_log() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let state = dir.path().join("state");
    let log = dir.path().join("audit.jsonl");
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "version = 1\n[exec]\nallowed_executables = [\"echo\"]\n[audit]\nlog = \"{}\"\n",
            log.display()
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        let mut all = vec![
            "run",
            "--json",
            "--policy",
            s(&policy),
            "--workspace",
            s(&ws),
        ];
        all.extend(["--state-dir", s(&state), "--"]);
        all.extend(args);
        tierbox(&all)
    };
    let o = run(&["echo", "attested"]);
    if o.status.code() != Some(0) {
        let doctor = tierbox(&["doctor"]);
        tierbox_test_support::skip_here(&format!(
            "tierbox run cannot run here: {} (doctor: {})",
            stderr(&o),
            stdout(&doctor)
        ));
        return;
    }
    let outcome_path = dir.path().join("outcome.json");
    std::fs::write(&outcome_path, &o.stdout).unwrap();
    let key = pubkey_hex(dir.path());
    let v = tierbox(&["attest", "verify", s(&outcome_path), "--pubkey", &key]);
    assert!(v.status.success(), "{} {}", stdout(&v), stderr(&v));
    assert!(stdout(&v).contains("every field"), "{}", stdout(&v));

    // Edited output no longer matches the signed digests.
    let mut outcome: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    outcome["stdout"]["text"] = "forged\n".into();
    std::fs::write(&outcome_path, outcome.to_string()).unwrap();
    let v = tierbox(&["attest", "verify", s(&outcome_path), "--pubkey", &key]);
    assert_fails_with(&v, "stdout.text");

    // Rotation from the command line: the old records move aside and both files chain.
    let rot = tierbox(&["audit", "rotate", s(&log)]);
    assert!(rot.status.success(), "{}", stderr(&rot));
    let rotated = dir.path().join("audit.jsonl.1");
    assert!(rotated.exists(), "{}", stdout(&rot));
    let v = tierbox(&["audit", "verify", s(&rotated), s(&log), "--pubkey", &key]);
    assert!(v.status.success(), "{} {}", stdout(&v), stderr(&v));

    // A rejection is evidence too.
    let r = run(&["curl", "example.org"]);
    assert_ne!(r.status.code(), Some(0));
    let v = tierbox(&["audit", "verify", s(&rotated), s(&log), "--pubkey", &key]);
    assert!(v.status.success(), "{} {}", stdout(&v), stderr(&v));
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
    let kinds: Vec<bool> = ["\"kind\":\"rotation\"", "\"kind\":\"rejection\""]
        .iter()
        .zip(text.lines())
        .map(|(kind, line)| line.contains(kind))
        .collect();
    assert_eq!(kinds, [true, true], "{text}");

    // Forgeries of a real outcome (each must fail, naming what differs).
    let genuine: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let verify = |text: &str| {
        std::fs::write(&outcome_path, text).unwrap();
        tierbox(&["attest", "verify", s(&outcome_path), "--pubkey", &key])
    };
    let forged = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut v = genuine.clone();
        edit(&mut v);
        v.to_string()
    };
    for (field, edit) in [
        (
            "exit_code",
            &(|v: &mut serde_json::Value| v["exit_code"] = 1.into())
                as &dyn Fn(&mut serde_json::Value),
        ),
        ("timed_out", &|v| v["timed_out"] = true.into()),
        ("tier", &|v| v["tier"] = "z".into()),
        ("backend", &|v| v["backend"] = "forged-backend".into()),
        ("enforcement", &|v| v["enforcement"]["forged"] = true.into()),
        ("duration_ms", &|v| {
            v["duration_ms"] = (v["duration_ms"].as_u64().unwrap() + 1000).into()
        }),
        ("limit_hit", &|v| v["limit_hit"] = "memory".into()),
        ("run_id", &|v| v["run_id"] = "another-run".into()),
    ] {
        assert_fails_with(&verify(&forged(edit)), field);
    }
    // "All tests passed", exit 0, with a rejection's envelope from the audit log.
    let rejection_line = text.lines().nth(1).unwrap();
    let record: serde_json::Value = serde_json::from_str(rejection_line).unwrap();
    let envelope = &record["record"]["envelope"];
    assert!(envelope.is_object(), "{record}");
    let fabricated = forged(&|v| {
        v["attestation"] = envelope.clone();
        v["stdout"]["text"] = "all tests passed\n".into();
    });
    assert_fails_with(&verify(&fabricated), "rejection");
    // A duplicate key: the last one would win elsewhere.
    let genuine_text = genuine.to_string();
    let duplicated = genuine_text.replacen('{', "{\"exit_code\":1,", 1);
    assert_fails_with(&verify(&duplicated), "duplicate key");
    // And the genuine text still verifies.
    assert!(verify(&genuine_text).status.success());
}
