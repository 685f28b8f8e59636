//! Tier A through the `tierbox` binary: WASM modules from the workspace, and CPython and
//! QuickJS compiled to WASI (installed by `tierbox wasm fetch-runtimes`).
//!
//! The runtimes are looked up where the binary looks for them (`TIERBOX_RUNTIMES_DIR`,
//! else the default runtimes directory). Without them the Python and JavaScript tests
//! are skipped with a printed reason — and fail under CI, where `.ci/run` installs them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;

/// A state directory shared by the tests of this file, so CPython is compiled once and
/// then loaded from the compiled-module cache.
fn shared_state() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tier-a-state");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn tierbox_in(state: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tierbox"))
        .args(args)
        .env("XDG_STATE_HOME", state)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): stdout {:?} stderr {:?}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Whether `python.wasm` and `quickjs.wasm` are installed; under CI their absence fails.
fn runtimes_installed() -> bool {
    let env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    let dir = tierbox_policy::validate::default_runtimes_dir(&env);
    let ok = ["python.wasm", "quickjs.wasm"]
        .iter()
        .all(|f| dir.join(f).is_file());
    if !ok {
        tierbox_test_support::skip_here(&format!(
            "the Tier A runtimes are not in {}; run `tierbox wasm fetch-runtimes`",
            dir.display()
        ));
    }
    ok
}

/// Runs `python3 -c CODE` in Tier A with the shared state directory. The first call
/// compiles CPython (seconds); later ones, in any test, load it from the cache.
fn python(ws: &Path, code: &str, extra: &[&str]) -> Output {
    static WARM: Mutex<bool> = Mutex::new(false);
    let state = shared_state();
    {
        let mut warm = WARM.lock().unwrap_or_else(|p| p.into_inner());
        if !*warm {
            let out = tierbox_in(
                &state,
                &["run", "--tier", "a", "--timeout-ms", "600000", "-w"]
                    .iter()
                    .copied()
                    .chain([ws.to_str().unwrap(), "--", "python3", "-c", "pass"])
                    .collect::<Vec<_>>(),
            );
            assert!(out.status.success(), "warm-up: {out:?}");
            *warm = true;
        }
    }
    let mut args = vec!["run", "--tier", "a", "-w", ws.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "python3", "-c", code]);
    tierbox_in(&state, &args)
}

#[test]
fn python_snippet_runs_in_tier_a() {
    if !runtimes_installed() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let out = python(
        ws.path(),
        "import sys; print(6 * 7, sys.platform)",
        &["--json"],
    );
    let v = json(&out);
    assert_eq!(v["stdout"]["text"], "42 wasi\n", "{v}");
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["tier"], "a");
    assert_eq!(v["backend"], "tier_a_wasmtime");
    assert_eq!(v["wasm"]["kind"], "module");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn python_cannot_read_host_files() {
    if !runtimes_installed() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    for path in ["/etc/passwd", "../etc/passwd", "/workspace/../etc/passwd"] {
        let out = python(ws.path(), &format!("print(open({path:?}).read())"), &[]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{path}: {stdout} {stderr}");
        assert!(
            !stdout.contains("root:"),
            "{path}: host file leaked: {stdout}"
        );
        assert!(
            stderr.contains("FileNotFoundError") || stderr.contains("PermissionError"),
            "{path}: {stderr}"
        );
    }
}

#[test]
fn python_writes_in_the_workspace_are_visible_on_the_host() {
    if !runtimes_installed() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("in.txt"), "from the host").unwrap();
    let code = "data = open('in.txt').read()\n\
                open('out.txt', 'w').write(data.upper())\n\
                open('/workspace/abs.txt', 'w').write('absolute')";
    let out = python(ws.path(), code, &[]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("out.txt")).unwrap(),
        "FROM THE HOST"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("abs.txt")).unwrap(),
        "absolute"
    );
}

/// A policy mapping `python3` with the given fuel budget.
fn fuel_policy(dir: &Path, fuel: u64) -> PathBuf {
    let path = dir.join(format!("fuel-{fuel}.toml"));
    std::fs::write(
        &path,
        format!(
            "version = 1\n[wasm]\nfuel = {fuel}\n[wasm.interpreters]\npython3 = \"python.wasm\"\n"
        ),
    )
    .unwrap();
    path
}

