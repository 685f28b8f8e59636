//! Tests of the seccomp filter: a classic-BPF interpreter evaluates the program for
//! synthetic `seccomp_data` (pure), then a forked child attaches it for real.

use super::*;
use crate::linux::sys::test_support as ts;

const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
const KILL: u32 = libc::SECCOMP_RET_KILL_PROCESS;

fn eperm() -> u32 {
    ret_errno(libc::EPERM)
}

fn locked_down() -> SeccompSpec {
    SeccompSpec::locked_down()
}

fn permissive() -> SeccompSpec {
    SeccompSpec {
        deny_namespaces: false,
        deny_file_metadata: false,
        mediate_chmod: false,
        deny_ipc: false,
        inet: InetSockets::Any,
        allow_unix_sockets: true,
        notify_refusals: false,
        chown_noop_gid: None,
    }
}

/// Synthetic `struct seccomp_data`.
#[derive(Debug, Clone, Copy)]
struct Data {
    nr: u32,
    arch: u32,
    args: [u64; 6],
}

impl Data {
    fn call(nr: libc::c_long, args: &[u64]) -> Self {
        let mut a = [0u64; 6];
        a[..args.len()].copy_from_slice(args);
        Self {
            nr: nr as u32,
            arch: NATIVE_AUDIT_ARCH.unwrap(),
            args: a,
        }
    }

    fn word(&self, offset: u32) -> u32 {
        match offset {
            0 => self.nr,
            4 => self.arch,
            8 | 12 => 0, // instruction pointer
            o if (16..64).contains(&o) && o % 4 == 0 => {
                let arg = self.args[((o - 16) / 8) as usize];
                if (o - 16) % 8 == 0 {
                    arg as u32
                } else {
                    (arg >> 32) as u32
                }
            }
            o => panic!("load from invalid seccomp_data offset {o}"),
        }
    }
}

/// What the interpreter observed along the path.
struct Trace {
    result: u32,
    /// Only `nr`/`arch` were loaded: the kernel's action cache can treat the result as a
    /// constant for this syscall number (mirrors `seccomp_is_const_allow`).
    constant: bool,
    steps: usize,
}

/// A classic-BPF interpreter for the instruction subset the kernel's seccomp checker
/// accepts and our builder emits. Panics on anything else or an out-of-range jump.
fn run(prog: &[libc::sock_filter], data: &Data) -> Trace {
    let mut acc: u32 = 0;
    let mut pc = 0usize;
    let mut constant = true;
    let mut steps = 0;
    loop {
        let insn = prog
            .get(pc)
            .unwrap_or_else(|| panic!("pc {pc} ran off the program"));
        steps += 1;
        let code = u32::from(insn.code);
        let class = code & 0x07;
        match class {
            c if c == libc::BPF_LD => {
                assert_eq!(
                    code,
                    libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
                    "unsupported load"
                );
                if insn.k > 4 {
                    constant = false;
                }
                acc = data.word(insn.k);
                pc += 1;
            }
            c if c == libc::BPF_ALU => {
                assert_eq!(code, libc::BPF_ALU | libc::BPF_AND | libc::BPF_K);
                acc &= insn.k;
                pc += 1;
            }
            c if c == libc::BPF_JMP => {
                let op = code & 0xf0;
                assert_eq!(code & 0x08, libc::BPF_K, "only K-operand jumps are emitted");
                if op == libc::BPF_JA {
                    pc += 1 + insn.k as usize;
                    continue;
                }
                let taken = match op {
                    o if o == libc::BPF_JEQ => acc == insn.k,
                    o if o == libc::BPF_JGT => acc > insn.k,
                    o if o == libc::BPF_JGE => acc >= insn.k,
                    o if o == libc::BPF_JSET => acc & insn.k != 0,
                    o => panic!("unsupported jump op {o:#x}"),
                };
                pc += 1 + usize::from(if taken { insn.jt } else { insn.jf });
            }
            c if c == libc::BPF_RET => {
                assert_eq!(code, libc::BPF_RET | libc::BPF_K);
                return Trace {
                    result: insn.k,
                    constant,
                    steps,
                };
            }
            other => panic!("unsupported instruction class {other:#x}"),
        }
    }
}

fn eval(prog: &SeccompProgram, nr: libc::c_long, args: &[u64]) -> u32 {
    run(prog.instructions(), &Data::call(nr, args)).result
}

