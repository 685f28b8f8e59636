//! The `tierbox` binary, end to end.

#![allow(clippy::unwrap_used, clippy::expect_used)]

/// What the CLI says about itself: denial lines, usage errors, the tier line, its
/// reserved exit statuses and `--json`'s error object.
#[path = "cli/truth.rs"]
mod truth;

/// `run --stdin`: bytes of any kind streamed to the program, cut at the stdin limit.
#[path = "cli/stdin.rs"]
mod stdin;

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn tierbox(args: &[&str], stdin: Option<&str>) -> Output {
    let state = tempfile::tempdir().unwrap();
    tierbox_with_state(state.path(), args, stdin)
}

/// [`tierbox`] with `XDG_STATE_HOME` = `state`.
fn tierbox_with_state(state: &std::path::Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tierbox"));
    cmd.args(args)
        .env("XDG_STATE_HOME", state)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut pipe = child.stdin.take().unwrap();
    if let Some(data) = stdin {
        pipe.write_all(data.as_bytes()).unwrap();
    }
    drop(pipe);
    child.wait_with_output().unwrap()
}

/// The JSON `out` printed, after checking the command exited 0 (its stderr otherwise).
#[track_caller]
fn succeeded_json(out: &Output) -> serde_json::Value {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn tier_b_available() -> bool {
    let out = tierbox(&["doctor", "--json"], None);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ok = v["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["tier"] == "b" && t["available"] == true);
    if !ok {
        tierbox_test_support::skip_here("tier b unavailable on this host");
    }
    ok
}

/// Whether the native Tier C backend can run here (`doctor`'s canary passed); prints why
/// not, and panics under CI.
fn tier_c_native_available() -> bool {
    let out = tierbox(&["doctor", "--json"], None);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let native = v["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["tier"] == "c")
        .flat_map(|t| t["backends"].as_array().unwrap())
        .find(|b| b["backend"] == "native")
        .cloned()
        .unwrap();
    let ok = native["available"] == true;
    if !ok {
        tierbox_test_support::skip_here(&format!(
            "native tier c unavailable on this host: {native}"
        ));
    }
    ok
}

/// glibc's `memmove` variants, as `GLIBC_TUNABLES` that make glibc pick each on an x86-64
/// CPU that has them (other CPUs ignore the names): the default choice, AVX2 (no
/// AVX-512), SSE2 (no AVX at all), and without ERMS/FSRM (`rep movsb`).
const MEMMOVE_VARIANTS: [Option<&str>; 4] = [
    None,
    Some("glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD,-AVX512ER,-AVX512PF"),
    Some(
        "glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX2,-AVX,-AVX_Fast_Unaligned_Load",
    ),
    Some("glibc.cpu.hwcaps=-ERMS,-FSRM"),
];

/// Regression: every native Tier C run, in every build profile and on every CPU, ends
/// with the program's own status — exit 0 for `true`, the output of `printf`.
///
/// The sandbox's pid 1 used to unmap the supervisor's memory and carry on in the same
/// program; whenever the compiler turned a copy into a call to libc's `memmove` and glibc
/// had picked a variant that reads its tuning data (AVX2, SSE2), pid 1 segfaulted and the
/// run ended with SIGSEGV (exit 139) instead of the program's status: every run of the
/// debug build on CPUs without AVX-512. Forcing each variant makes that machine-dependent
/// failure show on any x86-64 machine.
#[test]
fn tier_c_runs_end_with_the_program_s_status_whichever_memmove_glibc_picks() {
    if !tier_c_native_available() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let ws = ws.path().to_str().unwrap();
    for tunables in MEMMOVE_VARIANTS {
        let state = tempfile::tempdir().unwrap();
        let run = |args: &[&str]| {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_tierbox"));
            cmd.args(args)
                .env("XDG_STATE_HOME", state.path())
                .stdin(Stdio::null());
            if let Some(t) = tunables {
                cmd.env("GLIBC_TUNABLES", t);
            }
            cmd.output().unwrap()
        };
        let out = run(&["run", "--tier", "c", "--workspace", ws, "--", "true"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "GLIBC_TUNABLES={tunables:?}: `true` in tier c: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = run(&[
            "run",
            "--tier",
            "c",
            "--json",
            "--workspace",
            ws,
            "--",
            "printf",
            "hello",
        ]);
        let v = succeeded_json(&out);
        assert_eq!(
            v["stdout"]["text"], "hello",
            "GLIBC_TUNABLES={tunables:?}: {v}"
        );
        assert_eq!(v["exit_code"], 0, "GLIBC_TUNABLES={tunables:?}: {v}");
        assert!(v.get("sandbox_failure").is_none(), "{v}");
    }
}

#[test]
fn printf_hello_is_exactly_what_printf_prints() {
    if !tier_b_available() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let out = tierbox(
        &[
            "run",
            "--workspace",
            ws.path().to_str().unwrap(),
            "--",
            "printf",
            "hello",
        ],
        None,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"hello");
}

#[test]
fn git_status_matches_git_status_without_tierbox() {
    if !tier_b_available() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(ws.path())
            .env("HOME", ws.path())
            .output()
            .unwrap()
    };
    if !git(&["init", "-q"]).status.success() {
        tierbox_test_support::skip_here("git unavailable");
        return;
    }
    std::fs::write(ws.path().join("tracked.txt"), "a\n").unwrap();
    git(&["add", "tracked.txt"]);
    std::fs::write(ws.path().join("untracked.txt"), "b\n").unwrap();
    let direct = git(&["status"]);
    let sandboxed = tierbox(
        &[
            "run",
            "--workspace",
            ws.path().to_str().unwrap(),
            "--",
            "git",
            "status",
        ],
        None,
    );
    assert_eq!(
        sandboxed.status.code(),
        direct.status.code(),
        "{}",
        String::from_utf8_lossy(&sandboxed.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&sandboxed.stdout),
        String::from_utf8_lossy(&direct.stdout)
    );
    let short = tierbox(
        &[
            "run",
            "--workspace",
            ws.path().to_str().unwrap(),
            "--",
            "git",
            "status",
            "--short",
        ],
        None,
    );
    assert_eq!(
        String::from_utf8_lossy(&short.stdout),
        "A  tracked.txt\n?? untracked.txt\n"
    );
}

#[test]
fn check_rejects_bash_c_with_its_code_and_runs_nothing() {
    let ws = tempfile::tempdir().unwrap();
    let marker = ws.path().join("ran");
    let request = format!(
        r#"{{"command":"bash","args":["-c","touch {}"]}}"#,
        marker.display()
    );
    let out = tierbox(
        &[
            "check",
            "--workspace",
            ws.path().to_str().unwrap(),
            "--request",
            "-",
        ],
        Some(&request),
    );
    assert_eq!(out.status.code(), Some(125));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("exec.interpreter_denied"), "{stderr}");
    assert_eq!(
        stderr
            .lines()
            .next()
            .unwrap_or("")
            .matches("rejected")
            .count(),
        1,
        "{stderr}"
    );
    assert!(!marker.exists());
    // The same request through `run` is refused the same way, and nothing runs.
    let out = tierbox(
        &[
            "run",
            "--workspace",
            ws.path().to_str().unwrap(),
            "--request",
            "-",
        ],
        Some(&request),
    );
    assert_eq!(out.status.code(), Some(125));
    assert!(!marker.exists());
}

#[test]
fn check_prints_the_plan_as_json() {
    let ws = tempfile::tempdir().unwrap();
    let out = tierbox(
        &[
            "check",
            "--json",
            "--workspace",
            ws.path().to_str().unwrap(),
            "--",
            "ls",
            "-la",
        ],
        None,
    );
    let v = succeeded_json(&out);
    assert_eq!(v["plan"]["argv"], serde_json::json!(["ls", "-la"]));
    assert_eq!(v["plan"]["network"]["mode"], "block_all");
}

#[test]
fn exit_status_mirrors_the_child_and_timeout_is_124() {
    if !tier_b_available() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path().to_str().unwrap();
    assert_eq!(
        tierbox(&["run", "--workspace", w, "--", "false"], None)
            .status
            .code(),
        Some(1)
    );
    let out = tierbox(
        &[
            "run",
            "--workspace",
            w,
            "--timeout-ms",
            "300",
            "--",
            "sleep",
            "30",
        ],
        None,
    );
    assert_eq!(
        out.status.code(),
        Some(124),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = tierbox(
        &[
            "run",
            "--json",
            "--workspace",
            w,
            "--timeout-ms",
            "300",
            "--",
            "sleep",
            "30",
        ],
        None,
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["timed_out"], true);
    assert_eq!(v["limit_hit"], "wall_time");
}

#[test]
fn schema_publishes_process_run() {
    let out = tierbox(&["schema"], None);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["process_run"]["properties"]["command"]["maxLength"], 256);
}

/// A `.json` policy file is read as JSON and takes effect: its allowlist and limits are
/// the plan's, and what it does not allow is rejected.
#[test]
fn json_policy_file_takes_effect() {
    let ws = tempfile::tempdir().unwrap();
    let policy = ws.path().join("policy.json");
    std::fs::write(
        &policy,
        r#"{"version": 1, "exec": {"allowed_executables": ["ls"]}, "limits": {"cpus": 2}}"#,
    )
    .unwrap();
    let check = |cmd: &[&str]| {
        let mut args = vec![
            "check",
            "--json",
            "--policy",
            policy.to_str().unwrap(),
            "--workspace",
            ws.path().to_str().unwrap(),
            "--",
        ];
        args.extend_from_slice(cmd);
        tierbox(&args, None)
    };
    let out = check(&["ls"]);
    let v = succeeded_json(&out);
    assert_eq!(v["plan"]["limits"]["cpus"], 2, "{v}");
    let out = check(&["git", "status"]);
    assert_eq!(out.status.code(), Some(125));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["code"], "exec.not_allowed", "{v}");
}

#[test]
fn bad_policy_is_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.toml");
    std::fs::write(&p, "version = 1\n[exec]\nallow_interpreter = true\n").unwrap();
    let out = tierbox(&["policy", "check", p.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("allow_interpreter"), "{stderr}");
    // The error, then what to do about it.
    assert!(
        stderr.starts_with("tierbox: policy ")
            && stderr
                .lines()
                .last()
                .is_some_and(|l| l.starts_with("hint: docs/policy.md")),
        "{stderr}"
    );
    // Another command with a policy that cannot be read points to `policy check`.
    let missing = dir.path().join("missing.toml");
    let out = tierbox(
        &["check", "--policy", missing.to_str().unwrap(), "--", "ls"],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("hint: `tierbox policy check FILE`"),
        "{stderr}"
    );
}