#[test]
fn python_infinite_loop_is_stopped_at_the_deadline() {
    if !runtimes_installed() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let policies = tempfile::tempdir().unwrap();
    // Fuel far beyond what 3 s of computing burns, so the deadline is what stops it.
    let policy = fuel_policy(policies.path(), 1 << 60);
    let out = python(
        ws.path(),
        "while True: pass",
        &[
            "--timeout-ms",
            "3000",
            "--json",
            "-p",
            policy.to_str().unwrap(),
        ],
    );
    let v = json(&out);
    assert_eq!(v["timed_out"], true, "{v}");
    assert_eq!(v["limit_hit"], "wall_time");
    assert_eq!(v["exit_code"], serde_json::Value::Null);
    assert_eq!(out.status.code(), Some(124));
}

#[test]
fn python_infinite_loop_is_stopped_by_the_fuel_budget() {
    if !runtimes_installed() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let policies = tempfile::tempdir().unwrap();
    // CPython's start-up alone takes about 250 million units.
    let policy = fuel_policy(policies.path(), 1_000_000_000);
    let out = python(
        ws.path(),
        "while True: pass",
        &[
            "--timeout-ms",
            "600000",
            "--json",
            "-p",
            policy.to_str().unwrap(),
        ],
    );
    let v = json(&out);
    assert_eq!(v["limit_hit"], "fuel", "{v}");
    assert_eq!(v["timed_out"], false);
    assert_eq!(v["wasm"]["fuel_consumed"], 1_000_000_000u64);
    // A limit's own status, not the guest's failure (1).
    assert_eq!(out.status.code(), Some(122));
}

#[test]
fn quickjs_snippet_runs_in_tier_a() {
    if !runtimes_installed() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let out = tierbox_in(
        &shared_state(),
        &[
            "run",
            "--tier",
            "a",
            "-w",
            ws.path().to_str().unwrap(),
            "--",
            "qjs",
            "-e",
            "console.log([1, 2, 3].map(x => x * 2).join(' '))",
        ],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "2 4 6\n", "{out:?}");
    assert!(out.status.success());
}

const HELLO_WAT: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "hello from wasm\n")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 16))
    (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"#;

#[test]
fn a_second_run_of_a_module_loads_it_from_the_disk_cache() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("hello.wat"), HELLO_WAT).unwrap();
    let run = || {
        let out = tierbox_in(
            state.path(),
            &[
                "run",
                "--tier",
                "a",
                "--json",
                "-w",
                ws.path().to_str().unwrap(),
                "--",
                "hello.wat",
            ],
        );
        json(&out)
    };
    let first = run();
    assert_eq!(first["stdout"]["text"], "hello from wasm\n", "{first}");
    assert_eq!(first["wasm"]["cache"], "compiled");
    let second = run();
    assert_eq!(second["stdout"]["text"], "hello from wasm\n");
    assert_eq!(second["wasm"]["cache"], "disk", "{second}");
    assert_eq!(
        first["wasm"]["module_sha256"],
        second["wasm"]["module_sha256"]
    );
}

/// Compiling a module the caches do not have is shown on stderr when it is a terminal
/// (a spinner, then how long it took), never when stderr is a pipe, and not again once
/// the module comes from the cache.
#[test]
fn a_first_compilation_shows_progress_on_a_terminal_only() {
    use std::io::Read;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("hello.wat"), HELLO_WAT).unwrap();
    let args = [
        "run",
        "--tier",
        "a",
        "-w",
        ws.path().to_str().unwrap(),
        "--",
        "hello.wat",
    ];
    let on_terminal = |state: &Path| {
        let (master, slave) = tierbox_test_support::open_pty();
        let status = Command::new(env!("CARGO_BIN_EXE_tierbox"))
            .args(args)
            .env("XDG_STATE_HOME", state)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(slave)
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(0));
        let mut master = std::fs::File::from(master);
        rustix::io::ioctl_fionbio(&master, true).unwrap();
        let (mut shown, mut buf) = (Vec::new(), [0u8; 4096]);
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            shown.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&shown).into_owned()
    };
    let state = tempfile::tempdir().unwrap();
    let first = on_terminal(state.path());
    assert!(
        first.contains("tierbox: compiled the module in"),
        "{first:?}"
    );
    let again = on_terminal(state.path());
    assert!(
        !again.contains("compil"),
        "a cached module is not compiled: {again:?}"
    );
    let piped_state = tempfile::tempdir().unwrap();
    let piped = tierbox_in(piped_state.path(), &args);
    assert_eq!(piped.status.code(), Some(0));
    assert!(
        !String::from_utf8_lossy(&piped.stderr).contains("compil"),
        "{:?}",
        String::from_utf8_lossy(&piped.stderr)
    );
}

