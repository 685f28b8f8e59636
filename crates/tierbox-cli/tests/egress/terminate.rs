//! TLS termination at the egress proxy end to end: `tierbox run` with curl against the
//! lab's HTTPS host `allowed.test` (its own CA, named by `egress.upstream_roots`), whose
//! `/echo` answers with the `Authorization` header it received and logs it.
//!
//! - A credential (`egress.credentials`) reaches the upstream as the real secret, while
//!   the sandbox only ever holds a placeholder: not in its environment, its files, its
//!   output, the outcome, the attestation or the audit log; a response echoing the
//!   secret comes back with the placeholder in its place; the same placeholder sent to
//!   another allowed host (`other.test`, a plain tunnel) arrives as the placeholder.
//! - Method/path rules: an allowed GET passes, a POST to the same path is refused with
//!   the rule that would allow it.
//! - Tier B refuses credentials (its proxy is on the host's loopback) and serves
//!   method/path rules.

use std::path::Path;

use serde_json::Value;

use crate::netlab::NetLab;
use crate::strict::{Run, TIER_TABLE, Tier, ready, try_run_with};

/// The secret the upstream must receive and the sandbox must never see.
const SECRET: &str = "lab-secret-6f1d0c9e2b7a4d3c";

/// The script the sandbox runs: the credential to the terminated host, the same
/// placeholder to a tunnelled host (trusting the lab's CA itself), a POST the rules
/// refuse, and its environment into a file.
/// The responses go to files (the output is redacted, the files are what the program
/// got).
const SCRIPT: &str = r#"set -u
curl -sS --fail --max-time 20 -o a.txt -H "Authorization: Bearer $LAB_TOKEN" https://allowed.test/echo
curl -sS --fail --max-time 20 -o b.txt --cacert ca.pem -H "Authorization: Bearer $LAB_TOKEN" https://other.test/echo
echo "P:$(curl -sS --max-time 20 -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $LAB_TOKEN" https://allowed.test/echo)"
env > env.txt
test -s "$SSL_CERT_FILE" && echo bundle-ok
"#;

/// A policy terminating `allowed.test` (GET `/echo` and `/` only), with the `lab`
/// credential read from `secret_file` when one is given; `other.test` allowed as a plain
/// tunnel.
fn policy(lab: &NetLab, secret_file: Option<&Path>) -> String {
    let (a, b) = (lab.host("allowed"), lab.host("other"));
    let credential = match secret_file {
        Some(f) => format!(
            "\n[[egress.credentials]]\nname = \"lab\"\nhost = \"allowed.test\"\n\
             header = \"Authorization\"\nenv = \"LAB_TOKEN\"\nsecret = {{ file = \"{}\" }}\n",
            f.display()
        ),
        None => String::new(),
    };
    format!(
        r#"version = 1

{TIER_TABLE}
[exec]
allowed_executables = ["curl", "python3", "sh", "git"]
allow_interpreters = true

[env]
path = "/usr/bin:/bin"

[limits]
timeout_ms = 60000

[egress]
mode = "strict"
allow = ["allowed.test", "other.test", "{}", "{}"]
upstream_roots = ["{}"]

[egress.resolve]
"allowed.test" = ["{}"]
"other.test" = ["{}"]

[egress.hosts."allowed.test"]
allow = ["GET /echo", "GET /"]
{credential}"#,
        a.v4,
        b.v4,
        lab.ca_cert().display(),
        a.v4,
        b.v4,
    )
}

/// A secret file as a careful operator keeps one: the supervisor's, mode 0600, in a
/// directory of its own outside the workspace.
fn secret_file() -> (tempfile::TempDir, std::path::PathBuf) {
    secret_file_of(SECRET)
}