/// Ordinary syscalls (with plain arguments) that must stay allowed under every spec.
fn ordinary() -> Vec<(&'static str, libc::c_long, Vec<u64>)> {
    let thread_flags = (libc::CLONE_VM
        | libc::CLONE_FS
        | libc::CLONE_FILES
        | libc::CLONE_SIGHAND
        | libc::CLONE_THREAD
        | libc::CLONE_SYSVSEM
        | libc::CLONE_SETTLS
        | libc::CLONE_PARENT_SETTID
        | libc::CLONE_CHILD_CLEARTID) as u64;
    let fork_flags = (libc::CLONE_CHILD_SETTID | libc::CLONE_CHILD_CLEARTID) as u64 | 17;
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut v = vec![
        ("read", libc::SYS_read, vec![]),
        ("write", libc::SYS_write, vec![]),
        ("openat", libc::SYS_openat, vec![]),
        ("close", libc::SYS_close, vec![]),
        ("fstat", libc::SYS_fstat, vec![]),
        ("newfstatat", libc::SYS_newfstatat, vec![]),
        ("statx", libc::SYS_statx, vec![]),
        ("lseek", libc::SYS_lseek, vec![]),
        ("mmap", libc::SYS_mmap, vec![]),
        ("mprotect", libc::SYS_mprotect, vec![]),
        ("munmap", libc::SYS_munmap, vec![]),
        ("brk", libc::SYS_brk, vec![]),
        ("madvise", libc::SYS_madvise, vec![]),
        ("rt_sigaction", libc::SYS_rt_sigaction, vec![]),
        ("rt_sigprocmask", libc::SYS_rt_sigprocmask, vec![]),
        ("rt_sigreturn", libc::SYS_rt_sigreturn, vec![]),
        ("futex", libc::SYS_futex, vec![]),
        ("execve", libc::SYS_execve, vec![]),
        ("execveat", libc::SYS_execveat, vec![]),
        ("clone (thread)", libc::SYS_clone, vec![thread_flags]),
        ("clone (fork)", libc::SYS_clone, vec![fork_flags]),
        ("wait4", libc::SYS_wait4, vec![]),
        ("waitid", libc::SYS_waitid, vec![]),
        ("exit_group", libc::SYS_exit_group, vec![]),
        ("getpid", libc::SYS_getpid, vec![]),
        ("gettid", libc::SYS_gettid, vec![]),
        ("getuid", libc::SYS_getuid, vec![]),
        ("prctl", libc::SYS_prctl, vec![]),
        ("setrlimit", libc::SYS_setrlimit, vec![]),
        ("prlimit64", libc::SYS_prlimit64, vec![]),
        ("sync", libc::SYS_sync, vec![]),
        ("getdents64", libc::SYS_getdents64, vec![]),
        ("pipe2", libc::SYS_pipe2, vec![]),
        ("dup3", libc::SYS_dup3, vec![]),
        ("fcntl", libc::SYS_fcntl, vec![]),
        ("epoll_create1", libc::SYS_epoll_create1, vec![]),
        ("epoll_ctl", libc::SYS_epoll_ctl, vec![]),
        ("epoll_pwait", libc::SYS_epoll_pwait, vec![]),
        ("ppoll", libc::SYS_ppoll, vec![]),
        ("nanosleep", libc::SYS_nanosleep, vec![]),
        ("clock_gettime", libc::SYS_clock_gettime, vec![]),
        ("clock_nanosleep", libc::SYS_clock_nanosleep, vec![]),
        ("kill", libc::SYS_kill, vec![]),
        ("tgkill", libc::SYS_tgkill, vec![]),
        ("sched_yield", libc::SYS_sched_yield, vec![]),
        ("uname", libc::SYS_uname, vec![]),
        ("getrandom", libc::SYS_getrandom, vec![]),
        ("memfd_create", libc::SYS_memfd_create, vec![]),
        ("pidfd_open", libc::SYS_pidfd_open, vec![]),
        ("seccomp", libc::SYS_seccomp, vec![]),
        (
            "landlock_restrict_self",
            libc::SYS_landlock_restrict_self,
            vec![],
        ),
        ("set_robust_list", libc::SYS_set_robust_list, vec![]),
        ("rseq", libc::SYS_rseq, vec![]),
        (
            "socketpair (unix)",
            libc::SYS_socketpair,
            vec![libc::AF_UNIX as u64],
        ),
        ("connect", libc::SYS_connect, vec![]),
        ("sendto", libc::SYS_sendto, vec![]),
        ("recvfrom", libc::SYS_recvfrom, vec![]),
        ("ioctl (TCGETS)", libc::SYS_ioctl, vec![1, libc::TCGETS]),
        ("ioctl (FIONREAD)", libc::SYS_ioctl, vec![3, libc::FIONREAD]),
        ("personality (PER_LINUX)", libc::SYS_personality, vec![0]),
        (
            "personality (query)",
            libc::SYS_personality,
            vec![0xffff_ffff],
        ),
        ("chdir", libc::SYS_chdir, vec![]),
        ("fchdir", libc::SYS_fchdir, vec![]),
        ("renameat2", libc::SYS_renameat2, vec![]),
        ("unlinkat", libc::SYS_unlinkat, vec![]),
        ("mkdirat", libc::SYS_mkdirat, vec![]),
        ("setresuid", libc::SYS_setresuid, vec![]),
        ("capget", libc::SYS_capget, vec![]),
        ("sched_getaffinity", libc::SYS_sched_getaffinity, vec![]),
        ("mremap", libc::SYS_mremap, vec![]),
        ("sysinfo", libc::SYS_sysinfo, vec![]),
        ("io_setup (legacy aio)", libc::SYS_io_setup, vec![]),
        ("process_mrelease", libc::SYS_process_mrelease, vec![]),
        ("mlock", libc::SYS_mlock, vec![]),
        ("mseal", libc::SYS_mseal, vec![]),
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([
        ("arch_prctl", libc::SYS_arch_prctl, vec![]),
        ("open", libc::SYS_open, vec![]),
        ("stat", libc::SYS_stat, vec![]),
        ("fork", libc::SYS_fork, vec![]),
        ("vfork", libc::SYS_vfork, vec![]),
        ("poll", libc::SYS_poll, vec![]),
        ("getdents", libc::SYS_getdents, vec![]),
        ("getrlimit", libc::SYS_getrlimit, vec![]),
    ]);
    v
}

#[test]
fn every_table_entry_is_denied_with_its_errno() {
    let mut spec = locked_down();
    spec.deny_file_metadata = true;
    spec.deny_ipc = true;
    let prog = SeccompProgram::build(&spec).unwrap();
    for d in DENY_TABLE {
        assert_eq!(
            eval(&prog, d.nr.into(), &[]),
            ret_errno(d.errno),
            "{} ({}) must be denied",
            d.name,
            d.nr
        );
    }
}

#[test]
fn namespace_rules_depend_on_the_spec() {
    let strict = SeccompProgram::build(&locked_down()).unwrap();
    let loose = SeccompProgram::build(&permissive()).unwrap();
    for (nr, errno) in [
        (libc::SYS_unshare, libc::EPERM),
        (libc::SYS_setns, libc::EPERM),
        (libc::SYS_clone3, libc::ENOSYS),
    ] {
        assert_eq!(eval(&strict, nr, &[]), ret_errno(errno), "nr {nr}");
        assert_eq!(eval(&loose, nr, &[]), ALLOW, "nr {nr}");
    }
    for flag in [
        libc::CLONE_NEWNS,
        libc::CLONE_NEWCGROUP,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
    ] {
        let flags = (flag | libc::CLONE_VM) as u64 | 17;
        assert_eq!(
            eval(&strict, libc::SYS_clone, &[flags]),
            eperm(),
            "clone {flag:#x}"
        );
        // High bits of the 64-bit argument are ignored by the kernel and by the filter.
        assert_eq!(
            eval(&strict, libc::SYS_clone, &[flags | 0xffff_0000_0000_0000]),
            eperm()
        );
        assert_eq!(
            eval(&loose, libc::SYS_clone, &[flags]),
            ALLOW,
            "clone {flag:#x}"
        );
    }
}

#[test]
fn ordinary_syscalls_are_allowed_under_every_spec() {
    for spec in [locked_down(), permissive()] {
        let prog = SeccompProgram::build(&spec).unwrap();
        for (name, nr, args) in ordinary() {
            assert_eq!(
                eval(&prog, nr, &args),
                ALLOW,
                "{name} must be allowed under {spec:?}"
            );
        }
    }
}

#[test]
fn socket_families() {
    let combos = [(false, false), (true, false), (false, true), (true, true)];
    for (inet, unix) in combos {
        let spec = SeccompSpec {
            deny_namespaces: true,
            deny_file_metadata: false,
            mediate_chmod: false,
            deny_ipc: false,
            inet: if inet {
                InetSockets::Any
            } else {
                InetSockets::Deny
            },
            allow_unix_sockets: unix,
            notify_refusals: false,
            chown_noop_gid: None,
        };
        let prog = SeccompProgram::build(&spec).unwrap();
        let verdict = |allowed: bool| if allowed { ALLOW } else { eperm() };
        let sock = |domain: i32| eval(&prog, libc::SYS_socket, &[domain as u64, 1]);
        assert_eq!(sock(libc::AF_UNIX), verdict(unix), "{spec:?}");
        assert_eq!(sock(libc::AF_INET), verdict(inet), "{spec:?}");
        assert_eq!(sock(libc::AF_INET6), verdict(inet), "{spec:?}");
        for other in [
            libc::AF_NETLINK,
            libc::AF_PACKET,
            libc::AF_VSOCK,
            libc::AF_BLUETOOTH,
            libc::AF_ALG,
            libc::AF_KEY,
            libc::AF_XDP,
            libc::AF_CAN,
            libc::AF_TIPC,
            libc::AF_RDS,
            0,
            1000,
        ] {
            assert_eq!(sock(other), ret_errno(libc::EAFNOSUPPORT), "family {other}");
        }
        // The kernel reads the family as an int: high bits do not smuggle a family in.
        assert_eq!(
            eval(
                &prog,
                libc::SYS_socket,
                &[(1u64 << 32) | libc::AF_NETLINK as u64]
            ),
            ret_errno(libc::EAFNOSUPPORT)
        );
        // socketpair: AF_UNIX only, whatever the spec.
        assert_eq!(
            eval(&prog, libc::SYS_socketpair, &[libc::AF_UNIX as u64]),
            ALLOW
        );
        for other in [
            libc::AF_TIPC,
            libc::AF_INET,
            libc::AF_NETLINK,
            libc::AF_VSOCK,
        ] {
            assert_eq!(
                eval(&prog, libc::SYS_socketpair, &[other as u64]),
                ret_errno(libc::EAFNOSUPPORT),
                "socketpair family {other}"
            );
        }
    }
}

#[test]
fn ioctl_terminal_injection_and_personality() {
    let prog = SeccompProgram::build(&locked_down()).unwrap();
    for (name, request, _) in DENIED_IOCTLS {
        assert_eq!(
            eval(&prog, libc::SYS_ioctl, &[0, u64::from(*request)]),
            eperm(),
            "{name}"
        );
        // The kernel takes `unsigned int cmd`: high bits do not evade the rule.
        assert_eq!(
            eval(
                &prog,
                libc::SYS_ioctl,
                &[0, u64::from(*request) | (7 << 32)]
            ),
            eperm(),
            "{name} with high bits"
        );
    }
    for persona in [
        0x0040000u64, /* ADDR_NO_RANDOMIZE */
        8,            /* PER_LINUX32 */
        0x0400000,    /* READ_IMPLIES_EXEC */
    ] {
        assert_eq!(
            eval(&prog, libc::SYS_personality, &[persona]),
            eperm(),
            "{persona:#x}"
        );
    }
}

#[test]
fn wrong_arch_is_killed_and_x32_is_enosys() {
    let prog = SeccompProgram::build(&locked_down()).unwrap();
    for arch in [
        0x4000_0003u32, /* AUDIT_ARCH_I386 */
        AUDIT_ARCH_AARCH64 ^ AUDIT_ARCH_X86_64 ^ NATIVE_AUDIT_ARCH.unwrap(),
        0,
    ] {
        let mut data = Data::call(libc::SYS_getpid, &[]);
        data.arch = arch;
        assert_eq!(
            run(prog.instructions(), &data).result,
            KILL,
            "arch {arch:#x}"
        );
    }
    if cfg!(target_arch = "x86_64") {
        for nr in [X32_SYSCALL_BIT, X32_SYSCALL_BIT | 39, u32::MAX] {
            let mut data = Data::call(0, &[]);
            data.nr = nr;
            assert_eq!(
                run(prog.instructions(), &data).result,
                ret_errno(libc::ENOSYS),
                "nr {nr:#x}"
            );
        }
    }
}

/// Every syscall number that is neither denied nor inspected is decided from `nr` alone,
/// so the kernel's action cache bypasses the filter for it; and the search is shallow.
#[test]
fn allowed_syscalls_are_cache_constant_and_shallow() {
    let prog = SeccompProgram::build(&locked_down()).unwrap();
    let inspected: Vec<u32> = [
        libc::SYS_socket,
        libc::SYS_socketpair,
        libc::SYS_ioctl,
        libc::SYS_personality,
        libc::SYS_clone,
    ]
    .into_iter()
    .chain(LEAVE_BEHIND.iter().map(|&(_, nr, _)| nr))
    .map(|n| n as u32)
    .collect();
    let mut max_steps = 0;
    let mut total_steps = 0;
    for nr in 0..600u32 {
        let t = run(prog.instructions(), &Data::call(nr.into(), &[]));
        if inspected.contains(&nr) {
            assert!(!t.constant, "nr {nr} reads an argument");
            continue;
        }
        assert!(t.constant, "nr {nr} must not read arguments");
        if DENY_TABLE.iter().all(|d| d.nr != nr) {
            assert_eq!(
                t.result, ALLOW,
                "nr {nr} is not in the table and must be allowed"
            );
        }
        max_steps = max_steps.max(t.steps);
        if nr < 470 {
            total_steps += t.steps;
        }
    }
    println!(
        "{} insns; steps over nr 0..470: total {total_steps}, max {max_steps}",
        prog.len()
    );
    assert!(max_steps <= 14, "binary search too deep: {max_steps} steps");
}

#[test]
fn program_is_short_and_well_formed() {
    for spec in [locked_down(), permissive()] {
        let prog = SeccompProgram::build(&spec).unwrap();
        println!("seccomp filter for {spec:?}: {} instructions", prog.len());
        // 130 today: the deny table's intervals, the argument rules, and the ten calls
        // that could leave a setuid file or a device node behind (two to three
        // instructions each, plus their places in the search tree).
        assert!(
            prog.len() <= 144,
            "filter grew to {} instructions",
            prog.len()
        );
        let last = prog.instructions().last().unwrap();
        assert_eq!(u32::from(last.code), libc::BPF_RET | libc::BPF_K);
        for (i, insn) in prog.instructions().iter().enumerate() {
            if u32::from(insn.code) & 0x07 == libc::BPF_JMP {
                assert!(
                    i + 1 + usize::from(insn.jt.max(insn.jf)) < prog.len(),
                    "jump out of range at {i}"
                );
            }
        }
        assert_eq!(prog.to_bytes().len(), prog.len() * 8);
        let fprog = prog.as_fprog();
        assert_eq!(usize::from(fprog.len), prog.len());
    }
    // Every spec's whole filter (docs/tiers.md states the range).
    let lens: Vec<usize> = every_spec()
        .map(|s| SeccompProgram::build(&s).unwrap().len())
        .collect();
    let (min, max) = (lens.iter().min().unwrap(), lens.iter().max().unwrap());
    println!("whole filters: {min}..={max} instructions");
    // 181 today: the largest spec also inspects a uid-0 run's chown (two
    // seven-instruction blocks, one per argument layout, and their places in the tree).
    assert!(*max <= 184, "{max}");
}

#[test]
fn table_has_no_duplicates_and_every_entry_has_a_reason() {
    let mut seen = std::collections::BTreeMap::new();
    for d in DENY_TABLE {
        assert!(!d.reason.is_empty(), "{} has no reason", d.name);
        if let Some(other) = seen.insert(d.nr, d.name) {
            panic!("{} and {other} share number {}", d.name, d.nr);
        }
    }
}

#[test]
fn partition_covers_u32() {
    let iv = partition(
        [
            (0, 0, Action::Errno(1)),
            (1, 1, Action::Errno(1)),
            (5, 5, Action::Allow),
            (u32::MAX, u32::MAX, Action::Errno(2)),
        ]
        .into_iter(),
    );
    assert_eq!(
        iv,
        vec![
            (0, 1, Action::Errno(1)),
            (2, u32::MAX - 1, Action::Allow),
            (u32::MAX, u32::MAX, Action::Errno(2))
        ]
    );
}

/// Attach the locked-down filter in a forked child and probe it from inside.
#[test]
fn filter_enforced_in_a_forked_child() {
    assert!(probe_seccomp(), "this host must support seccomp");
    let prog = SeccompProgram::build(&locked_down()).unwrap();
    let fprog = prog.as_fprog();
    let code = ts::fork_with(|| {
        if sys::set_no_new_privs().is_err() {
            return 10;
        }
        if sys::seccomp_set_filter(&fprog, 0).is_err() {
            return 11;
        }
        if ts::unshare(libc::CLONE_NEWUSER) != Err(libc::EPERM) {
            return 12;
        }
        if ts::ptrace_traceme() != Err(libc::EPERM) {
            return 13;
        }
        if ts::socket(libc::AF_NETLINK, libc::SOCK_RAW) != Err(libc::EAFNOSUPPORT) {
            return 14;
        }
        if ts::socket(libc::AF_INET, libc::SOCK_STREAM) != Err(libc::EPERM) {
            return 15;
        }
        if ts::personality(0x0040000) != Err(libc::EPERM) {
            return 16;
        }
        if ts::personality(0xffff_ffff).is_err() {
            return 17;
        }
        if ts::getpid() <= 0 {
            return 18;
        }
        0
    });
    assert_eq!(code, 0, "child probe failed with code {code}");
}

/// Same child with a permissive spec: inet sockets and user namespaces work (control).
#[test]
fn permissive_filter_allows_what_it_should() {
    let prog = SeccompProgram::build(&permissive()).unwrap();
    let fprog = prog.as_fprog();
    let code = ts::fork_with(|| {
        if sys::set_no_new_privs().is_err() || sys::seccomp_set_filter(&fprog, 0).is_err() {
            return 10;
        }
        if ts::socket(libc::AF_INET, libc::SOCK_STREAM).is_err() {
            return 11;
        }
        if ts::socket(libc::AF_UNIX, libc::SOCK_STREAM).is_err() {
            return 12;
        }
        if ts::socket(libc::AF_PACKET, libc::SOCK_RAW) != Err(libc::EAFNOSUPPORT) {
            return 13;
        }
        0
    });
    assert_eq!(code, 0, "child probe failed with code {code}");
}

/// Wrong-arch calls kill the process: issue an i386 `int 0x80` getpid from the child.
#[cfg(target_arch = "x86_64")]
#[test]
fn int80_is_killed() {
    let prog = SeccompProgram::build(&locked_down()).unwrap();
    let fprog = prog.as_fprog();
    let code = ts::fork_with(|| {
        if sys::set_no_new_privs().is_err() || sys::seccomp_set_filter(&fprog, 0).is_err() {
            return 10;
        }
        ts::int80_getpid();
        0
    });
    assert_eq!(
        code,
        128 + libc::SIGSYS,
        "int 0x80 must be killed with SIGSYS"
    );
}

/// Median attach time (`seccomp(SET_MODE_FILTER)` only; `no_new_privs` set before the
/// clock starts) over `runs` forked children.
fn attach_p50_ns(prog: &SeccompProgram, runs: usize) -> u64 {
    let fprog = prog.as_fprog();
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let (r, w) = ts::pipe();
        let pid = ts::fork_child(|| {
            ts::close(r);
            if sys::set_no_new_privs().is_err() {
                return 1;
            }
            let t0 = ts::monotonic_ns();
            if sys::seccomp_set_filter(&fprog, 0).is_err() {
                return 2;
            }
            let dt = ts::monotonic_ns() - t0;
            if sys::write_all_raw(w, &dt.to_ne_bytes()).is_err() {
                return 3;
            }
            0
        });
        ts::close(w);
        let mut buf = [0u8; 8];
        let n = ts::read(r, &mut buf).unwrap();
        ts::close(r);
        assert_eq!(ts::wait_exit(pid), 0);
        assert_eq!(n, 8);
        samples.push(u64::from_ne_bytes(buf));
    }
    samples.sort_unstable();
    samples[samples.len() / 2]
}

