//! Reach across the run's network namespace besides the proxy (`egress.publish`,
//! `egress.host_ports`), through the CLI, in each backend: a port the program serves is
//! reachable on the host's `127.0.0.1` only while the run lasts; a host port is
//! reachable inside at `127.0.0.1:PORT` and nothing else on the host is; Tier B and
//! unlisted ports are refused with a fix that works.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::strict::{TIER_TABLE, Tier};

/// A program that serves HTTP on `127.0.0.1:PORT` (argv[1]) inside the sandbox until a
/// request for `/stop`, answering `/` with `served from inside`.
const SERVER: &str = include_str!("http_server.py");

/// Connects to each `host port proto` line of argv and prints what answered:
/// `ok <banner>`, `refused`, `error <kind>`; UDP datagrams are sent and printed `sent`.
const PROBE: &str = r#"import socket, sys
for spec in sys.argv[1:]:
    host, port, proto = spec.split(",")
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        if proto == "udp":
            u = socket.socket(fam, socket.SOCK_DGRAM)
            u.sendto(b"udp probe", (host, int(port)))
            print(spec, "sent")
            continue
        c = socket.create_connection((host, int(port)), timeout=3)
        c.settimeout(3)
        print(spec, "ok", c.recv(64).decode().strip())
    except ConnectionRefusedError:
        print(spec, "refused")
    except OSError as e:
        print(spec, "error", type(e).__name__, e.errno)
"#;

fn policy(tier: Tier, egress: &str) -> String {
    tier.adapt(&format!(
        "version = 1\n[exec]\nallowed_executables = [\"python3\", \"true\"]\nallow_interpreters = true\n\
         {TIER_TABLE}[limits]\ntimeout_ms = 60000\n[egress]\n{egress}"
    ))
}

/// A port nothing listens on now (bound, then released).
fn free_port() -> u16 {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    l.local_addr().unwrap().port()
}

/// A workspace with files, a state directory and a policy file, and the CLI run on them.
pub(crate) struct Sandbox {
    _ws: tempfile::TempDir,
    pub(crate) state: tempfile::TempDir,
    pub(crate) policy_file: std::path::PathBuf,
    pub(crate) ws: std::path::PathBuf,
}

impl Sandbox {
    fn new(policy_text: &str) -> Sandbox {
        Self::with_files(policy_text, &[("server.py", SERVER), ("probe.py", PROBE)])
    }

    /// A sandbox whose workspace holds `files` (name, content).
    pub(crate) fn with_files(policy_text: &str, files: &[(&str, &str)]) -> Sandbox {
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let ws_path = std::fs::canonicalize(ws.path()).unwrap();
        for (name, content) in files {
            std::fs::write(ws_path.join(name), content).unwrap();
        }
        let policy_file = state.path().join("policy.toml");
        std::fs::write(&policy_file, policy_text).unwrap();
        Sandbox {
            _ws: ws,
            state,
            policy_file,
            ws: ws_path,
        }
    }

    fn command(&self, tier: Tier, flags: &[&str], cmd: &[&str]) -> Command {
        self.verb(&["run", "--json"], tier, flags, cmd)
    }

    /// `tierbox VERB… --tier T --policy P --workspace W FLAGS… -- CMD…` in this sandbox's
    /// state directory, without stdin.
    pub(crate) fn verb(&self, verb: &[&str], tier: Tier, flags: &[&str], cmd: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tierbox"));
        c.args(verb)
            .args(["--tier", tier.arg(), "--policy"])
            .arg(&self.policy_file)
            .arg("--workspace")
            .arg(&self.ws)
            .args(flags)
            .arg("--")
            .args(cmd)
            .env("XDG_STATE_HOME", self.state.path())
            .stdin(Stdio::null());
        c
    }

