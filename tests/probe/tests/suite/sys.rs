//! The probes' only unsafe code: hooks that run in a forked child before `exec`.

use std::process::Command;

/// Makes `cmd` run in a UTS namespace of its own (root only).
pub(super) fn in_private_uts_namespace(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the hook runs in the forked child before exec and only calls unshare(2),
    // which is async-signal-safe, and reads errno.
    unsafe {
        cmd.pre_exec(|| {
            if libc::unshare(libc::CLONE_NEWUTS) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}
