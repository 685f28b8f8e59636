//! `tierbox run --stdin`: bytes of any kind streamed to the program, in every tier, cut at
//! the stdin limit and said so.
//!
//! Each run here pipes its input from a producer thread that writes in chunks and pauses
//! halfway (a slow producer: the program must not see an end of file before it ends), and
//! compares the digest `sha256sum` prints inside the sandbox with the host's.

use std::process::{Command, Output, Stdio};

use sha2::{Digest, Sha256};

/// 10 MiB: far past the 64 KiB the CLI took before, and past any pipe's buffer.
const PAYLOAD_BYTES: usize = 10 << 20;

fn hex_sha256(data: &[u8]) -> String {
    tierbox_attest::jcs::hex(&Sha256::digest(data))
}

/// `tierbox ARGS` in process (`TIERBOX_DAEMON=off`, a fresh state directory) with `data`
/// on its stdin, written by a slow producer.
fn run_fed(args: &[&str], data: Vec<u8>) -> Output {
    let state = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tierbox"))
        .args(args)
        .env("XDG_STATE_HOME", state.path())
        .env("TIERBOX_DAEMON", "off")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    // A write fails only when tierbox stopped reading (the limit): that is the test's to
    // judge from the outcome.
    let producer = std::thread::spawn(move || {
        let _ = tierbox_test_support::feed_slowly(&mut pipe, &data);
    });
    let out = child.wait_with_output().unwrap();
    producer.join().unwrap();
    out
}

