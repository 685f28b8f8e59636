//! Runtime denials read from the kernel's audit subsystem: a program that reads a host
//! secret, writes outside the workspace, calls `ptrace` and `unshare(CLONE_NEWUSER)`, and
//! connects to a host the allowlist does not name sees each refusal in `denials` with its
//! layer, target and hint — in Tier B and both Tier C backends, as far as each backend
//! can say — and two concurrent runs never see each other's. In Tier B the argument
//! rules' refusals (`unshare` flags, a socket family) come with their arguments, audit on
//! or off: the filter hands them to the supervisor.
//!
//! Turning audit on is a host-wide switch, so this binary is kept apart from the other
//! integration tests and does everything in one test, restoring the host's setting when
//! it ends (also on failure). It needs root (the audit socket), else it skips with the
//! reason — and fails under `CI=true`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use tierbox_policy::{EgressMode, Policy, ProcessRunRequest, TierCBackend, TierRequest};
use tierbox_runner::denials::{Denial, DenialLayer};
use tierbox_runner::{Outcome, RunOptions, Runner};
use tierbox_sandbox::linux::audit;

/// The probe: each refusal in turn, printing what the program saw.
const PROBE: &str = r#"
import ctypes, os, socket, sys, urllib.request
# The paths outside the workspace are given in a file: arguments may not name them.
secret, outside = open(sys.argv[1]).read().split("\n")[:2]
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, f):
    try:
        f()
        print(name, "ok")
    except Exception as e:
        print(name, type(e).__name__, e)
attempt("read", lambda: open(secret).read())
attempt("write", lambda: open(outside, "w").write("x"))
print("ptrace", libc.ptrace(16, 1, 0, 0), ctypes.get_errno())
print("unshare", libc.unshare(0x10000000), ctypes.get_errno())
attempt("netlink", lambda: socket.socket(16, socket.SOCK_RAW, 0))
attempt("connect", lambda: urllib.request.urlopen("http://not-allowed.example/", timeout=10))
"#;

/// Reads the file whose path is in the workspace file `argv[1]`.
const READ: &str = r#"
import sys
print(open(open(sys.argv[1]).read()).read())
"#;

/// Restores the host's audit setting when dropped.
struct AuditSwitch {
    was_enabled: bool,
}

impl AuditSwitch {
    fn set(&self, on: bool) {
        audit::set_enabled(on).expect("AUDIT_SET");
    }
}

impl Drop for AuditSwitch {
    fn drop(&mut self) {
        let _ = audit::set_enabled(self.was_enabled);
    }
}

