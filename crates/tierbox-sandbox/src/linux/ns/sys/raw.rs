//! Small raw system-call wrappers shared by pid 1 and the program: no allocation, no
//! locks, no glibc state.

use super::*;

// ---- small raw helpers (child side) ---------------------------------------------------

pub(super) fn exit_group(code: c_int) -> c_int {
    // SAFETY: exit_group ends this process (its own thread group); it never returns.
    unsafe { libc::syscall(libc::SYS_exit_group, code as libc::c_long) };
    code
}

pub(super) fn prctl(option: c_int, arg2: libc::c_ulong) -> Result<(), i32> {
    let zero: libc::c_ulong = 0;
    // SAFETY: the options used here take an integer or a pointer to a NUL-terminated
    // string owned by the spec (PR_SET_NAME reads at most 16 bytes, stopping at the NUL).
    check(unsafe { libc::syscall(libc::SYS_prctl, option, arg2, zero, zero, zero) }).map(drop)
}

pub(super) fn open_raw(dirfd: RawFd, path: &CStr, flags: c_int, mode: u32) -> Result<RawFd, i32> {
    // SAFETY: a NUL-terminated path and integer arguments.
    check(unsafe {
        libc::syscall(
            libc::SYS_openat,
            dirfd,
            path.as_ptr(),
            flags as libc::c_long,
            mode as libc::c_ulong,
        )
    })
    .map(|fd| fd as RawFd)
}

/// `open(path, O_PATH)` + `landlock_add_rule(PATH_BENEATH)` + `close`.
pub(super) fn add_landlock_rule(ruleset: RawFd, path: &CStr, access: u64) -> Result<(), i32> {
    let fd = open_raw(
        libc::AT_FDCWD,
        path,
        libc::O_PATH | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        0,
    )?;
    let r = lsys::landlock_add_path_rule_raw(ruleset, access, fd);
    close(fd);
    r
}

pub(crate) fn close(fd: RawFd) {
    // SAFETY: closes an fd this child opened; errors are irrelevant.
    unsafe { libc::syscall(libc::SYS_close, fd) };
}

pub(super) fn chdir(path: &CStr) -> Result<(), i32> {
    // SAFETY: a NUL-terminated path.
    check(unsafe { libc::syscall(libc::SYS_chdir, path.as_ptr()) }).map(drop)
}

pub(super) fn umask(mask: u32) {
    // SAFETY: integer argument; umask cannot fail.
    unsafe { libc::syscall(libc::SYS_umask, mask as libc::c_ulong) };
}

/// One `write(2)` of all of `content` to `fd` (a file just created, so a short write
/// is an error rather than a reason to loop).
pub(super) fn write_all_once(fd: RawFd, content: &[u8]) -> Result<(), i32> {
    // SAFETY: `content` is a valid slice for the duration of the call.
    let r = check(unsafe { libc::syscall(libc::SYS_write, fd, content.as_ptr(), content.len()) });
    match r {
        Ok(n) if n as usize == content.len() => Ok(()),
        Ok(_) => Err(libc::EIO),
        Err(e) => Err(e),
    }
}

/// `write(2)` until all of `content` is written (`EINTR` retried): a file of any size in
/// a tmpfs.
pub(super) fn write_all(fd: RawFd, mut content: &[u8]) -> Result<(), i32> {
    while !content.is_empty() {
        // SAFETY: `content` is a valid slice for the duration of the call.
        let r =
            check(unsafe { libc::syscall(libc::SYS_write, fd, content.as_ptr(), content.len()) });
        match r {
            Ok(0) => return Err(libc::EIO),
            Ok(n) => content = &content[n as usize..],
            Err(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One `write(2)` of all of `content` to a `/proc/self` file opened write-only.
pub(super) fn write_proc_self(path: &CStr, content: &[u8]) -> Result<(), i32> {
    let fd = open_raw(libc::AT_FDCWD, path, libc::O_WRONLY | libc::O_CLOEXEC, 0)?;
    // SAFETY: `content` is a valid slice for the duration of the call.
    let r = check(unsafe { libc::syscall(libc::SYS_write, fd, content.as_ptr(), content.len()) });
    close(fd);
    match r {
        Ok(n) if n as usize == content.len() => Ok(()),
        Ok(_) => Err(libc::EIO),
        Err(e) => Err(e),
    }
}
