//! The order of pid 1's setup, checked against a recorder instead of the kernel: no
//! root, no namespace.

use std::ffi::CString;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicI32, AtomicU32};

use super::*;
use crate::linux::exec::tests::{Recorder, each_failure_stops_at_its_step};
use crate::linux::ns::child::OwnedOp;

fn name(path: &CStr) -> String {
    path.to_string_lossy().into_owned()
}

impl InitCalls for Recorder {
    fn reset_signal_handlers(&self) {
        let _ = self.call("sig_dfl");
    }
    fn set_pdeathsig(&self) -> Result<(), i32> {
        self.call("pdeathsig")
    }
    fn supervisor_gone(&self, fd: RawFd) -> bool {
        self.call(&format!("reader?({fd})")).is_err()
    }
    fn cgroup_attach(&self, fd: RawFd) -> Result<(), i32> {
        self.call(&format!("cgroup({fd})"))
    }
    fn wait_for_byte(&self, fd: RawFd) -> Result<(), i32> {
        self.call(&format!("wait({fd})"))
    }
    fn close(&self, fd: RawFd) {
        let _ = self.call(&format!("close({fd})"));
    }
    fn write_proc_self(&self, path: &CStr, _content: &[u8]) -> Result<(), i32> {
        self.call(&format!("write({})", name(path)))
    }
    fn setsid(&self) -> Result<(), i32> {
        self.call("setsid")
    }
    fn sethostname(&self, host: &[u8]) -> Result<(), i32> {
        self.call(&format!("hostname({})", String::from_utf8_lossy(host)))
    }
    fn loopback_up(&self) -> Result<(), i32> {
        self.call("lo_up")
    }
    fn send_listener(&self, sock: RawFd, port: u16) -> Result<(), i32> {
        self.call(&format!("listener({sock}, {port})"))
    }
    fn send_namespaces(&self, sock: RawFd) -> Result<(), i32> {
        self.call(&format!("namespaces({sock})"))
    }
    fn umask(&self, mask: u32) {
        let _ = self.call(&format!("umask({mask:o})"));
    }
    fn move_tree(&self, tree: RawFd, dst: &CStr) -> Result<(), (SubCall, i32)> {
        let call = self.call(&format!("move_tree({tree}, {})", name(dst)));
        call.map_err(|e| (SubCall::MoveMount, e))
    }
    fn send_dir_fd(&self, op: &NsOp<'_>, sock: RawFd) -> Result<(), (SubCall, i32)> {
        let call = self.call(&format!("send_fd({}, {sock})", name(op.dst)));
        call.map_err(|e| (SubCall::SendFd, e))
    }
    fn run_op(&self, op: &NsOp<'_>) -> Result<(), (SubCall, i32)> {
        let call = self.call(&format!("op({})", name(op.dst)));
        call.map_err(|e| (SubCall::Mount, e))
    }
    fn add_landlock_rule(&self, ruleset: RawFd, path: &CStr, _access: u64) -> Result<(), i32> {
        self.call(&format!("rule({ruleset}, {})", name(path)))
    }
    fn wipe_arg_area(&self, _area: (usize, usize)) {
        let _ = self.call("wipe_args");
    }
    fn not_dumpable(&self) -> Result<(), i32> {
        self.call("not_dumpable")
    }
    fn set_dumpable(&self, on: bool) -> Result<(), i32> {
        self.call(&format!("dumpable({})", u8::from(on)))
    }
    fn set_name(&self, comm: &CStr) -> Result<(), i32> {
        self.call(&format!("name({})", name(comm)))
    }
    fn start_program(&self, _spec: &NsSpec<'_>) -> Result<libc::pid_t, (Step, i32)> {
        // A program that fails reports its own step (here: landlock).
        self.call("program")
            .map(|()| 2)
            .map_err(|e| (Step::Landlock, e))
    }
    fn close_all_but(&self, keep: &[RawFd; 2]) {
        let _ = self.call(&format!("close_all_but({}, {})", keep[0], keep[1]));
    }
    fn set_ids(&self, uid: u32, gid: u32) -> Result<(), i32> {
        self.call(&format!("set_ids({uid}, {gid})"))
    }
    fn capset_zero(&self) -> Result<(), i32> {
        self.call("capset")
    }
    fn no_new_privs(&self) -> Result<(), i32> {
        self.call("no_new_privs")
    }
    fn report(&self, fd: RawFd, report: &Report) -> Result<(), i32> {
        let started = report.tag == ReportTag::Started as u32;
        let tag = if started { "started" } else { "other" };
        self.call(&format!("report({fd}, {tag}, pid {})", report.value))
    }
}

