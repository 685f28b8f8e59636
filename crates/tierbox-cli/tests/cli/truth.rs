//! What the CLI says about itself is true: a denial line only for refusals that may
//! explain the run's end, each with a key that, applied, lets it through; an unknown
//! option is a usage error naming it; the tier line; every reserved exit status comes
//! with its `tierbox:` line (which a program's own status of the same number does not);
//! `--json` prints the error object on errors.

use std::path::{Path, PathBuf};
use std::process::Output;

use super::{on_a_terminal, tier_b_available, tier_c_native_available, tierbox};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The JSON `out` printed on stdout.
#[track_caller]
fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): stdout {:?} stderr {:?}",
            String::from_utf8_lossy(&out.stdout),
            stderr(out)
        )
    })
}

/// `version = 1` and `body`, as the policy file `name` in `dir`.
fn policy(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("version = 1\n{body}\n")).unwrap();
    path
}

/// The `tierbox:` lines of `out`'s stderr.
fn tierbox_lines(out: &Output) -> Vec<String> {
    stderr(out)
        .lines()
        .filter(|l| l.starts_with("tierbox:"))
        .map(str::to_owned)
        .collect()
}

/// The outcome's refused `socket` calls whose target starts with `family`.
fn socket_denials<'a>(v: &'a serde_json::Value, family: &str) -> Vec<&'a serde_json::Value> {
    v["denials"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|d| {
            d["layer"] == "seccomp"
                && d["operation"] == "socket"
                && d["target"].as_str().is_some_and(|t| t.starts_with(family))
        })
        .collect()
}

/// The `tierbox run` options that apply a Tier B socket denial's `hint` — a policy
/// allowing `programs` written into `dir`, and the tier — or a panic naming a hint no
/// test knows how to apply.
fn apply_hint(hint: &str, dir: &Path, programs: &str) -> Vec<String> {
    let exec = format!(
        "[exec]\nallowed_executables = [{programs}]\nallow_interpreters = true\nallow_eval = true\n"
    );
    let with = |name: &str, egress: &str| {
        let p = policy(dir, name, &format!("{exec}[egress]\n{egress}"));
        ["--tier", "b", "--policy", p.to_str().unwrap()]
            .map(str::to_owned)
            .to_vec()
    };
    if hint.starts_with("tier = \"c\" in the request (--tier c)") {
        let mut args = with("as-is.toml", "mode = \"block_all\"");
        args[1] = "c".to_owned();
        args
    } else if hint.starts_with("egress.mode = \"preflight\"") {
        with("preflight.toml", "mode = \"preflight\"")
    } else if hint.starts_with("egress.mode = \"strict\" with egress.allow += \"HOST:PORT\"") {
        with(
            "strict.toml",
            "mode = \"strict\"\nallow = [\"example.com:443\"]",
        )
    } else if hint.starts_with("egress.mode = \"allow_all\"") {
        with("allow-all.toml", "mode = \"allow_all\"")
    } else {
        panic!("a hint this test cannot apply: {hint}");
    }
}