/// A linear filter of the same rules (arch check, one JEQ per syscall): how attach cost
/// grows with length, for comparison with the binary-search layout.
fn padded(prog: &SeccompProgram, extra: usize) -> SeccompProgram {
    // Prepend `extra` never-taken checks after the nr load: `JEQ 0xfffffff0, +0, +0`.
    let insns = prog.instructions();
    let split = 3; // ld arch, jeq arch, ld nr
    let mut filter: Vec<libc::sock_filter> = insns[..split].to_vec();
    // The arch check jumps over `extra` more instructions to reach KILL: re-point it.
    filter[1].jf = 0; // fall through to the RET KILL we insert
    filter[1].jt = 1;
    filter.insert(
        2,
        libc::sock_filter {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: KILL,
        },
    );
    for _ in 0..extra {
        filter.push(libc::sock_filter {
            code: JEQ,
            jt: 0,
            jf: 0,
            k: 0xffff_fff0,
        });
    }
    // Re-run the real program from its nr load (it reloads nothing: acc holds nr).
    filter.extend_from_slice(&insns[split..]);
    SeccompProgram { filter }
}

/// Like [`padded`], but the padding is jumped over (`JA extra`): the kernel still copies,
/// converts and JIT-compiles it, but the action-cache evaluation skips it. Separates the
/// per-instruction cost from the per-evaluated-step cost.
fn padded_dead(prog: &SeccompProgram, extra: usize) -> SeccompProgram {
    let mut p = padded(prog, extra);
    let ja = (libc::BPF_JMP | libc::BPF_JA) as u16;
    // Index 4 is the first padding instruction (ld arch, jeq, ret kill, ld nr, pad...).
    p.filter.insert(
        4,
        libc::sock_filter {
            code: ja,
            jt: 0,
            jf: 0,
            k: extra as u32,
        },
    );
    p
}