#[test]
fn a_stdout_flood_is_capped_to_the_quota() {
    // 16384 writes of 64 KiB: 1 GiB of output.
    let flood = r#"(module
      (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
      (memory (export "memory") 2)
      (func (export "_start") (local $i i32)
        (i32.store (i32.const 0) (i32.const 65536))
        (i32.store (i32.const 4) (i32.const 65536))
        (loop $l
          (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br_if $l (i32.lt_u (local.get $i) (i32.const 16384))))))"#;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("flood.wat"), flood).unwrap();
    let out = tierbox_in(
        &shared_state(),
        &[
            "wasm",
            "run",
            "--json",
            "-w",
            ws.path().to_str().unwrap(),
            "flood.wat",
        ],
    );
    let v = json(&out);
    assert_eq!(v["exit_code"], 0, "{v}");
    assert_eq!(v["stdout"]["total_bytes"], 1u64 << 30);
    assert_eq!(v["stdout"]["truncated"], true);
    let kept = v["stdout"]["total_bytes"].as_u64().unwrap()
        - v["stdout"]["omitted_bytes"].as_u64().unwrap();
    assert_eq!(kept, 1 << 20, "the default quota keeps 1 MiB");
}

#[test]
fn check_prints_the_tier_a_plan_and_runs_nothing() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("hello.wat"), HELLO_WAT).unwrap();
    let out = tierbox_in(
        &shared_state(),
        &[
            "check",
            "--tier",
            "a",
            "--json",
            "-w",
            ws.path().to_str().unwrap(),
            "--",
            "hello.wat",
            "arg1",
        ],
    );
    let v = json(&out);
    let plan = &v["wasm_plan"];
    assert_eq!(
        plan["argv"],
        serde_json::json!(["hello.wat", "arg1"]),
        "{v}"
    );
    assert_eq!(plan["preopens"][0]["guest"], "/workspace");
    assert_eq!(plan["preopens"][1]["guest"], ".");
    assert_eq!(plan["env"], serde_json::json!([]));
}

#[test]
fn tier_a_rejects_what_it_cannot_grant() {
    let ws = tempfile::tempdir().unwrap();
    let wsp = ws.path().to_str().unwrap();
    std::fs::write(ws.path().join("hello.wat"), HELLO_WAT).unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "run",
                "--tier",
                "a",
                "--egress-host",
                "example.org",
                "-w",
                wsp,
                "--",
                "hello.wat",
            ],
            "tier.unsupported",
        ),
        (
            &["run", "--tier", "a", "-w", wsp, "--", "ls"],
            "wasm.not_mapped",
        ),
        (
            &["wasm", "run", "-w", wsp, "--pass-env", "HOME", "hello.wat"],
            "wasm.grant_denied",
        ),
        (
            &["wasm", "run", "-w", wsp, "--dir", "/etc", "hello.wat"],
            "wasm.grant_denied",
        ),
        (
            &["wasm", "run", "-w", wsp, "../outside.wasm"],
            "wasm.module_invalid",
        ),
    ];
    for (args, code) in cases {
        let mut args = args.to_vec();
        args.insert(1, "--json");
        if args[0] == "wasm" {
            args.swap(1, 2);
        }
        let out = tierbox_in(&shared_state(), &args);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {out:?}");
        let v = json(&out);
        assert_eq!(v["error"]["code"], *code, "{args:?}: {v}");
    }
}

