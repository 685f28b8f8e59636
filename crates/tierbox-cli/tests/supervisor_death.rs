//! `tierbox run` killed outright (SIGKILL) leaves no process of its run on any backend:
//! Tier B (a daemon in a session of its own included), Tier C native, bwrap and podman.
//! Soon after the kill nothing of the run is alive, no mount the supervisor made for the
//! run (a Tier B run's bounded `/tmp`) is left on the host, and the placeholder the killed
//! run's sandbox made in the workspace is gone after the next run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "serve/support.rs"]
mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::{pids_with_argv, tier_c_available, tierbox, wait_for};
use tierbox_test_support::skip;

/// Longest the test waits, after the SIGKILL, for every process of the run to be gone.
/// Not a speed target (the watchdog's sweep takes milliseconds): a deadline far beyond
/// it, so a loaded machine cannot fail the test, while a survivor (each sleeps for
/// ~3,000 s) still does.
const GONE_WITHIN: Duration = Duration::from_secs(60);

/// How long a run gets to start its processes (podman's first start is the slowest).
const START_WITHIN: Duration = Duration::from_secs(20);

/// The test image of the podman case (built from the host's static busybox).
const IMAGE: &str = "localhost/tierbox-e2e:busybox";

/// The built-in strict policy with `sh`, `setsid` and `sleep` allowed, `extra` at the
/// start of `[tier]` and `tail` at the end.
fn policy(dir: &Path, extra: &str, tail: &str) -> std::path::PathBuf {
    let out = Command::new(tierbox())
        .args(["policy", "init"])
        .output()
        .unwrap();
    let mut text = String::from_utf8(out.stdout).unwrap();
    text = text
        .replace("allow_interpreters = false", "allow_interpreters = true")
        .replace("allow_eval = false", "allow_eval = true")
        .replace("\"uv\",", "\"uv\", \"sh\", \"setsid\",")
        .replace("optional_layers = [", "optional_layers = [\"landlock\", ");
    text = text.replacen("[tier]\n", &format!("[tier]\n{extra}"), 1);
    text.push_str(tail);
    let path = dir.join("policy.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The mount points under `dir` in this process's mount namespace (the host's).
fn mounts_under(dir: &Path) -> Vec<String> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let prefix = format!("{}/", dir.display());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .filter(|point| point.starts_with(&prefix))
        .map(str::to_owned)
        .collect()
}

/// Starts `tierbox run` of `script` in `ws`, waits for the processes named by `markers`,
/// SIGKILLs the CLI and checks none of them is alive, and no mount is left under the
/// run's state directory, within [`GONE_WITHIN`].
/// Returns the killed CLI's pid.
fn kill_and_check(
    test: &str,
    policy: &Path,
    tier: &str,
    ws: &Path,
    script: &str,
    markers: &[[&str; 2]],
) -> u32 {
    let state = tempfile::tempdir().unwrap();
    let mut cli = Command::new(tierbox())
        .arg("run")
        .arg("--policy")
        .arg(policy)
        .args(["--tier", tier, "--workspace"])
        .arg(ws)
        .args(["--", "sh", "-c", script])
        .env("XDG_STATE_HOME", state.path())
        .env("TIERBOX_DAEMON", "off")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = wait_for(START_WITHIN, || {
        markers.iter().all(|m| pids_with_argv(m).len() == 1)
    });
    let mounted = mounts_under(state.path());
    if !started {
        let _ = cli.kill();
        let out = cli.wait_with_output().unwrap();
        panic!(
            "{test}: the run did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let cli_pid = cli.id();
    cli.kill().unwrap();
    // Not reaped until everything is checked: a killed supervisor that is a zombie (its
    // parent busy elsewhere) must be taken as gone by its watchdog, as a reaped one is.
    wait_for(GONE_WITHIN, || {
        markers.iter().all(|m| pids_with_argv(m).is_empty())
    });
    let left: Vec<_> = markers
        .iter()
        .filter(|m| !pids_with_argv(*m).is_empty())
        .collect();
    // Whatever failed, leave nothing running for the next test.
    for m in &left {
        for pid in pids_with_argv(*m) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
    assert!(
        left.is_empty(),
        "{test}: alive {GONE_WITHIN:?} after the SIGKILL: {left:?}"
    );
    wait_for(GONE_WITHIN, || mounts_under(state.path()).is_empty());
    let mounts_left = mounts_under(state.path());
    cli.wait().unwrap();
    for point in &mounts_left {
        let _ = Command::new("umount").args(["-l", point]).status();
    }
    assert!(
        mounts_left.is_empty(),
        "{test}: mounted on the host {GONE_WITHIN:?} after the SIGKILL (of {} while the run \
         ran): {mounts_left:?}",
        mounted.len()
    );
    cli_pid
}

/// Distinct `sleep` arguments for this test process and `test` (the tests run at once in
/// one process: the same marks would make each count the other's processes).
fn marks(test: &str, n: u32) -> Vec<String> {
    let salt = test
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b.into()))
        % 1000;
    (0..n)
        .map(|i| format!("{}.{salt:03}{i}", 3000 + std::process::id() % 600))
        .collect()
}

#[test]
fn sigkill_of_run_leaves_no_tier_b_process_nor_its_daemon() {
    let test = "sigkill_of_run_leaves_no_tier_b_process_nor_its_daemon";
    if rustix::process::geteuid().as_raw() != 0
        && skip(
            test,
            "a Tier B run's cgroup (what the watchdog kills) needs a root supervisor here",
        )
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let p = policy(dir.path(), "", "");
    let m = marks(test, 2);
    let script = format!("setsid -f sleep {}; exec sleep {}", m[0], m[1]);
    let _ = kill_and_check(
        test,
        &p,
        "b",
        ws.path(),
        &script,
        &[["sleep", &m[0]], ["sleep", &m[1]]],
    );
}

fn tier_c_case(test: &str, backend: &str) {
    if !tier_c_available(test) {
        return;
    }
    if backend == "bwrap"
        && !Path::new("/usr/bin/bwrap").exists()
        && skip(test, "bwrap is not installed")
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // No `.git`: the sandbox makes a placeholder for its cover in the workspace.
    let ws = tempfile::tempdir().unwrap();
    let p = policy(dir.path(), &format!("backend = \"{backend}\"\n"), "");
    let m = marks(test, 2);
    let script = format!("setsid -f sleep {}; exec sleep {}", m[0], m[1]);
    let _ = kill_and_check(
        test,
        &p,
        "c",
        ws.path(),
        &script,
        &[["sleep", &m[0]], ["sleep", &m[1]]],
    );
    // The killed run could not remove its placeholder; the next run does.
    let state = tempfile::tempdir().unwrap();
    let out = Command::new(tierbox())
        .arg("run")
        .arg("--policy")
        .arg(&p)
        .args(["--tier", "c", "--workspace"])
        .arg(ws.path())
        .args(["--", "true"])
        .env("XDG_STATE_HOME", state.path())
        .env("TIERBOX_DAEMON", "off")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left: Vec<_> = std::fs::read_dir(ws.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        left.is_empty(),
        "{test}: left in the workspace after the next run: {left:?}"
    );
}

#[test]
fn sigkill_of_run_leaves_no_native_tier_c_process() {
    tier_c_case("sigkill_of_run_leaves_no_native_tier_c_process", "native");
}

/// Regression: bwrap's parent-death signal was cleared when it switched to the
/// sandbox's ids, so its pid 1 and the program outlived the supervisor.
#[test]
fn sigkill_of_run_leaves_no_bwrap_process() {
    tier_c_case("sigkill_of_run_leaves_no_bwrap_process", "bwrap");
}

/// Regression: the engine runs the container, not the supervisor, so it outlived it.
#[test]
fn sigkill_of_run_leaves_no_podman_container() {
    let test = "sigkill_of_run_leaves_no_podman_container";
    let podman = Path::new("/usr/bin/podman");
    if !podman.exists() {
        if !tierbox_test_support::in_ci() {
            println!("SKIP {test}: podman is not installed");
            return;
        }
        panic!("{test}: podman is not installed, and CI=true forbids skipping");
    }
    let env = [
        (
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        ),
        ("HOME", "/root"),
    ];
    if let Err(e) = tierbox_test_support::container_image::build_busybox_image(podman, &env, IMAGE)
        && skip(test, &e)
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let p = policy(
        dir.path(),
        "backend = \"podman\"\n",
        &format!("\n[tier.container]\nimage = \"{IMAGE}\"\n"),
    );
    let m = marks(test, 2);
    let script = format!("sleep {} & exec sleep {}", m[0], m[1]);
    let cli = kill_and_check(
        test,
        &p,
        "c",
        ws.path(),
        &script,
        &[["sleep", &m[0]], ["sleep", &m[1]]],
    );
    // The watchdog kills the container, then removes it: its processes are gone first.
    let listed = || {
        let out = Command::new(podman)
            .args([
                "ps",
                "-a",
                "--filter",
                "name=tierbox-",
                "--format",
                "{{.Names}}",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let ours = format!("tierbox-{cli}.");
    wait_for(GONE_WITHIN, || {
        !listed().lines().any(|n| n.starts_with(&ours))
    });
    let names = listed();
    assert!(
        !names
            .lines()
            .any(|n| n.starts_with(&format!("tierbox-{cli}."))),
        "{test}: containers left: {names}"
    );
}
