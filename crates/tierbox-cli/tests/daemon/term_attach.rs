//! Terms held by the daemon from the CLI: `tierbox run -t` through it, `tierbox ps`,
//! `tierbox attach ID` (input piped, the exit status the program's), the detach keys
//! leaving the term running, an unknown id refused, and `ps` without a daemon.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::tier_b_available;

/// How long a term may take to show up or end before the test gives up (a bound so a
/// broken path fails instead of hanging, not a timing assertion).
const GIVE_UP: Duration = Duration::from_secs(60);

/// Ctrl-P Ctrl-Q.
const DETACH: &[u8] = b"\x10\x11";

struct Daemon {
    _dir: tempfile::TempDir,
    xdg: PathBuf,
    ws: PathBuf,
    policy: PathBuf,
}

impl Daemon {
    fn start() -> Self {
        Self::start_with(|_| String::new())
    }

    /// A daemon whose policy has `more(dir)` appended (`dir`: the test's directory).
    fn start_with(more: impl FnOnce(&std::path::Path) -> String) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let xdg = dir.path().join("xdg");
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        let policy = dir.path().join("policy.toml");
        std::fs::write(
            &policy,
            format!(
                "version = 1\n[exec]\nallowed_executables = [\"python3\"]\n\
                 allow_interpreters = true\nallow_eval = true\n{}",
                more(dir.path())
            ),
        )
        .unwrap();
        let d = Self {
            _dir: dir,
            xdg,
            ws,
            policy,
        };
        let out = d.tierbox(&d.with_policy(&["daemon", "start"]), b"");
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        d
    }

    fn with_policy<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        let mut v = args.to_vec();
        v.extend_from_slice(&[
            "--policy",
            self.policy.to_str().unwrap(),
            "--workspace",
            self.ws.to_str().unwrap(),
        ]);
        v
    }

    /// `tierbox ARGS` with `input` as its stdin (then its end).
    fn tierbox(&self, args: &[&str], input: &[u8]) -> Output {
        self.tierbox_with(args, input, &[])
    }

    /// `tierbox ARGS` for this daemon with `env` set, its stdio piped, started.
    fn spawn(&self, args: &[&str], env: &[(&str, &str)]) -> std::process::Child {
        Command::new(env!("CARGO_BIN_EXE_tierbox"))
            .args(args)
            .env_remove("TIERBOX_DETACH_KEYS")
            .envs(env.iter().copied())
            .env("XDG_STATE_HOME", &self.xdg)
            .env_remove("TIERBOX_SOCKET")
            .env_remove("TIERBOX_DAEMON")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// [`Self::tierbox`] with `env` set too.
    fn tierbox_with(&self, args: &[&str], input: &[u8], env: &[(&str, &str)]) -> Output {
        let mut child = self.spawn(args, env);
        let mut stdin = child.stdin.take().unwrap();
        let _ = stdin.write_all(input);
        drop(stdin);
        child.wait_with_output().unwrap()
    }

    /// `tierbox run -t --tier b -- python3 -i -q` through the daemon, `input` typed.
    fn run_t(&self, input: &[u8]) -> Output {
        self.run_t_with(&[], input, &[])
    }

    /// [`Self::run_t`] with more `flags` before the command, and `env`.
    fn run_t_with(&self, flags: &[&str], input: &[u8], env: &[(&str, &str)]) -> Output {
        let mut args = self.with_policy(&["run", "-t", "--tier", "b"]);
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", "python3", "-i", "-q"]);
        self.tierbox_with(&args, input, env)
    }

    /// `tierbox ps --json`'s terms.
    fn ps(&self) -> Vec<serde_json::Value> {
        let out = self.tierbox(&["ps", "--json"], b"");
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["terms"].as_array().unwrap().clone()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.tierbox(&["daemon", "stop"], b"");
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The term id `run -t` names on stderr (`term ID runs in the daemon`).
fn term_id(stderr: &str) -> String {
    let after = stderr.split("term ").nth(1).expect(stderr);
    after.split_whitespace().next().unwrap().to_owned()
}

#[test]
fn run_t_through_the_daemon_types_prints_and_mirrors_the_exit_status() {
    if !tier_b_available() {
        return;
    }
    let d = Daemon::start();
    let out = d.run_t(b"print(6*7)\nraise SystemExit(4)\n");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(stderr.contains("runs in the daemon"), "{stderr}");
    assert!(stdout.contains("42"), "{stdout}\n{stderr}");
    assert_eq!(out.status.code(), Some(4), "{stdout}\n{stderr}");
}

#[test]
fn a_detached_term_is_listed_and_attach_types_into_it_until_it_ends() {
    if !tier_b_available() {
        return;
    }
    let d = Daemon::start();
    // The detach keys as the first input: the term runs on.
    let out = d.run_t(DETACH);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("detached"), "{stderr}");
    let id = term_id(&stderr);
    let listed = d.ps();
    let term = listed
        .iter()
        .find(|t| t["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{id} not in {listed:?}"));
    assert_eq!(term["state"], "running");
    assert_eq!(term["argv"][0], "python3");
    let table = text(&d.tierbox(&["ps"], b"").stdout);
    assert!(
        table.contains(&id) && table.contains("python3 -i -q"),
        "{table}"
    );

    // Attached again, detached again: still running.
    let out = d.tierbox(&["attach", &id], DETACH);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        d.ps()
            .iter()
            .any(|t| t["id"] == id.as_str() && t["state"] == "running")
    );

    // Attached, typed into, ended: the program's status.
    let out = d.tierbox(&["attach", &id], b"print(6*7)\nraise SystemExit(5)\n");
    let stdout = text(&out.stdout);
    assert!(stdout.contains("42"), "{stdout}\n{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    let give_up = Instant::now() + GIVE_UP;
    while d
        .ps()
        .iter()
        .any(|t| t["id"] == id.as_str() && t["state"] == "running")
    {
        assert!(Instant::now() < give_up, "the term never ended");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Other detach keys (`--detach-keys`, `TIERBOX_DETACH_KEYS`): Ctrl-P Ctrl-Q then go to
/// the program like any key, the chosen keys detach and are named; keys that cannot be
/// parsed are a usage error naming them, before anything runs.
#[test]
fn other_detach_keys_detach_and_ctrl_p_ctrl_q_go_to_the_program() {
    if !tier_b_available() {
        return;
    }
    let d = Daemon::start();
    // With the default keys this input would detach at once (exit 0); here the program
    // reads on to the line that ends it.
    let mut input = DETACH.to_vec();
    input.extend_from_slice(b"print(6*7)\nraise SystemExit(6)\n");
    let out = d.run_t_with(&["--detach-keys", "ctrl-a,d"], &input, &[]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(stderr.contains("Ctrl-A d detaches"), "{stderr}");
    assert!(stdout.contains("42"), "{stdout}\n{stderr}");
    assert_eq!(out.status.code(), Some(6), "{stdout}\n{stderr}");

    // Chosen in the environment; they detach, and the term runs on.
    let out = d.run_t_with(&[], b"\x01d", &[("TIERBOX_DETACH_KEYS", "ctrl-a,d")]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("detached (Ctrl-A d)"), "{stderr}");
    let id = term_id(&stderr);
    assert!(
        d.ps()
            .iter()
            .any(|t| t["id"] == id.as_str() && t["state"] == "running")
    );
    // `none`: nothing detaches (the keys make a line Python refuses, then it reads on);
    // the flag wins over the environment.
    let out = d.tierbox_with(
        &["attach", "--detach-keys", "none", &id],
        b"\x01d\x10\x11\nraise SystemExit(7)\n",
        &[("TIERBOX_DETACH_KEYS", "ctrl-a,d")],
    );
    assert_eq!(out.status.code(), Some(7), "{out:?}");

    for (args, env, names) in [
        (
            vec!["attach", "--detach-keys", "ctrl-1", &id],
            vec![],
            "--detach-keys: detach keys \"ctrl-1\": \"ctrl-1\" is not a control key",
        ),
        (
            vec!["attach", &id],
            vec![("TIERBOX_DETACH_KEYS", "ctrl-p,,q")],
            "TIERBOX_DETACH_KEYS: detach keys \"ctrl-p,,q\": an empty key",
        ),
    ] {
        let out = d.tierbox_with(&args, b"", &env);
        let stderr = text(&out.stderr);
        // Refused as usage is (125), before anything ran.
        assert_eq!(out.status.code(), Some(125), "{stderr}");
        assert!(stderr.contains(names), "{stderr}");
    }
}

/// An attach with nothing typed for longer than the daemon keeps an idle connection
/// (`HEADER_READ_TIMEOUT`) still types what comes next: the CLI replaces the connection
/// the daemon closed instead of failing the first key with a broken pipe.
#[test]
fn typing_after_an_idle_attach_reaches_the_program() {
    if !tier_b_available() {
        return;
    }
    let d = Daemon::start();
    let out = d.run_t(DETACH);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let id = term_id(&text(&out.stderr));
    let mut child = d.spawn(&["attach", &id], &[]);
    // Past the daemon's idle timeout for the attach's input connection (a wait for a
    // server-side timeout to pass, not a measurement).
    std::thread::sleep(tierbox_server::conns::HEADER_READ_TIMEOUT + Duration::from_secs(2));
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"print(6*7)\nraise SystemExit(8)\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    drop(stdin);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(stdout.contains("42"), "{stdout}\n{stderr}");
    assert_eq!(out.status.code(), Some(8), "{stdout}\n{stderr}");
}

/// `tierbox attach` goes over the term's WebSocket: the daemon's audit log records each
/// attach and detach of the CLI (as the operator's default session), and never what was
/// typed.
#[test]
fn each_attach_and_detach_of_the_cli_is_in_the_audit_log() {
    if !tier_b_available() {
        return;
    }
    let d = Daemon::start_with(|dir| {
        format!("[audit]\nlog = \"{}\"\n", dir.join("audit.jsonl").display())
    });
    let log = d.policy.with_file_name("audit.jsonl");
    let out = d.run_t(DETACH);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let id = term_id(&text(&out.stderr));
    let out = d.tierbox(
        &["attach", &id],
        b"print('typed-' * 2)\nraise SystemExit(5)\n",
    );
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    assert!(text(&out.stdout).contains("typed-typed-"), "{out:?}");
    let _ = d.tierbox(&["daemon", "stop"], b"");
    let log = std::fs::read_to_string(&log).unwrap();
    let events: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|r| r["record"]["envelope"]["attestation"]["body"].clone())
        .filter(|b| b["kind"] == "event" && b["term_id"] == id.as_str())
        .collect();
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(
        names,
        [
            "term.attached",
            "term.detached",
            "term.attached",
            "term.detached"
        ],
        "{log}"
    );
    assert!(events.iter().all(|e| e["owner"] == "http:default"), "{log}");
    assert!(!log.contains("typed-"), "the audit log holds typed input");
}

#[test]
fn attach_to_an_unknown_id_is_not_found() {
    let d = Daemon::start();
    let out = d.tierbox(&["attach", "0123456789abcdef0123456789abcdef"], b"");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("term.not_found"), "{stderr}");
    assert_ne!(out.status.code(), Some(0));
    let out = d.tierbox(&["attach", "../daemon"], b"");
    assert!(text(&out.stderr).contains("is not a term id"), "{out:?}");
    assert_ne!(out.status.code(), Some(0));
}

#[test]
fn ps_without_a_daemon_says_terms_live_in_their_own_run_t() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tierbox"))
        .args(["ps"])
        .env("XDG_STATE_HOME", dir.path())
        .env_remove("TIERBOX_SOCKET")
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("tierbox daemon start"), "{stderr}");
    assert!(stderr.contains("tierbox run -t"), "{stderr}");
}