/// Op 0 mounts, op 1 sends its fd, op 2 is replaced by a moved tree ([`MOVED`]).
fn ops() -> &'static [NsOp<'static>] {
    static OWNED: LazyLock<[OwnedOp; 3]> = LazyLock::new(|| {
        let op = |kind, dst: &str| {
            OwnedOp::new(kind, CString::new(dst).unwrap_or_default(), String::new())
        };
        [
            op(OpKind::Mount, "/newroot"),
            op(OpKind::SendFd, "/tmp"),
            op(OpKind::BindTree, "/ws"),
        ]
    });
    static OPS: LazyLock<Vec<NsOp<'static>>> =
        LazyLock::new(|| OWNED.iter().map(OwnedOp::borrow).collect());
    &OPS
}

const CGROUPS: [RawFd; 2] = [30, 31];
const RULES: [(&CStr, u64); 1] = [(c"/tmp", 3)];
/// A detached tree moved in instead of op 2.
const MOVED: [(usize, RawFd); 1] = [(2, 60)];

/// Under an unprivileged supervisor: pid 1 writes its own id maps, brings `lo` up in the
/// namespace it made, and keeps its ids; no egress proxy.
fn unprivileged() -> NsSpec<'static> {
    NsSpec {
        uid_map: b"1000 1000 1\n",
        gid_map: b"1000 1000 1\n",
        hostname: b"sandbox",
        ops: ops(),
        program: c"/bin/true",
        argv: std::ptr::null(),
        envp: std::ptr::null(),
        cwd: c"/ws",
        init_name: c"tierbox-init",
        stdin_fd: 3,
        stdout_fd: 4,
        stderr_fd: 5,
        report_fd: 9,
        loopback_up: true,
        proxy_fd: -1,
        listen_ports: &[3128, 5432],
        send_namespaces: false,
        fs_fd: 8,
        rlimits: [(
            0,
            libc::rlimit64 {
                rlim_cur: 0,
                rlim_max: 0,
            },
        ); 5],
        last_cap: 40,
        seccomp: None,
        seccomp_listener_fd: -1,
        terminal_fd: -1,
        terminal_size: (0, 0),
        cgroup_fds: &CGROUPS,
        landlock_fd: 11,
        log_landlock: false,
        log_seccomp: false,
        landlock_rules: &RULES,
        arg_area: (0, 0),
        program_stack_top: std::ptr::null_mut(),
        reaper_fd: 12,
        maps_ready_fd: -1,
        switch_ids: false,
        moved_trees: &MOVED,
        fail_step: AtomicU32::new(0),
        fail_errno: AtomicI32::new(0),
    }
}

/// Under a root supervisor: it writes the id maps and says so, the network namespace is
/// a pooled one (`lo` already up), an egress proxy listens, and pid 1 switches ids.
fn root() -> NsSpec<'static> {
    NsSpec {
        maps_ready_fd: 14,
        switch_ids: true,
        loopback_up: false,
        proxy_fd: 15,
        landlock_fd: -1,
        ..unprivileged()
    }
}

#[test]
fn pid_1_under_an_unprivileged_supervisor_runs_every_step_in_order() {
    let r = Recorder::default();
    assert_eq!(init_setup(&r, &unprivileged()), Ok(2));
    assert_eq!(
        r.names(),
        [
            "sig_dfl",
            "pdeathsig",
            "reader?(9)",
            "cgroup(30)",
            "cgroup(31)",
            "dumpable(1)",
            "write(/proc/self/uid_map)",
            "write(/proc/self/setgroups)",
            "write(/proc/self/gid_map)",
            "dumpable(0)",
            "setsid",
            "hostname(sandbox)",
            "lo_up",
            "umask(0)",
            "op(/newroot)",
            "send_fd(/tmp, 8)",
            "move_tree(60, /ws)",
            "rule(11, /tmp)",
            "wipe_args",
            "not_dumpable",
            "name(tierbox-init)",
            "program",
            "close_all_but(9, 12)",
            "capset",
            "no_new_privs",
            "report(9, started, pid 2)",
        ]
    );
}