/// Measurement (run with `--ignored --nocapture`): attach time p50 vs filter length.
#[test]
#[ignore = "measurement; prints attach time vs length"]
fn measure_attach_time_vs_length() {
    let prog = SeccompProgram::build(&locked_down()).unwrap();
    let runs = 200;
    println!("seccomp attach p50 over {runs} forked children (no_new_privs already set):");
    let floor = SeccompProgram {
        filter: vec![libc::sock_filter {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: ALLOW,
        }],
    };
    let ns = attach_p50_ns(&floor, runs);
    println!(
        "  floor (RET ALLOW)      1 insns: {:>7.1} µs",
        ns as f64 / 1000.0
    );
    for n in [16usize, 32, 48, 64, 96] {
        // `JA n` over n dead JEQs, then RET ALLOW: the per-instruction cost alone.
        let ja = (libc::BPF_JMP | libc::BPF_JA) as u16;
        let mut filter = vec![libc::sock_filter {
            code: ja,
            jt: 0,
            jf: 0,
            k: n as u32,
        }];
        filter.extend((0..n).map(|_| libc::sock_filter {
            code: JEQ,
            jt: 0,
            jf: 0,
            k: 1,
        }));
        filter.push(libc::sock_filter {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: ALLOW,
        });
        let p = SeccompProgram { filter };
        let ns = attach_p50_ns(&p, runs);
        println!(
            "  floor + {n:>3} dead     {:>5} insns: {:>7.1} µs",
            p.len(),
            ns as f64 / 1000.0
        );
    }
    let base = attach_p50_ns(&prog, runs);
    println!(
        "  tierbox filter     {:>5} insns: {:>7.1} µs",
        prog.len(),
        base as f64 / 1000.0
    );
    for extra in [0usize, 64, 150, 400, 1000, 4000] {
        let p = padded(&prog, extra);
        // Sanity: the padded program still decides the same.
        assert_eq!(eval(&p, libc::SYS_ptrace, &[]), eperm());
        assert_eq!(eval(&p, libc::SYS_read, &[]), ALLOW);
        let ns = attach_p50_ns(&p, runs);
        println!(
            "  + {extra:>4} no-op JEQs {:>5} insns: {:>7.1} µs",
            p.len(),
            ns as f64 / 1000.0
        );
        if extra > 0 {
            let d = padded_dead(&prog, extra);
            assert_eq!(eval(&d, libc::SYS_ptrace, &[]), eperm());
            assert_eq!(eval(&d, libc::SYS_read, &[]), ALLOW);
            let ns = attach_p50_ns(&d, runs);
            println!(
                "  + {extra:>4} dead  JEQs {:>5} insns: {:>7.1} µs",
                d.len(),
                ns as f64 / 1000.0
            );
        }
    }
}

/// Quick attach-cost check that runs with the suite: the filter attaches, and prints p50.
#[test]
fn attach_time_is_reported() {
    let prog = SeccompProgram::build(&locked_down()).unwrap();
    let p50 = attach_p50_ns(&prog, 50);
    println!(
        "seccomp attach p50 ({} insns, 50 children): {:.1} µs",
        prog.len(),
        p50 as f64 / 1000.0
    );
}

/// `file_setattr` (inode attribute flags, as `FS_IOC_SETFLAGS`) is refused for every run,
/// not only for runs that keep uid 0. Regression: it was a metadata denial, so a Tier C
/// bwrap run set `FS_NODUMP_FL` while SECURITY.md said every run was denied.
#[test]
fn file_setattr_is_denied_for_every_run() {
    let prog = SeccompProgram::build(&SeccompSpec::locked_down()).unwrap();
    assert_eq!(eval(&prog, 469, &[]), eperm());
    let tier_c = SeccompProgram::build(&crate::tier_c::tier_c_seccomp_spec()).unwrap();
    assert_eq!(eval(&tier_c, 469, &[]), eperm());
}

/// SysV IPC and POSIX message queues are refused only with `deny_ipc` (Tier B, which has
/// no IPC namespace); Tier C's filter leaves them to the sandbox's own IPC namespace.
#[test]
fn ipc_is_denied_only_when_asked() {
    let mut spec = SeccompSpec::locked_down();
    let plain = SeccompProgram::build(&spec).unwrap();
    spec.deny_ipc = true;
    let ipc = SeccompProgram::build(&spec).unwrap();
    for nr in [
        libc::SYS_shmget,
        libc::SYS_shmat,
        libc::SYS_semop,
        libc::SYS_msgget,
        libc::SYS_msgrcv,
        libc::SYS_mq_open,
    ] {
        assert_eq!(eval(&plain, nr, &[]), ALLOW, "nr {nr} allowed by default");
        assert_eq!(eval(&ipc, nr, &[]), eperm(), "nr {nr} denied with deny_ipc");
    }
    for nr in [
        libc::SYS_read,
        libc::SYS_mmap,
        libc::SYS_futex,
        libc::SYS_openat,
    ] {
        assert_eq!(eval(&ipc, nr, &[]), ALLOW, "nr {nr}");
    }
}

#[test]
fn file_metadata_changes_are_denied_only_when_asked() {
    let mut spec = SeccompSpec::locked_down();
    let plain = SeccompProgram::build(&spec).unwrap();
    spec.deny_file_metadata = true;
    let meta = SeccompProgram::build(&spec).unwrap();
    for nr in [
        libc::SYS_fchmodat,
        libc::SYS_fchmod,
        libc::SYS_fchownat,
        452,
    ] {
        assert_eq!(eval(&plain, nr, &[]), ALLOW, "nr {nr} allowed by default");
        assert_eq!(
            eval(&meta, nr, &[]),
            eperm(),
            "nr {nr} denied with deny_file_metadata"
        );
    }
    // Attribute writes: "not supported", so that tools fall back to chmod.
    for nr in [
        libc::SYS_setxattr,
        libc::SYS_lsetxattr,
        libc::SYS_fsetxattr,
        libc::SYS_removexattr,
        libc::SYS_lremovexattr,
        libc::SYS_fremovexattr,
    ] {
        assert_eq!(eval(&plain, nr, &[]), ALLOW, "nr {nr} allowed by default");
        assert_eq!(
            eval(&meta, nr, &[]),
            ret_errno(libc::EOPNOTSUPP),
            "nr {nr} unsupported with deny_file_metadata"
        );
    }
    for nr in [
        libc::SYS_read,
        libc::SYS_openat,
        libc::SYS_utimensat,
        libc::SYS_getxattr,
    ] {
        assert_eq!(eval(&meta, nr, &[]), ALLOW, "nr {nr}");
    }
}

#[test]
fn chmod_is_handed_to_the_supervisor_when_mediated() {
    let mut spec = SeccompSpec::locked_down();
    spec.deny_file_metadata = true;
    spec.mediate_chmod = true;
    let prog = SeccompProgram::build(&spec).unwrap();
    for &(name, nr) in CHMOD_FAMILY {
        assert_eq!(eval(&prog, nr, &[]), libc::SECCOMP_RET_USER_NOTIF, "{name}");
    }
    assert_eq!(eval(&prog, libc::SYS_fchownat, &[]), eperm());
    assert_eq!(
        eval(&prog, libc::SYS_fsetxattr, &[]),
        ret_errno(libc::EOPNOTSUPP)
    );
    assert_eq!(eval(&prog, libc::SYS_read, &[]), ALLOW);
}

