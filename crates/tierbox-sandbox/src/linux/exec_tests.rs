//! The order of the program's setup, checked against a recorder instead of the kernel:
//! no root, no child process.

use std::cell::RefCell;

use super::*;

/// Records each call by name; fails the call named `fail_at` with `EPERM` (shared with
/// the tests of the steps that run before the program's, `launch::prefix`).
#[derive(Default)]
pub(crate) struct Recorder {
    calls: RefCell<Vec<String>>,
    fail_at: Option<&'static str>,
}

impl Recorder {
    pub(crate) fn failing(at: &'static str) -> Self {
        Self {
            fail_at: Some(at),
            ..Self::default()
        }
    }

    pub(crate) fn call(&self, name: &str) -> Result<(), i32> {
        self.calls.borrow_mut().push(name.to_owned());
        if self.fail_at == Some(name) {
            Err(libc::EPERM)
        } else {
            Ok(())
        }
    }

    pub(crate) fn names(&self) -> Vec<String> {
        self.calls.borrow().clone()
    }
}

impl ProgramCalls for Recorder {
    fn new_session(&self) -> Result<(), i32> {
        self.call("setsid()")
    }
    fn controlling_terminal(&self, fd: RawFd) -> Result<(), i32> {
        self.call(&format!("ioctl({fd}, TIOCSCTTY)"))
    }
    fn dup_to(&self, src: RawFd, dst: RawFd) -> Result<(), i32> {
        self.call(&format!("dup3({src}, {dst})"))
    }
    fn cloexec_from(&self, first: RawFd) -> Result<(), i32> {
        self.call(&format!("close_range({first}, cloexec)"))
    }
    fn close_range(&self, first: RawFd, last: RawFd) -> Result<(), i32> {
        if last == RawFd::MAX {
            self.call(&format!("close({first}..)"))
        } else {
            self.call(&format!("close({first}..={last})"))
        }
    }
    fn chdir(&self, _path: *const c_char) -> Result<(), i32> {
        self.call("chdir")
    }
    fn umask(&self, mask: u32) {
        let _ = self.call(&format!("umask({mask:o})"));
    }
    fn prlimit(&self, resource: c_int, _limit: &libc::rlimit64) -> Result<(), i32> {
        self.call(&format!("prlimit({resource})"))
    }
    fn securebits_noroot(&self) -> Result<(), i32> {
        self.call("securebits")
    }
    fn drop_bounding_set(&self, _last_cap: u32) -> Result<(), i32> {
        self.call("bounding")
    }
    fn clear_ambient(&self) -> Result<(), i32> {
        self.call("ambient")
    }
    fn set_ids(&self, uid: u32, gid: u32) -> Result<(), i32> {
        self.call(&format!("set_ids({uid}, {gid})"))
    }
    fn clear_groups(&self) -> Result<(), i32> {
        self.call("clear_groups")
    }
    fn capset_zero(&self) -> Result<(), i32> {
        self.call("capset")
    }
    fn die_with_parent(&self, parent: libc::pid_t) -> Result<(), i32> {
        self.call(&format!("pdeathsig({parent})"))
    }
    fn no_new_privs(&self) -> Result<(), i32> {
        self.call("no_new_privs")
    }
    fn landlock_restrict(&self, fd: RawFd, log: bool) -> Result<(), i32> {
        self.call(&format!("landlock({fd}{})", if log { ", log" } else { "" }))
    }
    fn seccomp(
        &self,
        _prog: &libc::sock_fprog,
        listener_sock: RawFd,
        log: bool,
    ) -> Result<(), i32> {
        self.call(&format!(
            "seccomp(listener {listener_sock}{})",
            if log { ", log" } else { "" }
        ))
    }
    fn unblock_signals(&self) -> Result<(), i32> {
        self.call("sigmask")
    }
    fn execve(
        &self,
        _program: *const c_char,
        _argv: *const *const c_char,
        _envp: *const *const c_char,
    ) -> i32 {
        let _ = self.call("execve");
        libc::ENOENT
    }
}