    fn run(&self, tier: Tier, flags: &[&str], cmd: &[&str]) -> (i32, Value, String) {
        let out = self.command(tier, flags, cmd).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let json = serde_json::from_str(&stdout).unwrap_or(Value::Null);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code().unwrap_or(-1), json, stderr)
    }

    /// `tierbox explain --policy P ARGS…`: its exit status and stdout.
    pub(crate) fn explain(&self, args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_tierbox"))
            .args(["explain", "--policy"])
            .arg(&self.policy_file)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    /// `tierbox attest verify` of `outcome`, with this sandbox's key.
    pub(crate) fn verify(&self, outcome: &Value) -> std::process::Output {
        let file = self.state.path().join("outcome.json");
        std::fs::write(&file, serde_json::to_vec(outcome).unwrap()).unwrap();
        Command::new(env!("CARGO_BIN_EXE_tierbox"))
            .args(["attest", "verify"])
            .arg(&file)
            .env("XDG_STATE_HOME", self.state.path())
            .output()
            .unwrap()
    }
}

/// `GET path` on `addr`: the status line and body, or the connect error.
fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut got = String::new();
    s.read_to_string(&mut got)?;
    Ok(got)
}

/// Retries [`http_get`] until it answers (the program starts listening), up to 20 s.
fn first_answer(addr: SocketAddr, child: &mut Child) -> String {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        match http_get(addr, "/") {
            Ok(a) if a.contains("200") => return a,
            _ if Instant::now() > until => {
                let _ = child.kill();
                let mut err = String::new();
                if let Some(e) = child.stderr.as_mut() {
                    let _ = e.read_to_string(&mut err);
                }
                panic!("{addr} never answered: {err}");
            }
            _ => {
                if let Some(status) = child.try_wait().unwrap() {
                    let mut err = String::new();
                    if let Some(e) = child.stderr.as_mut() {
                        let _ = e.read_to_string(&mut err);
                    }
                    panic!("the run ended early ({status}): {err}");
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Addresses of this host that are not `127.0.0.1`: `127.0.0.2`, `::1`, and every
/// address `hostname -I` lists.
fn other_host_addresses() -> Vec<std::net::IpAddr> {
    let mut out = vec![
        std::net::IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
        std::net::IpAddr::V6(Ipv6Addr::LOCALHOST),
    ];
    if let Ok(o) = Command::new("hostname").arg("-I").output() {
        out.extend(
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .filter_map(|a| a.parse::<std::net::IpAddr>().ok()),
        );
    }
    out
}

/// Starts `cmd` (a run of the test server published on `host_port`) and waits until the
/// host's `127.0.0.1:host_port` answers with the server's page.
fn serving(mut cmd: Command, host_port: u16) -> (Child, SocketAddr) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, host_port));
    let answer = first_answer(addr, &mut child);
    assert!(answer.ends_with("served from inside\n"), "{answer}");
    (child, addr)
}

/// Asks the server at `addr` to stop (`/stop`) and returns the outcome of its run, which
/// must have ended with exit 0.
fn stop_server(addr: SocketAddr, child: Child) -> Value {
    let stop = http_get(addr, "/stop").unwrap();
    assert!(stop.contains("200"), "{stop}");
    let out = child.wait_with_output().unwrap();
    let outcome: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert_eq!(
        outcome["exit_code"],
        0,
        "{outcome:#}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    outcome
}

fn publish_serves_on_loopback_only_while_the_run_lasts(test: &str, tier: Tier) {
    if let Some(reason) = tier.missing() {
        tierbox_test_support::skip(test, &reason);
        return;
    }
    let host_port = free_port();
    let entry = format!("127.0.0.1:{host_port}:8000");
    let sb = Sandbox::new(&policy(tier, &format!("publish = [\"{entry}\"]\n")));
    let cmd = sb.command(
        tier,
        &["--publish", &entry],
        &["python3", "server.py", "8000"],
    );
    let (child, addr) = serving(cmd, host_port);
    // The host port is on 127.0.0.1 and nowhere else.
    for ip in other_host_addresses() {
        let other = SocketAddr::new(ip, host_port);
        let r = TcpStream::connect_timeout(&other, Duration::from_secs(2));
        assert!(r.is_err(), "{other} answered while {addr} is published");
    }
    let outcome = stop_server(addr, child);
    let relay = &outcome["reach"][0];
    assert_eq!(relay["relay"], format!("publish {entry}"), "{outcome:#}");
    assert!(relay["connections"].as_u64().unwrap() >= 2, "{relay}");
    assert!(relay["bytes_out"].as_u64().unwrap() > 0, "{relay}");
    // Gone once the run is over.
    let after = TcpStream::connect_timeout(&addr, Duration::from_secs(2));
    assert!(after.is_err(), "{addr} still answers after the run");
}

#[test]
fn publish_native() {
    publish_serves_on_loopback_only_while_the_run_lasts("publish_native", Tier::C);
}

#[test]
fn publish_bwrap() {
    publish_serves_on_loopback_only_while_the_run_lasts("publish_bwrap", Tier::CBwrap);
}

/// A listener that answers each connection with `banner` and counts them.
fn banner_listener(addr: SocketAddr, banner: &'static str) -> Option<(u16, Arc<AtomicUsize>)> {
    let l = TcpListener::bind(addr).ok()?;
    let port = l.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            seen.fetch_add(1, Ordering::SeqCst);
            let _ = c.write_all(banner.as_bytes());
        }
    });
    Some((port, count))
}

