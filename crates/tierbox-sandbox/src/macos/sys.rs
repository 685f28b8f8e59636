//! The one unsafe step of the macOS launch: setting rlimits in the child between fork and
//! exec.

use std::os::unix::process::CommandExt;
use std::process::Command;

use super::{MacResource, Rlimit};

fn resource(r: MacResource) -> libc::c_int {
    match r {
        MacResource::Cpu => libc::RLIMIT_CPU,
        MacResource::NoFile => libc::RLIMIT_NOFILE,
        MacResource::FSize => libc::RLIMIT_FSIZE,
        MacResource::Core => libc::RLIMIT_CORE,
    }
}

/// Sets `limits` (soft and hard) in the child before it execs `sandbox-exec`; a limit the
/// kernel refuses fails the spawn with `setrlimit`'s error.
pub(super) fn set_rlimits_before_exec(cmd: &mut Command, limits: Vec<Rlimit>) {
    let table: Vec<(libc::c_int, libc::rlim_t)> = limits
        .into_iter()
        .map(|(_, r, v)| (resource(r), v as libc::rlim_t))
        .collect();
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed: it calls only setrlimit(2) on a table built
    // before the fork (no allocation, no locks), and reads errno through
    // `io::Error::last_os_error`, which does not allocate.
    unsafe {
        cmd.pre_exec(move || {
            for (res, value) in &table {
                let lim = libc::rlimit {
                    rlim_cur: *value,
                    rlim_max: *value,
                };
                if libc::setrlimit(*res, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}