/// The digest `sha256sum` printed (`<hex>  -`).
fn printed_digest(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// A policy file allowing `sha256sum`, `wc` and `head`, with `extra` TOML appended.
fn policy(dir: &std::path::Path, extra: &str) -> String {
    let path = dir.join("policy.toml");
    std::fs::write(
        &path,
        format!(
            "version = 1\n[exec]\nallowed_executables = [\"sha256sum\", \"wc\", \"head\"]\n{extra}"
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

/// The bwrap backend's policy: bwrap applies no landlock layer, and the seccomp, cgroup
/// and disk layers follow the host.
const BWRAP: &str = "[tier]\nminimum = \"c\"\nbackend = \"bwrap\"\noptional_layers = [\"landlock\", \"cgroup\", \"disk\", \"protected_paths\", \"seccomp\"]\n";

/// Regression: `--stdin` read the whole input into a string (refusing anything that was
/// not UTF-8, and anything past 64 KiB). 10 MiB of random bytes, NULs and invalid UTF-8
/// included, now reach the program byte for byte — Tier B, Tier C native and Tier C
/// bwrap — and the outcome names the same digest.
#[test]
fn ten_mib_of_binary_stdin_reach_the_program_exactly_in_every_tier() {
    let data = tierbox_test_support::binary_payload(PAYLOAD_BYTES);
    assert!(std::str::from_utf8(&data).is_err() && data.contains(&0));
    let want = hex_sha256(&data);
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let w = ws.to_str().unwrap().to_owned();
    let mut cases: Vec<(&str, String, &str)> = Vec::new();
    if super::tier_b_available() {
        cases.push(("tier b", policy(dir.path(), ""), "b"));
    }
    if super::tier_c_native_available() {
        cases.push(("tier c native", policy(dir.path(), ""), "c"));
    }
    if tierbox_runner::host::probe_bwrap_cached().is_ok() {
        let bwrap = dir.path().join("bwrap");
        std::fs::create_dir(&bwrap).unwrap();
        cases.push(("tier c bwrap", policy(&bwrap, BWRAP), "c"));
    } else {
        tierbox_test_support::skip_here("bubblewrap is not installed: the bwrap case is skipped");
    }
    for (name, policy, tier) in cases {
        let out = run_fed(
            &[
                "run",
                "--json",
                "--policy",
                &policy,
                "--workspace",
                &w,
                "--tier",
                tier,
                "--stdin",
                "--",
                "sha256sum",
            ],
            data.clone(),
        );
        let v = super::succeeded_json(&out);
        tierbox_test_support::assert_streamed_stdin_reached(&v, PAYLOAD_BYTES as u64, &want);
        assert_eq!(v["stdin"]["limit_hit"], false, "{name}");
        assert!(v["limit_hit"].is_null(), "{name}: {v}");
        if name == "tier c bwrap" {
            assert_eq!(v["backend"], "tier_c_bwrap", "{v}");
        }
    }
}

/// Past the stdin limit the program's stdin is closed after exactly the limit, and that
/// is said: `limit_hit: "stdin"`, the outcome's `stdin`, and a `tierbox:` line. The
/// request may narrow the policy's limit, never widen it; exactly the limit is no hit.
#[test]
fn stdin_past_its_limit_is_cut_there_and_said() {
    if !super::tier_b_available() {
        return;
    }
    let data = tierbox_test_support::binary_payload(300_000);
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let w = ws.to_str().unwrap().to_owned();
    let p = policy(dir.path(), "[limits]\nstdin_bytes = 200000\n");
    let run = |extra: &[&str], json: bool, data: &[u8]| {
        let mut args = vec!["run", "--policy", &p, "--workspace", &w, "--tier", "b"];
        if json {
            args.push("--json");
        }
        args.push("--stdin");
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "sha256sum"]);
        run_fed(&args, data.to_vec())
    };
    // The policy's limit.
    let v = super::succeeded_json(&run(&[], true, &data));
    assert_eq!(v["limit_hit"], "stdin", "{v}");
    assert_eq!(v["stdin"]["bytes"], 200_000, "{v}");
    assert_eq!(v["stdin"]["limit_bytes"], 200_000);
    assert_eq!(v["stdin"]["limit_hit"], true);
    let cut = hex_sha256(&data[..200_000]);
    assert_eq!(v["stdin"]["sha256"], cut.as_str());
    let printed = v["stdout"]["text"].as_str().unwrap_or_default();
    assert!(printed.starts_with(&cut), "{printed}");
    // Narrowed by the request; the line on stderr, the program's own exit status.
    let out = run(&["--stdin-limit", "1000"], false, &data);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(printed_digest(&out), hex_sha256(&data[..1000]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .contains("tierbox: limit hit: stdin: the program's stdin was closed after 1000 bytes"),
        "{stderr}"
    );
    // Exactly the limit: all of it, and no hit.
    let v = super::succeeded_json(&run(&["--stdin-limit", "1000"], true, &data[..1000]));
    assert!(v["limit_hit"].is_null(), "{v}");
    assert_eq!(v["stdin"]["limit_hit"], false, "{v}");
    assert_eq!(v["stdin"]["bytes"], 1000);
    // Widening is refused before anything runs.
    let out = run(&["--stdin-limit", "200001"], true, &data);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["code"], "limits.above_policy", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("stdin_limit_bytes"),
        "{v}"
    );
}

/// Inline stdin in a request document: bytes as base64 reach the program exactly; both
/// fields, bad base64 and more than the limit are refused with their rules' codes, and
/// nothing runs.
#[test]
fn request_stdin_as_base64_and_its_refusals() {
    if !super::tier_b_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let w = ws.to_str().unwrap().to_owned();
    let p = policy(dir.path(), "[limits]\nstdin_bytes = 4096\n");
    let data = tierbox_test_support::binary_payload(3000);
    let mut req = tierbox_policy::ProcessRunRequest::new("sha256sum");
    req.set_stdin_bytes(data.clone());
    assert!(req.stdin_base64.is_some());
    let doc = dir.path().join("req.json");
    let run_doc = |body: &str| {
        std::fs::write(&doc, body).unwrap();
        run_fed(
            &[
                "run",
                "--json",
                "--policy",
                &p,
                "--workspace",
                &w,
                "--tier",
                "b",
                "--request",
                doc.to_str().unwrap(),
            ],
            Vec::new(),
        )
    };
    let v = super::succeeded_json(&run_doc(&serde_json::to_string(&req).unwrap()));
    let printed = v["stdout"]["text"].as_str().unwrap_or_default();
    assert!(printed.starts_with(&hex_sha256(&data)), "{v}");
    assert_eq!(v["stdin"]["streamed"], false);
    for (body, code) in [
        (
            r#"{"command":"sha256sum","stdin":"a","stdin_base64":"YQ=="}"#,
            "input.stdin_conflict",
        ),
        (
            r#"{"command":"sha256sum","stdin_base64":"not base64!"}"#,
            "input.stdin_encoding_invalid",
        ),
        (
            &format!(
                r#"{{"command":"sha256sum","stdin":"{}"}}"#,
                "x".repeat(4097)
            ),
            "input.stdin_too_large",
        ),
    ] {
        let out = run_doc(body);
        assert_eq!(out.status.code(), Some(125), "{code}: {out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["error"]["code"], code, "{v}");
    }
}

/// A WASI command that reads its stdin to the end and prints how many bytes it read and
/// their 32-bit FNV-1a hash, in decimal (`COUNT HASH`).
const FNV_GUEST: &str = include_str!("stdin_fnv.wat");

/// 32-bit FNV-1a, as the guest computes it.
fn fnv1a(data: &[u8]) -> u32 {
    data.iter().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(16_777_619)
    })
}

/// Tier A: `wasm run --stdin` streams the same way; the guest reads 10 MiB of random
/// bytes exactly (its count and hash are the host's), and `--stdin-limit` cuts them.
#[test]
fn a_tier_a_guest_reads_a_streamed_binary_stdin_exactly() {
    let data = tierbox_test_support::binary_payload(PAYLOAD_BYTES);
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("fnv.wat"), FNV_GUEST).unwrap();
    let w = ws.to_str().unwrap().to_owned();
    let run = |extra: &[&str], data: &[u8]| {
        let mut args = vec!["wasm", "run", "--json", "--workspace", &w, "--stdin"];
        args.extend_from_slice(extra);
        args.push("fnv.wat");
        super::succeeded_json(&run_fed(&args, data.to_vec()))
    };
    let v = run(&[], &data);
    assert_eq!(v["tier"], "a", "{v}");
    assert_eq!(
        v["stdout"]["text"],
        format!("{PAYLOAD_BYTES} {}\n", fnv1a(&data)),
        "{v}"
    );
    assert_eq!(v["stdin"]["sha256"], hex_sha256(&data).as_str());
    let v = run(&["--stdin-limit", "4096"], &data);
    assert_eq!(
        v["stdout"]["text"],
        format!("4096 {}\n", fnv1a(&data[..4096])),
        "{v}"
    );
    assert_eq!(v["limit_hit"], "stdin", "{v}");
}