#[test]
fn pid_1_under_a_root_supervisor_waits_for_its_maps_serves_the_proxy_and_switches_ids() {
    let r = Recorder::default();
    assert_eq!(init_setup(&r, &root()), Ok(2));
    let names = r.names();
    assert_eq!(
        names[5..13],
        [
            "wait(14)",
            "close(14)",
            "setsid",
            "hostname(sandbox)",
            "listener(15, 3128)",
            "listener(15, 5432)",
            "close(15)",
            "umask(0)",
        ],
        "{names:?}"
    );
    assert_eq!(
        names[names.len() - 5..],
        [
            "close_all_but(9, 12)",
            "set_ids(1000, 1000)",
            "capset",
            "no_new_privs",
            "report(9, started, pid 2)",
        ]
    );
    for absent in ["write(", "lo_up", "rule("] {
        assert!(
            !names.iter().any(|n| n.starts_with(absent)),
            "{absent}: {names:?}"
        );
    }
}

#[test]
fn a_failing_step_stops_the_setup_and_is_named() {
    let unprivileged_cases = [
        ("pdeathsig", Step::Pdeathsig),
        ("cgroup(31)", Step::CgroupAttach),
        ("dumpable(1)", Step::UidMap),
        ("write(/proc/self/uid_map)", Step::UidMap),
        ("write(/proc/self/setgroups)", Step::Setgroups),
        ("write(/proc/self/gid_map)", Step::GidMap),
        ("dumpable(0)", Step::GidMap),
        ("setsid", Step::Setsid),
        ("hostname(sandbox)", Step::Hostname),
        ("lo_up", Step::Loopback),
        ("op(/newroot)", Step::MountOp),
        ("rule(11, /tmp)", Step::LandlockRules),
        ("not_dumpable", Step::InitIdentity),
        ("name(tierbox-init)", Step::InitIdentity),
        ("program", Step::Landlock),
    ];
    let root_cases = [
        ("wait(14)", Step::UidMap),
        ("listener(15, 3128)", Step::EgressListener),
        ("set_ids(1000, 1000)", Step::InitIdentity),
    ];
    let failure = |r: &Recorder, spec: &NsSpec<'_>| {
        init_setup(r, spec)
            .err()
            .map_or((Step::None, 0), |f| (f.step, f.errno))
    };
    // Nothing is reported after a failure: the caller reports it.
    each_failure_stops_at_its_step(&unprivileged_cases, "report", |r| {
        failure(r, &unprivileged())
    });
    each_failure_stops_at_its_step(&root_cases, "report", |r| failure(r, &root()));
}

#[test]
fn a_mount_op_failure_names_the_op_and_its_sub_call() {
    for (call, index, sub) in [
        ("op(/newroot)", 0, SubCall::Mount),
        ("send_fd(/tmp, 8)", 1, SubCall::SendFd),
        ("move_tree(60, /ws)", 2, SubCall::MoveMount),
    ] {
        let r = Recorder::failing(call);
        let expected = Failure {
            step: Step::MountOp,
            errno: libc::EPERM,
            op_index: index,
            sub: sub as u32,
        };
        assert_eq!(init_setup(&r, &unprivileged()), Err(expected), "{call}");
        assert_eq!(r.names().last().map(String::as_str), Some(call));
    }
}

#[test]
fn a_supervisor_gone_before_the_death_signal_took_hold_stops_pid_1() {
    let r = Recorder::failing("reader?(9)");
    let gone = init_setup(&r, &unprivileged()).err();
    assert_eq!(gone, Some(Failure::at(Step::Pdeathsig, libc::ESRCH)));
    assert_eq!(r.names(), ["sig_dfl", "pdeathsig", "reader?(9)"]);
}

/// Publishing under an unprivileged supervisor: pid 1 sends its own user and network
/// namespaces after the listeners, over the same socket, before anything is mounted.
#[test]
fn pid_1_sends_its_namespaces_after_the_listeners() {
    let r = Recorder::default();
    let spec = NsSpec {
        proxy_fd: 15,
        listen_ports: &[5432],
        send_namespaces: true,
        ..unprivileged()
    };
    assert_eq!(init_setup(&r, &spec), Ok(2));
    let names = r.names();
    let at = |call: &str| names.iter().position(|n| n == call).unwrap_or(usize::MAX);
    assert!(at("listener(15, 5432)") < at("namespaces(15)"), "{names:?}");
    assert!(at("namespaces(15)") < at("close(15)"), "{names:?}");
    assert!(at("close(15)") < at("op(/newroot)"), "{names:?}");
    let failing = Recorder::failing("namespaces(15)");
    assert_eq!(
        init_setup(&failing, &spec),
        Err(Failure::at(Step::EgressListener, libc::EPERM))
    );
}
