//! Terms through the library API: a real interactive program (`bash -i`, Python's REPL)
//! on a terminal in Tier B, native Tier C and bubblewrap — typing, echo, resize seen by
//! `stty size`, `^C` and `SIGINT` interrupting a foreground job without ending the
//! session, EOF ending the REPL with its status — plus ownership, the signal allowlist,
//! `TIOCSTI` refused from inside, and a flood that neither blocks the program nor grows
//! the ring. Skipped with a printed reason where the host cannot run a tier, failed under
//! `CI=true`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use tierbox_policy::{Policy, ProcessRunRequest, TierCBackend, TierRequest};
use tierbox_runner::background::BackgroundState;
use tierbox_runner::term::{MAX_TERM_WAIT_MS, TERM_RING_BYTES, TermError, TermManager, TermSignal};
use tierbox_sandbox::contract::TermSize;

use super::runs::{tier_b_available, tier_c_available};

/// Where a test runs: Tier B, or Tier C with a backend.
#[derive(Debug, Clone, Copy)]
enum Where {
    TierB,
    TierC(TierCBackend),
}

struct Env {
    env: super::background::Env,
    tier: TierRequest,
}

impl std::ops::Deref for Env {
    type Target = super::background::Env;
    fn deref(&self) -> &Self::Target {
        &self.env
    }
}

fn env(test: &str, at: Where, edit: impl FnOnce(&mut Policy)) -> Option<Env> {
    let available = match at {
        Where::TierB => tier_b_available(test),
        Where::TierC(backend) => tier_c_available(test, backend),
    };
    if !available {
        return None;
    }
    let mut policy = Policy::builtin_default();
    policy.exec.allowed_executables = ["bash", "python3"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    policy.exec.allow_interpreters = true;
    policy.exec.allow_eval = true;
    let tier = match at {
        Where::TierB => TierRequest::B,
        Where::TierC(backend) => {
            policy.tier.backend = backend;
            if backend == TierCBackend::Bwrap {
                // bwrap applies no landlock layer of its own.
                policy
                    .tier
                    .optional_layers
                    .push(tierbox_policy::Layer::Landlock);
            }
            TierRequest::C
        }
    };
    edit(&mut policy);
    Some(Env {
        env: super::background::env_of(policy),
        tier,
    })
}

impl Env {
    /// Starts `command` with `args` as alice's term of [`SIZE`]; its id.
    async fn start(&self, command: &str, args: &[&str]) -> String {
        let req = self.request(command, args);
        match self.runner.start_term("alice", &req, SIZE).await {
            Ok(h) => h.status.id,
            Err(err) => panic!("{command}: {err} ({})", err.code()),
        }
    }

    fn request(&self, command: &str, args: &[&str]) -> ProcessRunRequest {
        let mut r = ProcessRunRequest::new(command);
        r.args = args.iter().map(|s| (*s).to_owned()).collect();
        r.background = true;
        r.tier = self.tier;
        r
    }
}

/// `$check(test, where)` as one test per backend: Tier B, native Tier C, bubblewrap.
macro_rules! in_every_backend {
    ($name:ident, $check:path) => {
        mod $name {
            use super::*;

            #[test]
            fn tier_b() {
                $check(&tierbox_test_support::current_test(), Where::TierB);
            }

            #[test]
            fn native_tier_c() {
                let native = Where::TierC(TierCBackend::Native);
                $check(&tierbox_test_support::current_test(), native);
            }

            #[test]
            fn bwrap() {
                let bwrap = Where::TierC(TierCBackend::Bwrap);
                $check(&tierbox_test_support::current_test(), bwrap);
            }
        }
    };
}

/// What `tty` prints inside: the host's devpts node (Tier B), or the sandbox's own first
/// terminal (Tier C, native and bwrap: the terminal is made in its devpts).
fn tty_name(at: Where) -> &'static str {
    match at {
        Where::TierB => "/dev/pts/",
        Where::TierC(_) => "/dev/pts/0",
    }
}

const SIZE: TermSize = TermSize { rows: 24, cols: 80 };

/// A bound so that a broken term fails the test instead of hanging it (not a timing
/// assertion: the output is awaited, and this is only how long a test may wait at all).
const GIVE_UP: Duration = Duration::from_secs(60);

