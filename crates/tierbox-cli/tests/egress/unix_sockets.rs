//! Named host sockets (`egress.unix_sockets`), through the CLI, in each backend: a real
//! `ssh-agent` of another uid is reached through `$SSH_AUTH_SOCK` once the sandbox runs
//! as that uid (the refusal says so, and its fix works); nothing else of the socket's
//! directory, and no other host socket, is reachable; an engine's socket needs the
//! `danger_` key and is warned about; Tier B refuses.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::reach::Sandbox;
use crate::strict::{TIER_TABLE, Tier};

/// The host uid the test agent runs as, and the sandbox with it: no account has it.
const AGENT_UID: u32 = 4242;

/// Connects to each socket path of argv and prints `PATH ok`, or the error's name.
const PROBE: &str = r#"import socket, sys
for path in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        print(path, "ok")
    except OSError as e:
        print(path, type(e).__name__)
"#;

fn policy(tier: Tier, tier_extra: &str, egress: &str) -> String {
    tier.adapt(&format!(
        "version = 1\n[exec]\nallowed_executables = [\"ssh-add\", \"python3\", \"ls\"]\nallow_interpreters = true\n\
         {TIER_TABLE}{tier_extra}[limits]\ntimeout_ms = 60000\n[egress]\n{egress}"
    ))
}

/// An `ssh-agent` of uid [`AGENT_UID`] holding one key, in a directory only that uid
/// may enter (as `ssh-agent` makes its own); killed on drop.
struct Agent {
    dir: tempfile::TempDir,
    socket: PathBuf,
    child: Child,
    fingerprint: String,
}