/// `policy check` and `check` tell the truth for this host: a grant no tier carries is
/// refused by both with its code and key (it used to be "ok" from both, then `run` failed
/// at launch with exit 126 in Tier C and ran in Tier B); a deny_read that hides the
/// workspace is refused by the native backend's planner, which `policy check` reports
/// with the backend; what Tier B narrows of a grant is a note naming the key, and `check`
/// says which tier and backend would run.
#[test]
fn policy_check_and_check_report_what_a_backend_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let cache = dir.path().join("cache");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(cache.join("credentials")).unwrap();
    let policy = |name: &str, body: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, format!("version = 1\n{body}")).unwrap();
        p
    };
    let ws_arg = ws.to_str().unwrap();

    let device = policy(
        "device.toml",
        "[exec]\nallowed_executables = [\"ls\"]\n[filesystem]\nwritable = [\"/dev\"]\n",
    );
    let out = tierbox(
        &["policy", "check", device.to_str().unwrap(), "-w", ws_arg],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The same form as every other rejection: `tierbox: rejected [code]: …`.
    assert!(
        stderr.starts_with("tierbox: rejected [scope.grant_refused]: policy ")
            && stderr.contains("filesystem.writable entry \"/dev\""),
        "{stderr}"
    );
    let out = tierbox(
        &[
            "check",
            "--json",
            "-p",
            device.to_str().unwrap(),
            "-w",
            ws_arg,
            "--",
            "ls",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(125));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["code"], "scope.grant_refused", "{v}");

    let hides = policy(
        "hides.toml",
        &format!(
            "[filesystem]\ndeny_read = [{:?}]\n",
            dir.path().display().to_string()
        ),
    );
    let out = tierbox(
        &["policy", "check", hides.to_str().unwrap(), "-w", ws_arg],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("[scope.grant_refused]: policy ")
            && stderr.contains("filesystem.deny_read"),
        "{stderr}"
    );

    // The sandbox's own /tmp: both Tier C backends refuse a grant of the host's. (With
    // Tierbox's state directory outside /tmp: a grant holding it is refused outright.)
    let tmp = policy(
        "tmp.toml",
        "[exec]\nallowed_executables = [\"ls\"]\n[filesystem]\nwritable = [\"/tmp\"]\n",
    );
    let out = tierbox(
        &["policy", "check", tmp.to_str().unwrap(), "-w", ws_arg],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("[scope.grant_refused]") && stderr.contains("Tierbox's own state"),
        "{stderr}"
    );
    let state = tempfile::tempdir_in("/var/tmp").unwrap();
    let out = tierbox_with_state(
        state.path(),
        &["policy", "check", tmp.to_str().unwrap(), "-w", ws_arg],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("refused: "), "{stdout}");
    for backend in ["native    refuses: ", "bwrap     refuses: "] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(backend) && l.contains("/tmp")),
            "{backend}\n{stdout}"
        );
    }
    let out = tierbox_with_state(
        state.path(),
        &[
            "check",
            "--json",
            "--tier",
            "c",
            "-p",
            tmp.to_str().unwrap(),
            "-w",
            ws_arg,
            "--",
            "ls",
        ],
        None,
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    if v["preflight"]["tier"] == "c" {
        assert_eq!(out.status.code(), Some(125), "{v}");
        assert_eq!(v["preflight"]["refused_at_launch"], true, "{v}");
    }

    let narrowed = policy(
        "cache.toml",
        &format!(
            "[exec]\nallowed_executables = [\"ls\"]\n[filesystem]\nwritable = [{:?}]\ndeny_read = [{:?}]\n",
            cache.display().to_string(),
            cache.join("credentials").display().to_string()
        ),
    );
    let out = tierbox(
        &["policy", "check", narrowed.to_str().unwrap(), "-w", ws_arg],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let note = stdout
        .lines()
        .find(|l| l.starts_with("tier_b    narrows: filesystem.writable: "))
        .unwrap_or_else(|| panic!("no Tier B note:\n{stdout}"));
    assert!(note.contains(&cache.display().to_string()), "{note}");
    assert!(!stdout.contains("refuses"), "{stdout}");
    let out = tierbox(
        &[
            "check",
            "--json",
            "-p",
            narrowed.to_str().unwrap(),
            "-w",
            ws_arg,
            "--",
            "ls",
        ],
        None,
    );
    let v = succeeded_json(&out);
    let pre = &v["preflight"];
    assert_eq!(pre["refused_at_launch"], false, "{v}");
    let findings = pre["grant_findings"].as_array().unwrap();
    assert!(
        findings.iter().any(|f| f["backend"] == "tier_b"
            && f["key"] == "filesystem.writable"
            && f["refuses"] == false),
        "{pre}"
    );
    let tier = pre["tier"].as_str().unwrap_or_default();
    let backend = pre["backend"].as_str().unwrap();
    match tier {
        "c" => assert_eq!(backend, "native", "{pre}"),
        "b" => assert_eq!(backend, "tier_b", "{pre}"),
        other => panic!("no tier selected: {other:?} {pre}"),
    }
}

/// Regression: a run that keeps uid 0 (root supervisor, root-owned workspace) must still
/// be able to `git init` and commit — git chmods its lock files, which the supervisor
/// performs for it beneath the workspace.
#[test]
fn git_init_and_commit_work_when_the_run_keeps_uid_0() {
    if !tier_b_available() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path().to_str().unwrap();
    // The default policy covers a missing `.git` in every tier (`git init` fails there by
    // design); protecting only the entries git executes leaves the repository to the run.
    let policies = tempfile::tempdir().unwrap();
    let entries_only = policies.path().join("entries-only.toml");
    std::fs::write(
        &entries_only,
        "version = 1\n[exec]\nallowed_executables = [\"git\"]\n[filesystem]\nprotected = [\".git/config\", \".git/hooks\"]\n",
    )
    .unwrap();
    let p = entries_only.to_str().unwrap();
    let id = [
        "-e",
        "GIT_AUTHOR_NAME=a",
        "-e",
        "GIT_AUTHOR_EMAIL=a@example.org",
        "-e",
        "GIT_COMMITTER_NAME=a",
        "-e",
        "GIT_COMMITTER_EMAIL=a@example.org",
    ];
    let run = |args: &[&str]| {
        let mut all = vec!["run", "--tier", "b", "--workspace", w, "--policy", p];
        all.extend_from_slice(&id);
        all.push("--");
        all.extend_from_slice(args);
        tierbox(&all, None)
    };
    let init = run(&["git", "init", "-q"]);
    assert_eq!(
        init.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    std::fs::write(ws.path().join("a.txt"), "a\n").unwrap();
    assert_eq!(run(&["git", "add", "a.txt"]).status.code(), Some(0));
    let commit = run(&["git", "commit", "-q", "-m", "first"]);
    assert_eq!(
        commit.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&commit.stderr)
    );
    let log = run(&["git", "log", "--format=%s"]);
    assert_eq!(String::from_utf8_lossy(&log.stdout), "first\n");
}

fn tier_c_available() -> bool {
    let out = tierbox(&["doctor", "--json"], None);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tier_c = v["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tier"] == "c")
        .cloned()
        .unwrap();
    let ok = tier_c["available"] == true;
    if !ok {
        tierbox_test_support::skip_here(&format!(
            "tier c unavailable on this host: {}",
            tier_c["reason"]
        ));
    }
    ok
}

/// Ordinary developer commands in Tier C: listing, reading, git, and a file written inside
/// that is then visible on the host.
#[test]
fn tier_c_runs_ordinary_commands_and_writes_reach_the_host() {
    if !tier_c_available() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path().to_str().unwrap();
    std::fs::write(ws.path().join("notes.txt"), "hello from the host\n").unwrap();
    let run = |args: &[&str]| {
        let mut all = vec!["run", "--tier", "c", "--json", "--workspace", w, "--"];
        all.extend_from_slice(args);
        let out = tierbox(&all, None);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(v["exit_code"], 0, "{args:?}: {v}");
        assert_eq!(v["tier"], "c", "{v}");
        assert_eq!(v["backend"], "tier_c_linux_native", "{v}");
        v
    };
    let ls = run(&["ls"]);
    assert!(
        ls["stdout"]["text"].as_str().unwrap().contains("notes.txt"),
        "{ls}"
    );
    let cat = run(&["cat", "notes.txt"]);
    assert_eq!(cat["stdout"]["text"], "hello from the host\n");
    run(&["touch", "made-inside.txt"]);
    assert!(ws.path().join("made-inside.txt").exists());
    // The empty mount point covering the missing `.git` was removed after each run.
    assert!(!ws.path().join(".git").exists());
    // In a repository, git works and sees the file written inside.
    let init = Command::new("git")
        .args(["init", "-q"])
        .current_dir(ws.path())
        .status()
        .unwrap();
    assert!(init.success());
    let status = run(&["git", "status", "--porcelain"]);
    let text = status["stdout"]["text"].as_str().unwrap();
    assert!(text.contains("?? made-inside.txt"), "{status}");
}

