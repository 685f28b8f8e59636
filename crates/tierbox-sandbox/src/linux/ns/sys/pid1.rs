//! The sandbox's pid 1: its ordered setup, the start of the program, and the exec of
//! the reaper.

use super::mount_ops::*;
use super::net::*;
use super::program::program_main;
use super::raw::*;
use super::*;

// ---- pid 1 ----------------------------------------------------------------------------

/// pid 1's entry point: setup, start the program, then reap (as `tierbox-init` when it
/// can exec it, in process otherwise). Never returns (it exits with the program's status,
/// or 127 after reporting a setup failure).
pub(super) extern "C" fn init_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `&NsSpec` the supervisor passed to `clone`; this process runs on
    // a copy-on-write copy of the supervisor's memory taken at `clone`, in which the spec
    // and everything it points to are intact and never freed.
    let spec: &NsSpec<'_> = unsafe { &*(arg as *const NsSpec<'_>) };
    match init_setup(spec) {
        Ok(program) => {
            // 13. Let go of the copy of the supervisor's memory: exec the reaper. Only
            //     returns if the exec failed, with the memory intact: reap here.
            let report_fd = exec_reaper(spec, program);
            reaper::reap(report_fd, program)
        }
        Err(Failure {
            step,
            errno: err,
            op_index,
            sub,
        }) => {
            let r = Report {
                tag: ReportTag::Failed as u32,
                step: step as u32,
                value: err,
                op_index,
                sub,
                usage: ReapedUsage::default(),
            };
            let _ = lsys::write_all_raw(spec.report_fd, &r.encode());
            exit_group(127)
        }
    }
}