impl Agent {
    fn start() -> Result<Agent, String> {
        for tool in ["ssh-agent", "ssh-add", "ssh-keygen", "setpriv"] {
            if !Path::new("/usr/bin").join(tool).exists() {
                return Err(format!("/usr/bin/{tool} is not installed"));
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("id_ed25519");
        let keygen = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "tierbox-test", "-f"])
            .arg(&key)
            .output()
            .unwrap();
        assert!(keygen.status.success(), "{keygen:?}");
        let uid = AGENT_UID.to_string();
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            std::os::unix::fs::chown(entry.unwrap().path(), Some(AGENT_UID), Some(AGENT_UID))
                .unwrap();
        }
        std::os::unix::fs::chown(dir.path(), Some(AGENT_UID), Some(AGENT_UID)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let socket = dir.path().join("agent.sock");
        let as_agent = |program: &str| {
            let mut c = Command::new("setpriv");
            c.args(["--reuid", &uid, "--regid", &uid, "--clear-groups", program])
                .env("SSH_AUTH_SOCK", &socket);
            c
        };
        let child = as_agent("ssh-agent")
            .arg("-D")
            .arg("-a")
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            assert!(Instant::now() < until, "ssh-agent made no socket");
            std::thread::sleep(Duration::from_millis(20));
        }
        let add = as_agent("ssh-add").arg(&key).output().unwrap();
        assert!(add.status.success(), "{add:?}");
        let listed = as_agent("ssh-add").arg("-l").output().unwrap();
        let fingerprint = String::from_utf8_lossy(&listed.stdout)
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        assert!(fingerprint.starts_with("SHA256:"), "{listed:?}");
        Ok(Agent {
            dir,
            socket,
            child,
            fingerprint,
        })
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tierbox VERB` in `sb` with the caller's `SSH_AUTH_SOCK` at `sock`: the exit status,
/// stdout as JSON (or as a string when it is not), stderr.
fn tierbox(
    sb: &Sandbox,
    verb: &str,
    tier: Tier,
    sock: &Path,
    cmd: &[&str],
) -> (i32, Value, String) {
    let verb: &[&str] = match verb {
        "run" => &["run", "--json"],
        other => &[other],
    };
    let out = sb
        .verb(verb, tier, &[], cmd)
        .env("SSH_AUTH_SOCK", sock)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let json = serde_json::from_str(&stdout).unwrap_or(Value::String(stdout));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), json, stderr)
}

fn sandbox(policy_text: &str) -> Sandbox {
    Sandbox::with_files(policy_text, &[("probe.py", PROBE)])
}

/// A listening socket at `path`, owned by [`AGENT_UID`] (so only the grant decides).
fn listener(path: &Path) -> std::os::unix::net::UnixListener {
    let l = std::os::unix::net::UnixListener::bind(path).unwrap();
    std::os::unix::fs::chown(path, Some(AGENT_UID), Some(AGENT_UID)).unwrap();
    l
}

fn an_agent_socket_is_reached_and_nothing_else(test: &str, tier: Tier) {
    if let Some(reason) = tier.missing() {
        tierbox_test_support::skip(test, &reason);
        return;
    }
    let agent = match Agent::start() {
        Ok(a) => a,
        Err(reason) => {
            tierbox_test_support::skip(test, &reason);
            return;
        }
    };
    let egress = "unix_sockets = [\"$SSH_AUTH_SOCK\"]\n";
    // The sandbox's default host uid is not the agent's: refused, and the fix named.
    let sb = sandbox(&policy(tier, "", egress));
    let (code, refused, stderr) = tierbox(&sb, "run", tier, &agent.socket, &["ssh-add", "-l"]);
    assert_eq!(code, 125, "{refused}\n{stderr}");
    assert!(
        stderr.contains("tier.sandbox_uid") && stderr.contains(&format!("owner uid {AGENT_UID}")),
        "{stderr}"
    );
    // The fix: the sandbox runs as the agent's uid.
    let ids = format!("sandbox_uid = {AGENT_UID}\nsandbox_gid = {AGENT_UID}\n");
    let sb = sandbox(&policy(tier, &ids, egress));
    let (code, outcome, stderr) = tierbox(&sb, "run", tier, &agent.socket, &["ssh-add", "-l"]);
    assert_eq!(code, 0, "{outcome:#}\n{stderr}");
    let stdout = outcome["stdout"]["text"].as_str().unwrap_or_default();
    assert!(stdout.contains(&agent.fingerprint), "{outcome:#}");
    let path = std::fs::canonicalize(&agent.socket).unwrap();
    assert_eq!(
        outcome["unix_sockets"][0]["path"],
        path.display().to_string()
    );
    assert_eq!(outcome["unix_sockets"][0]["entry"], "$SSH_AUTH_SOCK");
    // The attestation names the socket: editing the list breaks `attest verify`.
    let ok = sb.verify(&outcome);
    assert!(ok.status.success(), "{ok:?}");
    let mut edited = outcome.clone();
    edited["unix_sockets"][0]["path"] = Value::from("/run/other.sock");
    let bad = sb.verify(&edited);
    assert!(!bad.status.success(), "an edited unix_sockets verified");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("unix_sockets"),
        "{bad:?}"
    );

    // Only the socket: the agent's key beside it is not in the sandbox, nor is another
    // host socket of the same owner, in the same directory or the next.
    let (_, listing, _) = tierbox(
        &sb,
        "run",
        tier,
        &agent.socket,
        &["ls", "-a", agent.dir.path().to_str().unwrap()],
    );
    let names = listing["stdout"]["text"].as_str().unwrap_or_default();
    assert_eq!(
        names.split_whitespace().collect::<Vec<_>>(),
        [".", "..", "agent.sock"],
        "{listing:#}"
    );
    let beside = agent.dir.path().join("other.sock");
    let _beside = listener(&beside);
    let elsewhere_dir = tempfile::tempdir().unwrap();
    let elsewhere = elsewhere_dir.path().join("service.sock");
    let _elsewhere = listener(&elsewhere);
    let (code, probed, stderr) = tierbox(
        &sb,
        "run",
        tier,
        &agent.socket,
        &[
            "python3",
            "probe.py",
            agent.socket.to_str().unwrap(),
            beside.to_str().unwrap(),
            elsewhere.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{probed:#}\n{stderr}");
    let lines = probed["stdout"]["text"].as_str().unwrap_or_default();
    assert!(
        lines.contains(&format!("{} ok", agent.socket.display())),
        "{lines}"
    );
    assert!(
        lines.contains(&format!("{} FileNotFoundError", beside.display())),
        "{lines}"
    );
    assert!(
        lines.contains(&format!("{} FileNotFoundError", elsewhere.display())),
        "{lines}"
    );
}

#[test]
fn unix_socket_agent_native() {
    an_agent_socket_is_reached_and_nothing_else("unix_socket_agent_native", Tier::C);
}

#[test]
fn unix_socket_agent_bwrap() {
    an_agent_socket_is_reached_and_nothing_else("unix_socket_agent_bwrap", Tier::CBwrap);
}

/// A socket named like a container engine's is refused without the `danger_` key, with a
/// fix that works; with it, `check` and the run warn, and the run connects.
#[test]
fn an_engine_socket_needs_the_danger_key_and_is_warned_about() {
    let tier = Tier::C;
    if let Some(reason) = tier.missing() {
        tierbox_test_support::skip("an_engine_socket_needs_the_danger_key", &reason);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let engine = std::fs::canonicalize(dir.path())
        .unwrap()
        .join("docker.sock");
    let _engine = listener(&engine);
    let ids = format!("sandbox_uid = {AGENT_UID}\nsandbox_gid = {AGENT_UID}\n");
    let egress = format!("unix_sockets = [\"{}\"]\n", engine.display());
    let sb = sandbox(&policy(tier, &ids, &egress));
    let probe = ["python3", "probe.py", engine.to_str().unwrap()];
    let (code, refused, stderr) = tierbox(&sb, "run", tier, &engine, &probe);
    assert_eq!(code, 125, "{stderr}");
    assert!(stderr.contains("egress.unix_socket_privileged"), "{stderr}");
    let fix = refused["error"]["fix"].as_str().unwrap_or_default();
    assert!(
        fix.contains("egress.danger_privileged_sockets = true"),
        "{refused}"
    );

    let egress = format!("{egress}danger_privileged_sockets = true\n");
    let sb = sandbox(&policy(tier, &ids, &egress));
    let (code, checked, stderr) = tierbox(&sb, "check", tier, &engine, &probe);
    assert_eq!(code, 0, "{checked}\n{stderr}");
    let text = checked.as_str().unwrap_or_default();
    assert!(
        text.contains("warning:") && text.contains("controls the host"),
        "{text}"
    );
    let (code, outcome, stderr) = tierbox(&sb, "run", tier, &engine, &probe);
    assert_eq!(code, 0, "{outcome:#}\n{stderr}");
    let stdout = outcome["stdout"]["text"].as_str().unwrap_or_default();
    assert!(
        stdout.contains(&format!("{} ok", engine.display())),
        "{outcome:#}"
    );
    assert_eq!(
        outcome["unix_sockets"][0]["privileged"], true,
        "{outcome:#}"
    );
    assert!(
        outcome["warnings"][0]
            .as_str()
            .unwrap_or_default()
            .contains("controls the host"),
        "{outcome:#}"
    );
    assert!(stderr.contains("tierbox: warning:"), "{stderr}");
}

/// Tier B refuses a socket grant, naming the key and the landlock rule it lacks; an
/// unset variable is refused naming the variable.
#[test]
fn tier_b_and_an_unset_variable_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s.sock");
    let _l = listener(&sock);
    let sb = sandbox(&policy(
        Tier::B,
        "",
        "unix_sockets = [\"$SSH_AUTH_SOCK\"]\n",
    ));
    let (code, _, stderr) = tierbox(&sb, "run", Tier::B, &sock, &["ls"]);
    assert_eq!(code, 125, "{stderr}");
    assert!(
        stderr.contains("egress.unix_sockets in tier b") && stderr.contains("ABI 9"),
        "{stderr}"
    );
    let sb = sandbox(&policy(
        Tier::C,
        "",
        "unix_sockets = [\"$TIERBOX_TEST_UNSET\"]\n",
    ));
    let (code, _, stderr) = tierbox(&sb, "run", Tier::C, &sock, &["ls"]);
    assert_eq!(code, 125, "{stderr}");
    assert!(
        stderr.contains("egress.unix_socket_unusable") && stderr.contains("$TIERBOX_TEST_UNSET"),
        "{stderr}"
    );
}

/// `explain --socket PATH` names the entry a socket needs; with the fix applied explain
/// allows it and a run connects to it.
#[test]
fn explain_names_the_socket_entry_and_the_fix_works() {
    let tier = Tier::C;
    if let Some(reason) = tier.missing() {
        tierbox_test_support::skip("explain_names_the_socket_entry", &reason);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sock = std::fs::canonicalize(dir.path())
        .unwrap()
        .join("service.sock");
    let _l = listener(&sock);
    let explain = |sb: &Sandbox| sb.explain(&["--socket".as_ref(), sock.as_os_str()]);
    let ids = format!("sandbox_uid = {AGENT_UID}\nsandbox_gid = {AGENT_UID}\n");
    let sb = sandbox(&policy(tier, &ids, ""));
    let (code, text) = explain(&sb);
    assert_eq!(code, Some(1), "{text}");
    let fix = format!("egress.unix_sockets += \"{}\"", sock.display());
    assert!(text.contains(&fix), "{text}");
    let sb = sandbox(&policy(
        tier,
        &ids,
        &format!("unix_sockets = [\"{}\"]\n", sock.display()),
    ));
    let (code, text) = explain(&sb);
    assert_eq!(code, Some(0), "{text}");
    let (code, outcome, stderr) = tierbox(
        &sb,
        "run",
        tier,
        &sock,
        &["python3", "probe.py", sock.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{outcome:#}\n{stderr}");
    let stdout = outcome["stdout"]["text"].as_str().unwrap_or_default();
    assert!(
        stdout.contains(&format!("{} ok", sock.display())),
        "{outcome:#}"
    );
}