/// With user namespaces made unavailable, `--tier c` is rejected with `tier.unavailable`
/// naming the cause, and nothing runs. `user.max_user_namespaces` is per user namespace,
/// so the test sets it to 0 inside `unshare --user --map-root-user` (the host's value is
/// never touched) and runs the binary there.
#[test]
fn tier_c_is_rejected_not_downgraded_when_user_namespaces_are_off() {
    if !tier_c_available() {
        return;
    }
    let Some(unshare) = ["/usr/bin/unshare", "/bin/unshare"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
    else {
        tierbox_test_support::skip_here("util-linux unshare not installed");
        return;
    };
    let ws = tempfile::tempdir().unwrap();
    let marker = ws.path().join("ran");
    let state = tempfile::tempdir().unwrap();
    let script = "echo 0 > /proc/sys/user/max_user_namespaces || exit 99; \
         exec \"$0\" run --tier c --workspace \"$1\" -- touch \"$2\"";
    let out = Command::new(unshare)
        .args(["--user", "--map-root-user", "--", "sh", "-c", script])
        .arg(env!("CARGO_BIN_EXE_tierbox"))
        .arg(ws.path())
        .arg("ran")
        .env("XDG_STATE_HOME", state.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(stderr.contains("tier.unavailable"), "{stderr}");
    assert!(stderr.contains("user.max_user_namespaces=0"), "{stderr}");
    assert!(!marker.exists(), "nothing may run");
}

/// `cargo --version` in Tier C with the toolchain granted read-only by the shipped
/// "build with caches" policy (its PATH names `~/.cargo/bin`), as root.
#[test]
fn tier_c_runs_cargo_from_a_read_only_toolchain() {
    if !tier_c_available() {
        return;
    }
    if !std::path::Path::new("/root/.cargo/bin/cargo").exists() {
        tierbox_test_support::skip_here("no /root/.cargo/bin/cargo (the policy's PATH names it)");
        return;
    }
    let policy = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../policies/build-with-caches.toml"
    );
    let ws = tempfile::tempdir().unwrap();
    let out = tierbox(
        &[
            "run",
            "--policy",
            policy,
            "--tier",
            "c",
            "--workspace",
            ws.path().to_str().unwrap(),
            "--",
            "cargo",
            "--version",
        ],
        None,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("cargo "), "{stdout}");
}

/// Two separate `tierbox run` processes on one workspace without `.git`: the first run's
/// sandbox creates the placeholder that covers `.git`; the second, started while the first
/// runs and ending later, must still be covered after the first ends (the first must not
/// remove a placeholder another process relies on, which would detach the second's cover
/// and let it create `.git/hooks` on the host).
#[test]
fn a_separate_process_never_removes_a_placeholder_another_run_relies_on() {
    if !tier_c_available() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let policy = state.path().join("policy.toml");
    std::fs::write(
        &policy,
        "version = 1\n[exec]\nallowed_executables = [\"sleep\", \"sh\", \"mkdir\"]\n\
         allow_interpreters = true\nallow_eval = true\n",
    )
    .unwrap();
    let spawn = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tierbox"));
        cmd.args(["run", "--tier", "c", "--json", "--policy"])
            .arg(&policy)
            .arg("--workspace")
            .arg(ws.path())
            .arg("--")
            .args(args)
            .env("XDG_STATE_HOME", state.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.spawn().unwrap()
    };
    let first = spawn(&["sleep", "0.5"]);
    // Wait until the first run's placeholder exists.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !ws.path().join(".git").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "no placeholder appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let second = spawn(&["sh", "-c", "sleep 1.5; mkdir -p .git/hooks && echo made"]);
    let first = first.wait_with_output().unwrap();
    assert_eq!(
        first.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let second = second.wait_with_output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&second.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&second.stderr)));
    assert_ne!(v["exit_code"], 0, "the second run created .git/hooks: {v}");
    assert!(
        !ws.path().join(".git/hooks").exists(),
        ".git/hooks was created on the host"
    );
    assert!(
        !ws.path().join(".git").exists(),
        "the last run out removes the placeholder"
    );
}

/// `doctor --policy` says which Tier C backend that policy selects and whether this host
/// can run it (an engine that does not answer is named with its reason).
#[test]
fn doctor_reports_the_backend_a_policy_selects() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("docker.toml");
    std::fs::write(
        &policy,
        "version = 1\n[tier]\nbackend = \"docker\"\noptional_layers = [\"cgroup\", \"protected_paths\", \"landlock\"]\n\
         [tier.container]\nimage = \"localhost/tools:1\"\n",
    )
    .unwrap();
    let out = tierbox(
        &["doctor", "--json", "--policy", policy.to_str().unwrap()],
        None,
    );
    let v = succeeded_json(&out);
    let selected = &v["selected_backend"];
    assert_eq!(selected["tier_c_backend"], "docker", "{v}");
    let docker = &v["containers"]["docker"];
    assert_eq!(selected["available"], docker["reachable"], "{v}");
    if docker["reachable"] == false {
        let reason = selected["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("docker engine unreachable"), "{v}");
    }
    // Without --policy: the built-in strict policy's native backend.
    let out = tierbox(&["doctor", "--json"], None);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["selected_backend"]["tier_c_backend"], "native", "{v}");
    // Where strict egress with an allowlist can run: each backend, and Tier B.
    let strict = &v["egress"]["strict_allowlist"];
    for key in ["tier_c_native", "tier_c_bwrap", "tier_b"] {
        assert!(strict[key].is_boolean(), "{key}: {v}");
    }
    if strict["tier_c_bwrap"] == true {
        assert_eq!(strict["tier_c_native"], true, "{v}");
    }
}

/// `doctor` says who a Tier C sandbox is on the host and whether idmapped mounts work:
/// under a root supervisor an unprivileged uid (the workspace owner's, or the default
/// sandbox id), under `tier.danger_sandbox_as_supervisor` host root, said loudly.
#[test]
fn doctor_names_the_sandbox_s_host_identity_and_whether_idmapped_mounts_work() {
    let out = tierbox(&["doctor", "--json"], None);
    let v = succeeded_json(&out);
    let id = &v["sandbox_identity"];
    let root = v["host"]["root"] == true;
    if root {
        assert_eq!(id["source"], "workspace owner", "{id}");
        let from_subuid = std::fs::read_to_string("/etc/subuid").is_ok_and(|t| {
            t.lines()
                .any(|l| l.starts_with("root:") || l.starts_with("0:"))
        });
        if !from_subuid {
            assert_eq!(
                id["default_host_id"],
                tierbox_policy::DEFAULT_SANDBOX_ID,
                "{id}"
            );
        }
        assert_ne!(id["default_host_id"], 0, "{id}");
        assert!(id["idmapped_mounts"]["work"].is_boolean(), "{id}");
        if tierbox_test_support::in_ci() {
            assert_eq!(id["idmapped_mounts"]["work"], true, "{id}");
        }
    } else {
        assert_eq!(id["source"], "supervisor", "{id}");
        assert_ne!(id["host_uid"], 0, "{id}");
    }
    let text = tierbox(&["doctor"], None);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("identity    tier c: uid 1000 inside")),
        "{text}"
    );

    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("as-root.toml");
    std::fs::write(
        &policy,
        "version = 1\n[tier]\ndanger_sandbox_as_supervisor = true\n",
    )
    .unwrap();
    let out = tierbox(&["doctor", "--policy", policy.to_str().unwrap()], None);
    let text = String::from_utf8_lossy(&out.stdout);
    if root {
        assert!(text.contains("uid 1000 inside is HOST ROOT"), "{text}");
    } else {
        assert!(text.contains("the supervisor's own host uid"), "{text}");
    }
}

/// `doctor` calls a Tier C backend available only after a real run of `true` through it
/// exited 0 (its canary), and names what went wrong otherwise: here a policy whose memory
/// limit (64 KiB) is too small for any sandbox to start.
#[test]
fn doctor_calls_a_backend_available_only_after_its_canary_run() {
    if !tier_c_native_available() {
        return;
    }
    let out = tierbox(&["doctor", "--json"], None);
    let v = succeeded_json(&out);
    let backends = |v: &serde_json::Value| -> Vec<serde_json::Value> {
        v["tiers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["tier"] == "c")
            .flat_map(|t| t["backends"].as_array().unwrap().clone())
            .collect()
    };
    let native = backends(&v)
        .into_iter()
        .find(|b| b["backend"] == "native")
        .unwrap();
    assert!(native["canary_ms"].is_u64(), "{native}");
    assert!(
        native["layers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l.as_str().unwrap().starts_with("pid 1 after setup: ")),
        "{native}"
    );

    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("tiny.toml");
    std::fs::write(&policy, "version = 1\n[limits]\nmemory_bytes = 65536\n").unwrap();
    let out = tierbox(
        &["doctor", "--json", "--policy", policy.to_str().unwrap()],
        None,
    );
    let v = succeeded_json(&out);
    for b in backends(&v) {
        if b["backend"] == "native" || b["backend"] == "bwrap" {
            assert_eq!(b["available"], false, "{b}");
            assert!(b["reason"].as_str().unwrap().contains("canary"), "{b}");
        }
    }
    assert_eq!(v["selected_backend"]["available"], false, "{v}");
    let text = tierbox(&["doctor", "--policy", policy.to_str().unwrap()], None);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("native                 unavailable: canary `true` failed"),
        "{text}"
    );
}

/// `check` and `run` refuse workspace roots that would hand a run the host, naming the
/// rule (exit 125, nothing runs); the state directory cannot be inside the workspace.
#[test]
fn check_and_run_refuse_the_host_s_own_directories_as_workspaces() {
    for root in ["/", "/root", "/etc", "/proc"] {
        for cmd in ["check", "run"] {
            let out = tierbox(&[cmd, "--workspace", root, "--", "true"], None);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(125), "{cmd} -w {root}: {err}");
            assert!(
                err.contains("scope.workspace_refused"),
                "{cmd} -w {root}: {err}"
            );
        }
    }
    let ws = tempfile::tempdir().unwrap();
    let state = ws.path().join(".tierbox");
    let out = tierbox(
        &[
            "run",
            "--state-dir",
            state.to_str().unwrap(),
            "--workspace",
            ws.path().to_str().unwrap(),
            "--",
            "true",
        ],
        None,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("contains the state directory"), "{err}");
}