/// What the README says of a guest's working directory: relative paths resolve in the
/// workspace; `os.getcwd()` reports `/` (WASI has no process working directory) until the
/// guest changes to `/workspace`.
#[test]
fn relative_paths_resolve_in_the_workspace_and_getcwd_is_as_documented() {
    if !runtimes_installed() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("f.txt"), "hi").unwrap();
    let out = python(
        ws.path(),
        "import os; print(os.getcwd()); print(open('f.txt').read()); \
         os.chdir('/workspace'); print(os.getcwd()); print(open('f.txt').read())",
        &[],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "/\nhi\n/workspace\nhi\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The README's Tier A examples, executed as written (the `cargo run -q -p tierbox-cli --`
/// of each line standing for this build's binary, in an empty directory as the
/// workspace): each prints what the `# …` line under it says, with the exit status it
/// names (0 when none).
#[test]
fn the_readme_s_tier_a_examples_print_what_it_says() {
    if !runtimes_installed() {
        return;
    }
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let bin = env!("CARGO_BIN_EXE_tierbox");
    let state = shared_state();
    let mut checked = 0;
    for block in readme.split("```sh\n").skip(1) {
        let block = block.split("```").next().unwrap_or("");
        if !block.contains("--tier a") {
            continue;
        }
        let ws = tempfile::tempdir().unwrap();
        let lines: Vec<&str> = block.lines().collect();
        let mut last: Option<(String, Output)> = None;
        let mut i = 0;
        while i < lines.len() {
            let line = lines[i];
            i += 1;
            if let Some(expected) = line.strip_prefix("# ") {
                let (cmd, out) = last.as_ref().expect("an expectation follows a command");
                let (text, code) = match expected.rsplit_once("(exit ") {
                    Some((text, code)) => (
                        text.trim(),
                        code.trim_end_matches(')').parse::<i32>().unwrap(),
                    ),
                    None => (expected.trim(), 0),
                };
                let shown = format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                assert!(
                    shown.contains(text) && out.status.code() == Some(code),
                    "README: `{cmd}` should print {text:?} and exit {code}; got {:?}: {shown}",
                    out.status.code()
                );
                checked += 1;
                continue;
            }
            if line.trim().is_empty() || line.contains("fetch-runtimes") {
                continue;
            }
            let mut cmd = line.to_owned();
            // A here-document runs to its terminator line.
            if let Some(tag) = line.split("<<'").nth(1).and_then(|t| t.split('\'').next()) {
                while i < lines.len() {
                    cmd.push('\n');
                    cmd.push_str(lines[i]);
                    i += 1;
                    if lines[i - 1] == tag {
                        break;
                    }
                }
            }
            let cmd = cmd.replace("cargo run -q -p tierbox-cli --", bin);
            let out = Command::new("sh")
                .arg("-c")
                .arg(&cmd)
                .current_dir(ws.path())
                .env("XDG_STATE_HOME", &state)
                .stdin(Stdio::null())
                .output()
                .unwrap();
            last = Some((cmd, out));
        }
    }
    assert!(checked >= 4, "only {checked} README examples checked");
}

/// `tierbox wasm run --net HOST:PORT`: a component reaches the granted host (the policy's
/// strict allowlist with an address entry for the loopback it resolves to); a component
/// looking up another name is refused, and the outcome's denials name the grant; the
/// attestation covers the network report (editing it breaks `attest verify`).
#[test]
fn a_component_reaches_its_granted_host_through_the_cli() {
    use std::io::Write as _;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let _ = c.write_all(b"granted\n");
        }
    });
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let guest = |name: &str| {
        std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/probe/wasm/net_component.wat"
        ))
        .unwrap()
        .replace("__NAME_LEN__", &name.len().to_string())
        .replace("__NAME__", name)
        .replace("__PORT__", &port.to_string())
    };
    std::fs::write(ws.path().join("good.wat"), guest("dev.test")).unwrap();
    std::fs::write(ws.path().join("other.wat"), guest("other.test")).unwrap();
    let policy = state.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "version = 1\n[egress]\nmode = \"strict\"\nallow = [\"dev.test:{port}\", \"127.0.0.1:{port}\"]\nresolve = {{ \"dev.test\" = [\"127.0.0.1\"] }}\n"
        ),
    )
    .unwrap();
    let grant = format!("dev.test:{port}");
    let run = |module: &str| {
        tierbox_in(
            state.path(),
            &[
                "wasm",
                "run",
                "--json",
                "--policy",
                policy.to_str().unwrap(),
                "--workspace",
                ws.path().to_str().unwrap(),
                "--net",
                &grant,
                module,
            ],
        )
    };
    let out = run("good.wat");
    let outcome = json(&out);
    assert_eq!(outcome["stdout"]["text"], "ok granted\n", "{outcome:#}");
    let address = format!("127.0.0.1:{port}");
    assert_eq!(
        outcome["wasm"]["network"]["connects"][&address], 1,
        "{outcome:#}"
    );

    let out = run("other.wat");
    let refused = json(&out);
    assert_eq!(refused["stdout"]["text"], "lookup-error 1\n", "{refused:#}");
    let d = &refused["denials"][0];
    assert_eq!(
        (d["operation"].as_str(), d["target"].as_str()),
        (Some("lookup"), Some("other.test")),
        "{refused:#}"
    );
    assert!(
        d["hint"]
            .as_str()
            .unwrap_or_default()
            .contains("grants.network"),
        "{d}"
    );

    let file = state.path().join("outcome.json");
    let verify = |o: &serde_json::Value| {
        std::fs::write(&file, serde_json::to_vec(o).unwrap()).unwrap();
        tierbox_in(state.path(), &["attest", "verify", file.to_str().unwrap()])
    };
    assert!(verify(&outcome).status.success());
    let mut edited = outcome.clone();
    edited["wasm"]["network"]["connects"][&address] = serde_json::json!(0);
    assert!(
        !verify(&edited).status.success(),
        "an edited network report verified"
    );
}