/// Reads a term's output from `*offset` until `needle` appears in what was read since
/// the last call, or the term ended with nothing more; returns what was read.
async fn read_until(tm: &TermManager, id: &str, offset: &mut u64, needle: &str) -> String {
    let give_up = Instant::now() + GIVE_UP;
    let mut seen = String::new();
    loop {
        let chunk = tm
            .output("alice", id, *offset, 64 * 1024, 1000)
            .await
            .unwrap();
        seen.push_str(&chunk.text);
        *offset = chunk.next_offset;
        if seen.contains(needle) {
            return seen;
        }
        let ended = tm.status("alice", id).await.unwrap().state != BackgroundState::Running;
        assert!(
            !(ended && chunk.text.is_empty()) && Instant::now() < give_up,
            "never saw {needle:?}; the terminal showed {seen:?}"
        );
    }
}

/// `bash -i` on a terminal: a typed line's result, `tty`, `stty size` before and after a
/// resize, `sleep 100` interrupted by `SIGINT` and by the byte `^C` with the shell still
/// there, and `exit 7` ending the term with status 7.
fn bash_session(test: &str, at: Where) {
    let tty_says = tty_name(at);
    let Some(e) = env(test, at, |_| {}) else {
        return;
    };
    let tm = e.runner.terms().clone();
    e.rt.block_on(async {
        let id = e.start("bash", &["--norc", "--noprofile", "-i"]).await;
        let mut at = 0;
        let type_line = |line: &str| format!("{line}\r");
        tm.write("alice", &id, type_line("echo typed-$((6*7))").as_bytes())
            .await
            .unwrap();
        let out = read_until(&tm, &id, &mut at, "typed-42").await;
        println!("{test}: typed line -> {:?}", out.trim());
        tm.write("alice", &id, type_line("tty").as_bytes())
            .await
            .unwrap();
        let out = read_until(&tm, &id, &mut at, tty_says).await;
        println!("{test}: tty -> {:?}", out.trim());
        tm.write("alice", &id, type_line("stty size").as_bytes())
            .await
            .unwrap();
        read_until(&tm, &id, &mut at, "24 80").await;
        tm.resize(
            "alice",
            &id,
            TermSize {
                rows: 30,
                cols: 100,
            },
        )
        .unwrap();
        tm.write("alice", &id, type_line("stty size").as_bytes())
            .await
            .unwrap();
        let out = read_until(&tm, &id, &mut at, "30 100").await;
        println!("{test}: stty size after resize -> {:?}", out.trim());
        // SIGINT to the foreground group: the job, not the shell. The job says it runs
        // (from inside its process group) before it becomes `sleep 100`; that it is
        // interrupted shows as the shell's next line running within GIVE_UP (< 100 s).
        let job = |marker: &str| type_line(&format!("bash -c 'echo {marker}; exec sleep 100'"));
        tm.write("alice", &id, job("sle\"\"ep-started").as_bytes())
            .await
            .unwrap();
        read_until(&tm, &id, &mut at, "sleep-started").await;
        tm.signal("alice", &id, TermSignal::Int).unwrap();
        tm.write("alice", &id, type_line("echo alive-$((1+1))").as_bytes())
            .await
            .unwrap();
        read_until(&tm, &id, &mut at, "alive-2").await;
        // The byte ^C, through the line discipline.
        tm.write("alice", &id, job("sle\"\"ep-again").as_bytes())
            .await
            .unwrap();
        read_until(&tm, &id, &mut at, "sleep-again").await;
        tm.write("alice", &id, b"\x03").await.unwrap();
        tm.write("alice", &id, type_line("echo again-$((2+3))").as_bytes())
            .await
            .unwrap();
        let out = read_until(&tm, &id, &mut at, "again-5").await;
        println!("{test}: after ^C -> {:?}", out.trim());
        assert_eq!(
            tm.status("alice", &id).await.unwrap().state,
            BackgroundState::Running
        );
        tm.write("alice", &id, type_line("exit 7").as_bytes())
            .await
            .unwrap();
        let s = until_ended(&tm, &id).await;
        println!(
            "{test}: ended {:?} exit {:?}, attested: {}",
            s.state,
            s.exit_code,
            s.attestation.is_some()
        );
        assert_eq!((s.state, s.exit_code), (BackgroundState::Exited, Some(7)));
        assert!(s.attestation.is_some(), "{s:?}");
        // An ended term takes no more input.
        let err = tm.write("alice", &id, b"x").await.unwrap_err();
        assert_eq!(err.code(), "term.ended", "{err}");
    });
}

