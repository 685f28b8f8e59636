//! `tierbox run -t` in a real terminal: tmux runs it, `send-keys` types, `capture-pane`
//! reads the screen, resizing the tmux window resizes the sandbox's terminal, and the
//! exit status is the program's. Skipped with a printed reason without tmux or Tier B,
//! failed under `CI=true`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// How long the screen may take to show what is waited for before the test gives up (a
/// bound so a broken terminal fails instead of hanging, not a timing assertion).
const GIVE_UP: Duration = Duration::from_secs(60);

fn tmux(socket: &Path, args: &[&str]) -> String {
    let out = Command::new("tmux")
        .arg("-S")
        .arg(socket)
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits until the pane shows `needle`; the screen.
fn screen_shows(socket: &Path, needle: &str) -> String {
    let give_up = Instant::now() + GIVE_UP;
    loop {
        let screen = tmux(socket, &["capture-pane", "-p", "-t", "t"]);
        if screen.contains(needle) {
            return screen;
        }
        assert!(Instant::now() < give_up, "never saw {needle:?}:\n{screen}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A directory with a workspace and a policy allowing `bash` (and eval), when tmux and
/// Tier B are there; else the test is skipped (failed under `CI=true`).
fn setup(test: &str) -> Option<(tempfile::TempDir, std::path::PathBuf, std::path::PathBuf)> {
    if Command::new("tmux").arg("-V").output().is_err() {
        tierbox_test_support::skip(test, "tmux is not installed");
        return None;
    }
    let facts = tierbox_sandbox::probe::host_facts();
    if facts.landlock_abi.is_none() || !facts.seccomp {
        tierbox_test_support::skip(test, "Tier B needs landlock and seccomp");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "version = 1\n[exec]\nallowed_executables = [\"bash\", \"seq\"]\nallow_interpreters = true\nallow_eval = true\n",
    )
    .unwrap();
    Some((dir, ws, policy))
}

#[test]
fn run_t_in_tmux_types_resizes_and_mirrors_the_exit_status() {
    let test = "run_t_in_tmux_types_resizes_and_mirrors_the_exit_status";
    let Some((dir, ws, policy)) = setup(test) else {
        return;
    };
    let status_file = dir.path().join("status");
    let socket = dir.path().join("tmux.sock");
    let command = format!(
        "{} run -t --policy {} --workspace {} --state-dir {} --tier b -- bash --norc --noprofile -i; echo $? > {}; sleep 100",
        env!("CARGO_BIN_EXE_tierbox"),
        policy.display(),
        ws.display(),
        dir.path().join("state").display(),
        status_file.display(),
    );
    tmux(
        &socket,
        &[
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            "80",
            "-y",
            "24",
            &command,
        ],
    );
    screen_shows(&socket, "bash-");
    tmux(
        &socket,
        &["send-keys", "-t", "t", "echo typed-$((6*7))", "Enter"],
    );
    let screen = screen_shows(&socket, "typed-42");
    println!("{test}: typed:\n{}", screen.trim_end());
    tmux(&socket, &["send-keys", "-t", "t", "stty size", "Enter"]);
    screen_shows(&socket, "24 80");
    let status = resize_and_exit(&socket, test, &status_file);
    tmux(&socket, &["kill-server"]);
    println!("{test}: exit status {}", status.trim());
    assert_eq!(status.trim(), "3");
}

/// Resizes the tmux window to 30x100, waits until `stty size` in the pane says so, types
/// `exit 3`, and returns what the pane's command wrote to `status` after it.
fn resize_and_exit(socket: &Path, test: &str, status: &Path) -> String {
    tmux(
        socket,
        &["resize-window", "-t", "t", "-x", "100", "-y", "30"],
    );
    tmux(
        socket,
        &["send-keys", "-t", "t", "clear; stty size", "Enter"],
    );
    let screen = screen_shows(socket, "30 100");
    println!("{test}: after resize:\n{}", screen.trim_end());
    tmux(socket, &["send-keys", "-t", "t", "exit 3", "Enter"]);
    file_written(status)
}

/// Waits until `path` holds something; its content.
fn file_written(path: &Path) -> String {
    let give_up = Instant::now() + GIVE_UP;
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && !s.is_empty()
        {
            return s;
        }
        assert!(Instant::now() < give_up, "{} never written", path.display());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_daemon_term_detaches_and_attach_redraws_types_and_resizes_in_tmux() {
    let test = "a_daemon_term_detaches_and_attach_redraws_types_and_resizes_in_tmux";
    let Some((dir, ws, policy)) = setup(test) else {
        return;
    };
    let xdg = dir.path().join("xdg");
    let tierbox = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_tierbox"))
            .args(args)
            .env("XDG_STATE_HOME", &xdg)
            .env_remove("TIERBOX_SOCKET")
            .env_remove("TIERBOX_DAEMON")
            .output()
            .unwrap()
    };
    let (p, w) = (policy.to_str().unwrap(), ws.to_str().unwrap());
    let socket = dir.path().join("tmux.sock");
    let (detached, ended) = (dir.path().join("detached"), dir.path().join("ended"));
    let prefix = format!(
        "env XDG_STATE_HOME={} {}",
        xdg.display(),
        env!("CARGO_BIN_EXE_tierbox")
    );
    // The daemon started in the pane, so its environment is the one `run -t` has there
    // (a daemon of another environment is not used).
    let run = format!(
        "{prefix} daemon start --policy {p} --workspace {w} && \
         {prefix} run -t --policy {p} --workspace {w} --tier b -- bash --norc --noprofile -i; \
         echo $? > {}; sleep 100",
        detached.display()
    );
    tmux(
        &socket,
        &["new-session", "-d", "-s", "t", "-x", "80", "-y", "24", &run],
    );
    screen_shows(&socket, "bash-");
    tmux(
        &socket,
        &["send-keys", "-t", "t", "echo before-$((6*7))", "Enter"],
    );
    screen_shows(&socket, "before-42");
    tmux(&socket, &["send-keys", "-t", "t", "C-p", "C-q"]);
    assert_eq!(file_written(&detached).trim(), "0");
    let listed: serde_json::Value =
        serde_json::from_slice(&tierbox(&["ps", "--json"]).stdout).unwrap();
    let id = listed["terms"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(listed["terms"][0]["state"], "running");

    let attach = format!(
        "{prefix} attach {id}; echo $? > {}; sleep 100",
        ended.display()
    );
    tmux(&socket, &["respawn-pane", "-k", "-t", "t", &attach]);
    // The redraw: what the term showed before it was detached.
    let screen = screen_shows(&socket, "before-42");
    println!("{test}: attached:\n{}", screen.trim_end());
    let status = resize_and_exit(&socket, test, &ended);
    tmux(&socket, &["kill-server"]);
    let _ = tierbox(&["daemon", "stop"]);
    assert_eq!(status.trim(), "3");
}

/// `tierbox run -t ARGS` with stdin empty, stdout `stdout`, no daemon.
fn run_t(
    dir: &Path,
    ws: &Path,
    policy: &Path,
    args: &[&str],
    stdout: std::process::Stdio,
) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_tierbox"))
        .args(["run", "-t", "--tier", "b", "--policy"])
        .arg(policy)
        .arg("--workspace")
        .arg(ws)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("--")
        .args(args)
        .env("TIERBOX_DAEMON", "off")
        .stdin(std::process::Stdio::null())
        .stdout(stdout)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// What `run -t` prints of a flood is what it shows plus what it says it did not: the
/// term's ring keeps the last 1 MiB and a terminal that reads slower misses the rest,
/// which is reported on stderr, never dropped silently. `seq 1 1000000` on a terminal
/// prints 7,888,896 bytes (`\r\n` line ends).
#[test]
fn run_t_shows_a_flood_or_says_how_much_it_did_not() {
    let test = "run_t_shows_a_flood_or_says_how_much_it_did_not";
    let Some((dir, ws, policy)) = setup(test) else {
        return;
    };
    let out_path = dir.path().join("out");
    let out = std::fs::File::create(&out_path).unwrap();
    let child = run_t(
        dir.path(),
        &ws,
        &policy,
        &["seq", "1", "1000000"],
        out.into(),
    );
    let done = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&done.stderr).into_owned();
    assert_eq!(done.status.code(), Some(0), "{stderr}");
    let shown = std::fs::metadata(&out_path).unwrap().len();
    let lost: u64 = stderr
        .lines()
        .find(|l| l.contains("bytes of the program's output were not shown"))
        .and_then(|l| l.split_whitespace().nth(1))
        .map_or(0, |n| n.parse().unwrap());
    println!("{test}: shown {shown}, reported not shown {lost}");
    assert_eq!(shown + lost, 7_888_896, "{stderr}");
}

/// A `run -t` whose stdout closes (`| head`) ends its term and exits 141 (128 +
/// SIGPIPE) after leaving the terminal as it found it, instead of dying of the signal:
/// nothing of the run is left.
#[test]
fn run_t_whose_output_closes_ends_its_term() {
    let test = "run_t_whose_output_closes_ends_its_term";
    let Some((dir, ws, policy)) = setup(test) else {
        return;
    };
    let mut child = run_t(
        dir.path(),
        &ws,
        &policy,
        &["seq", "1", "30000017"],
        std::process::Stdio::piped(),
    );
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 4096];
    std::io::Read::read_exact(&mut stdout, &mut first).unwrap();
    drop(stdout);
    let done = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&done.stderr).into_owned();
    assert_eq!(done.status.code(), Some(141), "{stderr}");
    assert!(stderr.contains("the output's reader went away"), "{stderr}");
    let give_up = Instant::now() + GIVE_UP;
    while std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == b"seq\x001\x0030000017\x00")
    }) {
        assert!(Instant::now() < give_up, "{test}: the program survived");
        std::thread::sleep(Duration::from_millis(50));
    }
}