const LIMITS: [(c_int, libc::rlimit64); 2] = [
    (
        libc::RLIMIT_NOFILE as c_int,
        libc::rlimit64 {
            rlim_cur: 64,
            rlim_max: 64,
        },
    ),
    (
        libc::RLIMIT_CORE as c_int,
        libc::rlimit64 {
            rlim_cur: 0,
            rlim_max: 0,
        },
    ),
];

const FILTER: libc::sock_fprog = libc::sock_fprog {
    len: 0,
    filter: std::ptr::null_mut(),
};

/// A Tier B program under a root supervisor: ids switched, chmod mediated.
pub(crate) fn tier_b(inherit: &[(RawFd, RawFd)]) -> ExecSpec<'_> {
    ExecSpec {
        stdio: [10, 11, 12],
        terminal: None,
        inherit,
        inherit_min_src: 16,
        cwd: c"/ws".as_ptr(),
        umask: None,
        rlimits: &LIMITS,
        privileges: Privileges {
            drop_privileged: true,
            last_cap: 40,
            ids: Some((1000, 1000)),
            clear_groups: false,
            keep_caps: false,
            rearm_pdeathsig: Some(77),
        },
        landlock_fd: 20,
        seccomp: Some(&FILTER),
        seccomp_listener_sock: 21,
        log_landlock: false,
        log_seccomp: false,
        program: c"/bin/true".as_ptr(),
        argv: std::ptr::null(),
        envp: std::ptr::null(),
    }
}

/// The native Tier C program: ns uid 0 switching to the sandbox's user, with a umask.
fn tier_c() -> ExecSpec<'static> {
    ExecSpec {
        umask: Some(0o022),
        privileges: Privileges {
            ids: Some((1000, 1000)),
            rearm_pdeathsig: None,
            ..tier_b(&[]).privileges
        },
        seccomp_listener_sock: -1,
        ..tier_b(&[])
    }
}

#[test]
fn tier_b_runs_every_step_in_order_and_reports_a_failed_execve() {
    let r = Recorder::default();
    assert_eq!(run(&r, &tier_b(&[])), (Step::Execve, libc::ENOENT));
    assert_eq!(
        r.names(),
        [
            "dup3(10, 0)",
            "dup3(11, 1)",
            "dup3(12, 2)",
            "close_range(3, cloexec)",
            "close(3..=19)",
            "close(22..)",
            "chdir",
            "prlimit(7)",
            "prlimit(4)",
            "securebits",
            "bounding",
            "ambient",
            "set_ids(1000, 1000)",
            "capset",
            "pdeathsig(77)",
            "no_new_privs",
            "landlock(20)",
            "seccomp(listener 21)",
            "sigmask",
            "execve",
        ]
    );
}

#[test]
fn tier_c_sets_its_umask_after_chdir_and_does_not_rearm_a_death_signal() {
    let r = Recorder::default();
    run(&r, &tier_c());
    let names = r.names();
    let at = |name: &str| names.iter().position(|n| n == name);
    assert_eq!(at("umask(22)"), at("chdir").map(|i| i + 1), "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with("pdeathsig")),
        "{names:?}"
    );
    assert!(
        names.contains(&"seccomp(listener -1)".to_owned()),
        "{names:?}"
    );
}

#[test]
fn the_privileged_and_landlock_steps_are_skipped_when_not_asked_for() {
    let r = Recorder::default();
    let spec = ExecSpec {
        privileges: Privileges {
            drop_privileged: false,
            ids: None,
            rearm_pdeathsig: Some(77),
            ..tier_b(&[]).privileges
        },
        landlock_fd: -1,
        seccomp: None,
        ..tier_b(&[])
    };
    run(&r, &spec);
    let names = r.names();
    for absent in [
        "securebits",
        "bounding",
        "ambient",
        "set_ids",
        "pdeathsig",
        "landlock",
        "seccomp",
    ] {
        assert!(
            !names.iter().any(|n| n.starts_with(absent)),
            "{absent}: {names:?}"
        );
    }
    // capset(0) is never skipped for a program, with or without an id switch.
    assert!(names.contains(&"capset".to_owned()), "{names:?}");
}