/// `tierbox ARGS` started with its stdin kept open (the child's) and its stdout gathered
/// by a thread into the returned buffer as it comes.
fn spawn_gathering(
    d: &Daemon,
    args: &[&str],
) -> (
    std::process::Child,
    std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
) {
    use std::io::Read;
    let mut child = d.spawn(args, &[]);
    let gathered = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut stdout = child.stdout.take().unwrap();
    let into = gathered.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = stdout.read(&mut buf) {
            into.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    (child, gathered)
}

/// Waits until `gathered` shows `needle` (giving up after [`GIVE_UP`]).
fn wait_for(gathered: &std::sync::Mutex<Vec<u8>>, needle: &str) {
    let give_up = Instant::now() + GIVE_UP;
    while !text(&gathered.lock().unwrap()).contains(needle) {
        assert!(
            Instant::now() < give_up,
            "never showed {needle:?}: {:?}",
            text(&gathered.lock().unwrap())
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One client types into a term: a plain `attach` to a term `run -t` holds is refused
/// with a hint whose two ways out both work — `--view` watches (what it types does not
/// reach the program) and `--take-over` detaches `run -t` (exit 0, the term runs on) and
/// types into it, the view following to the program's exit status.
#[test]
fn one_client_types_into_a_term_and_the_hints_ways_out_work() {
    if !tier_b_available() {
        return;
    }
    let d = Daemon::start();
    let mut run_t = d.with_policy(&["run", "-t", "--tier", "b"]);
    run_t.extend_from_slice(&["--", "python3", "-i", "-q"]);
    let (holder, held) = spawn_gathering(&d, &run_t);
    wait_for(&held, ">>> ");
    let id = d
        .ps()
        .iter()
        .find(|t| t["state"] == "running")
        .and_then(|t| t["id"].as_str().map(str::to_owned))
        .unwrap();

    let out = d.tierbox(&["attach", &id], b"");
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("term.controlled"), "{stderr}");
    assert!(
        stderr.contains("tierbox attach --view ID")
            && stderr.contains("tierbox attach --take-over ID"),
        "{stderr}"
    );

    // The first way out: a view, whose typing goes nowhere.
    let (mut viewer, viewed) = spawn_gathering(&d, &["attach", "--view", &id]);
    viewer
        .stdin
        .as_mut()
        .unwrap()
        .write_all(b"print('from'+'-the-view')\n")
        .unwrap();
    wait_for(&viewed, ">>> ");

    // The second: taken over; run -t is detached and the term goes on.
    let out = d.tierbox(
        &["attach", "--take-over", &id],
        b"print(6*7)\nraise SystemExit(5)\n",
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(stdout.contains("42"), "{stdout}\n{stderr}");
    assert_eq!(out.status.code(), Some(5), "{stdout}\n{stderr}");
    let holder_out = holder.wait_with_output().unwrap();
    let holder_err = text(&holder_out.stderr);
    assert_eq!(holder_out.status.code(), Some(0), "{holder_err}");
    assert!(holder_err.contains("took the term over"), "{holder_err}");

    let viewer_out = viewer.wait_with_output().unwrap();
    assert_eq!(viewer_out.status.code(), Some(5), "{viewer_out:?}");
    let seen = text(&viewed.lock().unwrap());
    assert!(seen.contains("42"), "{seen}");
    assert!(
        !seen.contains("from-the-view") && !stdout.contains("from-the-view"),
        "{seen}"
    );
}

/// Attaching again redraws: the program gets `SIGWINCH` though the size did not change
/// (the kernel alone would send none), while the attach of `run -t` that started it
/// sends none.
#[test]
fn attaching_again_asks_the_program_to_redraw() {
    if !tier_b_available() {
        return;
    }
    let d = Daemon::start();
    let script = "import signal,sys\n\
                  signal.signal(signal.SIGWINCH, lambda *a: print('WIN'+'CHED', flush=True))\n\
                  print('ar'+'med', flush=True)\n\
                  sys.stdin.readline()\n\
                  sys.exit(3)\n";
    let mut run_t = d.with_policy(&["run", "-t", "--tier", "b"]);
    run_t.extend_from_slice(&["--", "python3", "-c", script]);
    let (mut holder, held) = spawn_gathering(&d, &run_t);
    wait_for(&held, "armed");
    holder.stdin.as_mut().unwrap().write_all(DETACH).unwrap();
    let holder_out = holder.wait_with_output().unwrap();
    assert_eq!(holder_out.status.code(), Some(0), "{holder_out:?}");
    assert!(!text(&held.lock().unwrap()).contains("WINCHED"));
    let id = term_id(&text(&holder_out.stderr));
    let out = d.tierbox(&["attach", &id], b"\n");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("WINCHED"),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(3), "{out:?}");
}
