//! The program's own steps, in pid 1's memory (CLONE_VM | CLONE_VFORK) until its exec.

use super::raw::*;
use super::*;
use crate::launch::sys::RawCalls;
use crate::linux::exec;

// ---- the program ----------------------------------------------------------------------

/// The program's entry point (cloned by pid 1 with CLONE_VM | CLONE_VFORK).
pub(super) extern "C" fn program_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is pid 1's `&NsSpec`; pid 1 is suspended (CLONE_VFORK) until we exec or
    // exit, and we share its memory (CLONE_VM), so the reference stays valid.
    let spec: &NsSpec<'_> = unsafe { &*(arg as *const NsSpec<'_>) };
    let (step, err) = match program_setup(spec) {
        Ok(()) => (Step::Execve, libc::EIO),
        Err(Failure { step, errno, .. }) => (step, errno),
    };
    spec.fail_errno.store(err, Ordering::SeqCst);
    spec.fail_step.store(step as u32, Ordering::SeqCst);
    exit_group(127)
}

/// The program's setup and exec: the steps Tier B's child runs too
/// ([`crate::linux::exec`]), as ns uid 0 switching to the sandbox's user under a root
/// supervisor, with [`PROGRAM_UMASK`]. Returns only on failure.
pub(super) fn program_setup(spec: &NsSpec<'_>) -> Result<(), Failure> {
    let mut stdio = [spec.stdin_fd, spec.stdout_fd, spec.stderr_fd];
    let mut terminal = None;
    if spec.terminal_fd >= 0 {
        let secondary = sandbox_terminal(spec.terminal_fd, spec.terminal_size)
            .map_err(|errno| Failure::at(Step::ControllingTerminal, errno))?;
        stdio = [secondary; 3];
        terminal = Some(exec::TerminalSetup::NewSession);
    }
    let exec = exec::ExecSpec {
        stdio,
        terminal,
        inherit: &[],
        inherit_min_src: 0,
        cwd: spec.cwd.as_ptr(),
        umask: Some(PROGRAM_UMASK),
        rlimits: &spec.rlimits,
        // All capabilities are held in the user namespace: every run drops them. Our uid
        // inside is not 0 after the switch, so exec would clear the effective and
        // permitted sets anyway; this is the belt to that brace. pid 1 kills the program
        // when it ends, so no death signal is armed again.
        privileges: exec::Privileges {
            drop_privileged: true,
            last_cap: spec.last_cap,
            ids: spec.switch_ids.then_some((SANDBOX_UID, SANDBOX_GID)),
            clear_groups: false,
            keep_caps: false,
            rearm_pdeathsig: None,
        },
        landlock_fd: spec.landlock_fd,
        seccomp: spec.seccomp,
        seccomp_listener_sock: spec.seccomp_listener_fd,
        log_landlock: spec.log_landlock,
        log_seccomp: spec.log_seccomp,
        program: spec.program.as_ptr(),
        argv: spec.argv,
        envp: spec.envp,
    };
    let (step, errno) = exec::run(&RawCalls, &exec);
    Err(Failure::at(step, errno))
}

/// The program's terminal, from the sandbox's own devpts: `/dev/ptmx` opened (no
/// controlling terminal yet), unlocked and sized, its primary sent to the supervisor over
/// `sock` and closed here, its secondary opened through the primary (`TIOCGPTPEER`) at an
/// fd >= 3 (so stdio's `dup3` cannot clobber it). Raw system calls only.
fn sandbox_terminal(sock: RawFd, (rows, cols): (u16, u16)) -> Result<RawFd, i32> {
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
    let primary = open_raw(libc::AT_FDCWD, c"/dev/ptmx", flags, 0)?;
    let result = terminal_of(primary, sock, (rows, cols), flags);
    close(primary);
    result
}

fn terminal_of(
    primary: RawFd,
    sock: RawFd,
    (rows, cols): (u16, u16),
    flags: c_int,
) -> Result<RawFd, i32> {
    let unlock: c_int = 0;
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSPTLCK and TIOCSWINSZ read one value from a pointer to our stack, which
    // outlives the call.
    check(unsafe {
        libc::syscall(
            libc::SYS_ioctl,
            primary,
            libc::TIOCSPTLCK,
            &unlock as *const c_int,
        )
    })?;
    // SAFETY: as above.
    check(unsafe {
        libc::syscall(
            libc::SYS_ioctl,
            primary,
            libc::TIOCSWINSZ,
            &ws as *const libc::winsize,
        )
    })?;
    // SAFETY: TIOCGPTPEER takes open flags by value and returns a fresh fd.
    let secondary =
        check(unsafe { libc::syscall(libc::SYS_ioctl, primary, libc::TIOCGPTPEER, flags) })?
            as RawFd;
    let secondary = if secondary > 2 {
        secondary
    } else {
        // SAFETY: F_DUPFD_CLOEXEC on the fd just opened; the original is closed below.
        let moved =
            check(unsafe { libc::syscall(libc::SYS_fcntl, secondary, libc::F_DUPFD_CLOEXEC, 3) });
        close(secondary);
        moved? as RawFd
    };
    if let Err(e) = super::net::send_fd(sock, primary) {
        close(secondary);
        return Err(e);
    }
    Ok(secondary)
}
