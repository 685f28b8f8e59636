//! `tierbox-init`: the native Tier C sandbox's pid 1 once the program runs.
//!
//! A freestanding static program (no `std`, no libc, no dynamic loader), built by the
//! crate's build script from this directory with `--cfg tierbox_init` and embedded in the
//! supervisor, which runs it from a sealed memfd. pid 1 execs it right after it has
//! started the program (see `mod.rs` beside this file for why), with the report pipe on
//! [`reaper::REPORT_FD`] and the program's pid in `argv[1]`; every signal but `SIGKILL`
//! is blocked (the mask survives the exec).
//!
//! Nothing in this program can reach memory that is not its own: it is linked from this
//! directory's sources and `core` alone, so a call the compiler emits to any function it
//! does not contain (`memcpy`, …) fails the link instead of jumping into a library that
//! is not mapped.

#![no_std]
#![no_main]
// The shared files also hold what only the supervisor uses (decoding a record, …).
#![allow(dead_code)]

mod reaper;
mod report;
mod sys;

/// Called by `_start` with the program's pid: re-arms what the exec reset, then reaps.
fn run(program: i32) -> ! {
    reaper::rearm(reaper::REPORT_FD);
    reaper::reap(reaper::REPORT_FD, program)
}

/// Called by `_start` for `tierbox-init --run PATH ARGV0 [ARGS...]`: pid 1 of a bwrap
/// sandbox (bwrap `--as-pid-1`, in place of bwrap's own init). Makes itself non-dumpable
/// first — before the program exists, so the program can never open `/proc/1/mem` —
/// then forks the program with an empty signal mask and reaps as the native sandbox's
/// pid 1 does ([`reaper::reap`]), exiting with the program's code or 128 + its signal.
/// There is no report pipe: bwrap passes that exit code on.
///
/// With `--pty SOCK ROWS COLS` (after `--alive FD`), the forked program makes its terminal
/// in the sandbox's own devpts, sends the primary side out over `SOCK` and takes the
/// secondary as stdin, stdout, stderr and controlling terminal, in a session of its own
/// ([`sys::sandbox_terminal`]): `tty` inside names the sandbox's `/dev/pts/0`.
///
/// With `--alive FD` first, `FD` is the read end of a pipe only the supervisor writes to:
/// pid 1 re-arms its death signal and ends at once when the pipe has already hung up.
///
/// With `--run-stacked FD SOCK LOG`, the program also gets the seccomp program read from
/// `FD` stacked on the one bwrap attached: with `LOG` 1 attached with
/// `SECCOMP_FILTER_FLAG_LOG` (as the newest filter its verdict is the one the kernel
/// reports — to the audit subsystem, which bwrap's own filter never logs to), and with a
/// `SOCK` with a user-notification listener, sent to the supervisor over `SOCK` before
/// the program is exec'd (the calls the program hands off are the supervisor's to
/// answer). Any failure stops the program before it runs.
fn run_program(target: sys::ExecTarget) -> ! {
    // Only as a pid namespace's init: anywhere else the reaper's `kill(-1, SIGKILL)` would
    // reach every process this one may signal.
    if sys::getpid() != 1 {
        sys::exit_group(reaper::BAD_ARGUMENTS_EXIT);
    }
    if sys::prctl(sys::abi::PR_SET_DUMPABLE, 0) < 0 {
        sys::exit_group(reaper::SETUP_FAILED_EXIT);
    }
    let _ = sys::set_name(reaper::NAME.to_bytes_with_nul());
    // Die with bwrap, which dies with the supervisor: the death signal bwrap armed was
    // cleared when it switched to the sandbox's ids, so arm it again here, then check
    // the supervisor did not die before (its end of the alive pipe is then closed).
    if sys::prctl(sys::abi::PR_SET_PDEATHSIG, sys::abi::SIGKILL as usize) < 0 {
        sys::exit_group(reaper::SETUP_FAILED_EXIT);
    }
    if target.alive_fd >= 0 {
        if sys::pipe_has_no_writer(target.alive_fd) {
            sys::exit_group(reaper::SUPERVISOR_GONE_EXIT);
        }
        sys::close(target.alive_fd);
    }
    // Every signal blocked: `reap` waits for them synchronously.
    if sys::set_signal_mask(!0) < 0 {
        sys::exit_group(reaper::SETUP_FAILED_EXIT);
    }
    let stacked_filter = if target.filter_fd >= 0 {
        let insns = sys::load_filter(target.filter_fd);
        if insns <= 0 {
            let _ = sys::write(2, b"tierbox-init: cannot read the stacked seccomp filter\n");
            sys::exit_group(reaper::SETUP_FAILED_EXIT);
        }
        insns as usize
    } else {
        0
    };
    let pid = sys::fork();
    if pid == 0 {
        if let Some((sock, rows, cols)) = target.pty
            && sys::sandbox_terminal(sock, rows, cols) < 0
        {
            let _ = sys::write(2, b"tierbox-init: cannot make the run's terminal\n");
            sys::exit_group(reaper::SETUP_FAILED_EXIT);
        }
        let _ = sys::set_signal_mask(0);
        if stacked_filter > 0 {
            stack_filter(stacked_filter, &target);
        }
        let err = sys::execve(&target);
        let _ = sys::write(2, b"tierbox-init: cannot execute ");
        let _ = sys::write(2, target.path);
        let _ = sys::write(
            2,
            if err == -(sys::abi::ENOENT as isize) {
                b": no such file\n".as_slice()
            } else {
                b": execve failed\n".as_slice()
            },
        );
        sys::exit_group(if err == -(sys::abi::ENOENT as isize) {
            reaper::NOT_FOUND_EXIT
        } else {
            reaper::NOT_EXECUTABLE_EXIT
        });
    }
    if pid < 0 {
        sys::exit_group(reaper::SETUP_FAILED_EXIT);
    }
    if target.listener_sock >= 0 {
        sys::close(target.listener_sock);
    }
    if let Some((sock, ..)) = target.pty {
        sys::close(sock);
    }
    reaper::reap(reaper::NO_REPORT_FD, pid as i32)
}

/// In the forked program: attaches the `insns` instructions [`sys::load_filter`] read
/// with `target`'s flags, sends the listener over `target.listener_sock` when it has
/// one, and closes both; ends the process on any failure.
fn stack_filter(insns: usize, target: &sys::ExecTarget) {
    let mut flags = 0;
    if target.log {
        flags |= sys::abi::SECCOMP_FILTER_FLAG_LOG;
    }
    if target.listener_sock >= 0 {
        flags |= sys::abi::SECCOMP_FILTER_FLAG_NEW_LISTENER;
    }
    let attached = sys::attach_filter(insns, flags);
    if attached < 0 {
        let _ = sys::write(
            2,
            b"tierbox-init: cannot attach the stacked seccomp filter\n",
        );
        sys::exit_group(reaper::SETUP_FAILED_EXIT);
    }
    if target.listener_sock >= 0 {
        let listener = attached as i32;
        if sys::send_fd(target.listener_sock, listener) < 0 {
            let _ = sys::write(2, b"tierbox-init: cannot send the seccomp listener\n");
            sys::exit_group(reaper::SETUP_FAILED_EXIT);
        }
        sys::close(listener);
        sys::close(target.listener_sock);
    }
}