/// A uid-0 run's chown naming root's own ids (or "unchanged", or its own gid) answers 0
/// without running; any other owner or group is `EPERM`; without `chown_noop_gid` the
/// family stays `EPERM` whatever its arguments.
#[test]
fn uid0_chown_to_root_ids_is_a_noop_and_any_other_owner_is_refused() {
    let mut spec = SeccompSpec::locked_down();
    spec.deny_file_metadata = true;
    let plain = SeccompProgram::build(&spec).unwrap();
    spec.chown_noop_gid = Some(4242);
    for mediated in [false, true] {
        spec.mediate_chmod = mediated;
        spec.notify_refusals = mediated;
        // Handed off, both outcomes go to the supervisor, which answers with the
        // enforcing filter's verdict.
        let handed = SeccompProgram::build(&spec).unwrap();
        for &(name, nr, _, _) in CHOWN_FAMILY {
            let expect = if mediated {
                libc::SECCOMP_RET_USER_NOTIF
            } else {
                eval(
                    &SeccompProgram::build(&spec.enforcing()).unwrap(),
                    nr,
                    &[3; 6],
                )
            };
            assert_eq!(eval(&handed, nr, &[3; 6]), expect, "{name}");
        }
        let prog = SeccompProgram::build(&spec.enforcing()).unwrap();
        let noop = libc::SECCOMP_RET_ERRNO;
        let minus1 = u64::from(u32::MAX);
        for &(name, nr, owner, group) in CHOWN_FAMILY {
            let call = |o: u64, g: u64| {
                let mut args = [3u64; 6];
                args[owner as usize] = o;
                args[group as usize] = g;
                eval(&prog, nr, &args)
            };
            for (o, g) in [
                (0, 0),
                (minus1, minus1),
                (0, minus1),
                (minus1, 0),
                (0, 4242),
            ] {
                assert_eq!(call(o, g), noop, "{name}({o}, {g})");
                assert_eq!(eval(&plain, nr, &[3, o, g, g]), eperm(), "{name}");
            }
            for (o, g) in [
                (1000, 0),
                (0, 1000),
                (minus1, 1000),
                (1000, minus1),
                (65534, 4242),
            ] {
                assert_eq!(call(o, g), eperm(), "{name}({o}, {g})");
            }
        }
    }
}

/// What the kernel answers for a call under several attached filters, `newest_first`:
/// the lowest action (as a signed number: kill, then errors, then the hand-off, then
/// allow) wins, and among equal actions the newest filter's value.
fn stacked(newest_first: &[&SeccompProgram], data: &Data) -> u32 {
    let mut ret = run(newest_first[0].instructions(), data).result;
    for prog in &newest_first[1..] {
        let cur = run(prog.instructions(), data).result;
        let action = |r: u32| (r & libc::SECCOMP_RET_ACTION_FULL) as i32;
        if action(cur) < action(ret) {
            ret = cur;
        }
    }
    ret
}

/// `TIOCSTI`'s request number (the kernel compares the low 32 bits).
const TIOCSTI_REQUEST: u32 = 0x5412;

/// Every argument value an inspecting block of the whole filter looks at, and some it
/// does not.
fn inspected_args() -> Vec<Vec<u64>> {
    let mut args: Vec<Vec<u64>> = vec![vec![]];
    for family in [
        libc::AF_UNIX,
        libc::AF_INET,
        libc::AF_INET6,
        libc::AF_PACKET,
        libc::AF_NETLINK,
    ] {
        for ty in [libc::SOCK_STREAM, libc::SOCK_DGRAM, libc::SOCK_RAW] {
            args.push(vec![family as u64, (ty | libc::SOCK_CLOEXEC) as u64]);
        }
        args.push(vec![family as u64, libc::SOCK_STREAM as u64, 262]);
        args.push(vec![family as u64, libc::SOCK_STREAM as u64, 6]);
    }
    for &(_, request, _) in DENIED_IOCTLS {
        args.push(vec![0, u64::from(request)]);
    }
    args.push(vec![(libc::CLONE_NEWUSER | libc::SIGCHLD) as u64]);
    args.push(vec![libc::CLONE_NEWNS as u64]);
    args.push(vec![0xffff_ffff]);
    args.push(vec![8]);
    for flags in [0, libc::MSG_FASTOPEN as u64] {
        args.push(vec![3, 0, flags, flags, 0, 0]);
    }
    // What a run could leave behind: setid modes and device types at every argument index
    // a LEAVE_BEHIND rule reads, with and without the creating open flags.
    let create = u64::from(OPEN_CREATE_FLAGS);
    for mode in [0o755, 0o4755, 0o2755, 0o6755] {
        args.push(vec![mode, mode, mode, mode, mode]);
        args.push(vec![libc::AT_FDCWD as u64, create, mode, mode]);
        args.push(vec![libc::AT_FDCWD as u64, 0, libc::O_CREAT as u64, mode]);
        args.push(vec![0, 0, 0o20_000_000 | libc::O_DIRECTORY as u64, mode]);
        args.push(vec![0, 0, libc::O_RDONLY as u64, mode]);
    }
    // chown to root's own ids, the run's gid (4242 in `every_spec`), and anyone else's,
    // at the owner/group indices of `chown` (1, 2) and `fchownat` (2, 3).
    for (owner, group) in [
        (0, 0),
        (u32::MAX, u32::MAX),
        (0, 4242),
        (1000, 0),
        (0, 1000),
    ] {
        let (o, g) = (u64::from(owner), u64::from(group));
        args.push(vec![3, o, g, g]);
        args.push(vec![3, 3, o, g]);
    }
    for kind in [
        libc::S_IFCHR,
        libc::S_IFBLK,
        libc::S_IFIFO,
        libc::S_IFREG,
        libc::S_IFSOCK,
    ] {
        let mode = u64::from(kind) | 0o644;
        args.push(vec![0, mode, mode, 0, 0]);
    }
    args.push(vec![0, 0, 0, 0, u64::from(RENAME_WHITEOUT)]);
    args.push(vec![0, 0, 0, 0, libc::RENAME_NOREPLACE as u64]);
    args
}

/// Every spec the filter can be built for: 2^8 combinations of its options.
fn every_spec() -> impl Iterator<Item = SeccompSpec> {
    (0u8..=255).map(|bits| SeccompSpec {
        deny_namespaces: bits & 1 != 0,
        deny_file_metadata: bits & 2 != 0,
        mediate_chmod: bits & 64 != 0,
        inet: match (bits & 4 != 0, bits & 16 != 0) {
            (false, _) => InetSockets::Deny,
            (true, false) => InetSockets::Any,
            (true, true) => InetSockets::TcpOnly,
        },
        allow_unix_sockets: bits & 8 != 0,
        deny_ipc: bits & 32 != 0,
        notify_refusals: bits & 128 != 0,
        chown_noop_gid: (bits & 3 == 3).then_some(4242),
    })
}

/// The numbers and architectures compared for every spec and argument list.
fn compared_calls() -> impl Iterator<Item = (u32, u32)> {
    (0u32..=600)
        .chain([X32_SYSCALL_BIT, X32_SYSCALL_BIT | 90, u32::MAX])
        .flat_map(|nr| [(nr, NATIVE_AUDIT_ARCH.unwrap()), (nr, 0x4000_0003)])
}

#[test]
fn base_filter_with_stacked_notifier_decides_every_call_as_the_full_filter() {
    let args = inspected_args();
    let mut compared = 0usize;
    for spec in every_spec() {
        let full = SeccompProgram::build(&spec).unwrap();
        let base = SeccompProgram::build_base(&spec).unwrap();
        let notifier = SeccompProgram::notifier(&spec).unwrap();
        assert!(base.len() <= full.len(), "{spec:?}");
        // 105 at most today: the argument rules, a uid-0 run's chown among them.
        assert!(
            notifier.len() <= 112,
            "{spec:?}: {} instructions",
            notifier.len()
        );
        if !spec.needs_listener() {
            assert_eq!(
                base.to_bytes(),
                full.to_bytes(),
                "without a hand-off the base is the full filter"
            );
        }
        for (nr, arch) in compared_calls() {
            for a in &args {
                let mut data = Data::call(nr as libc::c_long, a);
                data.arch = arch;
                assert_eq!(
                    stacked(&[&notifier, &base], &data),
                    run(full.instructions(), &data).result,
                    "{spec:?} nr {nr} args {a:?} arch {arch:#x}"
                );
                compared += 1;
            }
        }
    }
    assert!(compared > 1_000_000, "{compared}");
    // The hand-off really is in the notifier, not in the base.
    let spec = SeccompSpec {
        deny_file_metadata: true,
        mediate_chmod: true,
        notify_refusals: true,
        chown_noop_gid: None,
        ..SeccompSpec::locked_down()
    };
    let base = SeccompProgram::build_base(&spec).unwrap();
    let notifier = SeccompProgram::notifier(&spec).unwrap();
    let netlink = [libc::AF_NETLINK as u64, libc::SOCK_RAW as u64];
    let tiocsti = [0, u64::from(TIOCSTI_REQUEST)];
    let handed: Vec<(&str, libc::c_long, &[u64])> = CHMOD_FAMILY
        .iter()
        .map(|&(name, nr)| (name, nr, &[][..]))
        .chain([
            ("socket", libc::SYS_socket, &netlink[..]),
            (
                "unshare",
                libc::SYS_unshare,
                &[libc::CLONE_NEWUSER as u64][..],
            ),
            ("clone", libc::SYS_clone, &[libc::CLONE_NEWNET as u64][..]),
            ("ioctl", libc::SYS_ioctl, &tiocsti[..]),
        ])
        .collect();
    for (name, nr, args) in handed {
        assert_eq!(eval(&base, nr, args), ALLOW, "{name}");
        assert_eq!(
            eval(&notifier, nr, args),
            libc::SECCOMP_RET_USER_NOTIF,
            "{name}"
        );
    }
    // What the argument rules allow is allowed by the notifier itself.
    assert_eq!(eval(&notifier, libc::SYS_clone, &[0x11]), ALLOW);
    assert_eq!(eval(&notifier, libc::SYS_ioctl, &[0, 0x5401]), ALLOW);
    assert_eq!(eval(&notifier, libc::SYS_ptrace, &[]), ALLOW);
}

