//! The reaper: what the sandbox's pid 1 does once the program runs. Shared, as one source
//! file, by the freestanding `tierbox-init` program and the supervisor's crate (the
//! in-process fallback, see the `init` module); `core` and `sys` only.

use core::ffi::CStr;

use super::report::{ReapedUsage, Report, ReportTag, Rusage};
use super::sys::{self, abi};

/// The fd the report pipe is on when `tierbox-init` starts: pid 1 moves it there (without
/// close-on-exec) just before it execs the reaper.
pub const REPORT_FD: i32 = 3;

/// pid 1's name (`comm`), set again after the exec (which names a process after the file
/// it ran: for `execveat(fd, "")`, the fd's number).
pub const NAME: &CStr = c"tierbox-init";

/// The report fd of `tierbox-init --run` (bwrap's pid 1): none; a write to it fails
/// with `EBADF` and the exit code alone carries the program's end.
pub const NO_REPORT_FD: i32 = -1;

/// Exit code of `tierbox-init --run` when it cannot set itself up (non-dumpable, signal
/// mask) or fork the program: nothing of the program ran.
pub const SETUP_FAILED_EXIT: i32 = 123;
/// Exit code of `tierbox-init --run` when the program's path does not exist (as a shell's).
pub const NOT_FOUND_EXIT: i32 = 127;
/// Exit code of `tierbox-init --run` when the program cannot be executed (as a shell's).
pub const NOT_EXECUTABLE_EXIT: i32 = 126;

/// Exit code of `tierbox-init` started without a valid program pid in `argv[1]`.
pub const BAD_ARGUMENTS_EXIT: i32 = 120;
/// Exit code of `tierbox-init` after a panic (a bug: nothing in it should panic).
pub const PANIC_EXIT: i32 = 121;
/// Exit code of pid 1 when its death signal could not be re-armed after the exec, or the
/// supervisor was already gone (nobody is left to report to).
pub const SUPERVISOR_GONE_EXIT: i32 = 122;

/// Signals pid 1 forwards to every other process of the namespace (`kill(-1, sig)`):
/// the ones a supervisor or terminal uses to ask a program to stop or reload. Everything
/// else stays blocked in pid 1 (and `SIGKILL` from the supervisor kills pid 1, which makes
/// the kernel kill the whole namespace).
pub const FORWARDED_SIGNALS: [i32; 7] = [
    abi::SIGHUP,
    abi::SIGINT,
    abi::SIGQUIT,
    abi::SIGTERM,
    abi::SIGUSR1,
    abi::SIGUSR2,
    abi::SIGWINCH,
];

/// What an `execve` resets and pid 1 needs back, first thing after it: not dumpable (an
/// exec by a process whose ids all agree makes it dumpable again; its memory is only this
/// program's, but `/proc/1` stays closed to the program all the same), its name, and its
/// death signal, then a check that the supervisor did not die before the signal was armed
/// again (its end of the report pipe is then closed: `POLLERR`).
pub fn rearm(report_fd: i32) {
    let dumpable = sys::prctl(abi::PR_SET_DUMPABLE, 0);
    let _ = sys::set_name(NAME.to_bytes_with_nul());
    let armed = sys::prctl(abi::PR_SET_PDEATHSIG, abi::SIGKILL as usize);
    if dumpable < 0 || armed < 0 || sys::pipe_has_no_reader(report_fd) {
        sys::exit_group(SUPERVISOR_GONE_EXIT);
    }
}

/// The reaper: reaps every process re-parented to pid 1, forwards [`FORWARDED_SIGNALS`]
/// to the rest of the namespace, and when the program (`program`, its pid in the
/// namespace) ends, kills and reaps every other process of the namespace, writes the
/// `ReportTag::Exited` record with the program's wait status and what all of them used
/// (`ReapedUsage`) to `report_fd`, and exits with the program's code (or 128 + its
/// signal).
///
/// So the record means the run is over: no process of the namespace but pid 1 is left,
/// and pid 1 only exits. The supervisor can finish the run on that record without waiting
/// for pid 1's exit, whose teardown of the namespaces (unmounting every mount of the
/// sandbox) is the longest step of the run's end.
///
/// Every signal but `SIGKILL` must be blocked (pid 1 waits for them synchronously).
pub fn reap(report_fd: i32, program: i32) -> ! {
    let mut wait_set: u64 = sigbit(abi::SIGCHLD);
    for s in FORWARDED_SIGNALS {
        wait_set |= sigbit(s);
    }
    let mut usage = ReapedUsage::default();
    loop {
        let mut program_status: Option<i32> = None;
        while let Some((pid, status)) = wait_any(abi::WNOHANG, &mut usage) {
            if pid == program {
                program_status = Some(status);
            }
        }
        if let Some(status) = program_status {
            // kill(-1, SIGKILL) from a pid namespace's init kills every other process of
            // that namespace, nothing outside it; a fork racing with it either is
            // signalled too or fails (its parent has the signal pending).
            let _ = sys::kill(-1, abi::SIGKILL);
            // Every process of the namespace is pid 1's child once its parent is dead:
            // no child left (ECHILD) means none left at all.
            while wait_any(0, &mut usage).is_some() {}
            let record = Report {
                tag: ReportTag::Exited as u32,
                value: status,
                usage,
                ..Report::default()
            };
            // One record is far below PIPE_BUF: the write is whole or fails, and a gone
            // reader cannot be told.
            let _ = sys::write(report_fd, &record.encode());
            sys::exit_group(exit_code(status));
        }
        let sig = sys::sigwait(&wait_set);
        if sig > 0 && sig as i32 != abi::SIGCHLD {
            let _ = sys::kill(-1, sig as i32);
        }
    }
}

/// pid 1's own exit code for the program's wait status: its code, or 128 + its signal.
pub fn exit_code(status: i32) -> i32 {
    let signal = status & 0x7f;
    if signal == 0 {
        (status >> 8) & 0xff
    } else {
        128 + signal
    }
}

/// One `wait4(-1, .., flags | __WALL, &rusage)` of pid 1: the reaped child's pid and wait
/// status, its usage added to `usage`; `None` when there is nothing (more) to reap
/// (`WNOHANG` and none exited, or no child at all). `EINTR` is retried (every signal but
/// `SIGKILL` is blocked in pid 1, so it does not happen).
fn wait_any(flags: i32, usage: &mut ReapedUsage) -> Option<(i32, i32)> {
    loop {
        let mut status = 0;
        let mut ru = Rusage::default();
        let r = sys::wait4_any(flags | abi::WALL, &mut status, &mut ru);
        if r > 0 {
            usage.add(&ru);
            return Some((r as i32, status));
        }
        if r != -(abi::EINTR as isize) {
            return None;
        }
    }
}

/// Bit of `sig` in a kernel sigset.
fn sigbit(sig: i32) -> u64 {
    1u64 << (sig - 1)
}
