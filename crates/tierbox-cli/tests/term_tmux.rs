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

#[test]
fn run_t_in_tmux_types_resizes_and_mirrors_the_exit_status() {
    let test = "run_t_in_tmux_types_resizes_and_mirrors_the_exit_status";
    if Command::new("tmux").arg("-V").output().is_err() {
        tierbox_test_support::skip(test, "tmux is not installed");
        return;
    }
    let facts = tierbox_sandbox::probe::host_facts();
    if facts.landlock_abi.is_none() || !facts.seccomp {
        tierbox_test_support::skip(test, "Tier B needs landlock and seccomp");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "version = 1\n[exec]\nallowed_executables = [\"bash\"]\nallow_interpreters = true\nallow_eval = true\n",
    )
    .unwrap();
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
    tmux(
        &socket,
        &["resize-window", "-t", "t", "-x", "100", "-y", "30"],
    );
    tmux(
        &socket,
        &["send-keys", "-t", "t", "clear; stty size", "Enter"],
    );
    let screen = screen_shows(&socket, "30 100");
    println!("{test}: after resize:\n{}", screen.trim_end());
    tmux(&socket, &["send-keys", "-t", "t", "exit 3", "Enter"]);
    let give_up = Instant::now() + GIVE_UP;
    let status = loop {
        if let Ok(s) = std::fs::read_to_string(&status_file) {
            break s;
        }
        assert!(Instant::now() < give_up, "tierbox never ended");
        std::thread::sleep(Duration::from_millis(100));
    };
    tmux(&socket, &["kill-server"]);
    println!("{test}: exit status {}", status.trim());
    assert_eq!(status.trim(), "3");
}