async fn until_ended(tm: &TermManager, id: &str) -> tierbox_runner::background::BackgroundStatus {
    let give_up = Instant::now() + GIVE_UP;
    loop {
        let s = tm.status("alice", id).await.unwrap();
        if s.state != BackgroundState::Running {
            return s;
        }
        assert!(Instant::now() < give_up, "never ended: {s:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

in_every_backend!(bash_in_a_term, bash_session);

/// Python's REPL: a typed expression's result, then EOF (closing the input) ends it with
/// its exit status.
fn python_repl(test: &str, at: Where) {
    let Some(e) = env(test, at, |_| {}) else {
        return;
    };
    let tm = e.runner.terms().clone();
    e.rt.block_on(async {
        let id = e.start("python3", &["-q", "-i"]).await;
        let mut at = 0;
        read_until(&tm, &id, &mut at, ">>> ").await;
        tm.write("alice", &id, b"print(6 * 7, 'x' * 3)\r")
            .await
            .unwrap();
        let out = read_until(&tm, &id, &mut at, "42 xxx\r\n>>> ").await;
        println!("{test}: REPL -> {:?}", out.trim());
        tm.write(
            "alice",
            &id,
            b"import atexit, os; atexit.register(os._exit, 5)\r",
        )
        .await
        .unwrap();
        read_until(&tm, &id, &mut at, ">>> ").await;
        tm.close_input("alice", &id).await.unwrap();
        let s = until_ended(&tm, &id).await;
        println!("{test}: after EOF {:?} exit {:?}", s.state, s.exit_code);
        assert_eq!((s.state, s.exit_code), (BackgroundState::Exited, Some(5)));
    });
}

in_every_backend!(python_repl_in_a_term, python_repl);

/// `TIOCSTI` on the terminal from inside is refused in every backend.
fn tiocsti_refused(test: &str, at: Where) {
    let Some(e) = env(test, at, |_| {}) else {
        return;
    };
    let tm = e.runner.terms().clone();
    e.rt.block_on(async {
        let code = "import fcntl, termios\ntry:\n    fcntl.ioctl(0, termios.TIOCSTI, b'x')\n    print('TIOCSTI-' 'ALLOWED')\nexcept OSError as e:\n    print('TIOCSTI-' 'REFUSED', e.errno)\nimport time; time.sleep(100)\n";
        let id = e.start("python3", &["-c", code]).await;
        let mut at = 0;
        let out = read_until(&tm, &id, &mut at, "TIOCSTI-REFUSED").await;
        println!("{test}: {:?}", out.trim());
        assert!(!out.contains("TIOCSTI-ALLOWED"), "{out:?}");
        tm.kill("alice", &id).await.unwrap();
    });
}

in_every_backend!(tiocsti_is_refused_in_a_term, tiocsti_refused);

/// Another owner can neither read, write, resize, signal nor kill a term: the id is
/// unknown to it, as an id that never existed is.
#[test]
fn another_owner_cannot_reach_a_term() {
    let test = "another_owner_cannot_reach_a_term";
    let Some(e) = env(test, Where::TierB, |_| {}) else {
        return;
    };
    let tm = e.runner.terms().clone();
    e.rt.block_on(async {
        let id = e.start("bash", &["--norc", "--noprofile", "-i"]).await;
        let codes = [
            tm.write("bob", &id, b"echo hi\r").await.map(drop),
            tm.close_input("bob", &id).await,
            tm.output("bob", &id, 0, 1024, 0).await.map(drop),
            tm.resize("bob", &id, SIZE),
            tm.signal("bob", &id, TermSignal::Kill),
            tm.status("bob", &id).await.map(drop),
            tm.kill("bob", &id).await.map(drop),
            tm.write("alice", "0123456789abcdef0123456789abcdef", b"x")
                .await
                .map(drop),
        ]
        .map(|r| r.map_err(|e: TermError| e.code()));
        println!("{test}: {codes:?}");
        assert!(
            codes.iter().all(|c| *c == Err("term.not_found")),
            "{codes:?}"
        );
        // Still alice's, still running.
        let s = tm.status("alice", &id).await.unwrap();
        assert_eq!(s.state, BackgroundState::Running);
        tm.kill("alice", &id).await.unwrap();
    });
}

/// A signal off the allowlist is refused by name; bad sizes and waits by value.
#[test]
fn a_term_refuses_signals_sizes_and_waits_off_its_limits() {
    let err = TermSignal::parse("USR1").unwrap_err();
    assert_eq!(err.code(), "term.signal_refused");
    assert!(err.to_string().contains("USR1"), "{err}");
    assert_eq!(TermSignal::parse("sigint").unwrap(), TermSignal::Int);
    assert_eq!(TermSignal::parse("WINCH").unwrap(), TermSignal::Winch);
    let Some(e) = env("a_term_refuses_limits", Where::TierB, |_| {}) else {
        return;
    };
    let tm = e.runner.terms().clone();
    e.rt.block_on(async {
        let req = e.request("bash", &["--norc", "--noprofile", "-i"]);
        let err = e
            .runner
            .start_term("alice", &req, TermSize { rows: 0, cols: 80 })
            .await
            .unwrap_err();
        assert_eq!(err.code(), "term.bad_size", "{err}");
        let id = e.start("bash", &["--norc", "--noprofile", "-i"]).await;
        let err = tm.output("alice", &id, 0, 10, 30_001).await.unwrap_err();
        assert_eq!(err.code(), "term.bad_wait", "{err}");
        assert!(err.to_string().contains("30001"), "{err}");
        tm.kill("alice", &id).await.unwrap();
    });
}

/// 50 MB of output with nobody reading: the program runs to its end (the terminal is
/// drained), the ring keeps its last [`TERM_RING_BYTES`] and a read from 0 counts what
/// it lost.
#[test]
fn a_flood_does_not_block_the_program_and_the_ring_stays_bounded() {
    let test = "a_flood_does_not_block_the_program_and_the_ring_stays_bounded";
    // Redaction off: this measures the terminal's drain, not the redactor's speed.
    let Some(e) = env(test, Where::TierB, |p| p.redaction.enabled = false) else {
        return;
    };
    let tm = e.runner.terms().clone();
    e.rt.block_on(async {
        let flood = "yes | head -c 50000000; echo flood-done-$((40+2)); sleep 100";
        let id = e.start("bash", &["-c", flood]).await;
        let give_up = Instant::now() + Duration::from_secs(600);
        // Only the end is looked for, from the newest bytes: nothing else is read.
        loop {
            let s = tm.status("alice", &id).await.unwrap();
            let from = s.stdout_bytes.saturating_sub(256);
            let tail = tm.output("alice", &id, from, 256, 1000).await.unwrap();
            if tail.text.contains("flood-done-42") {
                break;
            }
            assert!(Instant::now() < give_up, "the flood never ended: {s:?}");
        }
        let first = tm.output("alice", &id, 0, 1024, 0).await.unwrap();
        println!(
            "{test}: total {} bytes, a read from 0 starts at {} having missed {}",
            first.total_bytes, first.offset, first.missed_bytes
        );
        // `yes` writes "y\n", the terminal shows "y\r\n".
        assert!(first.total_bytes >= 50_000_000, "{first:?}");
        assert!(
            first.total_bytes - first.offset <= TERM_RING_BYTES as u64,
            "{first:?}"
        );
        assert_eq!(first.missed_bytes, first.offset);
        tm.kill("alice", &id).await.unwrap();
    });
}

/// What is typed into a term is the program's stdin: an interpreter reading its program
/// from it needs `exec.allow_eval`, as a run given stdin does; a script is not eval.
#[test]
fn a_repl_in_a_term_needs_allow_eval() {
    let test = "a_repl_in_a_term_needs_allow_eval";
    let Some(e) = env(test, Where::TierB, |p| p.exec.allow_eval = false) else {
        return;
    };
    e.rt.block_on(async {
        let req = e.request("python3", &["-q", "-i"]);
        let err = e.runner.start_term("alice", &req, SIZE).await.unwrap_err();
        println!("{test}: {} ({err})", err.code());
        assert_eq!(err.code(), "exec.eval_stdin", "{err}");
    });
}

/// A read waiting for output (a long poll with the whole [`MAX_TERM_WAIT_MS`]) returns
/// when the term ends, not when the wait is over: the terminal hangs up (waking the read)
/// before the end is published, and the end wakes it again. It returned after the full
/// 30 s before the end woke readers.
#[test]
fn a_waiting_read_returns_when_the_term_ends() {
    let test = "a_waiting_read_returns_when_the_term_ends";
    let Some(e) = env(test, Where::TierB, |_| {}) else {
        return;
    };
    let tm = e.runner.terms().clone();
    e.rt.block_on(async {
        let id = e.start("bash", &["--norc", "--noprofile", "-i"]).await;
        let mut at = 0;
        tm.write("alice", &id, b"echo ready-$((20+22))\r")
            .await
            .unwrap();
        read_until(&tm, &id, &mut at, "ready-42").await;
        // Everything shown so far read: the next read waits for more.
        loop {
            let chunk = tm.output("alice", &id, at, 64 * 1024, 300).await.unwrap();
            if chunk.next_offset == at {
                break;
            }
            at = chunk.next_offset;
        }
        tm.write("alice", &id, b"exec sleep 0.5\r").await.unwrap();
        let asked = Instant::now();
        let waiting = async {
            let mut from = at;
            // The echo of the line comes first; then the wait that the end must cut short.
            loop {
                let chunk = tm
                    .output("alice", &id, from, 64 * 1024, MAX_TERM_WAIT_MS)
                    .await
                    .unwrap();
                if chunk.next_offset == from {
                    return;
                }
                from = chunk.next_offset;
            }
        };
        waiting.await;
        let took = asked.elapsed();
        let s = tm.status("alice", &id).await.unwrap();
        println!(
            "{test}: the waiting read returned after {took:?}, state {:?}",
            s.state
        );
        assert_ne!(s.state, BackgroundState::Running, "{s:?}");
        assert!(
            took < Duration::from_millis(MAX_TERM_WAIT_MS / 2),
            "the read waited {took:?} past the term's end"
        );
    });
}

/// With redaction on, a word still being typed at a shell echoes once the terminal has
/// been quiet for `TERM_HOLD` — not at the next space or Enter, as when a held word waited
/// for its end — and a token the program prints at its prompt is still redacted whole.
#[test]
fn a_word_being_typed_echoes_and_a_printed_token_stays_redacted() {
    let test = "a_word_being_typed_echoes_and_a_printed_token_stays_redacted";
    let Some(e) = env(test, Where::TierB, |p| p.redaction.enabled = true) else {
        return;
    };
    let tm = e.runner.terms().clone();
    e.rt.block_on(async {
        let id = e.start("bash", &["--norc", "--noprofile", "-i"]).await;
        let mut at = 0;
        // No space or Enter after `re`: its echo shows all the same.
        tm.write("alice", &id, b"echo re").await.unwrap();
        read_until(&tm, &id, &mut at, "echo re").await;
        tm.write("alice", &id, b"ady\r").await.unwrap();
        read_until(&tm, &id, &mut at, "ready").await;
        // The token is put together by the shell, so the typed line holds none of it; it
        // is printed without a newline, and the terminal then stays quiet: the held word
        // is the whole token, redacted as it stands.
        let token = "ghp_0123456789abcdefghijABCDEFGHIJ012345";
        tm.write(
            "alice",
            &id,
            b"a=ghp_0123456789abcdefghij; b=ABCDEFGHIJ012345; printf %s%s $a $b; sleep 2\r",
        )
        .await
        .unwrap();
        let seen = read_until(&tm, &id, &mut at, tierbox_redact::REDACTED).await;
        println!("{test}: the terminal showed {seen:?}");
        assert!(!seen.contains(token), "the token was shown: {seen:?}");
        assert!(seen.contains(tierbox_redact::REDACTED), "{seen:?}");
    });
}

/// A term past its lifetime (the request's `timeout_ms`) is ended with its whole tree —
/// here a shell and the `sleep` it started in the background — and its status says it
/// expired; in every backend.
fn a_term_past_its_lifetime_is_gone_with_its_tree(test: &str, at: Where) {
    let Some(e) = env(test, at, |_| {}) else {
        return;
    };
    let tm = e.runner.terms().clone();
    // A distinctive argument per backend, to find the process from outside.
    let mark = match at {
        Where::TierB => "3072.25",
        Where::TierC(TierCBackend::Native) => "3072.5",
        Where::TierC(_) => "3072.75",
    };
    e.rt.block_on(async {
        let mut req = e.request("bash", &["--norc", "--noprofile", "-i"]);
        req.timeout_ms = Some(3000);
        let id = match e.runner.start_term("alice", &req, SIZE).await {
            Ok(h) => h.status.id,
            Err(err) => panic!("{test}: {err} ({})", err.code()),
        };
        let mut at_offset = 0;
        tm.write(
            "alice",
            &id,
            format!("sleep {mark} & echo bg-$((1+1))\r").as_bytes(),
        )
        .await
        .unwrap();
        read_until(&tm, &id, &mut at_offset, "bg-2").await;
        // The shell echoes before its child has become `sleep`.
        let give_up = Instant::now() + GIVE_UP;
        while !super::background::alive_with_args(&["sleep", mark]) {
            assert!(
                Instant::now() < give_up,
                "{test}: the background sleep never ran"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let s = until_ended(&tm, &id).await;
        println!("{test}: after its lifetime: {:?}", s.state);
        assert_eq!(s.state, BackgroundState::Expired, "{s:?}");
        let give_up = Instant::now() + GIVE_UP;
        while super::background::alive_with_args(&["sleep", mark]) {
            assert!(
                Instant::now() < give_up,
                "{test}: the background sleep survived"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

in_every_backend!(
    a_term_past_its_lifetime,
    a_term_past_its_lifetime_is_gone_with_its_tree
);

/// The busybox image the container cases run in (`tierbox_test_support::container_image`).
const IMAGE: &str = "localhost/tierbox-e2e:busybox";

/// Whether podman, its test image and Tier C are here; skips with the reason otherwise.
fn podman_available(test: &str) -> bool {
    tierbox_test_support::container_image::podman_with(test, IMAGE)
        && tier_c_available(test, TierCBackend::Podman)
}

/// A term in a podman container: the engine's CLI has the run's terminal and relays it
/// to the container's own (`--tty`): a shell there reads what is typed and sees its own
/// terminal (`tty`), its size and a resize, `^C` typed or `SIGINT` asked for interrupts
/// its foreground job and not the shell, its exit status is the term's, and `SIGTERM`
/// reaches the container's main process.
#[test]
fn a_shell_in_a_podman_term() {
    let test = "a_shell_in_a_podman_term";
    if !podman_available(test) {
        return;
    }
    let mut policy = Policy::builtin_default();
    policy.exec.allowed_executables = vec!["sh".to_owned()];
    policy.exec.allow_interpreters = true;
    policy.exec.allow_eval = true;
    policy.tier.backend = TierCBackend::Podman;
    policy.tier.container.image = Some(IMAGE.to_owned());
    policy
        .tier
        .optional_layers
        .push(tierbox_policy::Layer::Landlock);
    let e = Env {
        env: super::background::env_of(policy),
        tier: TierRequest::C,
    };
    let tm = e.runner.terms().clone();
    e.rt.block_on(async {
        let id = e.start("sh", &["-i"]).await;
        let mut at = 0;
        let mut typed = async |line: &str, needle: &str| {
            let line = format!("{line}\r");
            tm.write("alice", &id, line.as_bytes()).await.unwrap();
            read_until(&tm, &id, &mut at, needle).await
        };
        typed("echo typed-$((6*7))", "typed-42").await;
        let out = typed("busybox tty", "/dev/pts/").await;
        println!("{test}: tty -> {:?}", out.trim());
        typed("busybox stty size", "24 80").await;
        let bigger = TermSize {
            rows: 30,
            cols: 100,
        };
        tm.resize("alice", &id, bigger).unwrap();
        // The engine's CLI passes the resize on when it sees it: ask until it has (each
        // answer read up to the shell's next prompt).
        let give_up = Instant::now() + GIVE_UP;
        while !typed("busybox stty size", "$ ").await.contains("30 100") {
            assert!(Instant::now() < give_up, "no resize seen");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Each job says it runs from inside its own process group, so the ^C cannot reach
        // the shell before the job is its terminal's foreground.
        typed(
            "sh -c 'echo sle\"\"ep-started; exec sleep 100'",
            "sleep-started",
        )
        .await;
        tm.write("alice", &id, b"\x03").await.unwrap();
        typed("echo again-$((2+3))", "again-5").await;
        // SIGINT asked for: the container terminal's foreground job, as ^C.
        typed("sh -c 'echo sle\"\"ep-more; exec sleep 100'", "sleep-more").await;
        tm.signal("alice", &id, TermSignal::Int).unwrap();
        typed("echo alive-$((1+1))", "alive-2").await;
        tm.write("alice", &id, b"exit 7\r").await.unwrap();
        let s = until_ended(&tm, &id).await;
        assert_eq!(
            (s.state, s.exit_code),
            (BackgroundState::Exited, Some(7)),
            "{s:?}"
        );
        // Any other signal goes to the container's main process, through the engine.
        let script = "trap 'echo got-term; exit 3' TERM; echo re''ady; while :; do sleep 1; done";
        let id = e.start("sh", &["-c", script]).await;
        let mut at = 0;
        read_until(&tm, &id, &mut at, "ready").await;
        tm.signal("alice", &id, TermSignal::Term).unwrap();
        read_until(&tm, &id, &mut at, "got-term").await;
        let s = until_ended(&tm, &id).await;
        assert_eq!(
            (s.state, s.exit_code),
            (BackgroundState::Exited, Some(3)),
            "{s:?}"
        );
    });
}