fn host_ports_reach_the_granted_port_and_nothing_else(test: &str, tier: Tier) {
    if let Some(reason) = tier.missing() {
        tierbox_test_support::skip(test, &reason);
        return;
    }
    let (granted, granted_hits) =
        banner_listener((Ipv4Addr::LOCALHOST, 0).into(), "granted\n").unwrap();
    let (other, other_hits) = banner_listener((Ipv4Addr::LOCALHOST, 0).into(), "other\n").unwrap();
    // The same port on the host's other loopback addresses, and UDP on it.
    let v4_2 = banner_listener((Ipv4Addr::new(127, 0, 0, 2), granted).into(), "127.0.0.2\n");
    let v6 = banner_listener((Ipv6Addr::LOCALHOST, granted).into(), "::1\n");
    let udp = UdpSocket::bind((Ipv4Addr::LOCALHOST, granted)).unwrap();
    udp.set_nonblocking(true).unwrap();
    let sb = Sandbox::new(&policy(tier, &format!("host_ports = [{granted}]\n")));
    let specs = [
        format!("127.0.0.1,{granted},tcp"),
        format!("127.0.0.1,{other},tcp"),
        format!("127.0.0.2,{granted},tcp"),
        format!("::1,{granted},tcp"),
        format!("127.0.0.1,{granted},udp"),
    ];
    let mut cmd = vec!["python3", "probe.py"];
    cmd.extend(specs.iter().map(String::as_str));
    let (status, outcome, stderr) = sb.run(tier, &[], &cmd);
    assert_eq!(status, 0, "{outcome:#}\n{stderr}");
    let stdout = outcome["stdout"]["text"].as_str().unwrap_or_default();
    let line = |i: usize| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("{} ", specs[i])))
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(line(0), format!("{} ok granted", specs[0]), "{stdout}");
    for (i, spec) in specs.iter().enumerate().take(4).skip(1) {
        let l = line(i);
        assert!(!l.contains(" ok "), "{l}: reached from inside\n{stdout}");
        assert!(l.len() > spec.len(), "{stdout}");
    }
    assert_eq!(granted_hits.load(Ordering::SeqCst), 1);
    assert_eq!(other_hits.load(Ordering::SeqCst), 0);
    for (what, hits) in [("127.0.0.2", v4_2), ("::1", v6)] {
        if let Some((_, hits)) = hits {
            assert_eq!(hits.load(Ordering::SeqCst), 0, "{what} was reached");
        }
    }
    let mut buf = [0u8; 64];
    assert!(
        udp.recv_from(&mut buf).is_err(),
        "a UDP datagram reached the host"
    );
    let relay = &outcome["reach"][0];
    assert_eq!(
        relay["relay"],
        format!("host_port {granted}"),
        "{outcome:#}"
    );
    assert_eq!(relay["connections"], 1, "{relay}");
    // The attestation covers what crossed: editing it breaks `attest verify`.
    let ok = sb.verify(&outcome);
    assert!(ok.status.success(), "{ok:?}");
    let mut edited = outcome.clone();
    edited["reach"][0]["bytes_out"] = serde_json::json!(0);
    let refused = sb.verify(&edited);
    assert!(!refused.status.success(), "an edited reach verified");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("reach"),
        "{refused:?}"
    );
}

#[test]
fn host_ports_native() {
    host_ports_reach_the_granted_port_and_nothing_else("host_ports_native", Tier::C);
}