#[test]
fn a_helper_keeps_its_capabilities_and_gets_its_inherited_fds_in_range_only() {
    let r = Recorder::default();
    let inherit = [(16, 3), (17, 4), (5, 5), (18, 16), (-1, -1)];
    let spec = ExecSpec {
        privileges: Privileges {
            ids: None,
            clear_groups: true,
            keep_caps: true,
            ..tier_b(&inherit).privileges
        },
        ..tier_b(&inherit)
    };
    run(&r, &spec);
    let names = r.names();
    let close = names
        .iter()
        .position(|n| n == "close_range(3, cloexec)")
        .unwrap_or(usize::MAX);
    assert_eq!(names[close + 1..close + 3], ["dup3(16, 3)", "dup3(17, 4)"]);
    // The inherited range below 16 stays; above it only the landlock ruleset (20) and
    // the listener's socket (21) do.
    assert_eq!(
        names[close + 3..close + 6],
        ["close(16..=19)", "close(22..)", "chdir"],
        "{names:?}"
    );
    assert!(names.contains(&"clear_groups".to_owned()), "{names:?}");
    assert!(!names.contains(&"capset".to_owned()), "{names:?}");
    // The ambient set is emptied even when the other sets are kept.
    assert!(names.contains(&"ambient".to_owned()), "{names:?}");
}

#[test]
fn a_failing_step_stops_the_sequence_and_is_named() {
    let cases = [
        ("dup3(11, 1)", Step::Stdio),
        ("close_range(3, cloexec)", Step::CloseFds),
        ("chdir", Step::Chdir),
        ("prlimit(4)", Step::Rlimit),
        ("bounding", Step::DropBounding),
        ("set_ids(1000, 1000)", Step::SetIds),
        ("capset", Step::Capset),
        ("pdeathsig(77)", Step::Pdeathsig),
        ("no_new_privs", Step::NoNewPrivs),
        ("landlock(20)", Step::Landlock),
        ("seccomp(listener 21)", Step::Seccomp),
        ("sigmask", Step::SignalMask),
    ];
    each_failure_stops_at_its_step(&cases, "execve", |r| run(r, &tier_b(&[])));
}

/// Fails each call of `cases` in turn (with `EPERM`): `run` must stop there, name its
/// step, and never reach a call starting with `never`.
pub(crate) fn each_failure_stops_at_its_step(
    cases: &[(&'static str, Step)],
    never: &str,
    run: impl Fn(&Recorder) -> (Step, i32),
) {
    for &(call, step) in cases {
        let r = Recorder::failing(call);
        assert_eq!(run(&r), (step, libc::EPERM), "{call}");
        assert_eq!(r.names().last().map(String::as_str), Some(call));
        assert!(!r.names().iter().any(|n| n.starts_with(never)), "{call}");
    }
}

/// With a terminal, the program takes it as its controlling terminal right after stdio:
/// Tier B's child (a session leader since its own `setsid`) with `TIOCSCTTY` alone, native
/// Tier C's program after a `setsid` of its own; a failure there is named.
#[test]
fn a_terminal_becomes_the_controlling_terminal_right_after_stdio() {
    for (setup, expected) in [
        (TerminalSetup::Take, &["ioctl(0, TIOCSCTTY)"][..]),
        (
            TerminalSetup::NewSession,
            &["setsid()", "ioctl(0, TIOCSCTTY)"][..],
        ),
    ] {
        let r = Recorder::default();
        run(
            &r,
            &ExecSpec {
                terminal: Some(setup),
                ..tier_b(&[])
            },
        );
        let names = r.names();
        assert_eq!(names[3..3 + expected.len()], *expected, "{names:?}");
        assert_eq!(names[3 + expected.len()], "close_range(3, cloexec)");
    }
    let r = Recorder::failing("ioctl(0, TIOCSCTTY)");
    let spec = ExecSpec {
        terminal: Some(TerminalSetup::Take),
        ..tier_b(&[])
    };
    assert_eq!(run(&r, &spec).0, Step::ControllingTerminal);
    // Without one, neither call is made.
    let r = Recorder::default();
    run(&r, &tier_b(&[]));
    assert!(
        !r.names()
            .iter()
            .any(|n| n.contains("TIOCSCTTY") || n == "setsid()")
    );
}
