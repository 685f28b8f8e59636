//! `tierbox attest …` and `tierbox audit …`: the attestation key and offline verification.
//!
//! Verification commands exit 0 when everything verifies and 1 with one line on stderr
//! naming what failed (with the line number for logs); I/O errors (a missing file) are
//! internal errors like elsewhere in the CLI.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Subcommand;
use tierbox_attest::{SignedAttestation, VerifyOptions, VerifyingKey};

#[derive(Debug, Subcommand)]
pub enum AttestAction {
    /// Print the attestation public key (hex, or PEM with --pem), creating the key in
    /// the state directory on first use.
    Pubkey {
        /// State directory holding `attest-key` (default: $XDG_STATE_HOME/tierbox).
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// Use this private key file (PKCS#8 PEM or 64 hex digits) instead.
        #[arg(long, conflicts_with = "state_dir")]
        key: Option<PathBuf>,
        /// Print SubjectPublicKeyInfo PEM (readable by `openssl pkey -pubin`).
        #[arg(long)]
        pem: bool,
    },
    /// Verify a signed attestation (JSON): its digests and its signature.
    Verify {
        /// The signed attestation file.
        file: PathBuf,
        /// Require this signer: 64 hex digits, or a file holding hex or PEM.
        #[arg(long, value_name = "HEX_OR_FILE")]
        pubkey: Option<String>,
    },
    /// Sign the built-in example attestation with the state-directory key (to try the
    /// verification tools).
    #[command(hide = true)]
    Example {
        /// State directory holding `attest-key`.
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum AuditAction {
    /// Verify an audit log: canonical lines, hash chain, sequence, signatures.
    Verify {
        /// The log; give rotated files too, oldest first, to check they chain.
        #[arg(required = true, num_args = 1..)]
        logs: Vec<PathBuf>,
        /// Require every attestation to be signed by this key (hex, or a file).
        #[arg(long, value_name = "HEX_OR_FILE")]
        pubkey: Option<String>,
        /// Require the log to end at this record, `SEQ:DIGEST` (detects records cut
        /// from the end).
        #[arg(long, value_name = "SEQ:DIGEST")]
        expect_head: Option<String>,
    },
    /// Rotate an audit log: its records move to `LOG.<last seq>` and `LOG` starts again
    /// with a record chaining to them. Safe while runners append (they follow the path).
    Rotate {
        /// The log.
        log: PathBuf,
    },
}

fn state_dir_or_default(state_dir: Option<PathBuf>) -> PathBuf {
    state_dir.unwrap_or_else(|| tierbox_runner::RunOptions::default().state_dir)
}

fn load_or_create(state_dir: Option<PathBuf>) -> Result<tierbox_attest::SigningKey> {
    let dir = state_dir_or_default(state_dir);
    let (key, created) = tierbox_attest::load_or_create_signing_key(&dir)?;
    if let Some(path) = created {
        eprintln!("tierbox: created attestation key {}", path.display());
    }
    Ok(key)
}

/// Parses `--pubkey`: 64 hex digits, or a file holding hex or PEM.
fn trusted_key(arg: Option<&str>) -> Result<Option<VerifyingKey>> {
    let Some(arg) = arg else { return Ok(None) };
    if arg.len() == 64 && arg.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(Some(tierbox_attest::parse_public_key(arg, "--pubkey")?));
    }
    let text = std::fs::read_to_string(arg).with_context(|| format!("reading {arg}"))?;
    Ok(Some(tierbox_attest::parse_public_key(&text, arg)?))
}

pub fn run_attest(action: AttestAction) -> Result<ExitCode> {
    match action {
        AttestAction::Pubkey {
            state_dir,
            key,
            pem,
        } => {
            let key = match key {
                Some(path) => tierbox_attest::load_signing_key(&path)?,
                None => load_or_create(state_dir)?,
            };
            let public = key.verifying_key();
            if pem {
                print!("{}", tierbox_attest::public_key_pem(&public));
            } else {
                println!("{}", tierbox_attest::public_key_hex(&public));
            }
            Ok(ExitCode::SUCCESS)
        }
        AttestAction::Verify { file, pubkey } => verify_file(&file, pubkey.as_deref()),
        AttestAction::Example { state_dir } => {
            let key = load_or_create(state_dir)?;
            let signed = tierbox_attest::sign(tierbox_attest::example_attestation(), &key)?;
            println!("{}", serde_json::to_string_pretty(&signed)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn fail(what: &str, e: impl std::fmt::Display) -> ExitCode {
    eprintln!("tierbox: {what} verification failed: {e}");
    ExitCode::from(1)
}

fn verify_file(file: &Path, pubkey: Option<&str>) -> Result<ExitCode> {
    let trusted = trusted_key(pubkey)?;
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    // Either an envelope, or an outcome (`tierbox run --json`, an API result) carrying one.
    // Strict: a document with a duplicate key (two `exit_code`s) is refused, never read
    // one way here and another way elsewhere.
    let parsed = tierbox_policy::json::value(&text).and_then(|v| {
        let outcome =
            (v.get("signature").is_none() && v.get("attestation").is_some()).then(|| v.clone());
        let envelope = outcome.as_ref().map_or(v, |o| o["attestation"].clone());
        serde_json::from_value::<SignedAttestation>(envelope).map(|e| (e, outcome))
    });
    let (envelope, outcome) = match parsed {
        Ok(e) => e,
        Err(e) => {
            return Ok(fail(
                "attestation",
                format!("{}: not a signed attestation: {e}", file.display()),
            ));
        }
    };
    let checked =
        tierbox_attest::verify_envelope(&envelope, trusted.as_ref()).and_then(
            |()| match &outcome {
                Some(o) => tierbox_attest::verify_outcome(&envelope, o),
                None => Ok(()),
            },
        );
    match checked {
        Ok(()) => {
            if outcome.is_some() {
                println!(
                    "ok: every field the attestation covers matches the outcome (docs/attestation.md lists them)"
                );
            }
            println!(
                "ok: attestation {} digest {} signed by {}{}",
                envelope.attestation.id,
                envelope.digest,
                envelope.public_key,
                if trusted.is_some() {
                    " (trusted)"
                } else {
                    " (untrusted: pass --pubkey)"
                }
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Ok(fail("attestation", format!("{}: {e}", file.display()))),
    }
}

pub fn run_audit(action: AuditAction) -> Result<ExitCode> {
    match action {
        AuditAction::Rotate { log } => match tierbox_attest::rotate(&log) {
            Ok(moved) => {
                println!(
                    "rotated: records moved to {}; {} continues the chain",
                    moved.display(),
                    log.display()
                );
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("tierbox: cannot rotate {}: {e}", log.display());
                Ok(ExitCode::from(1))
            }
        },
        AuditAction::Verify {
            logs,
            pubkey,
            expect_head,
        } => {
            let expected_head = match expect_head.as_deref() {
                None => None,
                Some(s) => {
                    let (seq, digest) = s
                        .split_once(':')
                        .context("--expect-head must be SEQ:DIGEST")?;
                    Some(tierbox_attest::Head {
                        seq: seq.parse().context("--expect-head: SEQ must be a number")?,
                        digest: digest.to_owned(),
                    })
                }
            };
            let options = VerifyOptions {
                trusted_key: trusted_key(pubkey.as_deref())?,
                expected_head,
                ..VerifyOptions::default()
            };
            // Files oldest first: each must chain to the previous one's head.
            let (mut records, mut head) = (0, None);
            for (i, path) in logs.iter().enumerate() {
                let opts = VerifyOptions {
                    anchor: head.clone(),
                    expected_head: options
                        .expected_head
                        .clone()
                        .filter(|_| i + 1 == logs.len()),
                    ..options.clone()
                };
                match tierbox_attest::verify_log_with(path, &opts) {
                    Ok(s) => {
                        records += s.records;
                        if s.head.is_some() {
                            head = s.head;
                        }
                    }
                    Err(tierbox_attest::LogError::Io { op, path, source }) => {
                        return Err(source).with_context(|| format!("{op} {}", path.display()));
                    }
                    Err(e) => return Ok(fail("audit log", format!("{}: {e}", path.display()))),
                }
            }
            match head {
                Some(h) => println!("ok: {records} records, head {h}"),
                None => println!("ok: empty log"),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