struct Env {
    ws: tempfile::TempDir,
    state: tempfile::TempDir,
    /// Outside the workspace and every grant: `secret` (readable by its owner only)
    /// and where `outside` would be written.
    host: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        let env = Self {
            ws: tempfile::tempdir().unwrap(),
            state: tempfile::tempdir().unwrap(),
            // Outside /tmp: a root supervisor's Tier B run has a /tmp of its own, where
            // the host's files do not exist (no refusal to report).
            host: tempfile::Builder::new().tempdir_in("/var/tmp").unwrap(),
        };
        std::fs::write(env.ws.path().join("probe.py"), PROBE).unwrap();
        std::fs::write(env.ws.path().join("read.py"), READ).unwrap();
        std::fs::write(env.host.path().join("secret"), "host secret\n").unwrap();
        std::fs::write(
            env.ws.path().join("paths"),
            format!("{}\n{}\n", env.secret(), env.outside()),
        )
        .unwrap();
        env
    }

    fn runner(&self, backend: TierCBackend) -> Runner {
        self.runner_of(self.policy(backend))
    }

    fn runner_of(&self, policy: Policy) -> Runner {
        Runner::new(policy)
            .with_workspace(self.ws.path())
            .with_options(RunOptions {
                state_dir: self.state.path().to_path_buf(),
            })
    }

    fn policy(&self, backend: TierCBackend) -> Policy {
        let mut policy = Policy::builtin_default();
        policy.exec.allowed_executables = ["python3", "cat", "true"].map(str::to_owned).to_vec();
        policy.exec.allow_interpreters = true;
        policy.egress.mode = EgressMode::Strict;
        policy.egress.allow = vec!["crates.io".to_owned()];
        policy.tier.backend = backend;
        if backend == TierCBackend::Bwrap {
            // The bwrap backend applies no landlock domain (its mount namespace hides
            // what is not bound).
            policy
                .tier
                .optional_layers
                .push(tierbox_policy::Layer::Landlock);
        }
        policy
    }

    /// [`Env::runner`] whose policy also records Tier C's file refusals.
    fn runner_files(&self, backend: TierCBackend) -> Runner {
        let mut policy = self.policy(backend);
        policy.audit.file_refusals = true;
        self.runner_of(policy)
    }

    /// Checks the file refusals a Tier C probe run lists: the secret's read (hidden) and
    /// the write outside the workspace, each with the grant that would allow it.
    fn assert_file_refusals(&self, o: &Outcome, backend: &str) {
        let (applied, detail) = report(o, DenialLayer::Mounts);
        assert!(applied, "{backend}: {detail}");
        assert!(detail.contains("audit.file_refusals"), "{detail}");
        let mounts: Vec<(&str, &str)> = o
            .denials
            .iter()
            .filter(|d| d.layer == DenialLayer::Mounts)
            .map(|d| (d.operation.as_str(), d.target.as_str()))
            .collect();
        assert_eq!(
            mounts,
            [
                ("read", self.secret().as_str()),
                ("write", self.outside().as_str())
            ],
            "{backend}: {:?}",
            o.denials
        );
        let read = find(o, DenialLayer::Mounts, "read").unwrap();
        assert_eq!(
            read.hint,
            format!("filesystem.read_only += \"{}\"", self.secret())
        );
        let write = find(o, DenialLayer::Mounts, "write").unwrap();
        assert_eq!(
            write.hint,
            format!("filesystem.writable += \"{}\"", self.outside())
        );
    }

    fn secret(&self) -> String {
        self.host.path().join("secret").display().to_string()
    }

    fn outside(&self) -> String {
        self.host.path().join("written").display().to_string()
    }

    fn probe(&self, tier: TierRequest) -> ProcessRunRequest {
        let mut r = ProcessRunRequest::new("python3");
        r.args = vec!["probe.py".to_owned(), "paths".to_owned()];
        r.tier = tier;
        r
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn run(runner: &Runner, req: &ProcessRunRequest) -> Outcome {
    rt().block_on(runner.run(req)).unwrap()
}

fn find<'a>(o: &'a Outcome, layer: DenialLayer, operation: &str) -> Option<&'a Denial> {
    o.denials
        .iter()
        .find(|d| d.layer == layer && d.operation == operation)
}

fn report(o: &Outcome, layer: DenialLayer) -> (bool, &str) {
    let r = &o.enforcement.denial_reports[&layer];
    (r.applied, r.detail.as_str())
}

