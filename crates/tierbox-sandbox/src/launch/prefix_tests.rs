//! The order of a launched child's steps, checked against a recorder instead of the
//! kernel: no root, no child process.

use super::*;
use crate::launch::private_ns::FileId;
use crate::linux::exec::tests::{Recorder, each_failure_stops_at_its_step, tier_b};

impl PrefixCalls for Recorder {
    fn reset_signal_handlers(&self) {
        let _ = self.call("sig_dfl");
    }
    fn setsid(&self) -> Result<(), i32> {
        self.call("setsid")
    }
    fn die_with_parent(&self, parent: libc::pid_t) -> Result<(), i32> {
        self.call(&format!("pdeathsig({parent})"))
    }
    fn cgroup_attach(&self, fd: c_int) -> Result<(), i32> {
        self.call(&format!("cgroup({fd})"))
    }
    fn join_netns(&self, fd: c_int) -> Result<(), i32> {
        self.call(&format!("setns(net {fd})"))
    }
    fn unshare_mounts(&self) -> Result<(), i32> {
        self.call("unshare(mount)")
    }
    fn mounts_private(&self) -> Result<(), i32> {
        self.call("mounts_private")
    }
    fn move_tree(&self, tree: c_int, _path: *const c_char) -> Result<(), i32> {
        self.call(&format!("move_tree({tree})"))
    }
    fn join_userns(&self, fd: c_int) -> Result<(), i32> {
        self.call(&format!("setns(user {fd})"))
    }
    fn tier_b_mounts(&self, ns: &PrivateNs) -> Result<(), (Step, i32)> {
        self.call(&format!("tier_b_mounts({} trees)", ns.n_trees))
            .map_err(|e| (Step::ProtectedPaths, e))
    }
}

const CGROUPS: [c_int; 2] = [30, 31];

/// What every program does first: dispositions, session, death signal, its cgroup.
const PROGRAM_FIRST: [&str; 5] = [
    "sig_dfl",
    "setsid",
    "pdeathsig(77)",
    "cgroup(30)",
    "cgroup(31)",
];

/// A Tier B program's mount namespace, in a user namespace when `userns_fd >= 0`.
fn namespace(userns_fd: c_int) -> PrivateNs {
    PrivateNs {
        userns_fd,
        trees: std::ptr::null(),
        n_trees: 2,
        tree_fds: std::ptr::null_mut(),
        protect: std::ptr::null(),
        n_protect: 0,
        hide: std::ptr::null(),
        n_hide: 0,
        dev_null: FileId::default(),
    }
}

/// A Tier B program with `private_ns`: the supervisor is pid 77 (as in [`tier_b`]).
fn program(private_ns: Option<&PrivateNs>) -> PrefixSpec<'_> {
    PrefixSpec {
        parent_pid: 77,
        cgroup_fds: &CGROUPS,
        netns_fd: -1,
        mount_moves: &[],
        private_ns,
    }
}

/// The names before the program's first step (`dup3` of stdin).
fn own_steps(r: &Recorder) -> Vec<String> {
    let names = r.names();
    let first = names.iter().position(|n| n == "dup3(10, 0)");
    names[..first.unwrap_or(names.len())].to_vec()
}

#[test]
fn a_program_without_a_namespace_joins_its_cgroup_then_runs_the_programs_steps() {
    let r = Recorder::default();
    assert_eq!(
        run(&r, &program(None), &tier_b(&[])),
        (Step::Execve, libc::ENOENT)
    );
    assert_eq!(own_steps(&r), PROGRAM_FIRST);
    assert_eq!(r.names().last().map(String::as_str), Some("execve"));
}

#[test]
fn a_root_supervisors_program_makes_its_mount_namespace_and_rearms_the_death_signal() {
    let r = Recorder::default();
    let ns = namespace(-1);
    run(&r, &program(Some(&ns)), &tier_b(&[]));
    let steps = own_steps(&r);
    assert_eq!(steps[..5], PROGRAM_FIRST, "{steps:?}");
    assert_eq!(
        steps[5..],
        [
            "unshare(mount)",
            "mounts_private",
            "tier_b_mounts(2 trees)",
            "pdeathsig(77)"
        ]
    );
}

#[test]
fn an_unprivileged_supervisors_program_joins_its_user_namespace_before_mounting() {
    let r = Recorder::default();
    let ns = namespace(40);
    run(&r, &program(Some(&ns)), &tier_b(&[]));
    let steps = own_steps(&r);
    assert_eq!(steps[..5], PROGRAM_FIRST, "{steps:?}");
    assert_eq!(
        steps[5..],
        [
            "setns(user 40)",
            "unshare(mount)",
            "mounts_private",
            "tier_b_mounts(2 trees)",
            "pdeathsig(77)"
        ]
    );
}

#[test]
fn a_helper_joins_its_network_namespace_then_moves_its_trees_in_a_private_one() {
    let r = Recorder::default();
    let moves = [
        MountMove {
            tree: 50,
            path: c"/a".as_ptr(),
        },
        MountMove {
            tree: 51,
            path: c"/a/b".as_ptr(),
        },
    ];
    let spec = PrefixSpec {
        cgroup_fds: &[],
        netns_fd: 45,
        mount_moves: &moves,
        ..program(None)
    };
    run(&r, &spec, &tier_b(&[]));
    let steps = own_steps(&r);
    assert_eq!(steps[..3], PROGRAM_FIRST[..3], "{steps:?}");
    assert_eq!(
        steps[3..],
        [
            "setns(net 45)",
            "unshare(mount)",
            "mounts_private",
            "move_tree(50)",
            "move_tree(51)",
        ]
    );
}

#[test]
fn a_failing_step_stops_the_sequence_and_is_named() {
    let ns = namespace(40);
    let moves = [MountMove {
        tree: 50,
        path: c"/a".as_ptr(),
    }];
    let every = PrefixSpec {
        netns_fd: 45,
        mount_moves: &moves,
        ..program(Some(&ns))
    };
    let cases = [
        ("setsid", Step::Setsid),
        ("pdeathsig(77)", Step::Pdeathsig),
        ("cgroup(31)", Step::CgroupAttach),
        ("setns(net 45)", Step::JoinNetns),
        ("unshare(mount)", Step::HelperMounts),
        ("mounts_private", Step::HelperMounts),
        ("move_tree(50)", Step::HelperMounts),
        ("setns(user 40)", Step::UserNamespace),
        ("tier_b_mounts(2 trees)", Step::ProtectedPaths),
    ];
    // No step of the program's runs after a failure of the child's own.
    each_failure_stops_at_its_step(&cases, "dup3", |r| run(r, &every, &tier_b(&[])));
}
