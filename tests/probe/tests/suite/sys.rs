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

/// Makes `cmd` start under a seccomp filter (with `no_new_privs`) that refuses every
/// user namespace — `unshare` and `clone` with `CLONE_NEWUSER` and `setns` into one
/// (`EPERM`), `clone3`, whose flags no filter can read (`ENOSYS`: libc falls back to
/// `clone`) — as a container's seccomp profile does: nothing `cmd` starts can make or
/// join a user namespace, for this process tree only. Other system calls are allowed.
pub(super) fn without_user_namespaces(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    #[cfg(target_arch = "x86_64")]
    const AUDIT_ARCH: u32 = 0xC000_003E;
    #[cfg(target_arch = "aarch64")]
    const AUDIT_ARCH: u32 = 0xC000_00B7;
    const RET_ALLOW: u32 = 0x7fff_0000;
    const RET_ERRNO: u32 = 0x0005_0000;
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jump = |code: u32, k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    let (ld, jeq, jset, ret) = (
        libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
        libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
        libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K,
        libc::BPF_RET | libc::BPF_K,
    );
    let newuser = libc::CLONE_NEWUSER as u32;
    // seccomp_data: nr at 0, arch at 4, args[i] at 16 + 8 * i (low half first).
    let filter: Vec<libc::sock_filter> = vec![
        stmt(ld, 4),
        jump(jeq, AUDIT_ARCH, 1, 0),
        stmt(ret, RET_ALLOW),
        stmt(ld, 0),
        jump(jeq, libc::SYS_clone3 as u32, 0, 1),
        stmt(ret, RET_ERRNO | libc::ENOSYS as u32),
        jump(jeq, libc::SYS_unshare as u32, 2, 0),
        jump(jeq, libc::SYS_clone as u32, 1, 0),
        jump(jeq, libc::SYS_setns as u32, 4, 3),
        // unshare, clone: flags in args[0].
        stmt(ld, 16),
        jump(jset, newuser, 0, 1),
        stmt(ret, RET_ERRNO | libc::EPERM as u32),
        stmt(ret, RET_ALLOW),
        // setns: nstype in args[1]; 0 joins whatever the fd is.
        stmt(ld, 24),
        jump(jeq, 0, 1, 0),
        jump(jset, newuser, 0, 1),
        stmt(ret, RET_ERRNO | libc::EPERM as u32),
        stmt(ret, RET_ALLOW),
    ];
    // SAFETY: the hook runs in the forked child before exec and only makes two prctl
    // calls on a filter program made before the fork, which outlives them.
    unsafe {
        cmd.pre_exec(move || {
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr().cast_mut(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &prog as *const libc::sock_fprog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
