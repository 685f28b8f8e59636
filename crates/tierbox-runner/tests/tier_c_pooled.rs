//! Tier C runs in a long-lived supervisor (slot pooling on, as in `tierbox serve`): the
//! run ends on the sandbox's pid 1 reporting the program's exit, and pid 1 is reaped in
//! the background with the run's slot. This binary turns pooling on for its whole
//! process, so it is kept apart from the other integration tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tierbox_policy::{Policy, ProcessRunRequest, TierCBackend, TierRequest};
use tierbox_runner::{RunOptions, Runner};
use tierbox_sandbox::launch::{reaper, slots};

/// Whether native Tier C can run here; prints why not, and panics under CI.
fn tier_c_available(test: &str) -> bool {
    let facts = tierbox_sandbox::probe::host_facts();
    match tierbox_sandbox::select::tier_available(tierbox_policy::Tier::C, facts) {
        Ok(()) => true,
        Err(r) => !tierbox_test_support::skip(test, &r.to_string()),
    }
}

/// Held by every test of this binary for its whole length. The pool and the run groups
/// are the process's: a test that drains the pool and then lists this process's groups
/// would otherwise see the groups of another test's run still in progress (a slower
/// machine makes the other test's CPU loop outlast this one's runs).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

struct Env {
    ws: tempfile::TempDir,
    state: tempfile::TempDir,
    runner: Runner,
}

fn env() -> Env {
    slots::set_pooling(true);
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut policy = Policy::builtin_default();
    policy.exec.allowed_executables = ["sh", "sleep", "true"].map(str::to_owned).to_vec();
    policy.exec.allow_interpreters = true;
    policy.exec.allow_eval = true;
    policy.tier.backend = TierCBackend::Native;
    let runner = Runner::new(policy)
        .with_workspace(ws.path())
        .with_options(RunOptions {
            state_dir: state.path().to_path_buf(),
        });
    Env { ws, state, runner }
}

fn sh(script: &str) -> ProcessRunRequest {
    let mut r = ProcessRunRequest::new("sh");
    r.args = vec!["-c".to_owned(), script.to_owned()];
    r.tier = TierRequest::C;
    r
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Live or zombie processes on the host whose command line contains `marker`.
fn with_marker(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(marker) {
            found.push(pid.to_owned());
        }
    }
    found
}

/// The program's exit status and usage come from pid 1's report, and by the time the run
/// returns nothing the program started is alive — not even an orphan it left behind —
/// without waiting for anything after the return.
#[test]
fn a_run_ends_on_the_report_with_its_orphans_already_dead() {
    let test = "a_run_ends_on_the_report_with_its_orphans_already_dead";
    let _serial = serial();
    if !tier_c_available(test) {
        return;
    }
    let env = env();
    let rt = rt();
    for round in 0..3 {
        let marker = format!("{}{round}", 7_100 + std::process::id() % 1000);
        // An orphan (its parent subshell exits at once) and a child still running when
        // the program exits; then some CPU work, and a chosen exit code.
        let script = format!(
            "(sleep {marker} &) ; sleep {marker} & i=0; while [ $i -lt 40000 ]; do i=$((i+1)); done; exit 7"
        );
        let out = rt.block_on(env.runner.run(&sh(&script))).unwrap();
        let left = with_marker(&format!("sleep {marker}"));
        assert!(left.is_empty(), "round {round}: still there: {left:?}");
        assert_eq!(out.exit_code, Some(7), "stderr: {}", out.stderr.text);
        assert_eq!(out.signal, None);
        assert_eq!(out.tier, tierbox_policy::Tier::C);
        assert!(
            out.usage.cpu_user_ms + out.usage.cpu_sys_ms > 0,
            "the loop's CPU time is reported: {:?}",
            out.usage
        );
        assert!(out.usage.peak_rss_bytes > 0, "{:?}", out.usage);
    }
    // Killed by a signal: reported as the signal, not as pid 1's 128 + n.
    let out = rt.block_on(env.runner.run(&sh("kill -TERM $$"))).unwrap();
    assert_eq!((out.exit_code, out.signal), (None, Some(libc::SIGTERM)));
    assert!(reaper::settle(Duration::from_secs(10)), "pid 1s reaped");
    drop(env.ws);
    drop(env.state);
}

/// A run that outlives its deadline still ends the old way (the tree is killed, pid 1
/// reaped), and the slots of reported runs go back to the pool once pid 1 is reaped:
/// after `drain` no group of this process is left.
#[test]
fn timeouts_still_kill_the_tree_and_drained_slots_leave_no_group() {
    let test = "timeouts_still_kill_the_tree_and_drained_slots_leave_no_group";
    let _serial = serial();
    if !tier_c_available(test) {
        return;
    }
    let env = env();
    let rt = rt();
    let mut r = sh("sleep 30");
    r.timeout_ms = Some(300);
    let out = rt.block_on(env.runner.run(&r)).unwrap();
    assert!(out.timed_out);
    for _ in 0..5 {
        let out = rt.block_on(env.runner.run(&sh("true"))).unwrap();
        assert_eq!(out.exit_code, Some(0));
    }
    assert!(reaper::settle(Duration::from_secs(10)));
    let pooled = own_groups();
    assert!(
        !pooled.is_empty(),
        "the pooled slots' groups are found where this test looks"
    );
    slots::drain();
    let left = own_groups();
    assert!(left.is_empty(), "groups left after drain: {left:?}");
}

/// This process's run groups (`tierbox-<pid>.*`) under its own group of each v1
/// controller it is in.
fn own_groups() -> Vec<String> {
    let prefix = format!("tierbox-{}.", std::process::id());
    let mut found = Vec::new();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    for line in own.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(_), Some(ctls), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        for ctl in ctls
            .split(',')
            .filter(|c| ["memory", "pids", "cpu"].contains(c))
        {
            let dir = format!("/sys/fs/cgroup/{ctl}{}", path.trim_end_matches('/'));
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with(&prefix) {
                    found.push(format!("{dir}/{name}"));
                }
            }
        }
    }
    found
}