/// With `notify_refusals`, the filter hands off only calls the enforcing filter refuses
/// with an errno that is a refusal of the program's intent (so a supervisor answering
/// with that filter's verdict refuses exactly what the kernel would), and decides every
/// other call as the enforcing filter does.
#[test]
fn handed_off_refusals_are_answered_as_the_enforcing_filter() {
    let args = inspected_args();
    let mut handed = 0usize;
    for spec in every_spec().filter(|s| s.notify_refusals) {
        let whole = SeccompProgram::build(&spec).unwrap();
        let enforcing = SeccompProgram::build(&spec.enforcing()).unwrap();
        for (nr, arch) in compared_calls() {
            for a in &args {
                let mut data = Data::call(nr as libc::c_long, a);
                data.arch = arch;
                let got = run(whole.instructions(), &data).result;
                let want = run(enforcing.instructions(), &data).result;
                let chmod = CHMOD_FAMILY.iter().any(|&(_, n)| n as u32 == nr);
                if got != libc::SECCOMP_RET_USER_NOTIF || chmod && spec.mediate_chmod {
                    if !chmod {
                        assert_eq!(got, want, "{spec:?} nr {nr} args {a:?}");
                    }
                    continue;
                }
                handed += 1;
                assert_eq!(arch, NATIVE_AUDIT_ARCH.unwrap());
                assert_eq!(
                    want & libc::SECCOMP_RET_ACTION_FULL,
                    libc::SECCOMP_RET_ERRNO
                );
                assert_ne!(want & libc::SECCOMP_RET_DATA, libc::ENOSYS as u32);
                let full_args: [u64; 6] = data.args;
                assert_eq!(enforcing.evaluate(nr, &full_args), Some(want));
                let (name, target) = describe_refusal(nr, &full_args)
                    .unwrap_or_else(|| panic!("nr {nr} handed off but not described"));
                assert!(refused_call(nr).is_some_and(|c| c.name == name), "{name}");
                assert!(refusal_rule(name).is_some(), "{name}");
                assert!(!target.is_empty());
            }
        }
    }
    assert!(handed > 1000, "{handed}");
}

/// The supervisor's interpreter agrees with the tests' reference interpreter on every
/// spec's whole filter, for every call and argument list compared above.
#[test]
fn evaluate_agrees_with_the_reference_interpreter() {
    let args = inspected_args();
    for spec in every_spec().step_by(5) {
        let prog = SeccompProgram::build(&spec).unwrap();
        for (nr, arch) in compared_calls().filter(|(_, a)| Some(*a) == NATIVE_AUDIT_ARCH) {
            for a in &args {
                let data = Data::call(nr as libc::c_long, a);
                assert_eq!(
                    prog.evaluate(nr, &data.args),
                    Some(run(prog.instructions(), &data).result),
                    "{spec:?} nr {nr} args {a:?} arch {arch:#x}"
                );
            }
        }
    }
    // A program running off its end, or loading from outside `seccomp_data`, has no
    // verdict.
    for offset in [0, 2] {
        let bad = SeccompProgram {
            filter: vec![libc::sock_filter {
                code: LD_W_ABS,
                jt: 0,
                jf: 0,
                k: offset,
            }],
        };
        assert_eq!(bad.evaluate(0, &[0; 6]), None, "offset {offset}");
    }
}

#[test]
fn describe_refusal_names_the_refused_argument() {
    let d = |nr: libc::c_long, args: &[u64]| {
        let mut a = [0u64; 6];
        a[..args.len()].copy_from_slice(args);
        describe_refusal(nr as u32, &a).map(|(n, t)| format!("{n}: {t}"))
    };
    let cloexec = libc::SOCK_CLOEXEC as u64;
    assert_eq!(
        d(libc::SYS_socket, &[16, 3 | cloexec]).unwrap(),
        "socket: AF_NETLINK, SOCK_RAW"
    );
    assert_eq!(
        d(libc::SYS_socket, &[2, 1, 262]).unwrap(),
        "socket: AF_INET, SOCK_STREAM, protocol 262 (MPTCP)"
    );
    assert_eq!(
        d(libc::SYS_socket, &[99, 2]).unwrap(),
        "socket: family 99, SOCK_DGRAM"
    );
    assert_eq!(
        d(libc::SYS_socketpair, &[30]).unwrap(),
        "socketpair: AF_TIPC"
    );
    assert_eq!(
        d(libc::SYS_ioctl, &[0, u64::from(TIOCSTI_REQUEST)]).unwrap(),
        "ioctl: TIOCSTI"
    );
    assert_eq!(
        d(
            libc::SYS_clone,
            &[(libc::CLONE_NEWPID | libc::SIGCHLD) as u64]
        )
        .unwrap(),
        "clone: CLONE_NEWPID"
    );
    assert_eq!(
        d(libc::SYS_unshare, &[0x80 | libc::CLONE_NEWNET as u64]).unwrap(),
        "unshare: CLONE_NEWTIME|CLONE_NEWNET"
    );
    assert_eq!(
        d(libc::SYS_personality, &[8]).unwrap(),
        "personality: persona 0x8"
    );
    assert_eq!(
        d(libc::SYS_sendto, &[3, 0, 0, libc::MSG_FASTOPEN as u64]).unwrap(),
        "sendto: MSG_FASTOPEN"
    );
    assert_eq!(
        d(libc::SYS_fchmodat, &[0, 0, 0o4755]).unwrap(),
        "fchmodat: mode 04755 (setuid)"
    );
    assert_eq!(
        d(libc::SYS_openat, &[0, 0, libc::O_CREAT as u64, 0o6711]).unwrap(),
        "openat: mode 06711 (setuid, setgid)"
    );
    assert_eq!(
        d(
            libc::SYS_mknodat,
            &[0, 0, u64::from(libc::S_IFCHR) | 0o644, 0]
        )
        .unwrap(),
        "mknodat: character device 0:0"
    );
    assert_eq!(
        d(libc::SYS_renameat2, &[0, 0, 0, 0, 4]).unwrap(),
        "renameat2: RENAME_WHITEOUT"
    );
    assert_eq!(d(libc::SYS_read, &[]), None);
}

#[test]
fn inet_tcp_only_allows_tcp_and_nothing_else_of_inet() {
    let spec = SeccompSpec {
        inet: InetSockets::TcpOnly,
        ..SeccompSpec::locked_down()
    };
    let prog = SeccompProgram::build(&spec).unwrap();
    let flags = (libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) as u64;
    for domain in [libc::AF_INET, libc::AF_INET6] {
        let sock = |ty: i32, extra: u64| {
            eval(
                &prog,
                libc::SYS_socket,
                &[domain as u64, ty as u64 | extra, 0],
            )
        };
        assert_eq!(sock(libc::SOCK_STREAM, 0), ALLOW);
        assert_eq!(sock(libc::SOCK_STREAM, flags), ALLOW);
        for ty in [libc::SOCK_DGRAM, libc::SOCK_RAW, libc::SOCK_SEQPACKET] {
            assert_eq!(sock(ty, 0), eperm(), "domain {domain} type {ty}");
            assert_eq!(sock(ty, flags), eperm(), "domain {domain} type {ty}");
        }
        // The protocol: TCP (0 or IPPROTO_TCP) only. MPTCP and SCTP are stream sockets
        // too, and landlock's TCP rules do not apply to them.
        let proto = |protocol: u64| {
            eval(
                &prog,
                libc::SYS_socket,
                &[domain as u64, libc::SOCK_STREAM as u64 | flags, protocol],
            )
        };
        assert_eq!(proto(libc::IPPROTO_TCP as u64), ALLOW);
        for protocol in [
            libc::IPPROTO_MPTCP as u64,
            libc::IPPROTO_SCTP as u64,
            libc::IPPROTO_UDP as u64,
            1 << 32,
            (1 << 32) | libc::IPPROTO_TCP as u64,
        ] {
            assert_eq!(
                proto(protocol),
                eperm(),
                "domain {domain} protocol {protocol:#x}"
            );
        }
    }
    // No listening: listen() without bind() binds an ephemeral port landlock never sees.
    assert_eq!(eval(&prog, libc::SYS_listen, &[3, 128]), eperm());
    assert_eq!(
        eval(&prog, libc::SYS_socket, &[libc::AF_UNIX as u64, 1, 0]),
        eperm()
    );
    let fastopen = libc::MSG_FASTOPEN as u64;
    for (nr, flags_arg) in [
        (libc::SYS_sendto, 3),
        (libc::SYS_sendmsg, 2),
        (libc::SYS_sendmmsg, 3),
    ] {
        let mut args = [0u64; 6];
        args[flags_arg] = libc::MSG_NOSIGNAL as u64;
        assert_eq!(eval(&prog, nr, &args), ALLOW, "nr {nr}");
        args[flags_arg] |= fastopen;
        assert_eq!(eval(&prog, nr, &args), eperm(), "nr {nr} with MSG_FASTOPEN");
    }
    // Without the stream-only restriction the send calls are not inspected.
    let open = SeccompProgram::build(&SeccompSpec {
        inet: InetSockets::Any,
        ..SeccompSpec::locked_down()
    })
    .unwrap();
    assert_eq!(eval(&open, libc::SYS_sendto, &[0, 0, 0, fastopen]), ALLOW);
    assert_eq!(eval(&open, libc::SYS_listen, &[3, 128]), ALLOW);
    assert_eq!(
        eval(
            &open,
            libc::SYS_socket,
            &[
                libc::AF_INET as u64,
                libc::SOCK_STREAM as u64,
                libc::IPPROTO_MPTCP as u64
            ]
        ),
        ALLOW
    );
    assert_eq!(
        eval(
            &open,
            libc::SYS_socket,
            &[libc::AF_INET as u64, libc::SOCK_DGRAM as u64, 0]
        ),
        ALLOW
    );
}

