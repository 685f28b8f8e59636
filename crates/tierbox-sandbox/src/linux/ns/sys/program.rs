//! The program's own steps, in pid 1's memory (CLONE_VM | CLONE_VFORK) until its exec.

use super::raw::*;
use super::*;

// ---- the program ----------------------------------------------------------------------

/// The program's entry point (cloned by pid 1 with CLONE_VM | CLONE_VFORK).
pub(super) extern "C" fn program_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is pid 1's `&NsSpec`; pid 1 is suspended (CLONE_VFORK) until we exec or
    // exit, and we share its memory (CLONE_VM), so the reference stays valid.
    let spec: &NsSpec<'_> = unsafe { &*(arg as *const NsSpec<'_>) };
    let (step, err) = match program_setup(spec) {
        Ok(()) => (NsStep::Execve, libc::EIO),
        Err(Failure { step, errno, .. }) => (step, errno),
    };
    spec.fail_errno.store(err, Ordering::SeqCst);
    spec.fail_step.store(step as u32, Ordering::SeqCst);
    exit_group(127)
}

pub(super) fn program_setup(spec: &NsSpec<'_>) -> Result<(), Failure> {
    use NsStep as S;
    // 1. stdio; every source fd is >= 3, so dup3 cannot clobber one (nor refuse src == dst).
    for (src, dst) in [(spec.stdin_fd, 0), (spec.stdout_fd, 1), (spec.stderr_fd, 2)] {
        // SAFETY: dup3 on fds the supervisor opened for us.
        check(unsafe { libc::syscall(libc::SYS_dup3, src, dst, 0) }).map_err(fail(S::Stdio))?;
    }
    // 2. Everything else closes at exec (the report pipe included).
    // SAFETY: integer arguments.
    check(unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_ulong,
            libc::c_ulong::from(u32::MAX),
            libc::CLOSE_RANGE_CLOEXEC as libc::c_ulong,
        )
    })
    .map_err(fail(S::CloseFds))?;
    // 3. cwd in the new root, and the program's umask.
    chdir(spec.cwd).map_err(fail(S::Chdir))?;
    umask(PROGRAM_UMASK);
    // 4. rlimits while we still hold CAP_SYS_RESOURCE in the userns.
    for (resource, limit) in &spec.rlimits {
        // SAFETY: prlimit64 on ourselves with a pointer to a valid rlimit64.
        check(unsafe {
            libc::syscall(
                libc::SYS_prlimit64,
                0 as libc::c_ulong,
                *resource as libc::c_ulong,
                limit as *const libc::rlimit64,
                std::ptr::null_mut::<libc::rlimit64>(),
            )
        })
        .map_err(fail(S::Rlimit))?;
    }
    // 5. Capabilities (all held in the userns): securebits and the bounding set need
    //    CAP_SETPCAP, so they go before capset(0). Our uid inside is not 0, so exec would
    //    clear the effective and permitted sets anyway; this is the belt to that brace.
    lsys::set_securebits_noroot().map_err(fail(S::DropCaps))?;
    lsys::drop_bounding_set(spec.last_cap).map_err(fail(S::DropCaps))?;
    lsys::clear_ambient().map_err(fail(S::DropCaps))?;
    // 5b. Out of ns uid 0 (pid 1's setup identity) into the sandbox's user, with no
    //     supplementary groups, before the capabilities go (CAP_SETUID is needed).
    if spec.switch_ids {
        lsys::set_ids(SANDBOX_UID, SANDBOX_GID).map_err(fail(S::DropCaps))?;
    }
    lsys::capset_zero().map_err(fail(S::DropCaps))?;
    // 6. no_new_privs (required for the unprivileged seccomp filter below).
    lsys::set_no_new_privs().map_err(fail(S::NoNewPrivs))?;
    // 6b. Landlock: the second filesystem layer, under the mount namespace.
    if spec.landlock_fd >= 0 {
        lsys::landlock_restrict_self(spec.landlock_fd).map_err(fail(S::Landlock))?;
    }
    // 7. Seccomp last, so it cannot block any setup call above.
    if let Some(prog) = spec.seccomp {
        lsys::seccomp_set_filter(prog).map_err(fail(S::Seccomp))?;
    }
    // 8. The program starts with an empty signal mask.
    let set: u64 = 0;
    // SAFETY: a zeroed kernel sigset on our stack; the old mask is not requested.
    check(unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK as libc::c_ulong,
            &set as *const u64,
            std::ptr::null_mut::<u64>(),
            8 as libc::c_ulong,
        )
    })
    .map_err(fail(S::SignalMask))?;
    // 9. execve; only returns on failure.
    // SAFETY: program/argv/envp are NUL-terminated strings and NULL-terminated arrays owned
    // by the supervisor (present in our shared copy).
    unsafe {
        libc::syscall(
            libc::SYS_execve,
            spec.program.as_ptr(),
            spec.argv,
            spec.envp,
        )
    };
    Err(Failure::at(S::Execve, errno()))
}
