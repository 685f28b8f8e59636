//! Egress modes end to end: `tierbox run` with curl and small scripts against the lab's
//! hosts, in Tier B and in Tier C. Each case runs in both tiers; a tier the host cannot
//! provide is skipped with a reason (a failure under `CI=true`).
//!
//! The policy names the lab's hosts `allowed.test` and `blocked.test` through
//! `egress.resolve` (no DNS here), and allows `allowed.test` plus its address (the lab's
//! addresses are private, which the proxy refuses unless an address entry covers them).
//! `rebind.test` is allowed by name but resolves to 127.0.0.1: the DNS-rebinding case.

use std::net::IpAddr;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::netlab::NetLab;

/// A tier and whether this host can run strict egress in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    B,
    /// Tier C on the native backend.
    C,
    /// Tier C on the bwrap backend.
    CBwrap,
}

/// The `[tier]` table of [`policy`], which [`Tier::adapt`] rewrites for bwrap.
pub const TIER_TABLE: &str = "[tier]\noptional_layers = [\"cgroup\", \"protected_paths\"]\n";

impl Tier {
    pub fn arg(self) -> &'static str {
        match self {
            Tier::B => "b",
            Tier::C | Tier::CBwrap => "c",
        }
    }

    /// `policy_text` for this tier: the bwrap backend (which applies no landlock layer of
    /// its own) in place of the native one.
    pub fn adapt(self, policy_text: &str) -> String {
        match self {
            Tier::CBwrap => {
                assert!(policy_text.contains(TIER_TABLE), "{policy_text}");
                policy_text.replace(
                    TIER_TABLE,
                    "[tier]\nbackend = \"bwrap\"\n\
                     optional_layers = [\"cgroup\", \"protected_paths\", \"landlock\"]\n",
                )
            }
            Tier::B | Tier::C => policy_text.to_owned(),
        }
    }

    /// Why this host cannot enforce strict egress in this tier, if it cannot.
    pub fn missing(self) -> Option<String> {
        let facts = tierbox_sandbox::probe::host_facts();
        match self {
            Tier::B => {
                let abi = facts.landlock_abi.unwrap_or(0);
                if !facts.seccomp {
                    Some("tier b strict egress needs seccomp".to_owned())
                } else if abi < 4 {
                    Some(format!(
                        "tier b strict egress needs landlock abi 4, host has {abi}"
                    ))
                } else {
                    None
                }
            }
            Tier::C => tierbox_sandbox::linux::userns::probe_userns_cached()
                .reason()
                .map(|r| format!("tier c is unavailable: {r}")),
            Tier::CBwrap => Tier::C
                .missing()
                .or_else(|| {
                    tierbox_sandbox::bwrap::probe_bwrap_cached()
                        .err()
                        .map(|e| format!("bwrap is unusable: {e}"))
                })
                .or_else(|| {
                    (facts.euid != 0)
                        .then(|| "strict egress on bwrap needs a root supervisor".to_owned())
                }),
        }
    }
}

/// Skips (or fails under CI) when the lab or the tier is missing.
pub fn ready(test: &str, tier: Tier) -> Option<&'static NetLab> {
    let lab = NetLab::shared(test)?;
    if let Some(reason) = tier.missing() {
        tierbox_test_support::skip(test, &reason);
        return None;
    }
    Some(lab)
}

fn ip(lab: &NetLab, host: &str) -> IpAddr {
    IpAddr::V4(lab.host(host).v4)
}

/// The strict policy of these tests (or another mode, with the same allowlist).
pub fn policy(lab: &NetLab, mode: &str, allow: bool) -> String {
    let allowed = lab.host("allowed");
    let blocked = lab.host("blocked");
    let allow = if allow {
        format!(
            r#"allow = ["allowed.test", "rebind.test", "meta.test", "{}", "{}"]"#,
            allowed.v4, allowed.v6
        )
    } else {
        "allow = []".to_owned()
    };
    format!(
        r#"version = 1

[tier]
optional_layers = ["cgroup", "protected_paths"]

[exec]
allowed_executables = ["curl", "python3", "sh", "git", "ssh"]
allow_interpreters = true

[env]
path = "/usr/bin:/bin"

[limits]
timeout_ms = 60000

[egress]
mode = "{mode}"
{allow}

[egress.resolve]
"allowed.test" = ["{}"]
"blocked.test" = ["{}"]
"rebind.test" = ["127.0.0.1"]
"meta.test" = ["169.254.169.254"]
"#,
        allowed.v4, blocked.v4
    )
}