/// The cache hands out, for every one of the 256 specs, exactly the program `build` makes
/// for it — never another spec's — and one shared copy per spec.
#[test]
fn cached_programs_are_the_built_ones_per_spec() {
    let raw = |p: &SeccompProgram| -> Vec<(u16, u8, u8, u32)> {
        p.instructions()
            .iter()
            .map(|i| (i.code, i.jt, i.jf, i.k))
            .collect()
    };
    for bits in 0u16..256 {
        let on = |i: u8| bits & (1 << i) != 0;
        let spec = SeccompSpec {
            deny_namespaces: on(0),
            inet: match (on(1), on(3)) {
                (false, _) => InetSockets::Deny,
                (true, false) => InetSockets::Any,
                (true, true) => InetSockets::TcpOnly,
            },
            allow_unix_sockets: on(2),
            deny_file_metadata: on(4),
            mediate_chmod: on(5),
            deny_ipc: on(6),
            notify_refusals: on(7),
            chown_noop_gid: None,
        };
        match (SeccompProgram::build(&spec), SeccompProgram::cached(&spec)) {
            (Ok(built), Ok(cached)) => {
                assert_eq!(raw(&built), raw(&cached), "{spec:?}");
                let again = SeccompProgram::cached(&spec).unwrap();
                assert!(std::sync::Arc::ptr_eq(&cached, &again), "{spec:?}");
            }
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
            (a, b) => panic!("{spec:?}: build {a:?}, cached {b:?}"),
        }
    }
}

/// The calls that could leave a setuid or setgid file or a device node behind are refused
/// in every filter whatever the spec (in the kernel, or by the supervisor they are handed
/// to), and the same calls without such an argument are not.
#[test]
fn what_a_run_would_leave_behind_is_refused_under_every_spec() {
    let creating = |flags_at: usize, mode: u64| {
        let mut a = vec![0u64; 6];
        a[flags_at] = libc::O_CREAT as u64 | libc::O_WRONLY as u64;
        a[flags_at + 1] = mode;
        a
    };
    let at = |i: usize, v: u64| {
        let mut a = vec![0u64; 6];
        a[i] = v;
        a
    };
    let whiteout = u64::from(libc::S_IFCHR) | 0o644;
    for spec in every_spec() {
        let prog = SeccompProgram::build(&spec).unwrap();
        let refused = |r: u32| r == eperm() || r == libc::SECCOMP_RET_USER_NOTIF;
        for &(name, nr, rule) in LEAVE_BEHIND {
            let chmod = CHMOD_FAMILY.iter().any(|&(_, n)| n == nr);
            let (bad, good): (Vec<Vec<u64>>, Vec<Vec<u64>>) = match rule {
                LeaveBehind::Mode(i) => (
                    vec![
                        at(i as usize, 0o4755),
                        at(i as usize, 0o2775),
                        at(i as usize, 0o6711),
                    ],
                    vec![at(i as usize, 0o755), at(i as usize, 0o1777)],
                ),
                LeaveBehind::CreateMode { flags, .. } => (
                    vec![
                        creating(flags as usize, 0o4755),
                        creating(flags as usize, 0o2644),
                        {
                            let mut a = at(flags as usize, 0o20_200_000);
                            a[flags as usize + 1] = 0o4700;
                            a
                        },
                    ],
                    vec![creating(flags as usize, 0o755), {
                        // Without O_CREAT the mode register is never read by the kernel.
                        let mut a = at(flags as usize, libc::O_RDONLY as u64);
                        a[flags as usize + 1] = 0o4755;
                        a
                    }],
                ),
                LeaveBehind::Node(i) => (
                    vec![
                        at(i as usize, whiteout),
                        at(i as usize, u64::from(libc::S_IFBLK) | 0o600),
                        at(i as usize, u64::from(libc::S_IFREG) | 0o4755),
                        at(i as usize, 0o2644),
                    ],
                    vec![
                        at(i as usize, u64::from(libc::S_IFIFO) | 0o644),
                        at(i as usize, u64::from(libc::S_IFREG) | 0o755),
                        at(i as usize, u64::from(libc::S_IFSOCK) | 0o755),
                    ],
                ),
                LeaveBehind::RenameFlags(i) => (
                    vec![
                        at(i as usize, u64::from(RENAME_WHITEOUT)),
                        at(
                            i as usize,
                            u64::from(RENAME_WHITEOUT) | libc::RENAME_NOREPLACE as u64,
                        ),
                    ],
                    vec![
                        at(i as usize, 0),
                        at(i as usize, libc::RENAME_EXCHANGE as u64),
                    ],
                ),
            };
            for a in &bad {
                let r = eval(&prog, nr, a);
                assert!(refused(r), "{spec:?}: {name} {a:?} -> {r:#x}");
                if !spec.notify_refusals {
                    assert_eq!(r, eperm(), "{spec:?}: {name} {a:?}: refused in the kernel");
                }
            }
            for a in &good {
                let r = eval(&prog, nr, a);
                let expected = if chmod && spec.mediate_chmod {
                    libc::SECCOMP_RET_USER_NOTIF
                } else if chmod && spec.deny_file_metadata {
                    eperm()
                } else {
                    ALLOW
                };
                assert_eq!(r, expected, "{spec:?}: {name} {a:?}");
            }
        }
        // openat2's mode is out of the filter's reach: libc falls back to openat.
        assert_eq!(
            eval(&prog, libc::SYS_openat2, &[]),
            ret_errno(libc::ENOSYS),
            "{spec:?}"
        );
    }
}

