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
    let exec = exec::ExecSpec {
        stdio: [spec.stdin_fd, spec.stdout_fd, spec.stderr_fd],
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