/// `tierbox proxy` on an address that is not loopback warns, loudly and first, that
/// anyone who can reach it may use it (it has no authentication); on loopback it does not.
#[test]
fn the_proxy_warns_when_it_listens_beyond_loopback() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("p.toml");
    std::fs::write(
        &policy,
        "version = 1\n[egress]\nallow = [\"example.org\"]\n",
    )
    .unwrap();
    for (listen, warns) in [("0.0.0.0:0", true), ("127.0.0.1:0", false)] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tierbox"))
            .args([
                "proxy",
                "--policy",
                policy.to_str().unwrap(),
                "--listen",
                listen,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        assert_eq!(first.contains("WARNING"), warns, "{listen}: {first}");
        if warns {
            assert!(first.contains("no authentication"), "{first}");
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// `-e NAME` passes the value tierbox itself has and `--env-file FILE` reads `NAME=VALUE`
/// lines, so a secret never has to be in tierbox's command line (which every process of
/// the host can read); `-e NAME=VALUE` still works, and `-e NAME` of an unset variable,
/// or a malformed file line, is a rejection naming it.
#[test]
fn env_values_come_from_the_environment_or_a_file_instead_of_argv() {
    let ws = tempfile::tempdir().unwrap();
    let file = ws.path().join("vars.env");
    std::fs::write(&file, "# a comment\n\nFROM_FILE=a b=c\nOTHER=2\r\n").unwrap();
    let state = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tierbox"))
        .args([
            "check",
            "--json",
            "--workspace",
            ws.path().to_str().unwrap(),
            "-e",
            "FROM_ENV",
            "-e",
            "INLINE=x",
            "--env-file",
            file.to_str().unwrap(),
            "--",
            "ls",
        ])
        .env("XDG_STATE_HOME", state.path())
        .env("FROM_ENV", "the-secret")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let v = succeeded_json(&out);
    let env: Vec<(String, String)> = serde_json::from_value(v["plan"]["env"].clone()).unwrap();
    for (name, value) in [
        ("FROM_ENV", "the-secret"),
        ("INLINE", "x"),
        ("FROM_FILE", "a b=c"),
        ("OTHER", "2"),
    ] {
        assert!(
            env.contains(&(name.to_owned(), value.to_owned())),
            "{name}={value} missing: {env:?}"
        );
    }

    let out = tierbox(
        &[
            "check",
            "--workspace",
            ws.path().to_str().unwrap(),
            "-e",
            "TIERBOX_SURELY_UNSET_VAR",
            "--",
            "ls",
        ],
        None,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains("TIERBOX_SURELY_UNSET_VAR") && err.contains("not set"),
        "{err}"
    );
    std::fs::write(&file, "GOOD=1\nno equals sign here\n").unwrap();
    let out = tierbox(
        &[
            "check",
            "--workspace",
            ws.path().to_str().unwrap(),
            "--env-file",
            file.to_str().unwrap(),
            "--",
            "ls",
        ],
        None,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("line 2"), "{err}");
}

/// The program's output reaches a terminal with its control characters made visible —
/// escape sequences, BEL, a carriage return that would overwrite the line — on stdout
/// and stderr alike, while output that is piped stays byte-exact.
///
/// Regression: `\r` and BEL reached the terminal raw, and stderr was treated by stdout's
/// rule (raw when stdout was piped, whatever stderr was).
#[test]
fn output_to_a_terminal_is_inert_and_piped_output_is_exact() {
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path().to_str().unwrap();
    let script = [
        "run",
        "--workspace",
        w,
        "--",
        "printf",
        r"ok\rFAIL\033]0;t\007 end\r\n",
    ];
    let piped = tierbox(&script, None);
    assert_eq!(piped.status.code(), Some(0), "{piped:?}");
    assert_eq!(piped.stdout, b"ok\rFAIL\x1b]0;t\x07 end\r\n");

    let (status, shown) = on_a_terminal(&script);
    assert_eq!(status.code(), Some(0));
    // The pty's own output processing turns "\n" into "\r\n".
    assert!(shown.contains("ok^MFAIL␛]0;t^G end\r"), "{shown:?}");
    assert!(
        !shown.contains('\u{1b}') && !shown.contains('\u{7}'),
        "{shown:?}"
    );
}

/// Runs `tierbox ARGS` with stdout and stderr on a new pseudo-terminal: its exit status
/// and what it showed there.
fn on_a_terminal(args: &[&str]) -> (std::process::ExitStatus, String) {
    use std::io::Read;
    let (master, slave) = tierbox_test_support::open_pty();
    let state = tempfile::tempdir().unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_tierbox"))
        .args(args)
        .env("XDG_STATE_HOME", state.path())
        .stdin(Stdio::null())
        .stdout(slave.try_clone().unwrap())
        .stderr(slave)
        .status()
        .unwrap();
    let mut shown = Vec::new();
    let mut master = std::fs::File::from(master);
    let mut buf = [0u8; 4096];
    // Everything is written before the process exits; read what the pty holds.
    rustix::io::ioctl_fionbio(&master, true).unwrap();
    while let Ok(n) = master.read(&mut buf) {
        if n == 0 {
            break;
        }
        shown.extend_from_slice(&buf[..n]);
    }
    (status, String::from_utf8_lossy(&shown).into_owned())
}

/// The state directory is created 0711 (owner everything, others only traverse), as
/// documented, whichever command creates it first: a run, or `attest pubkey`.
///
/// Regression: the signing key's creation made it with the umask's 0755, so anyone could
/// list what Tierbox keeps there.
#[test]
fn the_state_directory_is_created_0711() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let xdg = dir.path().join("xdg");
    let out = tierbox_with_state(
        &xdg,
        &["run", "--workspace", ws.to_str().unwrap(), "--", "true"],
        None,
    );
    assert!(xdg.join("tierbox").is_dir(), "{out:?}");
    assert_eq!(mode(&xdg.join("tierbox")), 0o711);
    let fresh = dir.path().join("keys/state");
    let out = tierbox(
        &["attest", "pubkey", "--state-dir", fresh.to_str().unwrap()],
        None,
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(mode(&fresh), 0o711);
    assert_eq!(mode(&fresh.join("attest-key")), 0o600);
}

/// The `/etc` walk kept in the state directory changes nothing a run enforces: a second
/// process that reads it (the file is not rewritten) reports the same plan digest and
/// enforcement as the first, which walked and wrote it — for Tier B, and Tier C where it
/// runs.
#[test]
fn a_run_from_the_cached_system_walk_enforces_what_a_fresh_walk_does() {
    use std::os::unix::fs::MetadataExt;
    if !tier_b_available() {
        return;
    }
    let mut tiers = vec!["b"];
    if tier_c_native_available() {
        tiers.push("c");
    }
    for tier in tiers {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        let xdg = dir.path().join("xdg");
        let args = [
            "run",
            "--json",
            "--tier",
            tier,
            "--workspace",
            ws.to_str().unwrap(),
            "--",
            "true",
        ];
        let cache = xdg.join("tierbox/cache/system-paths.json");
        let first = succeeded_json(&tierbox_with_state(&xdg, &args, None));
        let written = std::fs::metadata(&cache).unwrap();
        let second = succeeded_json(&tierbox_with_state(&xdg, &args, None));
        let kept = std::fs::metadata(&cache).unwrap();
        assert_eq!(
            (written.ino(), written.mtime_nsec()),
            (kept.ino(), kept.mtime_nsec()),
            "tier {tier}: the second run walked again instead of reading the cache"
        );
        assert_eq!(first["plan_sha256"], second["plan_sha256"], "tier {tier}");
        let enforced = |o: &serde_json::Value| {
            tierbox_test_support::enforcement_without_sessions(&o["enforcement"])
        };
        assert_eq!(enforced(&first), enforced(&second), "tier {tier}");
        assert!(first["enforcement"].is_object(), "{first}");
        assert!(first["plan_sha256"].is_string(), "{first}");
    }
}

/// The command may follow tierbox's options without `--`, as with `timeout` or `env`:
/// everything from the first word that is not a tierbox option on is the command, its
/// dashes included; `--` still works, and a second `--` reaches the program.
///
/// Regression: `tierbox run ls -la` failed with "unexpected argument 'ls'".
#[test]
fn the_command_needs_no_double_dash() {
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path().to_str().unwrap();
    let out = tierbox(
        &["run", "--workspace", w, "printf", "%s|", "-la", "x"],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(out.stdout, b"-la|x|");
    let out = tierbox(
        &["run", "--workspace", w, "--", "printf", "%s|", "--", "-v"],
        None,
    );
    assert_eq!(out.stdout, b"--|-v|", "{out:?}");
    // An option after the command belongs to the command.
    let out = tierbox(&["run", "--workspace", w, "printf", "%s|", "--json"], None);
    assert_eq!(out.stdout, b"--json|", "{out:?}");
    let out = tierbox(&["check", "--workspace", w, "ls", "-la"], None);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains(r#"["ls", "-la"]"#));
}

/// A workspace inside the state directory stops `serve` at start with a hint that works:
/// it names `--state-dir` and says `danger_any_workspace_root` does not lift the rule;
/// with the state directory moved as it says, the same workspace is served.
///
/// Regression: the Kubernetes recipe's `--state-dir /var/lib/tierbox --workspace
/// /var/lib/tierbox/sandboxes` was refused with a hint pointing at
/// `danger_any_workspace_root`, which cannot lift that rule.
#[test]
fn serve_with_its_workspace_in_its_state_directory_names_a_fix_that_works() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let ws = state.join("sandboxes");
    std::fs::create_dir_all(&ws).unwrap();
    let (state, ws) = (state.to_str().unwrap(), ws.to_str().unwrap());
    let danger = dir.path().join("danger.toml");
    std::fs::write(&danger, "version = 1\ndanger_any_workspace_root = true\n").unwrap();
    let danger = danger.to_str().unwrap();
    let serve = |extra: &[&str]| {
        let mut args = vec!["serve", "--mcp", "--workspace", ws];
        args.extend_from_slice(extra);
        tierbox(&args, Some(""))
    };
    let out = serve(&["--state-dir", state]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(126), "{err}");
    assert!(err.contains("scope.workspace_refused"), "{err}");
    assert!(err.contains("lies inside the state directory"), "{err}");
    assert!(err.contains("--state-dir"), "{err}");
    assert!(
        err.contains("danger_any_workspace_root does not lift this rule"),
        "{err}"
    );
    // What the hint says does not work indeed does not.
    let out = serve(&["--state-dir", state, "--policy", danger]);
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    // What it says does: the server starts and waits for its MCP client (here stdin
    // closes before `initialize`).
    let elsewhere = dir.path().join("elsewhere");
    let out = serve(&["--state-dir", elsewhere.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("cannot serve"), "{err}");
    assert!(err.contains("initialize"), "{err}");
}

/// `serve` checks what every call would need before it accepts one: a workspace that
/// does not exist (or is refused) stops it at start, with the rule's code, for MCP and
/// HTTP alike.
///
/// Regression: the MCP `initialize` succeeded and the error came at the first tool call.
#[test]
fn serve_refuses_to_start_without_a_usable_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let missing = missing.to_str().unwrap();
    for (transport, code) in [
        (vec!["--mcp"], "scope.workspace_invalid"),
        (vec!["--http", "127.0.0.1:0"], "scope.workspace_invalid"),
    ] {
        let mut args = vec!["serve", "--workspace", missing];
        args.extend(transport.iter().copied());
        let out = tierbox(&args, Some(""));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(126), "{transport:?}: {err}");
        assert!(err.contains(code) && err.contains(missing), "{err}");
    }
    let out = tierbox(&["serve", "--workspace", "/", "--mcp"], Some(""));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(126), "{err}");
    assert!(err.contains("scope.workspace_refused"), "{err}");
}

/// `serve --http localhost:PORT` binds 127.0.0.1; a port that is not a number is refused
/// with what is wrong, as a usage error.
#[test]
fn serve_http_takes_localhost() {
    let out = tierbox(&["serve", "--http", "localhost:x"], None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.starts_with("tierbox: usage: "), "{err}");
    assert!(err.contains("is not a port number"), "{err}");
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tierbox"))
        .args(["serve", "--http", "localhost:0", "--workspace"])
        .arg(ws.path())
        .env("XDG_STATE_HOME", state.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    loop {
        line.clear();
        assert!(
            std::io::BufRead::read_line(&mut err, &mut line).unwrap() > 0,
            "serve ended before it listened"
        );
        if line.contains("serving the HTTP API") {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.contains("http://127.0.0.1:"), "{line}");
}

/// The shipped build policies follow the caller's home: with another `HOME`, the
/// `~/.cargo/bin` of their `env.path` and of their read-only grants is that home's, in
/// Tier B and Tier C alike, and no shipped policy names a user's own directory.
///
/// Regression: `env.path` refused `~`, so the policies hard-coded `/root/.cargo/bin`;
/// with another `HOME` the run failed at execve, naming no path and no policy key.
#[test]
fn shipped_build_policies_follow_the_callers_home() {
    use std::os::unix::fs::PermissionsExt;
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../policies");
    for entry in std::fs::read_dir(root).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for user_path in ["/root", "/home/"] {
            assert!(
                !text.contains(user_path),
                "{} names {user_path}",
                path.display()
            );
        }
    }
    let home = tempfile::tempdir().unwrap();
    let bin = home.path().join(".cargo/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let cargo = bin.join("cargo");
    std::fs::write(&cargo, "#!/bin/sh\necho \"cargo 0.0.0-from-$0\"\n").unwrap();
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let policy = format!("{root}/build-with-caches.toml");
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    for (tier, available) in [("b", true), ("c", tier_c_available())] {
        if !available {
            continue;
        }
        let out = Command::new(env!("CARGO_BIN_EXE_tierbox"))
            .args(["run", "--policy", &policy, "--tier", tier, "--workspace"])
            .arg(ws.path())
            .args(["--", "cargo", "--version"])
            .env("HOME", home.path())
            .env("XDG_STATE_HOME", state.path())
            .env("TIERBOX_DAEMON", "off")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "tier {tier}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            stdout.trim(),
            format!("cargo 0.0.0-from-{}", cargo.display()),
            "tier {tier}"
        );
    }
}

/// The end of a run is said plainly: a program killed by a signal is named with its
/// signal and exit status, and a limit with its policy key and value.
///
/// Regression: a signal printed nothing, and a limit printed only its name.
#[test]
fn a_signal_and_a_limit_are_said_with_the_key_to_change() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "version = 1\n[exec]\nallowed_executables = [\"sh\", \"dd\"]\n\
         allow_interpreters = true\nallow_eval = true\n\
         [limits]\nfile_size_bytes = 1048576\n",
    )
    .unwrap();
    let run = |cmd: &[&str]| {
        let mut args = vec![
            "run",
            "--tier",
            "b",
            "--policy",
            policy.to_str().unwrap(),
            "--workspace",
            ws.to_str().unwrap(),
            "--",
        ];
        args.extend_from_slice(cmd);
        tierbox(&args, None)
    };
    let out = run(&["sh", "-c", "kill -TERM $$"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{err}");
    assert!(
        err.contains("the program was killed by SIGTERM (exit status 143)"),
        "{err}"
    );
    let out = run(&["dd", "if=/dev/zero", "of=big", "bs=1M", "count=3"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(128 + 25 /* SIGXFSZ on Linux */),
        "{err}"
    );
    assert!(
        err.contains("limit hit: file_size (limits.file_size_bytes = 1048576 bytes)"),
        "{err}"
    );
}

/// `check`, `doctor --policy` and `run` give one answer: a policy whose Tier C backend
/// cannot apply a layer the policy requires (bwrap has no landlock) runs in Tier B under
/// `auto`, and all three say so; naming Tier C gets the same rejection from `check` and
/// `run`. Text output uses the policy's words.
///
/// Regression: `check` and `doctor` said ok (Tier C, bwrap), then `run` refused with
/// `tier.unavailable`, and `check` printed `Truncate`, `BlockAll`, `requested Auto`.
#[test]
fn check_doctor_and_run_agree_on_what_will_run() {
    if !tier_c_available() || tierbox_runner::host::probe_bwrap_cached().is_err() {
        tierbox_test_support::skip_here("needs Tier C and bwrap");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let policy = dir.path().join("bwrap.toml");
    std::fs::write(
        &policy,
        "version = 1\n[exec]\nallowed_executables = [\"true\"]\n[tier]\nbackend = \"bwrap\"\n",
    )
    .unwrap();
    let (p, w) = (policy.to_str().unwrap(), ws.to_str().unwrap());
    let check = tierbox(&["check", "--policy", p, "--workspace", w, "true"], None);
    let text = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(0), "{text}");
    assert!(text.contains("runs in   tier b"), "{text}");
    for word in ["requested auto", "truncate", "network   block_all"] {
        assert!(text.contains(word), "{word}: {text}");
    }
    let run = tierbox(
        &["run", "--json", "--policy", p, "--workspace", w, "true"],
        None,
    );
    let v: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(
        (v["tier"].as_str(), v["exit_code"].as_i64()),
        (Some("b"), Some(0)),
        "{v}"
    );
    let doctor = Command::new(env!("CARGO_BIN_EXE_tierbox"))
        .args(["doctor", "--policy", p])
        .current_dir(&ws)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(text.contains("runs in     tier b"), "{text}");
    // Tier C named: the same rejection before and at the run.
    let check = tierbox(
        &[
            "check",
            "--tier",
            "c",
            "--policy",
            p,
            "--workspace",
            w,
            "true",
        ],
        None,
    );
    let run = tierbox(
        &[
            "run",
            "--tier",
            "c",
            "--policy",
            p,
            "--workspace",
            w,
            "true",
        ],
        None,
    );
    assert_eq!(check.status.code(), Some(125));
    assert_eq!(run.status.code(), Some(125));
    let said = String::from_utf8_lossy(&check.stdout);
    let refused = String::from_utf8_lossy(&run.stderr);
    assert!(
        said.contains("tier.unavailable") && said.contains("landlock"),
        "{said}"
    );
    assert!(
        refused.contains("tier.unavailable") && refused.contains("landlock"),
        "{refused}"
    );
}

/// The outcome leads with how the run ended: `exit_code`, `signal`, `timed_out`,
/// `quota_exceeded` and `limit_hit` come before the output and the attestation, in the
/// CLI's `--json` (and in every rendering built from the same type).
///
/// Regression: keys came in alphabetical order, ~3 KB of attestation first.
#[test]
fn the_outcome_json_leads_with_how_the_run_ended() {
    let ws = tempfile::tempdir().unwrap();
    let out = tierbox(
        &[
            "run",
            "--json",
            "--workspace",
            ws.path().to_str().unwrap(),
            "true",
        ],
        None,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let at = |key: &str| {
        text.find(&format!("\"{key}\""))
            .unwrap_or_else(|| panic!("no {key}: {text}"))
    };
    let ends = [
        "exit_code",
        "signal",
        "timed_out",
        "quota_exceeded",
        "limit_hit",
    ];
    for pair in ends.windows(2) {
        assert!(at(pair[0]) < at(pair[1]), "{pair:?}: {text}");
    }
    assert!(at("limit_hit") < at("stdout") && at("stdout") < at("attestation"));
    assert!(at("exit_code") < 100, "{text}");
}

/// The fenced blocks of a Markdown file with their info string (`text`, `toml`, `json`).
fn fenced_blocks(markdown: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        match (&mut open, trimmed.strip_prefix("```")) {
            (None, Some(info)) => open = Some((info.trim().to_owned(), String::new())),
            (Some(_), Some(_)) => blocks.extend(open.take()),
            (Some((_, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    blocks
}

/// The README cannot drift from the binary: every option its CLI synopsis shows is one
/// the subcommand's `--help` lists, its policy example is a valid policy, and its request
/// examples are valid requests.
#[test]
fn the_readme_s_synopsis_policy_and_requests_match_the_binary() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let blocks = fenced_blocks(&readme);
    // The CLI synopsis: the text block whose lines start with `tierbox `.
    let synopsis = blocks
        .iter()
        .find(|(info, body)| info == "text" && body.starts_with("tierbox run"))
        .map(|(_, body)| body.clone())
        .expect("the README's CLI synopsis");
    let mut checked = 0;
    let mut command: Vec<String> = Vec::new();
    for line in synopsis.lines() {
        let line = line.split("  #").next().unwrap_or("");
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() == Some(&"tierbox") {
            // `tierbox wasm run`, `tierbox policy check FILE`: the subcommand words.
            command = words[1..]
                .iter()
                .take_while(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
                .map(|w| (*w).to_owned())
                .collect();
        }
        if command.is_empty() {
            continue;
        }
        let mut args: Vec<String> = command.clone();
        args.push("--help".to_owned());
        let help = Command::new(env!("CARGO_BIN_EXE_tierbox"))
            .args(&args)
            .output()
            .unwrap();
        let help = String::from_utf8_lossy(&help.stdout);
        for flag in line
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .filter(|w| w.starts_with("--") && w.len() > 2)
        {
            assert!(
                help.contains(flag),
                "README shows `tierbox {} {flag}`, which `--help` does not list:\n{help}",
                command.join(" ")
            );
            checked += 1;
        }
    }
    assert!(checked > 30, "only {checked} options checked");
    // The policy example.
    let policy = blocks
        .iter()
        .find(|(info, body)| info == "toml" && body.starts_with("version = 1"))
        .expect("the README's policy example");
    tierbox_policy::Policy::from_toml(&policy.1).unwrap_or_else(|e| panic!("{e}\n{}", policy.1));
    // The request examples.
    let requests: Vec<&String> = blocks
        .iter()
        .filter(|(info, body)| info == "json" && body.trim_start().starts_with('{'))
        .map(|(_, body)| body)
        .filter(|b| {
            let b = b.trim_start();
            b.starts_with("{\"command\"") || b.starts_with("{\"module\"")
        })
        .collect();
    assert!(requests.len() >= 2, "{requests:?}");
    for r in requests {
        if r.contains("\"module\"") {
            tierbox_policy::wasm::WasmRunRequest::from_json(r.as_bytes())
                .unwrap_or_else(|e| panic!("{e}: {r}"));
        } else {
            tierbox_policy::ProcessRunRequest::from_json(r.as_bytes())
                .unwrap_or_else(|e| panic!("{e}: {r}"));
        }
    }
}

/// Every `tierbox …` command in a shell block of the README and of `docs/` names a
/// subcommand that exists and options its `--help` lists, and every TOML block of `docs/`
/// is a valid policy (a snippet, given `version = 1` when it has none, parses as a policy
/// on its own: unset keys keep their defaults).
#[test]
fn the_docs_commands_and_policy_snippets_match_the_binary() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut pages = vec![std::path::PathBuf::from(format!("{root}/README.md"))];
    for entry in std::fs::read_dir(format!("{root}/docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    let mut help_of = std::collections::BTreeMap::<Vec<String>, String>::new();
    let (mut commands, mut options, mut policies, mut curls) = (0, 0, 0, 0);
    let api = tierbox_server::openapi::document();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let name = page.file_name().unwrap().to_string_lossy().into_owned();
        for (info, body) in fenced_blocks(&text) {
            if info == "toml" {
                let body = if body.contains("version = ") {
                    body
                } else {
                    format!("version = 1\n{body}")
                };
                tierbox_policy::Policy::from_toml(&body)
                    .unwrap_or_else(|e| panic!("{name}: a TOML block is no policy: {e}\n{body}"));
                policies += 1;
                continue;
            }
            if info != "sh" {
                continue;
            }
            // Join continued lines, then look at each command of the block.
            let joined = body.replace("\\\n", " ");
            for line in joined.lines() {
                let line = line.split(" #").next().unwrap_or("").trim();
                let line = line.strip_prefix("$ ").unwrap_or(line);
                let line = line.rsplit("| ").next().unwrap_or(line);
                if line.starts_with("curl ") {
                    check_curl(&name, line, &api);
                    curls += 1;
                    continue;
                }
                let Some(rest) = line
                    .strip_prefix("tierbox ")
                    .or_else(|| line.strip_prefix("cargo run -q -p tierbox-cli -- "))
                else {
                    continue;
                };
                // Options up to `--` are Tierbox's; after it, the program's.
                let own = rest.split(" -- ").next().unwrap_or("");
                let words: Vec<&str> = own.split_whitespace().collect();
                let sub: Vec<String> = words
                    .iter()
                    .take_while(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
                    .take_while(|w| !w.starts_with('-'))
                    .map(|w| (*w).to_owned())
                    .collect();
                let help = help_of.entry(sub.clone()).or_insert_with(|| {
                    let out = Command::new(env!("CARGO_BIN_EXE_tierbox"))
                        .args(&sub)
                        .arg("--help")
                        .output()
                        .unwrap();
                    assert!(
                        out.status.success(),
                        "{name}: `tierbox {}` is no subcommand: {}",
                        sub.join(" "),
                        String::from_utf8_lossy(&out.stderr)
                    );
                    String::from_utf8_lossy(&out.stdout).into_owned()
                });
                for flag in words.iter().filter(|w| w.starts_with("--") && w.len() > 2) {
                    let flag = flag.split('=').next().unwrap_or(flag);
                    assert!(
                        help.contains(flag),
                        "{name} shows `tierbox {} {flag}`, which `--help` does not list",
                        sub.join(" ")
                    );
                    options += 1;
                }
                commands += 1;
            }
        }
    }
    assert!(commands >= 12, "only {commands} commands found");
    assert!(curls >= 5, "only {curls} curl calls found");
    assert!(options >= 15, "only {options} options checked");
    assert!(policies >= 3, "only {policies} policy snippets found");
}

/// A documented `curl` call of the HTTP API: its path is an operation of the OpenAPI
/// document (`<id>` or a `$VARIABLE` standing for `{id}`) with the method it uses, and a JSON body it sends
/// to a run, term or file operation is a valid request.
fn check_curl(page: &str, line: &str, api: &serde_json::Value) {
    let Some(at) = line.find("/v1/") else {
        return;
    };
    let path: String = line[at..]
        .chars()
        .take_while(|c| !matches!(c, '\'' | '"' | ' ' | '?'))
        .collect();
    // `<id>` and a shell variable (`$RUN`) stand for a path parameter.
    let path = path
        .split('/')
        .map(|seg| match seg.starts_with('$') || seg == "<id>" {
            true => "{id}",
            false => seg,
        })
        .collect::<Vec<_>>()
        .join("/");
    let method = if line.contains("-X PUT") {
        "put"
    } else if line.contains("-X POST") || line.contains(" -d ") {
        "post"
    } else if line.contains("-X DELETE") {
        "delete"
    } else {
        "get"
    };
    assert!(
        api["paths"][&path][method].is_object(),
        "{page}: `{line}` calls {method} {path}, which the API does not have"
    );
    if let Some(body) = line
        .split(" -d '")
        .nth(1)
        .and_then(|b| b.split('\'').next())
    {
        match path.as_str() {
            "/v1/process/run" => {
                tierbox_policy::ProcessRunRequest::from_json(body.as_bytes())
                    .unwrap_or_else(|e| panic!("{page}: {e}: {body}"));
            }
            "/v1/wasm/run" => {
                tierbox_policy::wasm::WasmRunRequest::from_json(body.as_bytes())
                    .unwrap_or_else(|e| panic!("{page}: {e}: {body}"));
            }
            "/v1/terms" => {
                tierbox_server::terms::TermStart::from_http(body.as_bytes())
                    .unwrap_or_else(|e| panic!("{page}: {e}: {body}"));
            }
            "/v1/terms/{id}/input" => {
                let b: tierbox_server::terms::TermInputBody =
                    serde_json::from_str(body).unwrap_or_else(|e| panic!("{page}: {e}: {body}"));
                b.bytes().unwrap_or_else(|e| panic!("{page}: {e}: {body}"));
            }
            "/v1/terms/{id}/resize" => {
                let b: tierbox_server::terms::TermSizeBody =
                    serde_json::from_str(body).unwrap_or_else(|e| panic!("{page}: {e}: {body}"));
                b.size().unwrap_or_else(|e| panic!("{page}: {e}: {body}"));
            }
            "/v1/files" => {
                let b: tierbox_server::files::FileWriteBody =
                    serde_json::from_str(body).unwrap_or_else(|e| panic!("{page}: {e}: {body}"));
                b.bytes().unwrap_or_else(|e| panic!("{page}: {e}: {body}"));
            }
            "/v1/terms/{id}/signal" => {
                let b: tierbox_server::terms::TermSignalBody =
                    serde_json::from_str(body).unwrap_or_else(|e| panic!("{page}: {e}: {body}"));
                tierbox_runner::term::TermSignal::parse(&b.signal)
                    .unwrap_or_else(|e| panic!("{page}: {e}: {body}"));
            }
            _ => {}
        }
    }
}

/// A change set kept by hand (no run needed): `changes show` prints what the run chose
/// — a file holding BEL and an ESC sequence, a file named with ESC — escaped, though
/// stdout is not a terminal here, and `--json` exact; `changes apply` refuses the flagged
/// changes (a symlink out of the workspace, a new executable) with exit 1, listing each
/// and changing nothing, applies one named, then the rest with `--include-flagged`.
#[test]
fn changes_show_escapes_control_bytes_and_apply_needs_consent_for_flagged_changes() {
    use std::os::unix::fs::PermissionsExt;
    use tierbox_runner::review::{ChangeStore, KeepCaps, Keeping};
    let dir = tempfile::tempdir().unwrap();
    let (ws, upper, state) = (
        dir.path().join("ws"),
        dir.path().join("upper"),
        dir.path().join("state"),
    );
    std::fs::create_dir(&ws).unwrap();
    std::fs::create_dir(&upper).unwrap();
    std::fs::write(upper.join("bell.txt"), "ring\x07\x1b[31mred\n").unwrap();
    std::fs::write(upper.join("name\x1b[2Jx"), "z\n").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", upper.join("link")).unwrap();
    std::fs::write(upper.join("run.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(upper.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let id = "00112233445566778899aabbccddeeff";
    ChangeStore::new(&state)
        .keep(
            id,
            &upper,
            &ws,
            std::time::SystemTime::now(),
            &Keeping {
                owner: "uid:0",
                keep_for: std::time::Duration::from_secs(3600),
                caps: KeepCaps::default(),
            },
        )
        .changes
        .unwrap();
    let sd = state.to_str().unwrap();

    let shown = tierbox(&["changes", "show", id, "--diff", "--state-dir", sd], None);
    assert_eq!(shown.status.code(), Some(0), "{shown:?}");
    assert!(
        !shown.stdout.iter().any(|b| *b == 0x07 || *b == 0x1b),
        "a raw control byte was printed"
    );
    let text = String::from_utf8(shown.stdout).unwrap();
    println!("{text}");
    for part in [
        "A bell.txt",
        "A name\\x1b[2Jx",
        "A link -> /etc/passwd [symlink_outside]",
        "A run.sh 10 bytes 755",
        "+ring\\x07\\x1b[31mred\n",
        "+++ b/name\\x1b[2Jx\n",
    ] {
        assert!(text.contains(part), "{part:?} not in {text}");
    }
    let json = succeeded_json(&tierbox(
        &["changes", "show", id, "--diff", "--json", "--state-dir", sd],
        None,
    ));
    assert!(
        json["diff"]
            .as_str()
            .unwrap()
            .contains("+ring\x07\x1b[31mred\n")
    );
    let paths: Vec<&str> = json["changes"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"name\x1b[2Jx"), "{paths:?}");

    let refused = tierbox(&["changes", "apply", id, "--state-dir", sd], None);
    let err = String::from_utf8_lossy(&refused.stderr);
    println!("{err}");
    assert_eq!(refused.status.code(), Some(1), "{err}");
    for part in [
        "[changes.flagged] 2 change(s)",
        "link [symlink_outside]; run.sh [new_executable]",
        "nothing was applied",
        "--include-flagged",
    ] {
        assert!(err.contains(part), "{part:?} not in {err}");
    }
    assert_eq!(std::fs::read_dir(&ws).unwrap().count(), 0, "{err}");

    let named = tierbox(&["changes", "apply", id, "link", "--state-dir", sd], None);
    assert_eq!(named.status.code(), Some(0), "{named:?}");
    assert_eq!(
        std::fs::read_link(ws.join("link")).unwrap(),
        std::path::Path::new("/etc/passwd")
    );
    assert!(!ws.join("run.sh").exists());
    let all = tierbox(
        &[
            "changes",
            "apply",
            id,
            "--include-flagged",
            "--state-dir",
            sd,
        ],
        None,
    );
    assert_eq!(all.status.code(), Some(0), "{all:?}");
    let mode = std::fs::metadata(ws.join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);
    assert_eq!(
        std::fs::read(ws.join("bell.txt")).unwrap(),
        b"ring\x07\x1b[31mred\n"
    );
}

/// Review mode from the CLI: `run --overlay` leaves the workspace alone and says how to
/// go on; `changes list|show|apply|discard` act on the kept set, with exit 1 and the
/// error's code when the store refuses; `--tier b --overlay` is rejected, never run.
#[test]
fn run_overlay_and_the_changes_commands_review_a_run() {
    if !tier_c_available() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let w = ws.path().to_str().unwrap();
    let s = state.path().to_str().unwrap();
    std::fs::write(ws.path().join("a.txt"), "old\n").unwrap();
    let run = |args: &[&str]| tierbox_with_state(state.path(), args, None);
    let out = run(&[
        "run",
        "--overlay",
        "--workspace",
        w,
        "--",
        "touch",
        "new.txt",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let note = String::from_utf8_lossy(&out.stderr);
    assert!(note.contains("review mode: 1 change(s) kept"), "{note}");
    assert!(!ws.path().join("new.txt").exists());
    let state_dir = state.path().join("tierbox");
    let sd = state_dir.to_str().unwrap();
    let list = succeeded_json(&run(&["changes", "list", "--json", "--state-dir", sd]));
    let id = list[0]["run_id"].as_str().unwrap().to_owned();
    let shown = run(&["changes", "show", &id, "--state-dir", sd]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains("A new.txt"), "{text}");
    let applied = run(&["changes", "apply", &id, "--state-dir", sd]);
    assert_eq!(
        applied.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    assert!(ws.path().join("new.txt").exists());
    let again = run(&["changes", "apply", &id, "--state-dir", sd]);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("[changes.not_found]"));
    let bad = run(&["changes", "discard", "../../etc", "--state-dir", s]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("[changes.bad_run_id]"));
    // Tier B cannot: rejected (125), nothing written.
    let out = run(&[
        "run",
        "--tier",
        "b",
        "--overlay",
        "--workspace",
        w,
        "--",
        "touch",
        "b.txt",
    ]);
    assert_eq!(
        out.status.code(),
        Some(125),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("tier.unsupported"));
    assert!(!ws.path().join("b.txt").exists());
}

/// `tierbox explain`: a path and a host against a policy (exit 1 when denied, with the
/// change that would allow it), an outcome's denials, and a run's from the audit log.
#[test]
fn explain_says_which_rule_decides_and_what_a_run_was_refused() {
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path().to_str().unwrap();
    let state = tempfile::tempdir().unwrap();
    // Runs `tierbox ARGS`, checks its exit code and that its stdout holds `needle`.
    let expect = |args: &[&str], code: i32, needle: &str| {
        let out = tierbox_with_state(state.path(), args, None);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains(needle), "{args:?}: {stdout}");
        out
    };
    let explain_path = |path: &str, op: &str, code: i32, needle: &str| {
        expect(
            &["explain", "--workspace", w, "--path", path, "--op", op],
            code,
            needle,
        );
    };
    explain_path("/etc/shadow", "read", 1, "host secret under a system path");
    explain_path(w, "write", 0, "decided by the workspace");
    explain_path(
        "/opt/toolchain",
        "read",
        1,
        r#"to allow: filesystem.read_only += "/opt/toolchain""#,
    );
    // What the sandbox provides itself, as the argument check says too.
    explain_path("/proc/cpuinfo", "read", 0, "the sandbox provides it itself");
    explain_path("/tmp/tierbox-explain-new", "write", 0, "read-write");
    explain_path("/dev/null", "write", 0, "the sandbox provides it itself");
    explain_path("/dev/sda", "read", 1, "no policy can allow it");

    let policy = ws.path().join("egress.toml");
    let log = state.path().join("audit.jsonl");
    std::fs::write(
        &policy,
        format!(
            "version = 1\n[exec]\nallowed_executables = [\"sleep\"]\n[egress]\nmode = \"strict\"\nallow = [\"*.pypi.org\"]\n[audit]\nlog = \"{}\"\n",
            log.display()
        ),
    )
    .unwrap();
    let p = policy.to_str().unwrap();
    let with_policy = |what: &[&str], code: i32, needle: &str| {
        let mut args = vec!["explain", "-p", p, "--workspace", w];
        args.extend_from_slice(what);
        expect(&args, code, needle)
    };
    with_policy(
        &["--host", "files.pypi.org:443"],
        0,
        r#"egress.allow "*.pypi.org" matches"#,
    );
    with_policy(
        &["--host", "example.org:443"],
        1,
        r#"to allow: egress.allow += "example.org:443""#,
    );

    // A run stopped by its timeout: a limits denial in the outcome and in the audit log.
    if !tier_b_available() {
        return;
    }
    let out = expect(
        &[
            "run",
            "-p",
            p,
            "--workspace",
            w,
            "--json",
            "--timeout-ms",
            "200",
            "--",
            "sleep",
            "5",
        ],
        124,
        "",
    );
    let outcome: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outcome["denials"][0]["layer"], "limits", "{outcome}");
    assert_eq!(outcome["denials"][0]["target"], "200 ms", "{outcome}");
    let file = state.path().join("outcome.json");
    std::fs::write(&file, &out.stdout).unwrap();
    let file = file.to_str().unwrap();
    expect(
        &["explain", "--outcome", file],
        0,
        "wall_time 200 ms (limits, 1 time): to allow: a larger timeout_ms",
    );
    // Each layer the run's host could not record is named (which ones depends on the
    // host: audit off leaves landlock unrecorded, Tier C leaves its mounts unless asked).
    let unrecorded = outcome["enforcement"]["denial_reports"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(_, r)| r["applied"] == false)
        .map(|(layer, _)| format!("{layer}: not recorded here"));
    if let Some(line) = unrecorded {
        expect(&["explain", "--outcome", file], 0, &line);
    }
    with_policy(
        &[outcome["run_id"].as_str().unwrap()],
        0,
        "wall_time 200 ms (limits",
    );
    with_policy(&["00000000000000000000000000000000"], 1, "");
}

/// `tierbox` alone (no `tierbox-full` beside it): `run` and `check` work, every other
/// command and a Tier A run fail naming the missing program, having run nothing.
#[test]
fn tierbox_runs_run_and_check_itself_and_hands_the_rest_to_tierbox_full() {
    let dir = tempfile::tempdir().unwrap();
    let alone = dir.path().join("tierbox");
    std::fs::copy(env!("CARGO_BIN_EXE_tierbox"), &alone).unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("m.wat"), "(module (func (export \"_start\")))").unwrap();
    let run = |args: &[&str]| {
        Command::new(&alone)
            .args(args)
            .current_dir(&ws)
            .env("XDG_STATE_HOME", dir.path().join("state"))
            .env("TIERBOX_DAEMON", "off")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(&["run", "--tier", "b", "--", "echo", "alone"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "alone\n");
    let out = run(&["check", "--", "echo", "alone"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    for args in [
        &["doctor"][..],
        &["schema"],
        &["run", "--tier", "a", "--", "m.wat"],
        &["wasm", "run", "m.wat"],
    ] {
        let out = run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(126), "{args:?}: {out:?}");
        assert!(
            err.contains(&format!(
                "running {}",
                dir.path().join("tierbox-full").display()
            )) && err.contains("hint: tierbox-full must be installed beside tierbox"),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
    }
    // Beside it, the same commands are tierbox-full's.
    std::fs::copy(
        env!("CARGO_BIN_EXE_tierbox-full"),
        dir.path().join("tierbox-full"),
    )
    .unwrap();
    let out = run(&["run", "--tier", "a", "--json", "--", "m.wat"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let outcome: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outcome["backend"], "tier_a_wasmtime", "{outcome}");
    let out = run(&["schema"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// A `tierbox-full` started by a `tierbox` of another build refuses, naming both builds.
#[test]
fn tierbox_full_refuses_a_tierbox_of_another_build() {
    let out = Command::new(env!("CARGO_BIN_EXE_tierbox-full"))
        .arg("schema")
        .env("TIERBOX_FRONT_BUILD", "0.0.0-another")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(
        err.contains("from another build") && err.contains("0.0.0-another"),
        "{err}"
    );
    assert!(err.contains("cargo build -p tierbox-cli"), "{err}");
    assert!(out.stdout.is_empty(), "{out:?}");
}

/// A one-shot `tierbox run` arms no launcher thread for its only child: the child
/// attaches the whole seccomp filter itself (with a thread, it would inherit the base).
#[test]
fn a_one_shot_tier_b_run_has_its_child_attach_the_whole_filter() {
    if !tier_b_available() {
        return;
    }
    let v = succeeded_json(&tierbox(
        &["run", "--json", "--tier", "b", "--", "true"],
        None,
    ));
    let seccomp = &v["enforcement"]["seccomp"];
    assert_eq!(seccomp["applied"], true, "{seccomp}");
    let detail = seccomp["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("deny-list filter, ") && !detail.contains("inherited"),
        "{detail}"
    );
}

/// The built-in default policy (`tierbox policy init`) keeping 16 MiB per stream, so a
/// 10 MiB stream is output whole, with Tier C on `backend`.
fn big_output_policy(backend: Option<&str>) -> String {
    let out = tierbox(&["policy", "init"], None);
    tierbox_test_support::policy_for_output(
        &String::from_utf8(out.stdout).unwrap(),
        16 << 20,
        backend,
    )
}

/// Whether `label` (`tier b`, `tier c native`, `tier c bwrap`) runs here; prints why not.
fn backend_available(label: &str) -> bool {
    match label {
        "tier b" => tier_b_available(),
        "tier c native" => tier_c_native_available(),
        _ => {
            tier_c_available()
                && (tierbox_runner::host::probe_bwrap_cached().is_ok()
                    || !tierbox_test_support::skip_here("bubblewrap is not installed"))
        }
    }
}

/// `tierbox run -- cat FILE | cmp - FILE` for 10 MiB of random bytes, in Tier B, native
/// Tier C and bwrap: what the CLI prints to a pipe is the program's bytes exactly; and a
/// `--json` run of binary output decodes to them (`bytes_base64`).
///
/// Regression: the CLI printed the lossy UTF-8 of the output, so `tierbox run -- gzip -c
/// F | gunzip` failed "not in gzip format", 4096 random bytes came out as about 7,450,
/// and `tar -c` or `cat img.png > x` were corrupted, all with exit status 0.
#[test]
fn piped_binary_output_is_the_program_s_bytes_in_every_tier() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let big = tierbox_test_support::random_bytes(10 << 20, 1);
    std::fs::write(ws.join("big.bin"), &big).unwrap();
    let small = tierbox_test_support::random_bytes(64 << 10, 2);
    std::fs::write(ws.join("small.bin"), &small).unwrap();
    let w = ws.to_str().unwrap();
    for (label, tier, backend, name) in [
        ("tier b", "b", None, "tier_b_linux"),
        ("tier c native", "c", Some("native"), "tier_c_linux_native"),
        ("tier c bwrap", "c", Some("bwrap"), "tier_c_bwrap"),
    ] {
        if !backend_available(label) {
            continue;
        }
        let policy = dir.path().join(format!("{name}.toml"));
        std::fs::write(&policy, big_output_policy(backend)).unwrap();
        let p = policy.to_str().unwrap();
        let run = |extra: &[&str], file: &str| {
            let mut args = vec!["run", "--policy", p, "--workspace", w, "--tier", tier];
            args.extend_from_slice(extra);
            args.extend_from_slice(&["--", "cat", file]);
            tierbox(&args, None)
        };
        let out = run(&[], "big.bin");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{label}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if let Err(e) = tierbox_test_support::same_bytes(&out.stdout, &big) {
            panic!("{label}: tierbox run -- cat big.bin | cmp - big.bin: {e}");
        }
        let v = succeeded_json(&run(&["--json"], "small.bin"));
        assert_eq!(v["backend"], name, "{label}");
        let s = &v["stdout"];
        assert_eq!(s["lossy_utf8"], true, "{label}");
        let bytes =
            tierbox_runner::wire::decode(s["text"].as_str().unwrap(), s["bytes_base64"].as_str())
                .unwrap();
        if let Err(e) = tierbox_test_support::same_bytes(&bytes, &small) {
            panic!("{label}: --json stdout.bytes_base64: {e}");
        }
    }
}

/// Spill files end to end: a run's spill file is the supervisor's own, 0600 in a 0700
/// directory, and holds the stream; a second run finds only part of the cap
/// (`output.spill_total_bytes`) left and stops there, a third none and is refused, each
/// saying so in `spill_error`; `doctor` shows what is kept; once past
/// `output.spill_keep_secs` the next run removes them.
///
/// Regression: spill files were never removed and counted against nothing (a run could
/// fill the state directory's disk with old output), and `doctor` did not show them.
#[test]
fn spill_files_are_private_capped_shown_and_expire() {
    use std::os::unix::fs::MetadataExt;
    if !tier_b_available() {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let data = tierbox_test_support::random_bytes(3 << 20, 7);
    std::fs::write(ws.path().join("a.bin"), &data).unwrap();
    let policy = ws.path().join("spill.toml");
    let init = String::from_utf8(tierbox(&["policy", "init"], None).stdout).unwrap();
    let text = tierbox_test_support::policy_for_output(&init, 1 << 20, None).replace(
        "[output]\n",
        "[output]\nspill = true\nspill_total_bytes = 4194304\nspill_keep_secs = 3600\n",
    );
    std::fs::write(&policy, text).unwrap();
    let (p, w) = (policy.to_str().unwrap(), ws.path().to_str().unwrap());
    let run = |cmd: &[&str]| {
        let mut args = vec![
            "run",
            "--json",
            "--policy",
            p,
            "--workspace",
            w,
            "--tier",
            "b",
            "--",
        ];
        args.extend_from_slice(cmd);
        succeeded_json(&tierbox_with_state(state.path(), &args, None))
    };
    let first = run(&["cat", "a.bin"]);
    let spilled = std::path::PathBuf::from(first["stdout"]["spill_path"].as_str().unwrap());
    assert_eq!(
        first["stdout"]["spill_error"],
        serde_json::Value::Null,
        "{first}"
    );
    assert_eq!(std::fs::read(&spilled).unwrap(), data);
    let uid = rustix::process::geteuid().as_raw();
    let dir = spilled.parent().unwrap();
    for (path, mode) in [(spilled.as_path(), 0o600), (dir, 0o700)] {
        let m = std::fs::symlink_metadata(path).unwrap();
        assert_eq!(
            (m.uid(), m.mode() & 0o7777),
            (uid, mode),
            "{}",
            path.display()
        );
    }
    // 3 MiB of the 4 MiB cap are taken: the second run's spill stops at 1 MiB.
    let second = run(&["cat", "a.bin"]);
    let why = second["stdout"]["spill_error"].as_str().unwrap();
    assert!(
        why.contains("first 1048576 bytes") && why.contains("output.spill_total_bytes"),
        "{why}"
    );
    let partial = second["stdout"]["spill_path"].as_str().unwrap();
    assert_eq!(std::fs::read(partial).unwrap(), data[..1 << 20]);
    // None left: refused, no file.
    let third = run(&["cat", "a.bin"]);
    let why = third["stdout"]["spill_error"].as_str().unwrap();
    assert!(
        why.starts_with("spill refused") && why.contains("4194304"),
        "{why}"
    );
    assert_eq!(third["stdout"]["spill_path"], serde_json::Value::Null);
    let doctor = tierbox_with_state(state.path(), &["doctor", "--json", "--policy", p], None);
    let shown: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let spill = &shown["spill"];
    assert_eq!(
        (spill["files"].as_u64(), spill["bytes"].as_u64()),
        (Some(4), Some(4 << 20)),
        "{spill}"
    );
    assert!(spill["oldest_unix_secs"].is_u64(), "{spill}");
    let doctor = tierbox_with_state(state.path(), &["doctor", "--policy", p], None);
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        text.contains("spill       4 file(s), 4194304 of 4194304 bytes"),
        "{text}"
    );
    // Two hours later (past spill_keep_secs), the next run removes them all.
    for entry in std::fs::read_dir(dir).unwrap() {
        let f = std::fs::File::options()
            .write(true)
            .open(entry.unwrap().path())
            .unwrap();
        f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(7200))
            .unwrap();
    }
    let fourth = run(&["true"]);
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        left.len(),
        2,
        "only the fourth run's files are left: {left:?}"
    );
    assert!(!spilled.exists());
    assert_eq!(fourth["stdout"]["spill_error"], serde_json::Value::Null);
}

/// A `filesystem.deny_read` path inside the workspace is never readable: Tier B, which
/// grants the workspace to landlock whole, refuses the plan (`tier.unsupported`, naming
/// the path and Tier C) instead of running it with the file readable — a shell read it
/// there before — and the fix it names, Tier C, runs with the file hidden while its
/// neighbours stay readable.
#[test]
fn a_denied_path_inside_the_workspace_is_refused_by_tier_b_and_hidden_by_tier_c() {
    if !tier_b_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    let secret = ws.join("sub/secret.txt");
    std::fs::write(&secret, "top-secret-value\n").unwrap();
    std::fs::write(ws.join("sub/other.txt"), "neighbour\n").unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "version = 1\n[exec]\nallowed_executables = [\"sh\", \"cat\"]\n\
             allow_interpreters = true\nallow_eval = true\n[filesystem]\ndeny_read = [{:?}]\n",
            secret.display().to_string()
        ),
    )
    .unwrap();
    let run = |tier: &str| {
        tierbox(
            &[
                "run",
                "--policy",
                policy.to_str().unwrap(),
                "--workspace",
                ws.to_str().unwrap(),
                "--tier",
                tier,
                "--",
                "sh",
                "-c",
                "cat sub/other.txt; cat sub/secret.txt",
            ],
            None,
        )
    };
    let out = run("b");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!stdout.contains("top-secret-value"), "{stdout}");
    assert_eq!(out.status.code(), Some(125), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("rejected [tier.unsupported]")
            && stderr.contains("inside the workspace")
            && stderr.contains("use tier c"),
        "{stderr}"
    );
    if !tier_c_available() {
        return;
    }
    let out = run("c");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("neighbour") && !stdout.contains("top-secret-value"),
        "{stdout}"
    );
}

/// `explain --host H --request "METHOD /path"` decides a terminated host's request as the
/// proxy does and names the rule to add; adding exactly that rule allows it. `check`
/// lists the terminated hosts, their rules and credentials, and whether each secret can
/// be read here.
#[test]
fn explain_and_check_show_a_terminated_hosts_rules_and_the_fix_works() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("p.toml");
    let write = |rules: &str| {
        std::fs::write(
            &policy,
            format!(
                "version = 1\n[exec]\nallowed_executables = [\"curl\"]\n[egress]\nmode = \"strict\"\n\
                 allow = [\"api.example:443\"]\n[egress.hosts.\"api.example\"]\nallow = [{rules}]\n\
                 [[egress.credentials]]\nname = \"api\"\nhost = \"api.example\"\nheader = \"Authorization\"\n\
                 env = \"API_TOKEN\"\nsecret = {{ env = \"TBX_TEST_EXPLAIN_SECRET\" }}\n"
            ),
        )
        .unwrap();
    };
    let tierbox = |args: &[&str], secret: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tierbox"));
        cmd.arg(args[0])
            .arg("--policy")
            .arg(&policy)
            .args(&args[1..])
            .env_remove("TBX_TEST_EXPLAIN_SECRET")
            .env("XDG_STATE_HOME", dir.path())
            .stdin(Stdio::null());
        if let Some(s) = secret {
            cmd.env("TBX_TEST_EXPLAIN_SECRET", s);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    write("\"GET /repos/*\"");
    let explain = [
        "explain",
        "--host",
        "api.example:443",
        "--request",
        "POST /repos/o/r",
    ];
    let (code, out) = tierbox(&explain, None);
    assert_eq!(code, Some(1), "{out}");
    let fix = out
        .split("to allow: add \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no rule to add: {out}"))
        .to_owned();
    assert_eq!(fix, "POST /repos/o/r");
    write(&format!("\"GET /repos/*\", \"{fix}\""));
    let (code, out) = tierbox(&explain, None);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("request POST /repos/o/r: allowed"), "{out}");
    let (code, out) = tierbox(
        &[
            "explain",
            "--host",
            "api.example",
            "--request",
            "GET /repos/%2e%2e/x",
        ],
        None,
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("no rule can allow it"), "{out}");

    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let check = [
        "check",
        "--workspace",
        ws.to_str().unwrap(),
        "--",
        "curl",
        "https://api.example/",
    ];
    let (code, out) = tierbox(&check, None);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("terminate api.example: GET /repos/*, POST /repos/o/r"),
        "{out}"
    );
    assert!(
        out.contains("credential api: header Authorization, placeholder in $API_TOKEN"),
        "{out}"
    );
    assert!(
        out.contains(
            "NOT readable here: the supervisor's environment has no TBX_TEST_EXPLAIN_SECRET"
        ),
        "{out}"
    );
    let (_, out) = tierbox(&check, Some("s3cret"));
    assert!(
        out.contains("(readable here)") && !out.contains("s3cret"),
        "{out}"
    );
}
