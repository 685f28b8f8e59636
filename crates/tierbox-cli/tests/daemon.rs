//! `tierbox daemon` and `tierbox run` through it: the same output, status and JSON as a
//! run in process; used only when its identity is the CLI's; its own uid only; a run
//! whose client goes away is killed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "daemon/term_attach.rs"]
mod term_attach;

/// A state directory and a workspace of their own, and the daemon started on them (it is
/// stopped when this is dropped).
struct Daemon {
    _dir: tempfile::TempDir,
    xdg: PathBuf,
    ws: PathBuf,
}

impl Daemon {
    fn start() -> Self {
        Self::start_with(&[])
    }

    /// The daemon started with `extra` arguments (e.g. `--policy FILE`).
    fn start_with(extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let xdg = dir.path().join("xdg");
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        let d = Self { _dir: dir, xdg, ws };
        let mut args = vec!["daemon", "start", "--workspace", d.ws_str()];
        args.extend_from_slice(extra);
        let out = d.tierbox(&args);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        d
    }

    fn ws_str(&self) -> &str {
        self.ws.to_str().unwrap()
    }

    fn socket(&self) -> PathBuf {
        self.xdg.join("tierbox/daemon.sock")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tierbox"));
        cmd.args(args)
            .env("XDG_STATE_HOME", &self.xdg)
            .env_remove("TIERBOX_SOCKET")
            .env_remove("TIERBOX_DAEMON")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    fn tierbox(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// `tierbox run --json --tier b -- true` in workspace `ws`.
    fn run_json_in(&self, ws: &Path) -> Output {
        let ws = ws.to_str().unwrap();
        self.tierbox(&[
            "run",
            "--json",
            "--tier",
            "b",
            "--workspace",
            ws,
            "--",
            "true",
        ])
    }

    /// `tierbox run` in this workspace, through the daemon or (`in_process`) not.
    fn run(&self, extra: &[&str], cmd: &[&str], in_process: bool) -> Output {
        self.subcommand("run", extra, cmd, in_process)
    }

    /// `tierbox SUB --workspace W EXTRA -- CMD`, through the daemon or (`in_process`) not.
    fn subcommand(&self, sub: &str, extra: &[&str], cmd: &[&str], in_process: bool) -> Output {
        let mut args = vec![sub, "--workspace", self.ws_str()];
        args.extend_from_slice(extra);
        args.push("--");
        args.extend_from_slice(cmd);
        let mut c = self.command(&args);
        if in_process {
            c.env("TIERBOX_DAEMON", "off");
        }
        c.output().unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.tierbox(&["daemon", "stop"]);
    }
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {:?}\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// `text` with every run of digits replaced by `#` (a duration in a message).
fn without_numbers(text: &[u8]) -> String {
    let mut out = String::new();
    for c in String::from_utf8_lossy(text).chars() {
        if c.is_ascii_digit() {
            if !out.ends_with('#') {
                out.push('#');
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn tier_b_available() -> bool {
    let out = Command::new(env!("CARGO_BIN_EXE_tierbox"))
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ok = v["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["tier"] == "b" && t["available"] == true);
    ok || !tierbox_test_support::skip_here("tier b unavailable on this host")
}

#[test]
fn a_run_through_the_daemon_prints_and_exits_as_a_run_in_process() {
    if !tier_b_available() {
        return;
    }
    let d = Daemon::start();
    let status = d.tierbox(&["daemon", "status", "--json"]);
    assert_eq!(status.status.code(), Some(0), "{status:?}");
    assert_eq!(json(&status)["running"], true);
    let cases: [(&[&str], &[&str]); 5] = [
        (&["--tier", "b"], &["printf", "hello %s\\n", "daemon"]),
        (&["--tier", "b"], &["false"]),
        (&["--tier", "b", "--timeout-ms", "200"], &["sleep", "5"]),
        // Rejected: nothing runs, on either side.
        (&["--tier", "b"], &["bash", "-c", "echo x"]),
        (&["--tier", "b"], &["ls", "/nonexistent-tierbox-path"]),
    ];
    for (extra, cmd) in cases {
        let via_daemon = d.run(extra, cmd, false);
        let in_process = d.run(extra, cmd, true);
        assert_eq!(
            (
                via_daemon.status.code(),
                &via_daemon.stdout,
                without_numbers(&via_daemon.stderr)
            ),
            (
                in_process.status.code(),
                &in_process.stdout,
                without_numbers(&in_process.stderr)
            ),
            "{cmd:?}: daemon {via_daemon:?} vs in process {in_process:?}"
        );
        let mut jextra = extra.to_vec();
        jextra.push("--json");
        let (a, b) = (
            json(&d.run(&jextra, cmd, false)),
            json(&d.run(&jextra, cmd, true)),
        );
        if a.get("error").is_some() {
            assert_eq!(a, b, "{cmd:?}");
            continue;
        }
        assert_eq!(a["via"], "daemon", "{cmd:?}: {a}");
        assert_eq!(b["via"], "in_process", "{cmd:?}: {b}");
        for key in [
            "exit_code",
            "signal",
            "timed_out",
            "limit_hit",
            "tier",
            "backend",
            "plan_sha256",
        ] {
            assert_eq!(a[key], b[key], "{cmd:?}: {key}");
        }
        // The same layers; only the wording of how the seccomp filter was attached may
        // differ (a long-lived supervisor's launcher thread carries the chmod hand-off in
        // its inherited filter, a one-shot process stacks it in the child).
        // Each run has an audit session of its own (on a host with audit enabled).
        let (mut ea, mut eb) = (
            tierbox_test_support::enforcement_without_sessions(&a["enforcement"]),
            tierbox_test_support::enforcement_without_sessions(&b["enforcement"]),
        );
        for e in [&mut ea, &mut eb] {
            assert_eq!(e["seccomp"]["applied"], true, "{cmd:?}: {e}");
            e["seccomp"]["detail"] = serde_json::Value::Null;
        }
        assert_eq!(ea, eb, "{cmd:?}: enforcement");
        assert_eq!(a["stdout"]["text"], b["stdout"]["text"], "{cmd:?}");
        assert!(a["attestation"].is_object(), "{a}");
    }
    let stop = d.tierbox(&["daemon", "stop"]);
    assert_eq!(stop.status.code(), Some(0), "{stop:?}");
    assert!(!d.socket().exists());
    let status = d.tierbox(&["daemon", "status"]);
    assert_eq!(status.status.code(), Some(1), "{status:?}");
    // No daemon: in process, and said so.
    let v = json(&d.run(&["--tier", "b", "--json"], &["true"], false));
    assert_eq!(v["via"], "in_process");
    assert!(
        v["daemon"].as_str().unwrap().contains("no daemon"),
        "{}",
        v["daemon"]
    );
}

#[test]
fn a_daemon_with_another_workspace_or_policy_is_not_used() {
    if !tier_b_available() {
        return;
    }
    let d = Daemon::start();
    let other = tempfile::tempdir().unwrap();
    let out = d.run_json_in(other.path());
    let v = json(&out);
    assert_eq!(v["via"], "in_process", "{v}");
    assert!(v["daemon"].as_str().unwrap().contains("workspace"), "{v}");
    let policy = other.path().join("policy.toml");
    std::fs::write(
        &policy,
        "version = 1\n[exec]\nallowed_executables = [\"true\"]\n",
    )
    .unwrap();
    let v = json(&d.run(
        &[
            "--tier",
            "b",
            "--json",
            "--policy",
            policy.to_str().unwrap(),
        ],
        &["true"],
        false,
    ));
    assert_eq!(v["via"], "in_process", "{v}");
    assert!(v["daemon"].as_str().unwrap().contains("policy"), "{v}");
    // The same workspace named through a symlink is the same workspace.
    let link = other.path().join("link");
    std::os::unix::fs::symlink(&d.ws, &link).unwrap();
    let out = d.run_json_in(&link);
    assert_eq!(json(&out)["via"], "daemon");
}

/// The socket is 0600; loosened to 0666 here, a process of another uid still gets no
/// answer (`SO_PEERCRED`), while the owner's does.
#[test]
fn the_daemon_answers_only_its_own_uid() {
    if rustix::process::geteuid().as_raw() != 0 {
        tierbox_test_support::skip_here("needs root to run a client as another uid");
        return;
    }
    let d = Daemon::start();
    let socket = d.socket();
    let token = std::fs::read_to_string(d.xdg.join("tierbox/http-token")).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    }
    let status_as = |uid: Option<u32>| {
        let mut c = d.command(&["daemon", "status", "--json"]);
        c.env("TIERBOX_SOCKET", &socket)
            .env("TIERBOX_HTTP_TOKEN", token.trim());
        if let Some(uid) = uid {
            c.uid(uid).gid(uid);
        }
        c.output().unwrap()
    };
    let own = status_as(None);
    assert_eq!(own.status.code(), Some(0), "{own:?}");
    let foreign = status_as(Some(65534));
    assert_eq!(foreign.status.code(), Some(1), "{foreign:?}");
    let v = json(&foreign);
    assert_eq!(v["running"], false, "{v}");
}

fn processes_named(argv0: &str, arg: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            args.first()
                .is_some_and(|a0| Path::new(std::str::from_utf8(a0).unwrap_or("")).ends_with(argv0))
                && args.get(1) == Some(&arg.as_bytes())
        })
        .collect()
}

/// A client that goes away (killed) takes its run with it, as a run in process would.
#[test]
fn a_run_whose_client_is_killed_is_killed_in_the_daemon() {
    if !tier_b_available() {
        return;
    }
    let d = Daemon::start();
    // A duration no other test uses, to find this run's process.
    let marker = "3127";
    let mut client = d
        .command(&[
            "run",
            "--tier",
            "b",
            "--workspace",
            d.ws_str(),
            "--",
            "sleep",
            marker,
        ])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while processes_named("sleep", marker).is_empty() {
        assert!(Instant::now() < deadline, "the run never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    client.kill().unwrap();
    client.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !processes_named("sleep", marker).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the run outlived its client by 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `tierbox wasm run` goes through the daemon as `run` does: the same status and JSON.
#[test]
fn a_wasm_run_through_the_daemon_is_the_run_in_process() {
    let d = Daemon::start();
    std::fs::write(
        d.ws.join("exit7.wat"),
        r#"(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func (export "_start") (call $exit (i32.const 7))))"#,
    )
    .unwrap();
    let wasm_run = |in_process: bool| {
        let mut c = d.command(&[
            "wasm",
            "run",
            "--json",
            "--workspace",
            d.ws_str(),
            "exit7.wat",
        ]);
        if in_process {
            c.env("TIERBOX_DAEMON", "off");
        }
        c.output().unwrap()
    };
    let (a, b) = (wasm_run(false), wasm_run(true));
    assert_eq!(a.status.code(), Some(7), "{a:?}");
    assert_eq!(b.status.code(), Some(7), "{b:?}");
    let (a, b) = (json(&a), json(&b));
    assert_eq!(a["via"], "daemon", "{a}");
    assert_eq!(b["via"], "in_process", "{b}");
    for key in ["exit_code", "backend", "tier", "enforcement", "plan_sha256"] {
        assert_eq!(a[key], b[key], "{key}");
    }
}

/// The program's output reaches the CLI's stdout and stderr while it runs, each on its own
/// stream, both in process and through the daemon: the program prints a line on each
/// stream and then waits for a file the test creates only once it has read both lines.
/// A CLI that prints at the end never shows them, and the run times out.
#[test]
fn output_is_printed_while_the_program_runs_in_process_and_through_the_daemon() {
    if !tier_b_available() {
        return;
    }
    let policy_dir = tempfile::tempdir().unwrap();
    let policy = policy_dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "version = 1\n[exec]\nallowed_executables = [\"sh\", \"sleep\"]\n\
         allow_interpreters = true\nallow_eval = true\n",
    )
    .unwrap();
    let policy = policy.to_str().unwrap();
    let d = Daemon::start_with(&["--policy", policy]);
    for in_process in [true, false] {
        let via = if in_process { "in process" } else { "daemon" };
        let go = d.ws.join("go");
        let _ = std::fs::remove_file(&go);
        let script = "echo one; echo err-one >&2; \
                      while [ ! -e go ]; do sleep 0.05; done; echo two; echo err-two >&2";
        let mut cmd = d.command(&[
            "run",
            "--tier",
            "b",
            "--policy",
            policy,
            "--workspace",
            d.ws_str(),
            "--timeout-ms",
            "30000",
            "--",
            "sh",
            "-c",
            script,
        ]);
        if in_process {
            cmd.env("TIERBOX_DAEMON", "off");
        }
        let mut child = cmd.spawn().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<(&str, String)>();
        let readers = [
            (
                "stdout",
                Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            ),
            ("stderr", Box::new(child.stderr.take().unwrap())),
        ]
        .map(|(name, pipe)| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                use std::io::BufRead;
                for line in std::io::BufReader::new(pipe).lines() {
                    let _ = tx.send((name, line.unwrap()));
                }
            })
        });
        drop(tx);
        let mut seen: Vec<(&str, String)> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !(seen.contains(&("stdout", "one".into()))
            && seen.contains(&("stderr", "err-one".into())))
        {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => seen.push(line),
                Err(e) => {
                    let _ = child.kill();
                    panic!(
                        "{via}: the first lines did not arrive while the program ran ({e}); got {seen:?}"
                    );
                }
            }
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "{via}: the run ended before it was told to"
        );
        std::fs::write(&go, "").unwrap();
        let status = child.wait().unwrap();
        for r in readers {
            r.join().unwrap();
        }
        seen.extend(rx.try_iter());
        assert_eq!(status.code(), Some(0), "{via}: {seen:?}");
        let lines = |stream: &str| -> Vec<String> {
            seen.iter()
                .filter(|(s, _)| *s == stream)
                .map(|(_, l)| l.clone())
                .collect()
        };
        assert_eq!(lines("stdout"), ["one", "two"], "{via}");
        assert_eq!(lines("stderr"), ["err-one", "err-two"], "{via}");
    }
}

/// `tierbox check` asks the daemon when one with the same identity runs: the same text,
/// the same JSON (but for `via`) and the same exit status as in process, for a request
/// the policy accepts and for one it refuses.
#[test]
fn a_check_through_the_daemon_is_the_check_in_process() {
    let d = Daemon::start();
    let check = |extra: &[&str], cmd: &[&str], in_process: bool| {
        d.subcommand("check", extra, cmd, in_process)
    };
    let (a, b) = (
        check(&[], &["git", "status"], false),
        check(&[], &["git", "status"], true),
    );
    assert_eq!(a.status.code(), b.status.code(), "{a:?} {b:?}");
    assert_eq!(a.stdout, b.stdout, "{a:?}");
    assert!(
        String::from_utf8_lossy(&a.stdout).contains("runs in"),
        "{a:?}"
    );
    let (a, b) = (
        check(&["--json"], &["git", "status"], false),
        check(&["--json"], &["git", "status"], true),
    );
    let (mut a, mut b) = (json(&a), json(&b));
    assert_eq!(a["via"], "daemon", "{a}");
    assert_eq!(b["via"], "in_process", "{b}");
    a.as_object_mut().unwrap().remove("via");
    b.as_object_mut().unwrap().remove("via");
    assert_eq!(a, b);
    let (a, b) = (
        check(&[], &["bash", "-c", "id"], false),
        check(&[], &["bash", "-c", "id"], true),
    );
    assert_eq!(a.status.code(), Some(125), "{a:?}");
    assert_eq!(b.status.code(), Some(125), "{b:?}");
    assert_eq!(a.stderr, b.stderr);
}

/// Regression: `--stdin` through the daemon sent the whole input inside the JSON request
/// (UTF-8 only, at most 64 KiB). 10 MiB of random bytes now stream over the daemon's
/// socket in the streamed-stdin form, and reach the program exactly: the digest
/// `sha256sum` prints in the sandbox is the host's, as is the outcome's. A slow producer
/// (a pause halfway) is waited for, and a cut at `--stdin-limit` is said there too.
#[test]
fn binary_stdin_streams_through_the_daemon_byte_exact() {
    use sha2::{Digest, Sha256};
    if !tier_b_available() {
        return;
    }
    let d = Daemon::start();
    let data = tierbox_test_support::binary_payload(10 << 20);
    let want = tierbox_attest::jcs::hex(&Sha256::digest(&data));
    let fed = |extra: &[&str]| {
        let mut args = vec!["run", "--json", "--tier", "b", "--workspace", d.ws_str()];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--stdin", "--", "sha256sum"]);
        let mut child = d.command(&args).stdin(Stdio::piped()).spawn().unwrap();
        let mut pipe = child.stdin.take().unwrap();
        let data = data.clone();
        let producer = std::thread::spawn(move || {
            let _ = tierbox_test_support::feed_slowly(&mut pipe, &data);
        });
        let out = child.wait_with_output().unwrap();
        producer.join().unwrap();
        json(&out)
    };
    let v = fed(&[]);
    assert_eq!(v["via"], "daemon", "{v}");
    tierbox_test_support::assert_streamed_stdin_reached(&v, 10 << 20, &want);
    let v = fed(&["--stdin-limit", "65536"]);
    assert_eq!(v["via"], "daemon", "{v}");
    assert_eq!(v["limit_hit"], "stdin", "{v}");
    assert_eq!(v["stdin"]["bytes"], 65536);
    let cut = tierbox_attest::jcs::hex(&Sha256::digest(&data[..65536]));
    let printed = v["stdout"]["text"].as_str().unwrap_or_default();
    assert!(printed.starts_with(&cut), "{v}");
}

/// Whether Tier C's `backend` (`native`, `bwrap`) passed its canary here; prints why not.
fn tier_c_backend_available(backend: &str) -> bool {
    let out = Command::new(env!("CARGO_BIN_EXE_tierbox"))
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let found = v["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["tier"] == "c")
        .flat_map(|t| t["backends"].as_array().unwrap())
        .find(|b| b["backend"] == backend)
        .cloned()
        .unwrap_or_default();
    found["available"] == true
        || !tierbox_test_support::skip_here(&format!("tier c {backend} unavailable: {found}"))
}

/// `tierbox run -- cat FILE | cmp - FILE` for 10 MiB of random bytes through the daemon,
/// in Tier B, native Tier C and bwrap: the live output handed over by the daemon is the
/// program's bytes exactly, as in process.
///
/// Regression: the daemon's streamed output events were the lossy UTF-8 of each batch,
/// and a batch the channel had no room for was dropped, so binary or fast output reached
/// the terminal or pipe changed, or with pieces missing, and the run exited 0.
#[test]
fn binary_output_through_the_daemon_is_the_program_s_bytes_in_every_tier() {
    let big = tierbox_test_support::random_bytes(10 << 20, 3);
    for (tier, backend) in [("b", None), ("c", Some("native")), ("c", Some("bwrap"))] {
        let available = match backend {
            None => tier_b_available(),
            Some(b) => tier_c_backend_available(b),
        };
        if !available {
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("policy.toml");
        let init = Command::new(env!("CARGO_BIN_EXE_tierbox"))
            .args(["policy", "init"])
            .output()
            .unwrap();
        let text = String::from_utf8(init.stdout).unwrap();
        std::fs::write(
            &policy,
            tierbox_test_support::policy_for_output(&text, 16 << 20, backend),
        )
        .unwrap();
        let p = policy.to_str().unwrap();
        let d = Daemon::start_with(&["--policy", p]);
        std::fs::write(d.ws.join("big.bin"), &big).unwrap();
        let extra = ["--policy", p, "--tier", tier];
        let v = json(&d.run(&[&extra[..], &["--json"]].concat(), &["true"], false));
        assert_eq!(v["via"], "daemon", "{tier} {backend:?}: {v}");
        for in_process in [false, true] {
            let out = d.run(&extra, &["cat", "big.bin"], in_process);
            let how = format!("tier {tier} {backend:?}, in process {in_process}");
            assert_eq!(
                out.status.code(),
                Some(0),
                "{how}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            if let Err(e) = tierbox_test_support::same_bytes(&out.stdout, &big) {
                panic!("{how}: tierbox run -- cat big.bin | cmp - big.bin: {e}");
            }
        }
    }
}