/// In a real child under the Tier C filter, every route to a setuid or setgid file or a
/// device node fails with `EPERM`, the file or node does not exist afterwards, and the
/// same calls without the bit work.
#[test]
fn setid_files_and_device_nodes_cannot_be_made_in_a_filtered_child() {
    use std::ffi::CString;
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| {
        CString::new(dir.path().join(name).into_os_string().into_encoded_bytes()).unwrap()
    };
    let (plain, target, node, fifo, moved, src, twice) = (
        path("plain"),
        path("target"),
        path("node"),
        path("fifo"),
        path("moved"),
        path("src"),
        path("twice"),
    );
    std::fs::write(dir.path().join("plain"), b"x").unwrap();
    std::fs::write(dir.path().join("src"), b"x").unwrap();
    let prog = SeccompProgram::build(&crate::tier_c::tier_c_seccomp_spec()).unwrap();
    let fprog = prog.as_fprog();
    let cwd = libc::AT_FDCWD as u64;
    let code = ts::fork_with(|| {
        if sys::set_no_new_privs().is_err() || sys::seccomp_set_filter(&fprog, 0).is_err() {
            return 10;
        }
        let call = |nr: libc::c_long, args: [u64; 5], p: &[(usize, &std::ffi::CStr)]| {
            ts::path_call(nr, args, p)
        };
        let eperm = Err(libc::EPERM);
        type Check = (i32, Result<i64, i32>, Result<i64, i32>);
        let checks: [Check; 10] = [
            (
                20,
                call(libc::SYS_fchmodat, [cwd, 0, 0o4755, 0, 0], &[(1, &plain)]),
                eperm,
            ),
            (
                21,
                call(extra_nr::FCHMODAT2, [cwd, 0, 0o2755, 0, 0], &[(1, &plain)]),
                eperm,
            ),
            (
                22,
                call(
                    libc::SYS_openat,
                    [cwd, 0, (libc::O_CREAT | libc::O_WRONLY) as u64, 0o4755, 0],
                    &[(1, &target)],
                ),
                eperm,
            ),
            (
                23,
                call(
                    libc::SYS_mknodat,
                    [cwd, 0, u64::from(libc::S_IFCHR) | 0o644, 0, 0],
                    &[(1, &node)],
                ),
                eperm,
            ),
            (
                24,
                call(
                    libc::SYS_mknodat,
                    [cwd, 0, u64::from(libc::S_IFREG) | 0o6755, 0, 0],
                    &[(1, &node)],
                ),
                eperm,
            ),
            (
                25,
                call(
                    libc::SYS_renameat2,
                    [cwd, 0, cwd, 0, u64::from(RENAME_WHITEOUT)],
                    &[(1, &src), (3, &moved)],
                ),
                eperm,
            ),
            (
                26,
                call(libc::SYS_openat2, [cwd, 0, 0, 0, 0], &[(1, &target)]),
                Err(libc::ENOSYS),
            ),
            (
                27,
                call(libc::SYS_fchmodat, [cwd, 0, 0o750, 0, 0], &[(1, &plain)]),
                Ok(0),
            ),
            (
                28,
                call(
                    libc::SYS_mknodat,
                    [cwd, 0, u64::from(libc::S_IFIFO) | 0o644, 0, 0],
                    &[(1, &fifo)],
                ),
                Ok(0),
            ),
            (
                29,
                call(
                    libc::SYS_renameat2,
                    [cwd, 0, cwd, 0, 0],
                    &[(1, &src), (3, &moved)],
                ),
                Ok(0),
            ),
        ];
        for (code, got, want) in checks {
            if got != want {
                return code;
            }
        }
        // Without O_CREAT the mode is ignored, whatever it holds.
        match call(
            libc::SYS_openat,
            [cwd, 0, libc::O_RDONLY as u64, 0o4755, 0],
            &[(1, &twice)],
        ) {
            Err(libc::ENOENT) => 0,
            _ => 30,
        }
    });
    assert_eq!(code, 0, "child probe failed with code {code}");
    let mode = std::fs::metadata(dir.path().join("plain")).unwrap().mode();
    assert_eq!(
        mode & 0o7777,
        0o750,
        "the plain chmod worked, the setid ones did not"
    );
    for gone in ["target", "node", "src"] {
        assert!(!dir.path().join(gone).exists(), "{gone} must not exist");
    }
    assert!(dir.path().join("moved").exists());
}

/// SECURITY.md's table of system calls says, for each call either side restricts, what
/// the filter does and what the container runtimes' default profile does. Every row is
/// checked against the built filters (Tier B with every option that adds a rule, Tier C)
/// and against the reference copy of that profile; every x86-64 call either side
/// restricts must have a row.
#[cfg(target_arch = "x86_64")]
#[test]
fn the_security_md_seccomp_table_matches_the_filter() {
    use std::collections::{BTreeMap, BTreeSet};
    let syscalls: BTreeMap<String, u32> = include_str!("reference/syscalls-x86_64.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (nr, name) = l.split_once(' ').unwrap();
            (name.to_owned(), nr.parse().unwrap())
        })
        .collect();
    let container: BTreeMap<String, String> = include_str!("reference/container-default.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (verdict, name) = l.split_once(' ').unwrap();
            (name.to_owned(), verdict.to_owned())
        })
        .collect();
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../SECURITY.md")).unwrap();
    let table = doc
        .split("<!-- seccomp-table:start -->")
        .nth(1)
        .and_then(|t| t.split("<!-- seccomp-table:end -->").next())
        .expect("SECURITY.md has the seccomp table markers");

    let tier_b = SeccompSpec {
        deny_namespaces: true,
        deny_file_metadata: false,
        mediate_chmod: false,
        deny_ipc: true,
        inet: InetSockets::TcpOnly,
        allow_unix_sockets: false,
        // The table is what the kernel refuses: with the hand-off, the supervisor answers
        // exactly so (tested in `handed_off_refusals_are_answered_as_the_enforcing_filter`).
        notify_refusals: false,
        chown_noop_gid: None,
    };
    let uid0 = SeccompSpec {
        deny_file_metadata: true,
        chown_noop_gid: Some(4242),
        ..tier_b
    };
    let mediated = SeccompSpec {
        mediate_chmod: true,
        ..uid0
    };
    let tier_c = crate::tier_c::tier_c_seccomp_spec();
    let progs: Vec<(&str, SeccompProgram)> = [
        ("tier b", tier_b),
        ("tier b, uid 0", uid0),
        ("tier b, uid 0 mediated", mediated),
        ("tier c", tier_c),
    ]
    .into_iter()
    .map(|(n, s)| (n, SeccompProgram::build(&s).unwrap()))
    .collect();
    let decide =
        |prog: &SeccompProgram, nr: u32| run(prog.instructions(), &Data::call(nr.into(), &[]));

    let mut rows = BTreeSet::new();
    for line in table.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        assert_eq!(cells.len(), 4, "row {line}");
        let (tierbox, theirs) = (cells[1], cells[2]);
        for name in cells[0].split(", ") {
            let name = name.trim_matches('`');
            let nr = *syscalls
                .get(name)
                .unwrap_or_else(|| panic!("{name}: not an x86-64 system call"));
            assert!(rows.insert(name.to_owned()), "{name}: two rows");
            let t: Vec<(&str, Trace)> = progs.iter().map(|(n, p)| (*n, decide(p, nr))).collect();
            let result = |spec: &str| t.iter().find(|(n, _)| *n == spec).unwrap().1.result;
            let enosys = ret_errno(libc::ENOSYS);
            match tierbox {
                "denied" => {
                    for (spec, tr) in &t {
                        assert!(
                            tr.constant && tr.result == eperm(),
                            "{name} under {spec}: {:#x}",
                            tr.result
                        );
                    }
                }
                "allowed" => {
                    for (spec, tr) in &t {
                        assert!(
                            tr.constant && tr.result == ALLOW,
                            "{name} under {spec}: {:#x}",
                            tr.result
                        );
                    }
                }
                "`ENOSYS`" => {
                    for (spec, tr) in &t {
                        assert_eq!(tr.result, enosys, "{name} under {spec}");
                    }
                }
                "denied with strict egress in Tier B" => {
                    assert_eq!(result("tier b"), eperm(), "{name}");
                    assert_eq!(result("tier c"), ALLOW, "{name}");
                }
                "denied in Tier B" => {
                    assert_eq!(result("tier b"), eperm(), "{name}");
                    assert_eq!(result("tier c"), ALLOW, "{name}");
                }
                "`EOPNOTSUPP` to runs that keep uid 0" => {
                    assert_eq!(
                        result("tier b, uid 0"),
                        ret_errno(libc::EOPNOTSUPP),
                        "{name}"
                    );
                    assert_eq!(result("tier b"), ALLOW, "{name}");
                    assert_eq!(result("tier c"), ALLOW, "{name}");
                }
                "denied to runs that keep uid 0" => {
                    assert_eq!(result("tier b, uid 0"), eperm(), "{name}");
                    assert_eq!(result("tier b"), ALLOW, "{name}");
                    assert_eq!(result("tier c"), ALLOW, "{name}");
                }
                "handed to the supervisor for runs that keep uid 0" => {
                    assert_eq!(
                        result("tier b, uid 0 mediated"),
                        libc::SECCOMP_RET_USER_NOTIF,
                        "{name}"
                    );
                    assert_eq!(result("tier b"), ALLOW, "{name}");
                }
                other if other.starts_with("by argument") => {
                    assert!(
                        t.iter().any(|(_, tr)| !tr.constant),
                        "{name}: the filter never reads its arguments"
                    );
                }
                other => panic!("{name}: unknown Tierbox verdict {other:?}"),
            }
            let reference = container.get(name).map(String::as_str);
            let expected = match theirs {
                "allowed" => Some("allow"),
                "denied" => None,
                "`ENOSYS`" => Some("enosys"),
                other if other.starts_with("by argument") => Some("argument"),
                other => panic!("{name}: unknown container verdict {other:?}"),
            };
            assert_eq!(reference, expected, "{name}: the container column");
        }
    }
    // Completeness: every call either side restricts has a row.
    for (name, &nr) in &syscalls {
        let ours = progs.iter().any(|(_, p)| {
            let tr = decide(p, nr);
            !tr.constant || tr.result != ALLOW
        });
        let theirs = container.get(name).map(String::as_str) != Some("allow");
        if ours || theirs {
            assert!(
                rows.contains(name),
                "{name} ({nr}) is restricted by {} but has no row in SECURITY.md's table",
                if ours {
                    "Tierbox"
                } else {
                    "the container default"
                }
            );
        }
    }
}
