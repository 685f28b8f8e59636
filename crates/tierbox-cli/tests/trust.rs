//! Tierbox trusts only what is its user's: a state directory, a token file or a daemon
//! socket another user could have prepared is refused, naming the path, its owner and
//! mode and the fix — and the fix, applied, works; the CLI sends nothing to a daemon
//! socket that is another user's, or whose listener is.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Another user's uid on this host (no account needed).
const OTHER_UID: u32 = 1500;

fn tierbox() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tierbox"));
    c.stdin(Stdio::null())
        .env_remove("TIERBOX_SOCKET")
        .env_remove("TIERBOX_DAEMON");
    c
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn is_root(test: &str) -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    !tierbox_test_support::skip(test, "making files of another user needs root (chown)")
}

fn run_in(state: &Path, ws: &Path) -> Output {
    tierbox()
        .arg("run")
        .arg("--state-dir")
        .arg(state)
        .arg("--workspace")
        .arg(ws)
        .args(["--", "true"])
        .output()
        .unwrap()
}

#[test]
fn a_state_directory_others_can_write_is_refused_and_the_fix_works() {
    let base = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let state = base.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = run_in(&state, ws.path());
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&state.display().to_string()) && err.contains("mode 0777"),
        "{err}"
    );
    let fix = format!("chmod go-w {}", state.display());
    assert!(err.contains(&fix), "the fix is named: {err}");
    // The fix, applied as written.
    let applied = Command::new("sh").arg("-c").arg(&fix).status().unwrap();
    assert!(applied.success());
    let out = run_in(&state, ws.path());
    assert!(out.status.success(), "after `{fix}`: {}", stderr(&out));
}

#[test]
fn a_state_directory_of_another_user_is_refused() {
    let test = "a_state_directory_of_another_user_is_refused";
    if !is_root(test) {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let state = base.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::os::unix::fs::chown(&state, Some(OTHER_UID), Some(OTHER_UID)).unwrap();
    let out = run_in(&state, ws.path());
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(&format!("owned by uid {OTHER_UID}")), "{err}");
    // Nothing was written into it.
    assert_eq!(std::fs::read_dir(&state).unwrap().count(), 0, "{err}");
    // The fix: a directory of one's own.
    let own = base.path().join("own");
    let out = run_in(&own, ws.path());
    assert!(out.status.success(), "{}", stderr(&out));

    // The same for `serve`, before it writes its token there.
    let out = tierbox()
        .args(["serve", "--http", "127.0.0.1:0", "--state-dir"])
        .arg(&state)
        .arg("--workspace")
        .arg(ws.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&format!("owned by uid {OTHER_UID}")),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read_dir(&state).unwrap().count(), 0);
}

/// The fallback state directory under a sticky world-writable `/tmp` is accepted: the
/// entry below it is ours.
#[test]
fn the_fallback_state_directory_under_sticky_tmp_is_accepted() {
    let ws = tempfile::tempdir().unwrap();
    let out = tierbox()
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .arg("run")
        .arg("--workspace")
        .arg(ws.path())
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_token_file_of_another_user_is_refused() {
    let test = "a_token_file_of_another_user_is_refused";
    if !is_root(test) {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let token = base.path().join("token");
    std::fs::write(&token, "0123456789abcdef0123456789abcdef0123456789abcdef\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&token, Some(OTHER_UID), None).unwrap();
    let out = tierbox()
        .args(["serve", "--http", "127.0.0.1:0", "--token-file"])
        .arg(&token)
        .arg("--state-dir")
        .arg(base.path().join("state"))
        .arg("--workspace")
        .arg(ws.path())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("the token file") && err.contains(&format!("owned by uid {OTHER_UID}")),
        "{err}"
    );
}

/// A listener on `socket` that prints how many bytes each connection sent. With
/// `drop_first` it binds as [`OTHER_UID`] (the socket file is theirs); otherwise it binds
/// as root (the file is root's) and listens as [`OTHER_UID`] (its peer credentials are).
fn fake_daemon(socket: &Path, drop_first: bool) -> std::process::Child {
    let script = r#"
import os, socket, sys
path, uid, drop_first = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
if drop_first:
    os.setgid(uid); os.setuid(uid)
s = socket.socket(socket.AF_UNIX)
s.bind(path)
if not drop_first:
    os.setgid(uid); os.setuid(uid)
s.listen(8)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.settimeout(5)
    got = 0
    try:
        while True:
            b = c.recv(65536)
            if not b:
                break
            got += len(b)
    except OSError:
        pass
    print("received", got, flush=True)
    c.close()
"#;
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(socket)
        .arg(OTHER_UID.to_string())
        .arg(if drop_first { "1" } else { "0" })
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "ready");
    child
}

fn run_via(socket: &Path, state: &Path, ws: &Path) -> serde_json::Value {
    let out = tierbox()
        .env("TIERBOX_SOCKET", socket)
        // The bearer token the CLI would send: it must never reach the listener.
        .env(
            "TIERBOX_HTTP_TOKEN",
            "0123456789abcdef0123456789abcdef0123456789abcdef",
        )
        .arg("run")
        .arg("--json")
        .arg("--state-dir")
        .arg(state)
        .arg("--workspace")
        .arg(ws)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn received(mut daemon: std::process::Child) -> String {
    std::thread::sleep(Duration::from_millis(300));
    let _ = daemon.kill();
    let out = daemon.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn nothing_is_sent_to_a_daemon_socket_of_another_user() {
    let test = "nothing_is_sent_to_a_daemon_socket_of_another_user";
    if !is_root(test) {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let theirs = base.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(OTHER_UID), Some(OTHER_UID)).unwrap();
    let socket = theirs.join("tierbox.sock");
    let daemon = fake_daemon(&socket, true);
    let ws = tempfile::tempdir().unwrap();
    let v = run_via(&socket, &base.path().join("state"), ws.path());
    let got = received(daemon);
    assert_eq!(v["via"], "in_process", "{v}");
    let why = v["daemon"].as_str().unwrap_or_default();
    assert!(why.contains(&format!("owned by uid {OTHER_UID}")), "{why}");
    assert!(!got.contains("received"), "the CLI connected: {got}");
}

#[test]
fn nothing_is_sent_to_a_daemon_listening_as_another_user() {
    let test = "nothing_is_sent_to_a_daemon_listening_as_another_user";
    if !is_root(test) {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let socket = base.path().join("tierbox.sock");
    let daemon = fake_daemon(&socket, false);
    let ws = tempfile::tempdir().unwrap();
    let v = run_via(&socket, &base.path().join("state"), ws.path());
    let got = received(daemon);
    assert_eq!(v["via"], "in_process", "{v}");
    let why = v["daemon"].as_str().unwrap_or_default();
    assert!(why.contains(&format!("runs as uid {OTHER_UID}")), "{why}");
    assert!(
        got.lines().all(|l| l == "received 0"),
        "the CLI sent the daemon something: {got}"
    );
}