/// The ordered setup of pid 1. Returns the program's pid (in the namespace) once it runs
/// and the supervisor has been told.
pub(super) fn init_setup(spec: &NsSpec<'_>) -> Result<libc::pid_t, Failure> {
    use Step as S;
    // 1. Default dispositions: signals stay blocked (inherited from the cloning thread)
    //    until the program's exec, and pid 1 only ever waits for them synchronously.
    reset_signal_handlers();
    // 2. Die with the supervisor's thread, then check it was not already gone: the
    //    supervisor holds the read end of the report pipe until it has our first record,
    //    so POLLERR on our write end means it died (getppid() is 0 across a pid namespace).
    prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong).map_err(fail(S::Pdeathsig))?;
    if init_sys::pipe_has_no_reader(spec.report_fd) {
        return Err(Failure::at(S::Pdeathsig, libc::ESRCH));
    }
    // 2b. Into the run's cgroup, before any setup allocates memory or forks: pid 1 moves
    //    itself (a task moving itself through v1 `tasks` skips the global threadgroup
    //    lock). The fds were opened by the supervisor, whose credentials the kernel
    //    checks.
    for fd in spec.cgroup_fds {
        lsys::write_all_raw(*fd, b"0").map_err(fail(S::CgroupAttach))?;
    }
    // 3. Our own id maps, before anything else needs an id: a process may map its own
    //    outside euid/egid with one line; `setgroups` must be denied before `gid_map`.
    //    A root supervisor mapping another host uid writes them for us (only a
    //    privileged process may): wait for its word.
    if spec.maps_ready_fd >= 0 {
        wait_for_byte(spec.maps_ready_fd).map_err(fail(S::UidMap))?;
        close(spec.maps_ready_fd);
    } else {
        write_proc_self(c"/proc/self/uid_map", spec.uid_map).map_err(fail(S::UidMap))?;
        write_proc_self(c"/proc/self/setgroups", b"deny").map_err(fail(S::Setgroups))?;
        write_proc_self(c"/proc/self/gid_map", spec.gid_map).map_err(fail(S::GidMap))?;
    }
    // 4. A session of our own: no controlling terminal of the supervisor's.
    // SAFETY: setsid takes no arguments.
    check(unsafe { libc::syscall(libc::SYS_setsid) }).map_err(fail(S::Setsid))?;
    // 5. Hostname in the new UTS namespace (needs CAP_SYS_ADMIN in the userns: we have it).
    sethostname(spec.hostname).map_err(fail(S::Hostname))?;
    // 6. Loopback up in the new network namespace (its only interface), unless the
    //    supervisor made the namespace and did it (a pooled namespace).
    if spec.loopback_up {
        loopback_up().map_err(fail(S::Loopback))?;
    }
    // 6b. The egress proxy's listener, made here so that it lives in this namespace, and
    //     handed to the supervisor, which serves it. Before the program exists, so the
    //     program's first connection finds it (queued in the backlog until accepted).
    if spec.proxy_fd >= 0 {
        send_loopback_listener(spec.proxy_fd, spec.proxy_port).map_err(fail(S::EgressListener))?;
        close(spec.proxy_fd);
    }
    // 7. Exact modes for everything the ops create.
    umask(0);
    // 8. The filesystem, op by op, in the planner's order.
    for (i, op) in spec.ops.iter().enumerate() {
        let moved = spec.moved_trees.iter().find(|(at, _)| *at == i);
        let result = match moved {
            Some((_, tree)) => move_tree(*tree, op.dst),
            None if op.kind == OpKind::SendFd => send_dir_fd(op, spec.fs_fd),
            None => run_op(op),
        };
        result.map_err(|(sub, errno)| Failure {
            step: S::MountOp,
            errno,
            op_index: i as u32,
            sub: sub as u32,
        })?;
    }
    // 8b. Landlock rules for the mounts that exist only in here; the program restricts
    //     itself with the ruleset just before seccomp.
    if spec.landlock_fd >= 0 {
        for (path, access) in spec.landlock_rules {
            add_landlock_rule(spec.landlock_fd, path, *access).map_err(fail(S::LandlockRules))?;
        }
    }
    // 9. pid 1's identity: not dumpable (its memory is a copy of the supervisor's; the
    //    program may not read it through /proc/1/mem or /proc/1/environ), the supervisor's
    //    argv wiped from /proc/1/cmdline, and a recognisable name.
    wipe_arg_area(spec.arg_area);
    prctl(libc::PR_SET_DUMPABLE, 0).map_err(fail(S::InitIdentity))?;
    prctl(libc::PR_SET_NAME, spec.init_name.as_ptr() as libc::c_ulong)
        .map_err(fail(S::InitIdentity))?;
    // 10. The program: CLONE_VFORK suspends us until it execs or fails.
    spec.fail_step.store(0, Ordering::SeqCst);
    spec.fail_errno.store(0, Ordering::SeqCst);
    // SAFETY: `program_main` only makes raw system calls on the spec; its stack top is the
    // 16-byte aligned end of a buffer in our memory, which it shares (CLONE_VM) while we
    // are suspended (CLONE_VFORK) until it execs or exits.
    let pid = unsafe {
        libc::clone(
            program_main,
            spec.program_stack_top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            spec as *const NsSpec<'_> as *mut c_void,
        )
    };
    if pid < 0 {
        return Err(Failure::at(S::CloneProgram, errno()));
    }
    let failed = Step::from_u32(spec.fail_step.load(Ordering::SeqCst));
    if failed != Step::None {
        return Err(Failure::at(failed, spec.fail_errno.load(Ordering::SeqCst)));
    }
    // 11. Hold nothing of the run: only the report pipe and the reaper's image stay open.
    close_all_but(&[spec.report_fd, spec.reaper_fd]);
    // 12. Drop what pid 1 no longer needs: it only waits and forwards signals (and the
    //     reaper's exec, with no_new_privs and no capabilities, can gain none). Under a
    //     root supervisor it leaves ns uid 0 (host root) for the sandbox's uid first; the
    //     death signal this clears is armed again by the reaper.
    if spec.switch_ids {
        lsys::set_ids(SANDBOX_UID, SANDBOX_GID).map_err(fail(S::InitIdentity))?;
    }
    let _ = lsys::capset_zero();
    let _ = lsys::set_no_new_privs();
    let started = Report {
        tag: ReportTag::Started as u32,
        step: 0,
        value: pid,
        ..Report::default()
    };
    // A supervisor that is gone cannot be told; PR_SET_PDEATHSIG kills us anyway.
    let _ = lsys::write_all_raw(spec.report_fd, &started.encode());
    Ok(pid)
}