/// Regression: every Tier B program that looked a user or a host up (`id`, `ls -l`,
/// `curl`) printed `1 denial: socket AF_UNIX … to allow: egress.mode = "allow_all"`,
/// although libc's name service goes on without the socket. `id` prints no denial line;
/// the outcome still lists the refusal, with a hint that — applied — lets it through,
/// and that is not `allow_all` when Tier C runs here.
#[test]
fn a_tier_b_lookup_prints_no_denial_line_and_its_hint_is_true() {
    if !tier_b_available() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path().to_str().unwrap();
    let out = tierbox(&["run", "--tier", "b", "-w", w, "--", "id"], None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("denial"), "{}", stderr(&out));

    let v = json(&tierbox(
        &["run", "--tier", "b", "--json", "-w", w, "--", "id"],
        None,
    ));
    let Some(&unix) = socket_denials(&v, "AF_UNIX").first() else {
        tierbox_test_support::skip_here(&format!(
            "no unix socket refusal of `id` recorded here (denials {}; needs seccomp user notification and a libc that tries nscd)",
            v["denials"]
        ));
        return;
    };
    let hint = unix["hint"].as_str().unwrap();
    if !hint.starts_with("egress.mode = \"allow_all\"") {
        assert!(!hint.contains("allow_all"), "{hint}");
    }
    let policies = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = ["run", "--json", "-w", w].map(str::to_owned).to_vec();
    args.extend(apply_hint(hint, policies.path(), "\"id\""));
    args.extend(["--".to_owned(), "id".to_owned()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let applied = json(&tierbox(&args, None));
    assert_eq!(applied["exit_code"], 0, "{applied}");
    assert!(
        socket_denials(&applied, "AF_UNIX").is_empty(),
        "{hint}: {}",
        applied["denials"]
    );
}

/// A refused socket is named when the program fails (here: each is the only thing it
/// tries), and each socket hint — a unix socket's, UDP's, TCP's — applied as it says,
/// lets the program through.
///
/// Regression: a TCP socket with its protocol named (`curl http://127.0.0.1/`) and a UDP
/// one were told `egress.mode = "allow_all" or "preflight"`, a unix socket `allow_all`.
#[test]
fn a_refused_socket_is_named_when_the_program_fails_and_every_hint_is_true() {
    if !tier_b_available() {
        return;
    }
    if !Path::new("/usr/bin/python3").is_file() {
        tierbox_test_support::skip_here("no /usr/bin/python3 to open sockets with");
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path().to_str().unwrap();
    let policies = tempfile::tempdir().unwrap();
    let blocked = policy(
        policies.path(),
        "blocked.toml",
        "[exec]\nallowed_executables = [\"python3\"]\nallow_interpreters = true\nallow_eval = true\n[egress]\nmode = \"block_all\"",
    );
    let blocked = blocked.to_str().unwrap();
    for (family, kind, protocol, named) in [
        ("AF_UNIX", "SOCK_STREAM", "0", ""),
        ("AF_INET", "SOCK_DGRAM", "0", ""),
        ("AF_INET", "SOCK_STREAM", "0", ""),
        (
            "AF_INET",
            "SOCK_STREAM",
            "socket.IPPROTO_TCP",
            ", protocol 6 (TCP)",
        ),
    ] {
        let code =
            format!("import socket; socket.socket(socket.{family}, socket.{kind}, {protocol})");
        let run = |extra: &[&str]| {
            let mut args = vec!["run", "-w", w];
            args.extend_from_slice(extra);
            args.extend(["--", "python3", "-c", &code]);
            tierbox(&args, None)
        };
        let out = run(&["--tier", "b", "--policy", blocked]);
        assert_ne!(
            out.status.code(),
            Some(0),
            "{family} {kind}: {}",
            stderr(&out)
        );
        let line = format!("tierbox: 1 denial: socket {family}, {kind}{named} (seccomp)");
        let v = json(&run(&["--tier", "b", "--policy", blocked, "--json"]));
        let Some(&denial) = socket_denials(&v, family).first() else {
            tierbox_test_support::skip_here(&format!(
                "no socket refusal recorded here (denials {}; needs seccomp user notification)",
                v["denials"]
            ));
            return;
        };
        assert!(stderr(&out).contains(&line), "{line}: {}", stderr(&out));
        let hint = denial["hint"].as_str().unwrap();
        // The narrowest key: never allow_all while one lets it through — for a unix
        // socket, Tier C where it runs here.
        if family == "AF_UNIX" && hint.contains("allow_all") {
            assert!(hint.contains("does not run here"), "{hint}");
        } else {
            assert!(
                !hint.contains("allow_all"),
                "{family} {kind} {protocol}: {hint}"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let applied = apply_hint(hint, dir.path(), "\"python3\"");
        let mut args: Vec<&str> = vec!["--json"];
        args.extend(applied.iter().map(String::as_str));
        let v = json(&run(&args));
        assert_eq!(v["exit_code"], 0, "{hint}: {v}");
        assert!(socket_denials(&v, family).is_empty(), "{hint}: {v}");
    }
}

/// Regression: `tierbox run --jsno -- ls` ran `--jsno` as the command (and was refused
/// as an executable). A word before the command that starts with `-` and is not one of
/// tierbox's options is a usage error naming it: exit 125, the `tierbox: usage:` line,
/// the error object with `--json`; after `--` it is the command's.
#[test]
fn an_unknown_option_before_the_command_is_a_usage_error_naming_it() {
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path().to_str().unwrap();
    for cmd in ["run", "check"] {
        let out = tierbox(&[cmd, "-w", w, "--jsno", "--", "ls"], None);
        assert_eq!(out.status.code(), Some(125), "{cmd}: {out:?}");
        let lines = tierbox_lines(&out);
        assert_eq!(lines.len(), 1, "{cmd}: {}", stderr(&out));
        assert!(
            lines[0].starts_with("tierbox: usage: unknown option '--jsno'"),
            "{cmd}: {}",
            stderr(&out)
        );
        assert!(
            stderr(&out).contains("'--json'"),
            "clap's tip: {}",
            stderr(&out)
        );
        assert!(out.stdout.is_empty(), "{out:?}");

        let out = tierbox(&[cmd, "--json", "-w", w, "--jsno", "--", "ls"], None);
        assert_eq!(out.status.code(), Some(125), "{cmd}: {out:?}");
        let v = json(&out);
        assert_eq!(v["error"]["code"], "cli.usage", "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains("'--jsno'"),
            "{v}"
        );
    }
    // After `--`, the command's: refused as an executable, not as an option.
    let out = tierbox(&["run", "-w", w, "--", "--jsno"], None);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(
        stderr(&out).starts_with("tierbox: rejected [exec.not_allowed]"),
        "{}",
        stderr(&out)
    );
    // Help is not an error.
    let out = tierbox(&["run", "--help"], None);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// One line on stderr says which tier and backend ran and which layers were missing:
/// with `--verbose`, or when stderr is a terminal; never otherwise (the cold path prints
/// nothing it was not asked for). A policy's Tier C backend that `auto` passes over is
/// said always, and recorded in the outcome.
///
/// Regression: the CLI never said which tier ran, and a policy naming docker on a host
/// without an engine ran in Tier B without a word.
#[test]
fn the_tier_line_says_which_tier_and_backend_ran_and_what_was_passed_over() {
    if !tier_b_available() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path().to_str().unwrap();
    let v = json(&tierbox(&["run", "--json", "-w", w, "--", "true"], None));
    let mut expected = format!(
        "tierbox: tier {}, backend {}",
        v["tier"].as_str().unwrap(),
        v["backend"].as_str().unwrap()
    );
    let missing: Vec<&str> = v["enforcement"]["missing_layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    if !missing.is_empty() {
        expected.push_str(&format!("; not enforced here: {}", missing.join(", ")));
    }
    let verbose = tierbox(&["run", "--verbose", "-w", w, "--", "true"], None);
    assert_eq!(verbose.status.code(), Some(0), "{verbose:?}");
    let lines = tierbox_lines(&verbose);
    assert_eq!(lines.len(), 1, "{}", stderr(&verbose));
    assert!(lines[0].starts_with(&expected), "{expected}: {}", lines[0]);
    let quiet = tierbox(&["run", "-w", w, "--", "true"], None);
    assert!(quiet.stderr.is_empty(), "{}", stderr(&quiet));
    let (status, shown) = on_a_terminal(&["run", "-w", w, "--", "true"]);
    assert_eq!(status.code(), Some(0), "{shown}");
    assert!(shown.contains(&expected), "{expected}: {shown:?}");

    // A policy naming docker: where no engine answers, `auto` runs Tier B, and says so.
    let policies = tempfile::tempdir().unwrap();
    let docker = policy(
        policies.path(),
        "docker.toml",
        "[tier]\nbackend = \"docker\"\noptional_layers = [\"cgroup\", \"protected_paths\", \"disk\", \"landlock\"]\n[tier.container]\nimage = \"localhost/tools:1\"\n[exec]\nallowed_executables = [\"true\"]",
    );
    let docker = docker.to_str().unwrap();
    let check = json(&tierbox(
        &["check", "--json", "-p", docker, "-w", w, "--", "true"],
        None,
    ));
    if check["preflight"]["tier"] != "b" {
        tierbox_test_support::skip_optional_here(&format!(
            "a docker engine answers here: {}",
            check["preflight"]
        ));
        return;
    }
    let why = check["preflight"]["passed_over"].as_str().unwrap();
    assert!(
        why.starts_with("tier c: ") && why.contains("docker"),
        "{why}"
    );
    let out = tierbox(&["run", "-p", docker, "-w", w, "--", "true"], None);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        tierbox_lines(&out),
        [format!(
            "tierbox: tier b, backend tier_b_linux; passed over: {why}"
        )],
        "{}",
        stderr(&out)
    );
    let v = json(&tierbox(
        &["run", "--json", "-p", docker, "-w", w, "--", "true"],
        None,
    ));
    assert_eq!(v["enforcement"]["passed_over"], why, "{v}");
}

/// Each exit status tierbox reserves comes with one `tierbox:` line on stderr naming
/// what happened — with `--json` too, where its own failures also print the error
/// object — while a program that exits with the same status by itself gets none.
///
/// Regression: tierbox's usage errors exited 2, as a program may; `--json` printed
/// nothing on stdout for an unreadable policy.
#[test]
fn each_reserved_exit_status_comes_with_its_tierbox_line() {
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path().to_str().unwrap();
    let policies = tempfile::tempdir().unwrap();
    // (status, the line's start, arguments after `run`, the error code `--json` prints).
    let mut cases: Vec<(i32, &str, Vec<String>, Option<&str>)> = Vec::new();
    let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    cases.push((
        125,
        "tierbox: rejected [exec.interpreter_denied]: ",
        args(&["-w", w, "--", "bash", "-c", "id"]),
        Some("exec.interpreter_denied"),
    ));
    cases.push((
        125,
        "tierbox: usage: unknown option '--nope'",
        args(&["-w", w, "--nope", "--", "true"]),
        Some("cli.usage"),
    ));
    cases.push((
        126,
        "tierbox: error: reading policy /nonexistent/p.toml",
        args(&["-w", w, "-p", "/nonexistent/p.toml", "--", "true"]),
        Some("policy.invalid"),
    ));
    let fuel = policy(policies.path(), "fuel.toml", "[wasm]\nfuel = 1000000");
    std::fs::write(
        ws.path().join("loop.wat"),
        r#"(module (func (export "_start") (loop (br 0))))"#,
    )
    .unwrap();
    cases.push((
        122,
        "tierbox: limit hit: fuel (wasm.fuel = 1000000)",
        args(&[
            "-w",
            w,
            "--tier",
            "a",
            "-p",
            fuel.to_str().unwrap(),
            "--",
            "loop.wat",
        ]),
        None,
    ));
    if tier_b_available() {
        cases.push((
            124,
            "tierbox: timed out after ",
            args(&["-w", w, "--timeout-ms", "300", "--", "sleep", "30"]),
            None,
        ));
    }
    for (status, line, args, code) in &cases {
        for json_mode in [false, true] {
            let mut argv = vec!["run"];
            if json_mode {
                argv.push("--json");
            }
            argv.extend(args.iter().map(String::as_str));
            let out = tierbox(&argv, None);
            assert_eq!(out.status.code(), Some(*status), "{argv:?}: {out:?}");
            let lines = tierbox_lines(&out);
            assert!(
                lines.iter().any(|l| l.starts_with(line)),
                "{argv:?}: expected a line starting {line:?} in {}",
                stderr(&out)
            );
            if json_mode {
                let v = json(&out);
                match code {
                    Some(code) => assert_eq!(v["error"]["code"], *code, "{argv:?}: {v}"),
                    None => assert!(v.get("exit_code").is_some(), "{argv:?}: {v}"),
                }
            } else if code.is_some() {
                assert_eq!(lines.len(), 1, "{argv:?}: {}", stderr(&out));
            }
        }
    }
    if tier_c_native_available() {
        sandbox_failure_is_123_with_its_line(w, policies.path());
    }
    if !tier_b_available() {
        return;
    }
    // A program's own 124 (`timeout`'s, here) is the program's: no `tierbox:` line.
    let own = policy(
        policies.path(),
        "own.toml",
        "[exec]\nallowed_executables = [\"timeout\", \"sleep\"]",
    );
    let out = tierbox(
        &[
            "run",
            "-w",
            w,
            "-p",
            own.to_str().unwrap(),
            "--",
            "timeout",
            "0.01",
            "sleep",
            "5",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    assert!(tierbox_lines(&out).is_empty(), "{}", stderr(&out));
}

/// A Tier C sandbox whose pid 1 is killed by an outsider while the program runs: exit
/// 123, and the line that says the sandbox failed. (`--json` prints the same ending line
/// by the same code as the timeout's, tested above.)
fn sandbox_failure_is_123_with_its_line(w: &str, policies: &Path) {
    use std::io::BufRead;
    let sh = policy(
        policies,
        "sh.toml",
        "[exec]\nallowed_executables = [\"sh\", \"sleep\"]\nallow_interpreters = true\nallow_eval = true",
    );
    let args = [
        "run",
        "--tier",
        "c",
        "-w",
        w,
        "-p",
        sh.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "echo started; exec sleep 30",
    ];
    let state = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tierbox"))
        .args(args)
        .env("XDG_STATE_HOME", state.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Printed live, so the run is past its launch and supervised.
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "started\n");
    let pid1 = running_pid1_of(child.id());
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid1.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(123), "{out:?}");
    assert!(
        tierbox_lines(&out)
            .iter()
            .any(|l| l.starts_with("tierbox: sandbox pid 1 was killed")),
        "{}",
        stderr(&out)
    );
}

/// The host pid of the sandbox pid 1 (`tierbox-init`, a child of the CLI process `cli`)
/// whose child is the program `sleep 30`; waits up to 10 s for it.
fn running_pid1_of(cli: u32) -> u32 {
    for _ in 0..1000 {
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, after)| after.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid != Some(cli) || !stat.contains("(tierbox-init)") {
                continue;
            }
            let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                .unwrap_or_default();
            if children.split_whitespace().any(|child| {
                std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default()
                    == b"sleep\x0030\x00"
            }) {
                return pid;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("no sandbox pid 1 of tierbox {cli} running sleep 30");
}

/// `--json` prints, on an error, the error object the HTTP API returns for it: the same
/// code, message and fix (`{"error": {"code", "message", "fix"}}`), with exit 125.
///
/// Regression: the CLI printed `{"rejected": …}`, and nothing at all for an error that
/// was not a rejection.
#[test]
fn json_prints_the_rejection_object_the_http_api_returns() {
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path().to_str().unwrap();
    let out = tierbox(&["run", "--json", "-w", w, "--", "bash", "-c", "id"], None);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let v = json(&out);
    let code = v["error"]["code"].as_str().unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    assert_eq!(code, "exec.interpreter_denied");
    let http = tierbox_server::service::ServiceError::new(code, message);
    assert_eq!(v, serde_json::json!({ "error": http.to_json() }));
    assert!(v["error"]["fix"].is_string(), "{v}");
    // The same object from `check`.
    let out = tierbox(
        &["check", "--json", "-w", w, "--", "bash", "-c", "id"],
        None,
    );
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert_eq!(json(&out), v);
}