/// One `tierbox run --json` in a fresh workspace holding the lab's certificate
/// (`ca.pem`) and the scripts of [`SCRIPTS`].
pub struct Run {
    pub status: i32,
    pub outcome: Value,
    pub stdout: String,
    pub stderr: String,
    /// The run's workspace and the CLI's state directory (audit log, spill files), kept
    /// for the test to read.
    pub workspace: tempfile::TempDir,
    pub state: tempfile::TempDir,
}

impl Run {
    /// The egress decisions of the outcome (empty without a proxy).
    pub fn decisions(&self) -> Vec<Value> {
        self.outcome["egress"]["decisions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The outcome's first denial of `operation` (`request`, `tls`, `connect`), if any.
    pub fn denial(&self, operation: &str) -> Option<Value> {
        self.outcome["denials"]
            .as_array()
            .and_then(|d| d.iter().find(|d| d["operation"] == operation).cloned())
    }

    fn describe(&self) -> String {
        format!(
            "status {}\nstdout: {}\nstderr: {}\ncli stderr: {}\negress: {}",
            self.status,
            self.stdout,
            self.outcome["stderr"]["text"],
            self.stderr,
            self.outcome["egress"]
        )
    }
}

/// Scripts the cases run with `python3` (a file in the workspace; no inline code).
const SCRIPTS: &[(&str, &str)] = &[
    (
        "udp.py",
        r#"import os, socket, sys
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    s.sendto(b"tierbox-udp-probe", (os.environ["TARGET"], 53))
    print("udp sent:", s.recvfrom(100)[0].decode())
except OSError as e:
    print("udp failed:", e)
    sys.exit(3)
"#,
    ),
    (
        "fastopen.py",
        r#"import os, socket, sys
MSG_FASTOPEN = 0x20000000
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    s.sendto(b"GET / HTTP/1.0\r\n\r\n", MSG_FASTOPEN, (os.environ["TARGET"], 80))
    print("fastopen connected:", s.recv(100))
except OSError as e:
    print("fastopen failed:", e)
    sys.exit(3)
"#,
    ),
    (
        "mptcp.py",
        r#"import os, socket, sys
IPPROTO_MPTCP = 262
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP)
    s.settimeout(5)
    s.connect((os.environ["TARGET"], 80))
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    print("mptcp connected:", s.recv(100))
except OSError as e:
    print("mptcp failed:", e)
    sys.exit(3)
"#,
    ),
    (
        "listen.py",
        r#"import socket, sys
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.listen(1)
    print("listening on", s.getsockname())
except OSError as e:
    print("listen failed:", e)
    sys.exit(3)
"#,
    ),
    (
        "relay.py",
        r#"import os, socket, sys
proxy = os.environ["HTTP_PROXY"].rsplit("/", 1)[-1].split(":")
s = socket.create_connection((proxy[0], int(proxy[1])), timeout=10)
s.sendall(b"CONNECT allowed.test:80 HTTP/1.1\r\nHost: allowed.test:80\r\n\r\n")
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(1)
print("outer:", head.split(b"\r\n")[0].decode())
s.sendall(b"CONNECT blocked.test:80 HTTP/1.1\r\nHost: blocked.test:80\r\n\r\n")
reply = b""
while True:
    chunk = s.recv(4096)
    if not chunk:
        break
    reply += chunk
print("inner:", reply.split(b"\r\n")[0].decode())
print(reply.decode(errors="replace"))
"#,
    ),
    (
        "socks.sh",
        "exec curl -sS --max-time 20 --socks5-hostname \"${ALL_PROXY#socks5h://}\" \"$TARGET\"\n",
    ),
    // The target comes from the environment, where preflight does not look: what a
    // program that builds its URL at runtime does. Only the runtime layers stop it.
    (
        "fetch.sh",
        "set -f\nexec curl -sS --fail --max-time 20 $CURL_FLAGS \"$TARGET\"\n",
    ),
];

/// [`try_run`] that must have run the command (not been rejected).
pub fn run(lab: &NetLab, tier: Tier, policy_text: &str, cmd: &[&str]) -> Run {
    run_env(lab, tier, policy_text, cmd, &[])
}

/// [`run`] with request environment variables.
pub fn run_env(
    lab: &NetLab,
    tier: Tier,
    policy_text: &str,
    cmd: &[&str],
    env: &[(&str, &str)],
) -> Run {
    let run = try_run(lab, tier, policy_text, cmd, env);
    assert!(
        run.outcome.is_object() && run.outcome.get("error").is_none(),
        "tierbox did not run the command: {}\n{}",
        run.outcome,
        run.stderr
    );
    run
}

/// `sh fetch.sh`: curl `target` with `flags`, both passed in the environment.
pub fn fetch(lab: &NetLab, tier: Tier, policy_text: &str, flags: &str, target: &str) -> Run {
    run_env(
        lab,
        tier,
        policy_text,
        &["sh", "fetch.sh"],
        &[("TARGET", target), ("CURL_FLAGS", flags)],
    )
}

/// One `tierbox run --json`; the outcome may be a rejection.
pub fn try_run(
    lab: &NetLab,
    tier: Tier,
    policy_text: &str,
    cmd: &[&str],
    env: &[(&str, &str)],
) -> Run {
    run_cli(lab, tier, policy_text, cmd, env, true, (&[], &[]))
}

/// [`try_run`] with more files in the workspace (name, content) and variables in the
/// CLI's own environment (the supervisor's: where a credential's secret may come from).
pub fn try_run_with(
    lab: &NetLab,
    tier: Tier,
    policy_text: &str,
    cmd: &[&str],
    files: &[(&str, &str)],
    cli_env: &[(String, String)],
) -> Run {
    run_cli(lab, tier, policy_text, cmd, &[], true, (files, cli_env))
}

/// More workspace files (name, content) and the CLI's own variables.
type Extras<'a> = (&'a [(&'a str, &'a str)], &'a [(String, String)]);

/// `tierbox run` with or without `--json` (without, `outcome` is null and `stdout` is
/// the program's).
fn run_cli(
    lab: &NetLab,
    tier: Tier,
    policy_text: &str,
    cmd: &[&str],
    env: &[(&str, &str)],
    json: bool,
    (files, cli_env): Extras<'_>,
) -> Run {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    std::fs::copy(lab.ca_cert(), ws_path.join("ca.pem")).unwrap();
    for (name, text) in SCRIPTS.iter().chain(files) {
        std::fs::write(ws_path.join(name), text).unwrap();
    }
    let policy_file = state.path().join("policy.toml");
    std::fs::write(&policy_file, tier.adapt(policy_text)).unwrap();
    let mut args: Vec<String> = vec![
        "run".into(),
        "--tier".into(),
        tier.arg().into(),
        "--policy".into(),
        policy_file.to_string_lossy().into_owned(),
        "--workspace".into(),
        ws_path.to_string_lossy().into_owned(),
    ];
    if json {
        args.push("--json".into());
    }
    for (k, v) in env {
        args.push("--env".into());
        args.push(format!("{k}={v}"));
    }
    args.push("--".into());
    args.extend(cmd.iter().map(|s| s.to_string()));
    let out = Command::new(env!("CARGO_BIN_EXE_tierbox"))
        .args(&args)
        .env("XDG_STATE_HOME", state.path())
        .envs(cli_env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let outcome: Value = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    // A run that happened ran on the backend this tier names.
    if let Some(backend) = outcome["backend"].as_str() {
        let expected = match tier {
            Tier::B => "tier_b_linux",
            Tier::C => "tier_c_linux_native",
            Tier::CBwrap => "tier_c_bwrap",
        };
        assert_eq!(backend, expected, "{stdout}");
    }
    Run {
        status: out.status.code().unwrap_or(-1),
        stdout: outcome["stdout"]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        outcome,
        workspace: ws,
        state,
    }
}

fn curl<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["curl", "-sS", "--fail", "--max-time", "20"];
    v.extend_from_slice(extra);
    v
}

fn has_decision(run: &Run, host: &str, verdict: &str, protocol: &str) -> bool {
    run.decisions()
        .iter()
        .any(|d| d["host"] == host && d["verdict"] == verdict && d["protocol"] == protocol)
}

// ---- cases --------------------------------------------------------------------------

pub fn allowed_http_https_and_socks(test: &str, tier: Tier) {
    let Some(lab) = ready(test, tier) else { return };
    let p = policy(lab, "strict", true);

    let r = run(lab, tier, &p, &curl(&["http://allowed.test/"]));
    assert_eq!(r.status, 0, "{}", r.describe());
    assert_eq!(r.stdout, "hello from allowed\n", "{}", r.describe());
    assert!(
        has_decision(&r, "allowed.test", "allowed", "http"),
        "{}",
        r.describe()
    );
    let d = &r.decisions()[0];
    assert!(
        d["bytes_received"].as_u64().unwrap() > 0,
        "{}",
        r.describe()
    );

    let r = run(
        lab,
        tier,
        &p,
        &curl(&["--cacert", "ca.pem", "https://allowed.test/"]),
    );
    assert_eq!(r.status, 0, "{}", r.describe());
    assert_eq!(r.stdout, "hello from allowed\n", "{}", r.describe());
    assert!(
        has_decision(&r, "allowed.test", "allowed", "connect"),
        "{}",
        r.describe()
    );

    let r = run_env(
        lab,
        tier,
        &p,
        &["sh", "socks.sh"],
        &[("TARGET", "http://allowed.test/")],
    );
    assert_eq!(r.status, 0, "{}", r.describe());
    assert_eq!(r.stdout, "hello from allowed\n", "{}", r.describe());
    assert!(
        has_decision(&r, "allowed.test", "allowed", "socks5"),
        "{}",
        r.describe()
    );
}

pub fn not_allowlisted_is_refused_and_reported(test: &str, tier: Tier) {
    let Some(lab) = ready(test, tier) else { return };
    let p = policy(lab, "strict", true);
    let blocked = ip(lab, "blocked");

    // Named in the arguments: preflight refuses before anything runs.
    let r = try_run(lab, tier, &p, &curl(&["http://blocked.test/"]), &[]);
    assert_eq!(r.status, 125, "{}", r.describe());
    assert_eq!(r.outcome["error"]["code"], "egress.host_not_allowed");

    // Built at runtime: the proxy refuses, and says so in the outcome.
    let r = fetch(lab, tier, &p, "", "http://blocked.test/");
    assert_ne!(r.status, 0, "{}", r.describe());
    assert!(
        has_decision(&r, "blocked.test", "not_allowlisted", "http"),
        "{}",
        r.describe()
    );
    // The outcome lists it as a denial with the change that would allow it, and says
    // which layers' denials it records on this host. Besides it, at most the unix
    // sockets libc's name service tries (nscd), which strict mode refuses in Tier B.
    let denials = r.outcome["denials"].as_array().cloned().unwrap_or_default();
    let (egress, other): (Vec<_>, Vec<_>) =
        denials.into_iter().partition(|d| d["layer"] == "egress");
    assert_eq!(
        egress,
        [serde_json::json!({
            "layer": "egress", "operation": "connect", "target": "blocked.test:80",
            "count": 1, "hint": "egress.allow += \"blocked.test:80\""
        })],
        "{}",
        r.describe()
    );
    for d in &other {
        assert_eq!(
            (&d["layer"], &d["operation"], &d["target"]),
            (
                &serde_json::json!("seccomp"),
                &serde_json::json!("socket"),
                &serde_json::json!("AF_UNIX, SOCK_STREAM")
            ),
            "{}",
            r.describe()
        );
    }
    assert_eq!(
        r.outcome["enforcement"]["denial_reports"]["egress"]["applied"],
        true,
        "{}",
        r.describe()
    );
    let denied = r.decisions()[0]["message"].as_str().unwrap().to_owned();
    assert_eq!(
        denied,
        "egress denied: host blocked.test is not in the allowlist",
        "{}",
        r.describe()
    );

    // Without --json the CLI says it on stderr, where an agent reading the output sees it.
    let r = run_cli(
        lab,
        tier,
        &p,
        &["sh", "fetch.sh"],
        &[("TARGET", "http://blocked.test/"), ("CURL_FLAGS", "")],
        false,
        (&[], &[]),
    );
    assert_ne!(r.status, 0, "{}", r.describe());
    // (Besides the egress refusal, at most the name service's unix socket, as above.)
    let line = r
        .stderr
        .lines()
        .find(|l| l.starts_with("tierbox: "))
        .unwrap_or_default();
    assert!(
        line.contains(" denial")
            && line.contains(": connect blocked.test:80 (egress)")
            && line.contains("; to allow: egress.allow += \"blocked.test:80\"")
            && line.ends_with("; see --json"),
        "the CLI does not print the denial and its fix: {}",
        r.describe()
    );

    let r = fetch(lab, tier, &p, "--cacert ca.pem", "https://blocked.test/");
    assert_ne!(r.status, 0, "{}", r.describe());
    assert!(
        has_decision(&r, "blocked.test", "not_allowlisted", "connect"),
        "{}",
        r.describe()
    );

    let r = run_env(
        lab,
        tier,
        &p,
        &["sh", "socks.sh"],
        &[("TARGET", "http://blocked.test/")],
    );
    assert_ne!(r.status, 0, "{}", r.describe());
    assert!(
        has_decision(&r, "blocked.test", "not_allowlisted", "socks5"),
        "{}",
        r.describe()
    );

    assert!(
        !lab.saw_tcp(blocked, 80),
        "the blocked host was reached on port 80"
    );
    assert!(
        !lab.saw_tcp(blocked, 443),
        "the blocked host was reached on port 443"
    );
}

pub fn bypasses_fail(test: &str, tier: Tier) {
    let Some(lab) = ready(test, tier) else { return };
    let p = policy(lab, "strict", true);
    let allowed = ip(lab, "allowed").to_string();
    let blocked = ip(lab, "blocked");
    let blocked_s = blocked.to_string();

    // Proxy-unaware client, straight at the blocked host's address.
    let url = format!("http://{blocked_s}/");
    let r = fetch(lab, tier, &p, "--noproxy *", &url);
    assert_ne!(r.status, 0, "--noproxy reached {url}: {}", r.describe());
    assert!(r.decisions().is_empty(), "{}", r.describe());

    // Direct TCP to an allowlisted host's address, without the proxy.
    let url = format!("http://{allowed}/");
    let r = fetch(lab, tier, &p, "--noproxy *", &url);
    assert_ne!(r.status, 0, "--noproxy reached {url}: {}", r.describe());
    assert!(r.decisions().is_empty(), "{}", r.describe());

    // UDP to a DNS port.
    let r = run_env(
        lab,
        tier,
        &p,
        &["python3", "udp.py"],
        &[("TARGET", &blocked_s)],
    );
    assert_ne!(r.status, 0, "{}", r.describe());
    assert!(r.stdout.contains("udp failed"), "{}", r.describe());
    assert!(
        !lab.saw_udp(blocked, 53),
        "a datagram reached the blocked host"
    );

    // TCP fast open: a connect without connect(2), which landlock does not see.
    let r = run_env(
        lab,
        tier,
        &p,
        &["python3", "fastopen.py"],
        &[("TARGET", &blocked_s)],
    );
    assert_ne!(r.status, 0, "{}", r.describe());
    assert!(r.stdout.contains("fastopen failed"), "{}", r.describe());

    // MPTCP: a stream socket that landlock's TCP rules do not cover (it falls back to
    // plain TCP on the wire, so the lab would see it).
    let r = run_env(
        lab,
        tier,
        &p,
        &["python3", "mptcp.py"],
        &[("TARGET", &blocked_s)],
    );
    assert_ne!(r.status, 0, "{}", r.describe());
    assert!(r.stdout.contains("mptcp failed"), "{}", r.describe());

    // listen() without bind(): the kernel binds an ephemeral port on every address, which
    // landlock's bind rule never sees — an inbound channel past the proxy. Tier B refuses
    // to listen at all; Tier C listens in its own network namespace, which has only `lo`.
    let r = run(lab, tier, &p, &["python3", "listen.py"]);
    if tier == Tier::B {
        assert_ne!(r.status, 0, "{}", r.describe());
        assert!(
            r.stdout.contains("listen failed: [Errno 1]"),
            "{}",
            r.describe()
        );
    }

    // An allowed name that resolves to loopback (DNS rebinding), and one that resolves
    // to the cloud metadata address.
    let r = run(lab, tier, &p, &curl(&["http://rebind.test/"]));
    assert_ne!(r.status, 0, "{}", r.describe());
    assert!(
        has_decision(&r, "rebind.test", "special_address", "http"),
        "{}",
        r.describe()
    );
    let r = run(
        lab,
        tier,
        &p,
        &curl(&["--cacert", "ca.pem", "https://meta.test/"]),
    );
    assert_ne!(r.status, 0, "{}", r.describe());
    assert!(
        has_decision(&r, "meta.test", "special_address", "connect"),
        "{}",
        r.describe()
    );

    // A second CONNECT written inside an allowed tunnel goes to the allowed host (which
    // answers 405), never to the blocked one.
    let r = run(lab, tier, &p, &["python3", "relay.py"]);
    assert_eq!(r.status, 0, "{}", r.describe());
    assert!(r.stdout.contains("outer: HTTP/1.1 200"), "{}", r.describe());
    assert!(
        r.stdout.contains("lab: method CONNECT not allowed"),
        "{}",
        r.describe()
    );
    assert!(
        !r.decisions().iter().any(|d| d["host"] == "blocked.test"),
        "{}",
        r.describe()
    );

    // IPv6 literals: the blocked host through the proxy, and directly.
    let v6 = lab.host("blocked").v6;
    let url = format!("http://[{v6}]/");
    let r = fetch(lab, tier, &p, "-g", &url);
    assert_ne!(r.status, 0, "{}", r.describe());
    assert!(
        has_decision(&r, &v6.to_string(), "not_allowlisted", "http"),
        "{}",
        r.describe()
    );
    let r = fetch(lab, tier, &p, "-g --noproxy *", &url);
    assert_ne!(r.status, 0, "{}", r.describe());

    assert!(!lab.saw_tcp(blocked, 80), "the blocked host was reached");
    assert!(
        !lab.saw_tcp(IpAddr::V6(v6), 80),
        "the blocked host was reached over IPv6"
    );
}

pub fn no_network_without_allowlist(test: &str, tier: Tier) {
    let Some(lab) = ready(test, tier) else { return };
    let allowed = ip(lab, "allowed").to_string();
    let url = format!("http://{allowed}/");
    for (mode, allow) in [("block_all", true), ("strict", false)] {
        let p = policy(lab, mode, allow);
        let r = fetch(lab, tier, &p, "--noproxy *", &url);
        assert_ne!(r.status, 0, "{mode}: {}", r.describe());
        let r = fetch(lab, tier, &p, "", "http://allowed.test/");
        assert_ne!(r.status, 0, "{mode}: {}", r.describe());
        assert!(r.outcome["egress"].is_null(), "{mode}: {}", r.describe());
        let r = run_env(
            lab,
            tier,
            &p,
            &["python3", "udp.py"],
            &[("TARGET", &allowed)],
        );
        assert_ne!(r.status, 0, "{mode}: {}", r.describe());
    }
}

/// `tierbox check` (validation only) with a preflight policy.
fn preflight_checks_hosts_before_spawning(test: &str) {
    let Some(lab) = NetLab::shared(test) else {
        return;
    };
    let state = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let policy_file = state.path().join("policy.toml");
    std::fs::write(&policy_file, policy(lab, "preflight", true)).unwrap();
    let check = |cmd: &[&str]| -> (i32, String) {
        let mut args = vec![
            "check",
            "--json",
            "--policy",
            policy_file.to_str().unwrap(),
            "--workspace",
            ws.path().to_str().unwrap(),
            "--",
        ];
        args.extend_from_slice(cmd);
        let out = Command::new(env!("CARGO_BIN_EXE_tierbox"))
            .args(&args)
            .env("XDG_STATE_HOME", state.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    for cmd in [
        &["git", "clone", "https://blocked.test/x"][..],
        &["ssh", "user@blocked.test"][..],
        &["curl", "http://blocked.test:8080/"][..],
    ] {
        let (status, out) = check(cmd);
        assert_eq!(status, 125, "{cmd:?} was not rejected: {out}");
        assert!(out.contains("egress.host_not_allowed"), "{cmd:?}: {out}");
        assert!(out.contains("blocked.test"), "{cmd:?}: {out}");
    }
    for cmd in [
        &["git", "clone", "https://allowed.test/x"][..],
        &["ssh", "user@allowed.test"][..],
    ] {
        let (status, out) = check(cmd);
        assert_eq!(status, 0, "{cmd:?} was rejected: {out}");
    }
}

/// Three tests per case: Tier B, and Tier C on each Linux backend.
macro_rules! in_both_tiers {
    ($($case:ident),* $(,)?) => {$(
        mod $case {
            #[test]
            fn tier_b() {
                super::$case(concat!(stringify!($case), "::tier_b"), super::Tier::B);
            }
            #[test]
            fn tier_c() {
                super::$case(concat!(stringify!($case), "::tier_c"), super::Tier::C);
            }
            #[test]
            fn tier_c_bwrap() {
                super::$case(concat!(stringify!($case), "::tier_c_bwrap"), super::Tier::CBwrap);
            }
        }
    )*};
}

in_both_tiers!(
    allowed_http_https_and_socks,
    not_allowlisted_is_refused_and_reported,
    bypasses_fail,
    no_network_without_allowlist,
);

#[test]
fn preflight_rejects_unlisted_hosts_before_spawning() {
    preflight_checks_hosts_before_spawning("preflight_rejects_unlisted_hosts_before_spawning");
}