/// Step 13 of pid 1: moves the report pipe to [`reaper::REPORT_FD`] (kept across the
/// exec) and execs `tierbox-init` from [`NsSpec::reaper_fd`] with the program's pid in
/// `argv[1]` and an empty environment. Returns only when there is no image or the exec
/// failed — with this process's memory untouched — and then gives the fd the report pipe
/// is on now, for the in-process reaper.
pub(super) fn exec_reaper(spec: &NsSpec<'_>, program: libc::pid_t) -> RawFd {
    if spec.reaper_fd < 0 {
        // What tierbox-init does first (an id switch cleared the death signal).
        reaper::rearm(spec.report_fd);
        return spec.report_fd;
    }
    let target = reaper::REPORT_FD;
    let mut image = spec.reaper_fd;
    if image == target {
        // Out of the report pipe's way first (close-on-exec, like the original).
        // SAFETY: integer arguments on an fd this process holds.
        image = unsafe { libc::syscall(libc::SYS_fcntl, image, libc::F_DUPFD_CLOEXEC, target + 1) }
            as RawFd;
        if image < 0 {
            return spec.report_fd;
        }
    }
    // dup3 to a new number clears close-on-exec; on the same number, fcntl does.
    // SAFETY: integer arguments on fds this process holds.
    let moved = unsafe {
        if spec.report_fd == target {
            libc::syscall(libc::SYS_fcntl, target, libc::F_SETFD, 0)
        } else {
            libc::syscall(libc::SYS_dup3, spec.report_fd, target, 0)
        }
    };
    if moved < 0 {
        return spec.report_fd;
    }
    let mut digits = [0u8; 12];
    let pid_arg = decimal(program, &mut digits);
    let argv: [*const c_char; 3] = [
        reaper::NAME.as_ptr(),
        pid_arg.as_ptr().cast(),
        std::ptr::null(),
    ];
    let envp: [*const c_char; 1] = [std::ptr::null()];
    // SAFETY: an fd we hold, an empty NUL-terminated path with AT_EMPTY_PATH, and
    // NULL-terminated argv/envp arrays of NUL-terminated strings on our stack. Returns
    // only on failure, before the point of no return (the memory is intact).
    unsafe {
        libc::syscall(
            libc::SYS_execveat,
            image,
            c"".as_ptr(),
            argv.as_ptr(),
            envp.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    };
    target
}

/// `n` (positive) in decimal, NUL-terminated, in `buf`.
pub(super) fn decimal(n: libc::pid_t, buf: &mut [u8; 12]) -> &[u8] {
    let mut v = n.max(0) as u32;
    let mut at = buf.len() - 1;
    buf[at] = 0;
    loop {
        at -= 1;
        buf[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    buf.get(at..).unwrap_or_default()
}

pub(super) fn wipe_arg_area((start, end): (usize, usize)) {
    if start == 0 || end <= start {
        return;
    }
    // SAFETY: [start, end) is the argv area of the process this one was copied from
    // (read by the supervisor from /proc/self/stat), mapped and writable in our private
    // copy-on-write copy; nothing in this process reads the arguments afterwards.
    unsafe { std::ptr::write_bytes(start as *mut u8, 0, end - start) };
}

/// Blocks until one byte can be read from `fd` (a pipe); `EPIPE` if its writer went away
/// without writing.
pub(super) fn wait_for_byte(fd: RawFd) -> Result<(), i32> {
    let mut b = 0u8;
    loop {
        // SAFETY: reads at most one byte into `b`, on our stack.
        let n = unsafe { libc::syscall(libc::SYS_read, fd, &mut b as *mut u8, 1usize) };
        match check(n) {
            Ok(1) => return Ok(()),
            Ok(_) => return Err(libc::EPIPE),
            Err(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
}

/// Closes every fd but those in `keep` (negative entries are ignored).
pub(super) fn close_all_but(keep: &[RawFd; 2]) {
    let (lo, hi) = (keep[0].min(keep[1]), keep[0].max(keep[1]));
    let mut from: libc::c_ulong = 0;
    for k in [lo, hi] {
        if k < 0 || (k as libc::c_ulong) < from {
            continue;
        }
        let k = k as libc::c_ulong;
        if k > from {
            close_range(from, k - 1);
        }
        from = k + 1;
    }
    close_range(from, libc::c_ulong::from(u32::MAX));
}

pub(super) fn close_range(first: libc::c_ulong, last: libc::c_ulong) {
    // SAFETY: integer arguments; closing fds this process does not use any more.
    unsafe { libc::syscall(libc::SYS_close_range, first, last, 0 as libc::c_ulong) };
}
