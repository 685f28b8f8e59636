//! The sandbox's pid 1: the real calls of its ordered setup ([`super::super::setup`]:
//! up to the start of the program), and the exec of the reaper.

use super::mount_ops::*;
use super::net::*;
use super::program::program_main;
use super::raw::*;
use super::*;
use crate::linux::ns::setup::{InitCalls, init_setup};

// ---- pid 1 ----------------------------------------------------------------------------

/// pid 1's entry point: setup, start the program, then reap (as `tierbox-init` when it
/// can exec it, in process otherwise). Never returns (it exits with the program's status,
/// or 127 after reporting a setup failure).
pub(super) extern "C" fn init_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `&NsSpec` the supervisor passed to `clone`; this process runs on
    // a copy-on-write copy of the supervisor's memory taken at `clone`, in which the spec
    // and everything it points to are intact and never freed.
    let spec: &NsSpec<'_> = unsafe { &*(arg as *const NsSpec<'_>) };
    match init_setup(&Pid1Calls, spec) {
        Ok(program) => {
            // Then let go of the copy of the supervisor's memory: exec the reaper. Only
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

/// The real system calls of pid 1's setup ([`InitCalls`]): raw calls only.
pub(super) struct Pid1Calls;

impl InitCalls for Pid1Calls {
    fn reset_signal_handlers(&self) {
        reset_signal_handlers();
    }

    fn set_pdeathsig(&self) -> Result<(), i32> {
        prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong)
    }

    fn supervisor_gone(&self, fd: RawFd) -> bool {
        init_sys::pipe_has_no_reader(fd)
    }

    fn cgroup_attach(&self, fd: RawFd) -> Result<(), i32> {
        lsys::write_all_raw(fd, b"0")
    }

    fn wait_for_byte(&self, fd: RawFd) -> Result<(), i32> {
        wait_for_byte(fd)
    }

    fn close(&self, fd: RawFd) {
        close(fd);
    }

    fn write_proc_self(&self, path: &CStr, content: &[u8]) -> Result<(), i32> {
        write_proc_self(path, content)
    }

    fn setsid(&self) -> Result<(), i32> {
        // SAFETY: setsid takes no arguments.
        check(unsafe { libc::syscall(libc::SYS_setsid) }).map(drop)
    }

    fn sethostname(&self, name: &[u8]) -> Result<(), i32> {
        sethostname(name)
    }

    fn loopback_up(&self) -> Result<(), i32> {
        loopback_up()
    }

    fn send_listener(&self, sock: RawFd, port: u16) -> Result<(), i32> {
        send_loopback_listener(sock, port)
    }

    fn umask(&self, mask: u32) {
        umask(mask);
    }

    fn move_tree(&self, tree: RawFd, dst: &CStr) -> Result<(), OpFailure> {
        move_tree(tree, dst)
    }

    fn send_dir_fd(&self, op: &NsOp<'_>, sock: RawFd) -> Result<(), OpFailure> {
        send_dir_fd(op, sock)
    }

    fn run_op(&self, op: &NsOp<'_>) -> Result<(), OpFailure> {
        run_op(op)
    }

    fn add_landlock_rule(&self, ruleset: RawFd, path: &CStr, access: u64) -> Result<(), i32> {
        add_landlock_rule(ruleset, path, access)
    }

    fn wipe_arg_area(&self, area: (usize, usize)) {
        wipe_arg_area(area);
    }

    fn not_dumpable(&self) -> Result<(), i32> {
        prctl(libc::PR_SET_DUMPABLE, 0)
    }

    fn send_namespaces(&self, sock: RawFd) -> Result<(), i32> {
        for path in [c"/proc/self/ns/user", c"/proc/self/ns/net"] {
            // SAFETY: a NUL-terminated constant path and integer flags.
            let fd = check(unsafe {
                libc::syscall(
                    libc::SYS_openat,
                    libc::AT_FDCWD,
                    path.as_ptr(),
                    libc::O_RDONLY | libc::O_CLOEXEC,
                )
            })? as RawFd;
            let sent = super::net::send_fd(sock, fd);
            close(fd);
            sent?;
        }
        Ok(())
    }

    fn set_dumpable(&self, on: bool) -> Result<(), i32> {
        prctl(libc::PR_SET_DUMPABLE, libc::c_ulong::from(on))
    }

    fn set_name(&self, name: &CStr) -> Result<(), i32> {
        prctl(libc::PR_SET_NAME, name.as_ptr() as libc::c_ulong)
    }

    fn start_program(&self, spec: &NsSpec<'_>) -> Result<libc::pid_t, (Step, i32)> {
        spec.fail_step.store(0, Ordering::SeqCst);
        spec.fail_errno.store(0, Ordering::SeqCst);
        // SAFETY: `program_main` only makes raw system calls on the spec; its stack top is
        // the 16-byte aligned end of a buffer in our memory, which it shares (CLONE_VM)
        // while we are suspended (CLONE_VFORK) until it execs or exits.
        let pid = unsafe {
            libc::clone(
                program_main,
                spec.program_stack_top,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                spec as *const NsSpec<'_> as *mut c_void,
            )
        };
        if pid < 0 {
            return Err((Step::CloneProgram, errno()));
        }
        let failed = Step::from_u32(spec.fail_step.load(Ordering::SeqCst));
        if failed != Step::None {
            return Err((failed, spec.fail_errno.load(Ordering::SeqCst)));
        }
        Ok(pid)
    }

    fn close_all_but(&self, keep: &[RawFd; 2]) {
        close_all_but(keep);
    }

    fn set_ids(&self, uid: u32, gid: u32) -> Result<(), i32> {
        lsys::set_ids(uid, gid)
    }

    fn capset_zero(&self) -> Result<(), i32> {
        lsys::capset_zero()
    }

    fn no_new_privs(&self) -> Result<(), i32> {
        lsys::set_no_new_privs()
    }

    fn report(&self, fd: RawFd, report: &Report) -> Result<(), i32> {
        lsys::write_all_raw(fd, &report.encode())
    }
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
    let pid_arg = lsys::decimal(program, &mut digits);
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