/// [`secret_file`] holding `value`.
fn secret_file_of(value: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lab-token");
    std::fs::write(&path, format!("{value}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    (dir, path)
}

fn files_holding(dir: &Path, needle: &str) -> Vec<std::path::PathBuf> {
    tierbox_test_support::files_containing(dir, needle.as_bytes())
}

fn decisions(run: &Run) -> Vec<Value> {
    run.decisions()
}

fn lab_saw(lab: &NetLab, ip: std::net::Ipv4Addr, detail_prefix: &str) -> Vec<String> {
    lab.log()
        .into_iter()
        .filter(|e| e.local.ip() == std::net::IpAddr::V4(ip) && e.local.port() == 443)
        .map(|e| e.detail)
        .filter(|d| d.starts_with(detail_prefix))
        .collect()
}

fn credential_reaches_the_upstream_and_never_the_sandbox(test: &str, tier: Tier) {
    let Some(lab) = ready(test, tier) else { return };
    // A secret per tier: the two tests reach the same host at once.
    let secret = format!("{SECRET}-{tier:?}");
    let secret = secret.as_str();
    let (_dir, secret_path) = secret_file_of(secret);
    let p = policy(lab, Some(&secret_path));
    let before = lab.log().len();
    let r = try_run_with(
        lab,
        tier,
        &p,
        &["sh", "cred.sh"],
        &[("cred.sh", SCRIPT)],
        &[],
    );
    let describe = format!(
        "status {}\nstdout: {}\nstderr: {}\noutcome: {}",
        r.status, r.stdout, r.stderr, r.outcome
    );
    assert_eq!(r.status, 0, "{describe}");
    let env_txt = std::fs::read_to_string(r.workspace.path().join("env.txt")).unwrap();
    let placeholder = env_txt
        .lines()
        .find_map(|l| l.strip_prefix("LAB_TOKEN="))
        .unwrap_or_else(|| panic!("no LAB_TOKEN in the sandbox: {env_txt}"))
        .to_owned();
    assert!(placeholder.starts_with("tbx_ph_"), "{placeholder}");
    assert!(
        env_txt.contains("SSL_CERT_FILE=/tmp/tierbox-ca-bundle.pem"),
        "{env_txt}"
    );
    assert!(r.stdout.contains("bundle-ok"), "{describe}");

    // The terminated host received the secret; the response echoing it came back with
    // the placeholder in its place.
    let a = lab.host("allowed").v4;
    let log: Vec<String> = lab.log()[before..]
        .iter()
        .map(|e| e.detail.clone())
        .collect();
    let seen_a = lab_saw(lab, a, "auth ");
    assert!(
        seen_a.contains(&format!("auth Bearer {secret} query ")),
        "{seen_a:?}\n{log:?}"
    );
    let read = |name: &str| std::fs::read_to_string(r.workspace.path().join(name)).unwrap();
    assert_eq!(
        read("a.txt"),
        format!("auth=Bearer {placeholder}\nquery=\n")
    );
    // The tunnelled host received the placeholder, never the secret.
    assert_eq!(
        read("b.txt"),
        format!("auth=Bearer {placeholder}\nquery=\n")
    );
    let b = lab.host("other").v4;
    let seen_b = lab_saw(lab, b, "auth ");
    assert!(
        seen_b.contains(&format!("auth Bearer {placeholder} query ")),
        "{seen_b:?}"
    );
    assert!(!seen_b.iter().any(|d| d.contains(secret)), "{seen_b:?}");
    // The POST was refused by the rules, with the rule that allows it.
    assert!(r.stdout.contains("P:403"), "{describe}");
    let refused = decisions(&r)
        .into_iter()
        .filter(|d| d["verdict"] == "request_refused")
        .count();
    assert_eq!(refused, 1, "{describe}");
    let denial = r
        .denial("request")
        .unwrap_or_else(|| panic!("no request denial: {describe}"));
    assert_eq!(
        denial["target"], "POST /echo on allowed.test:443",
        "{denial}"
    );
    assert_eq!(
        denial["hint"], "add \"POST /echo\" to egress.hosts.\"allowed.test\".allow",
        "{denial}"
    );
    // The credential's use is counted by name, never with its value.
    assert_eq!(
        r.outcome["egress"]["credentials_used"]["lab"], 1,
        "{describe}"
    );

    // The secret is nowhere the sandbox or the caller can read.
    let everything = r.outcome.to_string();
    assert!(!everything.contains(secret), "outcome: {everything}");
    assert!(!r.stdout.contains(secret) && !r.stderr.contains(secret));
    assert!(!env_txt.contains(secret));
    let in_ws = files_holding(r.workspace.path(), secret);
    assert!(
        in_ws.is_empty(),
        "workspace files holding the secret: {in_ws:?}"
    );
    let in_state = files_holding(r.state.path(), secret);
    assert!(
        in_state.is_empty(),
        "state files (audit log) holding it: {in_state:?}"
    );
}

/// Tier B serves method/path rules (no secret is involved) and refuses credentials,
/// saying why and what to use.
fn tier_b_rules_yes_credentials_no(test: &str) {
    let tier = Tier::B;
    let Some(lab) = ready(test, tier) else { return };
    let script = "curl -sS --fail --max-time 20 https://allowed.test/echo?x=1\n\
                  curl -sS --max-time 20 -o /dev/null -w 'P:%{http_code}\\n' -X POST https://allowed.test/echo\n";
    let r = try_run_with(
        lab,
        tier,
        &policy(lab, None),
        &["sh", "rules.sh"],
        &[("rules.sh", script)],
        &[],
    );
    assert_eq!(r.status, 0, "{} {}", r.outcome, r.stderr);
    assert!(r.stdout.contains("auth=\nquery=x=1\n"), "{}", r.outcome);
    assert!(r.stdout.contains("P:403"), "{}", r.outcome);

    let (_dir, secret_path) = secret_file();
    let r = try_run_with(
        lab,
        tier,
        &policy(lab, Some(&secret_path)),
        &["sh", "rules.sh"],
        &[("rules.sh", script)],
        &[],
    );
    assert_eq!(r.status, 125, "{}", r.outcome);
    assert_eq!(
        r.outcome["error"]["code"], "tier.unsupported",
        "{}",
        r.outcome
    );
    let message = r.outcome["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("egress.credentials in tier b"),
        "{message}"
    );
    assert!(message.contains("use tier c"), "{message}");
}

/// A secret the supervisor cannot read safely refuses the run before anything starts,
/// naming the entry and why.
fn an_unsafe_secret_file_refuses_the_run(test: &str, tier: Tier) {
    use std::os::unix::fs::PermissionsExt;
    let Some(lab) = ready(test, tier) else { return };
    let (_dir, secret_path) = secret_file();
    std::fs::set_permissions(&secret_path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let r = try_run_with(
        lab,
        tier,
        &policy(lab, Some(&secret_path)),
        &["sh", "cred.sh"],
        &[("cred.sh", SCRIPT)],
        &[],
    );
    assert_eq!(r.status, 125, "{}", r.outcome);
    assert_eq!(
        r.outcome["error"]["code"], "egress.termination_unavailable",
        "{}",
        r.outcome
    );
    let message = r.outcome["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("egress.credentials \"lab\""), "{message}");
    assert!(message.contains("lets others write"), "{message}");
    assert!(!r.workspace.path().join("env.txt").exists(), "it ran");
    // The fix the message names (chmod go-w) lets the run through.
    std::fs::set_permissions(&secret_path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let r = try_run_with(
        lab,
        tier,
        &policy(lab, Some(&secret_path)),
        &["sh", "cred.sh"],
        &[("cred.sh", SCRIPT)],
        &[],
    );
    assert_eq!(r.status, 0, "{} {}", r.outcome, r.stderr);
    assert!(
        r.workspace.path().join("env.txt").exists(),
        "it did not run"
    );
}

/// A client that trusts something else than the run's bundle (here the lab's CA alone)
/// fails its handshake with the proxy: a `tls_failed` decision whose hint says to point it
/// at `$SSL_CERT_FILE`; doing just that works.
fn a_client_not_trusting_the_runs_ca_is_told_where_it_is(test: &str, tier: Tier) {
    let Some(lab) = ready(test, tier) else { return };
    let script = "curl -sS --max-time 20 -o /dev/null --cacert ca.pem https://allowed.test/ || echo \"refused: $?\"\n\
                  curl -sS --fail --max-time 20 -o fixed.txt --cacert \"$SSL_CERT_FILE\" https://allowed.test/ && echo fixed\n";
    let r = try_run_with(
        lab,
        tier,
        &policy(lab, None),
        &["sh", "trust.sh"],
        &[("trust.sh", script)],
        &[],
    );
    let describe = format!("{} {}", r.outcome, r.stderr);
    assert!(r.stdout.contains("refused: 60"), "{describe}");
    let failed = decisions(&r)
        .into_iter()
        .find(|d| d["verdict"] == "tls_failed")
        .unwrap_or_else(|| panic!("no tls_failed decision: {describe}"));
    let message = failed["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("the client does not trust the run's CA"),
        "{message}"
    );
    assert!(
        message.contains("curl --cacert \"$SSL_CERT_FILE\""),
        "{message}"
    );
    assert!(r.stdout.contains("fixed"), "{describe}");
    let fixed = std::fs::read_to_string(r.workspace.path().join("fixed.txt")).unwrap();
    assert_eq!(fixed, "hello from allowed\n");
}

#[test]
fn a_client_not_trusting_the_runs_ca_is_told_where_it_is_and_that_works() {
    a_client_not_trusting_the_runs_ca_is_told_where_it_is(
        "terminate::a_client_not_trusting_the_runs_ca_is_told_where_it_is_and_that_works",
        Tier::C,
    );
}

mod credential_reaches_the_upstream_and_never_the_sandbox {
    #[test]
    fn tier_c() {
        super::credential_reaches_the_upstream_and_never_the_sandbox(
            "terminate::credential::tier_c",
            super::Tier::C,
        );
    }
    #[test]
    fn tier_c_bwrap() {
        super::credential_reaches_the_upstream_and_never_the_sandbox(
            "terminate::credential::tier_c_bwrap",
            super::Tier::CBwrap,
        );
    }
}

#[test]
fn tier_b_serves_request_rules_and_refuses_credentials() {
    tier_b_rules_yes_credentials_no(
        "terminate::tier_b_serves_request_rules_and_refuses_credentials",
    );
}

#[test]
fn an_unsafe_secret_file_refuses_the_run_before_it_starts() {
    an_unsafe_secret_file_refuses_the_run(
        "terminate::an_unsafe_secret_file_refuses_the_run_before_it_starts",
        Tier::C,
    );
}

/// `tierbox proxy --ca-out FILE` terminates the policy's hosts on its own: a client that
/// trusts FILE gets the allowed request through and the refused one refused; without
/// `--ca-out` it refuses to start, saying so; an existing FILE is never overwritten.
#[test]
fn the_proxy_alone_terminates_with_the_bundle_it_writes() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let test = "terminate::the_proxy_alone_terminates_with_the_bundle_it_writes";
    let Some(lab) = NetLab::shared(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let policy_file = dir.path().join("policy.toml");
    std::fs::write(&policy_file, policy(lab, None)).unwrap();
    let bundle = dir.path().join("bundle.pem");
    let proxy = |ca_out: Option<&Path>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tierbox"));
        cmd.args(["proxy", "--listen", "127.0.0.1:0", "--policy"])
            .arg(&policy_file);
        if let Some(p) = ca_out {
            cmd.arg("--ca-out").arg(p);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let out = proxy(None).wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("give --ca-out FILE"),
        "{stderr}"
    );

    let mut child = proxy(Some(&bundle));
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut addr = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(rest) = line.split("egress proxy on ").nth(1) {
            addr = rest.split_whitespace().next().map(str::to_owned);
            break;
        }
    }
    let addr = addr.expect("the proxy's address");
    let curl = |extra: &[&str]| {
        Command::new("curl")
            .args([
                "-sS",
                "--max-time",
                "20",
                "-x",
                &format!("http://{addr}"),
                "--cacert",
            ])
            .arg(&bundle)
            .args(extra)
            .output()
            .unwrap()
    };
    let get = curl(&["https://allowed.test/echo"]);
    assert_eq!(
        String::from_utf8_lossy(&get.stdout),
        "auth=\nquery=\n",
        "{get:?}"
    );
    let post = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-X",
        "POST",
        "https://allowed.test/echo",
    ]);
    assert_eq!(String::from_utf8_lossy(&post.stdout), "403", "{post:?}");
    let _ = child.kill();
    let _ = child.wait();
    // The bundle is not overwritten by another proxy.
    let before = std::fs::read(&bundle).unwrap();
    let out = proxy(Some(&bundle)).wait_with_output().unwrap();
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("creating a new file"),
        "{out:?}"
    );
    assert_eq!(std::fs::read(&bundle).unwrap(), before);
}