#[test]
fn host_ports_bwrap() {
    host_ports_reach_the_granted_port_and_nothing_else("host_ports_bwrap", Tier::CBwrap);
}

/// Tier B refuses both kinds of reach, naming the key and why; tier c is the way.
#[test]
fn tier_b_refuses_reach_with_the_reason() {
    for egress in [
        "publish = [\"127.0.0.1:18999:8000\"]\n",
        "host_ports = [5432]\n",
    ] {
        let sb = Sandbox::new(&policy(Tier::B, egress));
        let flags: &[&str] = match egress.starts_with("publish") {
            true => &["--publish", "127.0.0.1:18999:8000"],
            false => &[],
        };
        let (status, json, stderr) = sb.run(Tier::B, flags, &["python3", "probe.py"]);
        assert_ne!(status, 0);
        let err = &json["error"];
        assert_eq!(err["code"], "tier.unsupported", "{json:#}\n{stderr}");
        let msg = err["message"].as_str().unwrap_or_default();
        let key = egress.split(' ').next().unwrap();
        assert!(msg.contains(&format!("egress.{key} in tier b")), "{msg}");
        assert!(msg.contains("use tier c"), "{msg}");
    }
}

/// A port the policy does not list is refused with the fix, and the fix works; a host
/// port another process holds refuses the run before it starts.
#[test]
fn an_unlisted_or_busy_port_is_refused_and_the_fix_works() {
    let tier = Tier::C;
    if let Some(reason) = tier.missing() {
        tierbox_test_support::skip("an_unlisted_or_busy_port_is_refused", &reason);
        return;
    }
    let host_port = free_port();
    let entry = format!("127.0.0.1:{host_port}:8000");
    let sb = Sandbox::new(&policy(tier, ""));
    let (status, json, stderr) = sb.run(tier, &["--publish", &entry], &["python3", "probe.py"]);
    assert_ne!(status, 0);
    assert_eq!(
        json["error"]["code"], "egress.publish_not_allowed",
        "{json:#}"
    );
    let hint = json["error"]["hint"].as_str().unwrap_or(&stderr);
    assert!(hint.contains("egress.publish"), "{json:#}\n{stderr}");
    // The fix: the entry in egress.publish. `check` shows it, with what the host has.
    let sb = Sandbox::new(&policy(tier, &format!("publish = [\"{entry}\"]\n")));
    let check = Command::new(env!("CARGO_BIN_EXE_tierbox"))
        .args(["check", "--tier", "c", "--policy"])
        .arg(&sb.policy_file)
        .arg("--workspace")
        .arg(&sb.ws)
        .args(["--publish", &entry, "--", "python3", "probe.py"])
        .env("XDG_STATE_HOME", sb.state.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&check.stdout);
    let want =
        format!("publish   host 127.0.0.1:{host_port} -> the sandbox's 127.0.0.1:8000 (free here");
    assert!(text.contains(&want), "{text}");
    let (status, json, stderr) = sb.run(tier, &["--publish", &entry], &["python3", "probe.py"]);
    assert_eq!(status, 0, "{json:#}\n{stderr}");
    assert_eq!(json["reach"][0]["relay"], format!("publish {entry}"));
    // A program that ends at once, with its pid 1, before the supervisor joins its
    // namespace: the run is still fine.
    for _ in 0..5 {
        let (status, json, stderr) = sb.run(tier, &["--publish", &entry], &["true"]);
        assert_eq!(status, 0, "{json:#}\n{stderr}");
    }
    // Busy: another listener holds the host port.
    let _holder = TcpListener::bind((Ipv4Addr::LOCALHOST, host_port)).unwrap();
    let (status, json, _) = sb.run(tier, &["--publish", &entry], &["python3", "probe.py"]);
    assert_ne!(status, 0);
    assert_eq!(json["error"]["code"], "egress.port_unavailable", "{json:#}");
    let msg = json["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("address in use"), "{msg}");
}

/// `explain --host 127.0.0.1:PORT` says a host port is needed and names it; with the
/// fix applied, explain allows it and a run reaches the host's listener there.
#[test]
fn explain_names_the_host_port_and_the_fix_works() {
    let tier = Tier::C;
    if let Some(reason) = tier.missing() {
        tierbox_test_support::skip("explain_names_the_host_port", &reason);
        return;
    }
    let (port, hits) = banner_listener((Ipv4Addr::LOCALHOST, 0).into(), "granted\n").unwrap();
    let target = format!("127.0.0.1:{port}");
    let explain = |sb: &Sandbox| sb.explain(&["--host".as_ref(), target.as_ref()]);
    let sb = Sandbox::new(&policy(tier, ""));
    let (code, text) = explain(&sb);
    assert_eq!(code, Some(1), "{text}");
    let fix = format!("to allow: egress.host_ports += {port} (tier c)");
    assert!(text.contains(&fix), "{text}");
    let sb = Sandbox::new(&policy(tier, &format!("host_ports = [{port}]\n")));
    let (code, text) = explain(&sb);
    assert_eq!(code, Some(0), "{text}");
    let (status, outcome, stderr) = sb.run(
        tier,
        &[],
        &["python3", "probe.py", &format!("127.0.0.1,{port},tcp")],
    );
    assert_eq!(status, 0, "{outcome:#}\n{stderr}");
    let stdout = outcome["stdout"]["text"].as_str().unwrap_or_default();
    assert!(stdout.contains("ok granted"), "{outcome:#}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

/// A host uid no account has, for runs of an unprivileged supervisor.
const UNPRIVILEGED_UID: u32 = 4242;

/// `tierbox` run as [`UNPRIVILEGED_UID`] (root drops to it with `setpriv`), in `dir`
/// (its workspace `dir/ws`, its state `dir/state`, both that uid's).
fn unprivileged(dir: &std::path::Path, args: &[&str]) -> Command {
    let uid = UNPRIVILEGED_UID.to_string();
    let mut c = Command::new("setpriv");
    c.args(["--reuid", &uid, "--regid", &uid, "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_tierbox"))
        .args(args)
        .env("HOME", dir)
        .env("XDG_STATE_HOME", dir.join("state"))
        .env_remove("XDG_RUNTIME_DIR")
        .stdin(Stdio::null());
    c
}

/// Under an unprivileged supervisor — which may not join the sandbox's network namespace
/// — native Tier C publishes through a helper in the sandbox's user and network
/// namespaces: the server answers on the host's 127.0.0.1 while the run lasts, and the
/// run itself (an unprivileged Tier C run) works.
#[test]
fn publish_native_unprivileged() {
    let test = "publish_native_unprivileged";
    if let Some(reason) = Tier::C.missing() {
        tierbox_test_support::skip(test, &reason);
        return;
    }
    if tierbox_sandbox::probe::host_facts().euid != 0
        || !std::path::Path::new("/usr/bin/setpriv").exists()
    {
        tierbox_test_support::skip(
            test,
            "dropping to an unprivileged uid needs root and setpriv",
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    let ws = dir.join("ws");
    std::fs::create_dir_all(dir.join("state")).unwrap();
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("server.py"), SERVER).unwrap();
    let host_port = free_port();
    let entry = format!("127.0.0.1:{host_port}:8000");
    let policy_file = dir.join("policy.toml");
    std::fs::write(
        &policy_file,
        policy(Tier::C, &format!("publish = [\"{entry}\"]\n")),
    )
    .unwrap();
    for p in [
        &dir,
        &ws,
        &dir.join("state"),
        &ws.join("server.py"),
        &policy_file,
    ] {
        std::os::unix::fs::chown(p, Some(UNPRIVILEGED_UID), Some(UNPRIVILEGED_UID)).unwrap();
    }
    let (policy_arg, ws_arg) = (policy_file.to_str().unwrap(), ws.to_str().unwrap());
    let cmd = unprivileged(
        &dir,
        &[
            "run",
            "--json",
            "--tier",
            "c",
            "--policy",
            policy_arg,
            "--workspace",
            ws_arg,
            "--publish",
            &entry,
            "--",
            "python3",
            "server.py",
            "8000",
        ],
    );
    let (child, addr) = serving(cmd, host_port);
    let outcome = stop_server(addr, child);
    assert_eq!(
        outcome["enforcement"]["uid"], UNPRIVILEGED_UID,
        "{outcome:#}"
    );
    assert_eq!(
        outcome["reach"][0]["relay"],
        format!("publish {entry}"),
        "{outcome:#}"
    );
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err());
}