#[test]
fn denials_are_read_from_the_kernel_audit_records_and_never_mixed_between_runs() {
    let test = "denials_are_read_from_the_kernel_audit_records_and_never_mixed_between_runs";
    let facts = tierbox_sandbox::probe::host_facts();
    if facts.euid != 0 {
        tierbox_test_support::skip(test, "reading the kernel's audit records needs root");
        return;
    }
    let was_enabled = match audit::enabled_now() {
        Ok(on) => on,
        Err(e) => {
            tierbox_test_support::skip(test, &format!("no kernel audit socket: {e}"));
            return;
        }
    };
    if facts.landlock_abi.unwrap_or(0) < audit::LANDLOCK_LOG_ABI {
        tierbox_test_support::skip(test, "landlock ABI 7 (kernel 6.15) logs denials");
        return;
    }
    if !Path::new("/usr/bin/python3").exists() && which("python3").is_none() {
        tierbox_test_support::skip(test, "python3 is not installed");
        return;
    }
    let switch = AuditSwitch { was_enabled };
    let env = Env::new();

    // 1. Audit off: the layers say so; nothing is made up. The refusals the filter hands
    //    to the supervisor (Tier B, both Tier C backends) are recorded all the same, with their
    //    arguments.
    switch.set(false);
    let bwrap = tierbox_sandbox::bwrap::probe_bwrap(None).is_ok();
    let runs = [
        (TierRequest::B, TierCBackend::Native),
        (TierRequest::C, TierCBackend::Native),
        (TierRequest::C, TierCBackend::Bwrap),
    ];
    for (tier, backend) in runs
        .into_iter()
        .filter(|r| bwrap || r.1 != TierCBackend::Bwrap)
    {
        let off = run(&env.runner(backend), &env.probe(tier));
        let out = &off.stdout.text;
        assert!(out.contains("unshare -1 1"), "{tier:?}: {off:?}");
        assert!(
            out.contains("netlink OSError [Errno 97]"),
            "{tier:?}: {out}"
        );
        let (applied, detail) = report(&off, DenialLayer::Landlock);
        assert!(!applied, "{tier:?}: {detail}");
        assert!(
            detail.contains("audit subsystem is disabled") || detail.contains("bwrap"),
            "{detail}"
        );
        let (applied, detail) = report(&off, DenialLayer::Seccomp);
        assert!(applied, "{tier:?}: {detail}");
        assert!(detail.contains("handed to the supervisor"), "{detail}");
        assert!(
            detail
                .contains("other refusals not recorded: the kernel's audit subsystem is disabled"),
            "{detail}"
        );
        if tier == TierRequest::C {
            // Not asked for: said so, with the key that asks.
            let (applied, detail) = report(&off, DenialLayer::Mounts);
            assert!(
                !applied && detail.contains("audit.file_refusals = true"),
                "{detail}"
            );
            // Asked for, with audit off: said so.
            let asked = run(&env.runner_files(backend), &env.probe(tier));
            let (applied, detail) = report(&asked, DenialLayer::Mounts);
            assert!(
                !applied && detail.contains("audit subsystem is disabled"),
                "{detail}"
            );
        }
        let listed: Vec<(DenialLayer, &str, &str)> = off
            .denials
            .iter()
            .filter(|d| d.layer != DenialLayer::Egress)
            .map(|d| (d.layer, d.operation.as_str(), d.target.as_str()))
            .collect();
        assert_eq!(
            listed,
            [
                (DenialLayer::Seccomp, "unshare", "CLONE_NEWUSER"),
                (DenialLayer::Seccomp, "socket", "AF_NETLINK, SOCK_RAW"),
            ],
            "{tier:?}: {:?}",
            off.denials
        );
    }

    // 2. Audit on, Tier B: every refusal, with its layer, target and hint.
    switch.set(true);
    let b = run(
        &env.runner(TierCBackend::Native),
        &env.probe(TierRequest::B),
    );
    let out = &b.stdout.text;
    assert!(out.contains("read PermissionError"), "{out}");
    assert!(out.contains("ptrace -1 1"), "{out}");
    assert!(out.contains("unshare -1 1"), "{out}");
    for layer in [DenialLayer::Landlock, DenialLayer::Seccomp] {
        let (applied, detail) = report(&b, layer);
        assert!(applied, "{layer}: {detail}");
        assert!(!detail.contains("incomplete"), "{layer}: {detail}");
    }
    let read = find(&b, DenialLayer::Landlock, "read").expect("the secret's read");
    assert_eq!(read.target, env.secret());
    assert_eq!(
        read.hint,
        format!("filesystem.read_only += \"{}\"", env.secret())
    );
    assert!(read.first_ms.is_some());
    let write = b
        .denials
        .iter()
        .find(|d| d.layer == DenialLayer::Landlock && d.operation.starts_with("make-reg"))
        .expect("the write outside the workspace");
    assert_eq!(write.target, env.host.path().display().to_string());
    assert!(
        write.hint.starts_with("filesystem.writable += "),
        "{write:?}"
    );
    let ptrace = find(&b, DenialLayer::Seccomp, "ptrace").expect("ptrace");
    assert!(
        ptrace.hint.starts_with("not allowed by any policy"),
        "{ptrace:?}"
    );
    let unshare = find(&b, DenialLayer::Seccomp, "unshare").expect("unshare");
    assert_eq!(unshare.target, "CLONE_NEWUSER", "{unshare:?}");
    assert!(
        unshare
            .hint
            .starts_with("not allowed by any policy: no nested namespaces"),
        "{unshare:?}"
    );
    let netlink = find(&b, DenialLayer::Seccomp, "socket").expect("the netlink socket");
    assert_eq!(netlink.target, "AF_NETLINK, SOCK_RAW", "{netlink:?}");
    assert!(
        netlink.hint.starts_with("not allowed by any policy"),
        "{netlink:?}"
    );
    assert_eq!(
        b.denials
            .iter()
            .filter(|d| d.layer == DenialLayer::Seccomp)
            .count(),
        3,
        "each refusal once, from one source: {:?}",
        b.denials
    );
    let (_, detail) = report(&b, DenialLayer::Seccomp);
    assert!(
        detail.contains("handed to the supervisor")
            && detail.contains("every other refusal from the kernel's audit records"),
        "{detail}"
    );
    let connect = find(&b, DenialLayer::Egress, "connect").expect("the proxy's refusal");
    assert_eq!(connect.target, "not-allowed.example:80");
    assert_eq!(connect.hint, "egress.allow += \"not-allowed.example:80\"");

    // 3. Native Tier C: the secret is absent there (ENOENT, not a refusal) and the host
    //    is read-only (EROFS); the system calls are refused and recorded, the argument
    //    rules' with their arguments.
    let c = run(
        &env.runner_files(TierCBackend::Native),
        &env.probe(TierRequest::C),
    );
    let out = &c.stdout.text;
    assert!(out.contains("read FileNotFoundError"), "{out}");
    assert!(out.contains("ptrace -1 1"), "{out}");
    for layer in [DenialLayer::Landlock, DenialLayer::Seccomp] {
        let (applied, detail) = report(&c, layer);
        assert!(applied, "{layer}: {detail}");
    }
    let listed: Vec<(DenialLayer, &str)> = c
        .denials
        .iter()
        .map(|d| (d.layer, d.operation.as_str()))
        .collect();
    for expected in [
        (DenialLayer::Seccomp, "ptrace"),
        (DenialLayer::Seccomp, "unshare"),
        (DenialLayer::Seccomp, "socket"),
        (DenialLayer::Egress, "connect"),
    ] {
        assert!(listed.contains(&expected), "{expected:?} in {listed:?}");
    }
    let unshare = find(&c, DenialLayer::Seccomp, "unshare").unwrap();
    assert_eq!(unshare.target, "CLONE_NEWUSER", "{unshare:?}");
    let netlink = find(&c, DenialLayer::Seccomp, "socket").unwrap();
    assert_eq!(netlink.target, "AF_NETLINK, SOCK_RAW", "{netlink:?}");
    assert!(
        !listed.contains(&(DenialLayer::Landlock, "read")),
        "{listed:?}"
    );
    env.assert_file_refusals(&c, "native");

    // 4. bwrap: no landlock domain (said so, none listed); bwrap's own filter is never
    //    logged and has no listener, so tierbox-init stacks the whole filter with both:
    //    the refused calls are recorded, the argument rules' with their arguments.
    if tierbox_sandbox::bwrap::probe_bwrap(None).is_ok() {
        let w = run(
            &env.runner_files(TierCBackend::Bwrap),
            &env.probe(TierRequest::C),
        );
        let out = &w.stdout.text;
        assert!(out.contains("read FileNotFoundError"), "{out}");
        assert!(out.contains("ptrace -1 1"), "{out}");
        assert!(out.contains("unshare -1 1"), "{out}");
        let (applied, detail) = report(&w, DenialLayer::Landlock);
        assert!(!applied && detail.contains("bwrap"), "{detail}");
        let (applied, detail) = report(&w, DenialLayer::Seccomp);
        assert!(applied, "{detail}");
        assert!(!detail.contains("incomplete"), "{detail}");
        let ptrace = find(&w, DenialLayer::Seccomp, "ptrace").expect("ptrace under bwrap");
        assert!(
            ptrace.hint.starts_with("not allowed by any policy"),
            "{ptrace:?}"
        );
        let unshare = find(&w, DenialLayer::Seccomp, "unshare").expect("unshare under bwrap");
        assert_eq!(unshare.target, "CLONE_NEWUSER", "{unshare:?}");
        let netlink = find(&w, DenialLayer::Seccomp, "socket").expect("netlink under bwrap");
        assert_eq!(netlink.target, "AF_NETLINK, SOCK_RAW", "{netlink:?}");
        assert!(
            detail.contains("handed to the supervisor")
                && detail.contains("every other refusal from the kernel's audit records"),
            "{detail}"
        );
        assert!(
            find(&w, DenialLayer::Egress, "connect").is_some(),
            "{:?}",
            w.denials
        );
        assert!(
            w.denials.iter().all(|d| d.layer != DenialLayer::Landlock),
            "{:?}",
            w.denials
        );
        env.assert_file_refusals(&w, "bwrap");
    } else {
        tierbox_test_support::skip(test, "bubblewrap is not installed (the bwrap part)");
    }

    // 5. A run refused nothing: an empty list, the layers still recorded.
    let mut t = ProcessRunRequest::new("true");
    t.tier = TierRequest::B;
    let clean = run(&env.runner(TierCBackend::Native), &t);
    assert!(clean.denials.is_empty(), "{:?}", clean.denials);
    assert!(report(&clean, DenialLayer::Landlock).0);

    // 6. Two concurrent runs, each refused its own file: neither sees the other's.
    let other = tempfile::Builder::new().tempdir_in("/var/tmp").unwrap();
    std::fs::write(other.path().join("secret"), "other\n").unwrap();
    let runner = env.runner(TierCBackend::Native);
    let read = |path: String, name: &str| {
        std::fs::write(env.ws.path().join(name), path).unwrap();
        let mut r = ProcessRunRequest::new("python3");
        r.args = vec!["read.py".to_owned(), name.to_owned()];
        r.tier = TierRequest::B;
        r
    };
    let (first, second) = (
        read(env.secret(), "first"),
        read(other.path().join("secret").display().to_string(), "second"),
    );
    let targets = |o: &Outcome| -> Vec<String> {
        o.denials
            .iter()
            .filter(|d| d.layer == DenialLayer::Landlock)
            .map(|d| d.target.clone())
            .collect()
    };
    let each_sees_its_own = |runner: &Runner| {
        let (x, y) = rt().block_on(async { tokio::join!(runner.run(&first), runner.run(&second)) });
        let (x, y) = (x.unwrap(), y.unwrap());
        assert_eq!(targets(&x), vec![env.secret()], "{:?}", x.denials);
        assert_eq!(
            targets(&y),
            vec![other.path().join("secret").display().to_string()],
            "{:?}",
            y.denials
        );
    };
    each_sees_its_own(&runner);
    // The same in native Tier C with file refusals recorded: each run lists the hidden
    // secret it read, never the other's.
    let files = env.runner_files(TierCBackend::Native);
    let in_c = |mut r: ProcessRunRequest| {
        r.tier = TierRequest::C;
        r
    };
    let (first_c, second_c) = (in_c(first.clone()), in_c(second.clone()));
    let (x, y) = rt().block_on(async { tokio::join!(files.run(&first_c), files.run(&second_c)) });
    let (x, y) = (x.unwrap(), y.unwrap());
    let hidden = |o: &Outcome| -> Vec<String> {
        o.denials
            .iter()
            .filter(|d| d.layer == DenialLayer::Mounts)
            .map(|d| d.target.clone())
            .collect()
    };
    assert_eq!(hidden(&x), vec![env.secret()], "{:?}", x.denials);
    assert_eq!(
        hidden(&y),
        vec![other.path().join("secret").display().to_string()],
        "{:?}",
        y.denials
    );
    // Every run's rule is gone once the removals are flushed (as the CLI does at exit).
    assert!(audit::files::flush_rule_removals());
    assert_eq!(audit::files::rules_held().unwrap(), 0);

    // 7. Warm slots (a long-lived supervisor): the slot's launcher thread carries the log
    //    flags and an audit session each run adopts in turn. The same refusals are
    //    recorded; a run after a refused one on the same slot inherits none of them; two
    //    concurrent runs (two slots) see only their own.
    tierbox_sandbox::launch::slots::set_pooling(true);
    let pooled = env.runner(TierCBackend::Native);
    // A repository of the workspace's own: its `.git` is bound read-only by the slot's
    // thread (a missing one would need a placeholder for each run, which only a child
    // that makes its own namespace can cover).
    std::fs::create_dir(env.ws.path().join(".git")).unwrap();
    for round in 0..3 {
        let p = run(&pooled, &env.probe(TierRequest::B));
        // Every pooled run inherits its filter from the slot's thread, a run with a
        // private /tmp and /dev/shm (a root supervisor's, here with its workspace beneath
        // /tmp and so bound back onto a mount point) and protected paths too: the thread
        // holds the mounts.
        assert!(
            p.enforcement
                .seccomp
                .detail
                .contains("inherited from the launcher thread"),
            "round {round}: {}",
            p.enforcement.seccomp.detail
        );
        let read = find(&p, DenialLayer::Landlock, "read").expect("the secret's read, pooled");
        assert_eq!(read.target, env.secret());
        assert_eq!(read.count, 1, "round {round}: {read:?}");
        assert!(
            find(&p, DenialLayer::Seccomp, "ptrace").is_some(),
            "{:?}",
            p.denials
        );
        assert_eq!(
            find(&p, DenialLayer::Seccomp, "unshare").map(|d| d.target.as_str()),
            Some("CLONE_NEWUSER"),
            "{:?}",
            p.denials
        );
        let after = run(&pooled, &t);
        assert!(
            after.denials.is_empty(),
            "round {round}: {:?}",
            after.denials
        );
        assert!(report(&after, DenialLayer::Seccomp).0);
    }
    each_sees_its_own(&pooled);
    tierbox_sandbox::launch::slots::set_pooling(false);
    drop(switch);
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })
}