/// An upstream whose certificate does not verify (the policy names no anchor for the
/// lab's CA, so only the host's trust store is asked) fails closed: a `tls_failed`
/// decision, the credential never sent, and the host never sees a request.
#[test]
fn an_upstream_that_does_not_verify_gets_nothing() {
    let test = "terminate::an_upstream_that_does_not_verify_gets_nothing";
    let tier = Tier::C;
    let Some(lab) = ready(test, tier) else { return };
    // A secret of this test's own: other tests reach the same host meanwhile.
    let own_secret = "bad-upstream-secret-5d0e7a21";
    let (_dir, secret_path) = secret_file_of(own_secret);
    let p = policy(lab, Some(&secret_path)).replace(
        &format!("upstream_roots = [\"{}\"]\n", lab.ca_cert().display()),
        "",
    );
    assert!(!p.contains("upstream_roots"), "{p}");
    let script = "curl -sS --max-time 20 -o /dev/null -H \"Authorization: Bearer $LAB_TOKEN\" \
                  https://allowed.test/echo || echo \"refused: $?\"\n";
    let r = try_run_with(lab, tier, &p, &["sh", "bad.sh"], &[("bad.sh", script)], &[]);
    let describe = format!("{} {}", r.outcome, r.stderr);
    assert!(r.stdout.contains("refused: "), "{describe}");
    let failed = decisions(&r)
        .into_iter()
        .find(|d| d["verdict"] == "tls_failed")
        .unwrap_or_else(|| panic!("no tls_failed decision: {describe}"));
    let message = failed["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("the upstream allowed.test failed TLS verification"),
        "{message}"
    );
    let reached: Vec<String> = lab
        .log()
        .into_iter()
        .map(|e| e.detail)
        .filter(|d| d.contains(own_secret))
        .collect();
    assert!(
        reached.is_empty(),
        "the upstream got the secret: {reached:?}"
    );
    assert!(
        r.outcome["egress"]["credentials_used"].is_null()
            || r.outcome["egress"]["credentials_used"]["lab"].is_null(),
        "{describe}"
    );
}
