//! Raw system calls of the reaper, for both of its homes: the freestanding `tierbox-init`
//! program (built with `--cfg tierbox_init`, no `std`, no libc) and the supervisor's
//! crate (the in-process fallback). `core` only: every call is one instruction of inline
//! assembly that touches no memory but what its arguments point to (no `errno`, no
//! thread-local storage, no libc state). Each wrapper returns the raw result: a value, or
//! `-errno`.
//!
//! Under `--cfg tierbox_init` this file also holds what a freestanding program needs of
//! its own: the entry point `_start`, the panic handler, and the `mem*` functions the
//! compiler may call (the image is linked with nothing else, so a call to any function it
//! does not contain is a link error, never a jump into memory that is not there).

use core::ffi::c_long;

/// System call numbers (each architecture's uapi `unistd.h`; a test checks them against
/// the `libc` crate's).
#[cfg(target_arch = "x86_64")]
pub mod nr {
    /// `write`.
    pub const WRITE: i64 = 1;
    /// `kill`.
    pub const KILL: i64 = 62;
    /// `wait4`.
    pub const WAIT4: i64 = 61;
    /// `rt_sigtimedwait`.
    pub const RT_SIGTIMEDWAIT: i64 = 128;
    /// `prctl`.
    pub const PRCTL: i64 = 157;
    /// `ppoll`.
    pub const PPOLL: i64 = 271;
    /// `exit_group`.
    pub const EXIT_GROUP: i64 = 231;
    /// `rt_sigprocmask`.
    pub const RT_SIGPROCMASK: i64 = 14;
    /// `clone`.
    pub const CLONE: i64 = 56;
    /// `execve`.
    pub const EXECVE: i64 = 59;
    /// `getpid`.
    pub const GETPID: i64 = 39;
    /// `read`.
    pub const READ: i64 = 0;
    /// `close`.
    pub const CLOSE: i64 = 3;
    /// `seccomp`.
    pub const SECCOMP: i64 = 317;
    /// `sendmsg`.
    pub const SENDMSG: i64 = 46;
    /// `setsid`.
    pub const SETSID: i64 = 112;
    /// `ioctl`.
    pub const IOCTL: i64 = 16;
    /// `openat`.
    pub const OPENAT: i64 = 257;
    /// `dup3`.
    pub const DUP3: i64 = 292;
}

/// System call numbers (the generic uapi `unistd.h`; a test checks them against the
/// `libc` crate's).
#[cfg(target_arch = "aarch64")]
pub mod nr {
    /// `write`.
    pub const WRITE: i64 = 64;
    /// `kill`.
    pub const KILL: i64 = 129;
    /// `wait4`.
    pub const WAIT4: i64 = 260;
    /// `rt_sigtimedwait`.
    pub const RT_SIGTIMEDWAIT: i64 = 137;
    /// `prctl`.
    pub const PRCTL: i64 = 167;
    /// `ppoll`.
    pub const PPOLL: i64 = 73;
    /// `exit_group`.
    pub const EXIT_GROUP: i64 = 94;
    /// `rt_sigprocmask`.
    pub const RT_SIGPROCMASK: i64 = 135;
    /// `clone`.
    pub const CLONE: i64 = 220;
    /// `execve`.
    pub const EXECVE: i64 = 221;
    /// `getpid`.
    pub const GETPID: i64 = 172;
    /// `read`.
    pub const READ: i64 = 63;
    /// `close`.
    pub const CLOSE: i64 = 57;
    /// `seccomp`.
    pub const SECCOMP: i64 = 277;
    /// `sendmsg`.
    pub const SENDMSG: i64 = 211;
    /// `setsid`.
    pub const SETSID: i64 = 157;
    /// `ioctl`.
    pub const IOCTL: i64 = 29;
    /// `openat`.
    pub const OPENAT: i64 = 56;
    /// `dup3`.
    pub const DUP3: i64 = 24;
}

/// System call numbers: the `libc` crate's, on CPUs the freestanding image is not built
/// for (the crate's in-process reaper only).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub mod nr {
    /// `write`.
    pub const WRITE: i64 = libc::SYS_write as i64;
    /// `kill`.
    pub const KILL: i64 = libc::SYS_kill as i64;
    /// `wait4`.
    pub const WAIT4: i64 = libc::SYS_wait4 as i64;
    /// `rt_sigtimedwait`.
    pub const RT_SIGTIMEDWAIT: i64 = libc::SYS_rt_sigtimedwait as i64;
    /// `prctl`.
    pub const PRCTL: i64 = libc::SYS_prctl as i64;
    /// `ppoll`.
    pub const PPOLL: i64 = libc::SYS_ppoll as i64;
    /// `exit_group`.
    pub const EXIT_GROUP: i64 = libc::SYS_exit_group as i64;
    /// `rt_sigprocmask`.
    pub const RT_SIGPROCMASK: i64 = libc::SYS_rt_sigprocmask as i64;
    /// `clone`.
    pub const CLONE: i64 = libc::SYS_clone as i64;
    /// `execve`.
    pub const EXECVE: i64 = libc::SYS_execve as i64;
    /// `getpid`.
    pub const GETPID: i64 = libc::SYS_getpid as i64;
    /// `read`.
    pub const READ: i64 = libc::SYS_read as i64;
    /// `close`.
    pub const CLOSE: i64 = libc::SYS_close as i64;
    /// `seccomp`.
    pub const SECCOMP: i64 = libc::SYS_seccomp as i64;
    /// `sendmsg`.
    pub const SENDMSG: i64 = libc::SYS_sendmsg as i64;
    /// `setsid`.
    pub const SETSID: i64 = libc::SYS_setsid as i64;
    /// `ioctl`.
    pub const IOCTL: i64 = libc::SYS_ioctl as i64;
    /// `openat`.
    pub const OPENAT: i64 = libc::SYS_openat as i64;
    /// `dup3`.
    pub const DUP3: i64 = libc::SYS_dup3 as i64;
}

/// Constants of the Linux ABI that are the same on every architecture the reaper runs on
/// (a test checks them against the `libc` crate's).
pub mod abi {
    /// `TIOCSCTTY`.
    pub const TIOCSCTTY: usize = 0x540E;
    /// `TIOCSPTLCK`: lock or unlock a pseudo-terminal's secondary side.
    pub const TIOCSPTLCK: usize = 0x4004_5431;
    /// `TIOCGPTPEER`: open the secondary side through the primary.
    pub const TIOCGPTPEER: usize = 0x5441;
    /// `TIOCSWINSZ`.
    pub const TIOCSWINSZ: usize = 0x5414;
    /// `AT_FDCWD`.
    pub const AT_FDCWD: i32 = -100;
    /// `O_RDWR`.
    pub const O_RDWR: i32 = 2;
    /// `O_NOCTTY`.
    pub const O_NOCTTY: i32 = 0o400;
    /// `O_CLOEXEC`.
    pub const O_CLOEXEC: i32 = 0o2_000_000;
    /// `SIGHUP`.
    pub const SIGHUP: i32 = 1;
    /// `SIGINT`.
    pub const SIGINT: i32 = 2;
    /// `SIGQUIT`.
    pub const SIGQUIT: i32 = 3;
    /// `SIGKILL`.
    pub const SIGKILL: i32 = 9;
    /// `SIGUSR1`.
    pub const SIGUSR1: i32 = 10;
    /// `SIGUSR2`.
    pub const SIGUSR2: i32 = 12;
    /// `SIGTERM`.
    pub const SIGTERM: i32 = 15;
    /// `SIGCHLD`.
    pub const SIGCHLD: i32 = 17;
    /// `SIGWINCH`.
    pub const SIGWINCH: i32 = 28;
    /// `EINTR`.
    pub const EINTR: i32 = 4;
    /// `ENOENT`.
    pub const ENOENT: i32 = 2;
    /// `SIG_SETMASK`.
    pub const SIG_SETMASK: i32 = 2;
    /// `WNOHANG`.
    pub const WNOHANG: i32 = 1;
    /// `__WALL`: wait for every kind of child (clone children included).
    pub const WALL: i32 = 0x4000_0000;
    /// `PR_SET_PDEATHSIG`.
    pub const PR_SET_PDEATHSIG: i32 = 1;
    /// `PR_SET_DUMPABLE`.
    pub const PR_SET_DUMPABLE: i32 = 4;
    /// `PR_SET_NAME`.
    pub const PR_SET_NAME: i32 = 15;
    /// `POLLOUT`.
    pub const POLLOUT: i16 = 4;
    /// `POLLERR`.
    pub const POLLERR: i16 = 8;
    /// `POLLIN`.
    pub const POLLIN: i16 = 1;
    /// `POLLHUP`.
    pub const POLLHUP: i16 = 16;
    /// `EINVAL`.
    pub const EINVAL: i32 = 22;
    /// `E2BIG`.
    pub const E2BIG: i32 = 7;
    /// `SECCOMP_SET_MODE_FILTER`.
    pub const SECCOMP_SET_MODE_FILTER: u32 = 1;
    /// `SECCOMP_FILTER_FLAG_LOG`: the kernel's audit subsystem records what the filter
    /// refuses.
    pub const SECCOMP_FILTER_FLAG_LOG: u32 = 2;
    /// `SECCOMP_FILTER_FLAG_NEW_LISTENER`: the call returns a user-notification fd.
    pub const SECCOMP_FILTER_FLAG_NEW_LISTENER: u32 = 8;
    /// `SOL_SOCKET`.
    pub const SOL_SOCKET: i32 = 1;
    /// `SCM_RIGHTS`.
    pub const SCM_RIGHTS: i32 = 1;
}

pub use super::report::Rusage;

/// A system call with up to four arguments.
///
/// # Safety
///
/// The arguments must be valid for `nr`: every pointer the kernel reads or writes
/// points to memory that stays mapped and unaliased for the call.
#[cfg(target_arch = "x86_64")]
unsafe fn syscall4(nr: c_long, a1: usize, a2: usize, a3: usize, a4: usize) -> isize {
    let ret: isize;
    // SAFETY: the x86-64 Linux system call ABI: number in rax, arguments in rdi, rsi,
    // rdx, r10; the kernel clobbers rcx and r11 and touches no user stack. Memory the
    // arguments point to is the caller's contract.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => ret,
            in("rdi") a1,
            in("rsi") a2,
            in("rdx") a3,
            in("r10") a4,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// A system call with up to four arguments.
///
/// # Safety
///
/// The arguments must be valid for `nr`: every pointer the kernel reads or writes
/// points to memory that stays mapped and unaliased for the call.
#[cfg(target_arch = "aarch64")]
unsafe fn syscall4(nr: c_long, a1: usize, a2: usize, a3: usize, a4: usize) -> isize {
    let ret: isize;
    // SAFETY: the AArch64 Linux system call ABI: number in x8, arguments in x0-x3,
    // result in x0; `svc 0` touches no user stack. Memory the arguments point to is
    // the caller's contract.
    unsafe {
        core::arch::asm!(
            "svc 0",
            inlateout("x0") a1 as isize => ret,
            in("x1") a2,
            in("x2") a3,
            in("x3") a4,
            in("x8") nr,
            options(nostack),
        );
    }
    ret
}

/// Other CPUs (the crate's in-process reaper only): libc's wrapper, whose `errno` is
/// turned back into `-errno`.
///
/// # Safety
///
/// As for the other architectures.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
unsafe fn syscall4(nr: c_long, a1: usize, a2: usize, a3: usize, a4: usize) -> isize {
    // SAFETY: the caller's contract.
    let r = unsafe { libc::syscall(nr, a1, a2, a3, a4) } as isize;
    if r == -1 {
        -(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO) as isize)
    } else {
        r
    }
}

/// `wait4(-1, &status, flags, &usage)`: the reaped child's pid (> 0), 0 for nothing to
/// reap under `WNOHANG`, or `-errno`.
pub fn wait4_any(flags: i32, status: &mut i32, usage: &mut Rusage) -> isize {
    // SAFETY: wait4 writes one int to `status` and one rusage (the kernel's layout,
    // `Rusage`) to `usage`, both exclusively borrowed for the call.
    unsafe {
        syscall4(
            nr::WAIT4 as c_long,
            -1isize as usize,
            core::ptr::from_mut(status) as usize,
            flags as usize,
            core::ptr::from_mut(usage) as usize,
        )
    }
}

/// `kill(pid, sig)`; from a pid namespace's init, `pid` -1 means every other process of
/// that namespace (and nothing outside it).
pub fn kill(pid: i32, sig: i32) -> isize {
    // SAFETY: integer arguments.
    unsafe {
        syscall4(
            nr::KILL as c_long,
            pid as isize as usize,
            sig as usize,
            0,
            0,
        )
    }
}

/// One `write(fd, bytes)`.
pub fn write(fd: i32, bytes: &[u8]) -> isize {
    // SAFETY: the kernel reads at most `bytes.len()` bytes of `bytes`, borrowed for the
    // call.
    unsafe {
        syscall4(
            nr::WRITE as c_long,
            fd as usize,
            bytes.as_ptr() as usize,
            bytes.len(),
            0,
        )
    }
}

/// `rt_sigtimedwait(set, NULL, NULL)`: waits for one of the (blocked) signals in `set`
/// (a kernel sigset: bit `sig - 1` per signal) and returns its number, or `-errno`.
pub fn sigwait(set: &u64) -> isize {
    // SAFETY: the kernel reads one 8-byte sigset from `set`; no siginfo, no timeout.
    unsafe {
        syscall4(
            nr::RT_SIGTIMEDWAIT as c_long,
            core::ptr::from_ref(set) as usize,
            0,
            0,
            8,
        )
    }
}

/// `prctl(option, arg2, 0, 0)` for options that take an integer.
pub fn prctl(option: i32, arg2: usize) -> isize {
    // SAFETY: integer arguments for the options this is used with.
    unsafe { syscall4(nr::PRCTL as c_long, option as usize, arg2, 0, 0) }
}

/// `prctl(PR_SET_NAME, name)`; `name` must end with a NUL (the kernel reads at most 16
/// bytes, stopping at the NUL).
pub fn set_name(name: &[u8]) -> isize {
    if name.last() != Some(&0) {
        return -22;
    }
    // SAFETY: a NUL-terminated name, borrowed for the call.
    unsafe {
        syscall4(
            nr::PRCTL as c_long,
            abi::PR_SET_NAME as usize,
            name.as_ptr() as usize,
            0,
            0,
        )
    }
}

/// `rt_sigprocmask(SIG_SETMASK, &mask, NULL)`: blocks exactly the signals in `mask` (a
/// kernel sigset; the kernel never blocks `SIGKILL` and `SIGSTOP`).
pub fn set_signal_mask(mask: u64) -> isize {
    // SAFETY: the kernel reads one 8-byte sigset from a local; no old set is written.
    unsafe {
        syscall4(
            nr::RT_SIGPROCMASK as c_long,
            abi::SIG_SETMASK as usize,
            core::ptr::from_ref(&mask) as usize,
            0,
            8,
        )
    }
}

/// The program's terminal, made in the sandbox's own devpts: `/dev/ptmx` opened (no
/// controlling terminal yet), unlocked and sized `rows` × `cols`, its primary sent over
/// `sock` (to the supervisor) and closed here, its secondary (opened through the
/// primary, `TIOCGPTPEER`) made stdin, stdout and stderr, then the controlling terminal
/// of a session of this process's own (`setsid`, `TIOCSCTTY`). 0, or `-errno` of the
/// step that failed.
pub fn sandbox_terminal(sock: i32, rows: u16, cols: u16) -> isize {
    let flags = (abi::O_RDWR | abi::O_NOCTTY | abi::O_CLOEXEC) as usize;
    // SAFETY: a NUL-terminated path in this image's read-only data, integer flags.
    let primary = unsafe {
        syscall4(
            nr::OPENAT as c_long,
            abi::AT_FDCWD as usize,
            c"/dev/ptmx".as_ptr() as usize,
            flags,
            0,
        )
    };
    if primary < 0 {
        return primary;
    }
    let made = terminal_of(primary as i32, sock, rows, cols, flags);
    close(primary as i32);
    close(sock);
    if made < 0 {
        return made;
    }
    let secondary = made as i32;
    for fd in 0..3 {
        // SAFETY: integer arguments; dup3 onto stdio clears close-on-exec there.
        let r = unsafe { syscall4(nr::DUP3 as c_long, secondary as usize, fd, 0, 0) };
        if r < 0 {
            return r;
        }
    }
    close(secondary);
    // SAFETY: no arguments.
    let r = unsafe { syscall4(nr::SETSID as c_long, 0, 0, 0, 0) };
    if r < 0 {
        return r;
    }
    // SAFETY: TIOCSCTTY takes an integer argument.
    unsafe { syscall4(nr::IOCTL as c_long, 0, abi::TIOCSCTTY, 0, 0) }
}

/// `ioctl(fd, request, arg)` for a request that only reads the value at `arg`.
fn ioctl_in(fd: i32, request: usize, arg: *const u8) -> isize {
    // SAFETY: the request reads one value from `arg`, which the caller keeps alive for
    // the call (a value on its stack).
    unsafe { syscall4(nr::IOCTL as c_long, fd as usize, request, arg as usize, 0) }
}

/// [`sandbox_terminal`]'s pair from the open `primary`: unlocked, sized, the primary
/// sent; the secondary's fd (close-on-exec, above stdio), or `-errno`.
fn terminal_of(primary: i32, sock: i32, rows: u16, cols: u16, flags: usize) -> isize {
    let unlock: i32 = 0;
    // `struct winsize`: rows, columns, and two pixel sizes left 0.
    let size: [u16; 4] = [rows, cols, 0, 0];
    let r = ioctl_in(
        primary,
        abi::TIOCSPTLCK,
        core::ptr::from_ref(&unlock).cast(),
    );
    if r < 0 {
        return r;
    }
    let r = ioctl_in(primary, abi::TIOCSWINSZ, size.as_ptr().cast());
    if r < 0 {
        return r;
    }
    // SAFETY: TIOCGPTPEER takes open flags by value and returns a fresh fd.
    let secondary = unsafe {
        syscall4(
            nr::IOCTL as c_long,
            primary as usize,
            abi::TIOCGPTPEER,
            flags,
            0,
        )
    };
    if secondary < 0 {
        return secondary;
    }
    let sent = send_fd(sock, primary);
    if sent < 0 {
        close(secondary as i32);
        return sent;
    }
    secondary
}

/// `getpid()`.
pub fn getpid() -> isize {
    // SAFETY: no arguments.
    unsafe { syscall4(nr::GETPID as c_long, 0, 0, 0, 0) }
}

/// `fork()`, as `clone(SIGCHLD)`: the child's pid in the parent, 0 in the child, or
/// `-errno`. Sound only in a single-threaded process (the image is).
pub fn fork() -> isize {
    // SAFETY: no CLONE_VM, no stack, no tid pointers: the child runs on a copy of this
    // process's memory, exactly as after fork(2).
    unsafe { syscall4(nr::CLONE as c_long, abi::SIGCHLD as usize, 0, 0, 0) }
}

/// A program to `execve`, as found on `tierbox-init`'s initial stack: its path and the
/// NULL-terminated `argv` and `envp` arrays (addresses; they stay mapped for the life of
/// the process).
#[derive(Debug, Clone, Copy)]
pub struct ExecTarget {
    /// The program's path, without its NUL.
    pub path: &'static [u8],
    /// `--run-stacked FD SOCK LOG`: the fd holding the seccomp program to stack on the
    /// program ([`load_filter`]); -1 for `--run`.
    pub filter_fd: i32,
    /// `SOCK`: the socket the stacked filter's user-notification listener is sent over
    /// ([`send_fd`]); -1 (`SOCK` 0) for none.
    pub listener_sock: i32,
    /// `LOG` 1: the stacked filter logs what it refuses to the audit subsystem.
    pub log: bool,
    /// `--alive FD` before the mode: the read end of a pipe whose only write end the
    /// supervisor holds (it hangs up when the supervisor dies); -1 for none.
    pub alive_fd: i32,
    /// `--pty SOCK ROWS COLS` before the mode (after `--alive FD`): the socket over which
    /// the forked program sends the primary side of the terminal it makes in the
    /// sandbox's devpts ([`sandbox_terminal`]), and its size; `None` without.
    pub pty: Option<(i32, u16, u16)>,
    path_ptr: usize,
    argv: usize,
    envp: usize,
}

/// `execve(target)`: returns only on failure, with `-errno`.
pub fn execve(target: &ExecTarget) -> isize {
    // SAFETY: the three addresses are the kernel's own initial-stack strings and arrays
    // ([`ExecTarget`]), NUL- and NULL-terminated, mapped until this process execs or exits.
    unsafe {
        syscall4(
            nr::EXECVE as c_long,
            target.path_ptr,
            target.argv,
            target.envp,
            0,
        )
    }
}

/// Whether `fd` (the read end of a pipe) has lost its last writer and holds nothing:
/// `ppoll` reports `POLLHUP` on it.
pub fn pipe_has_no_writer(fd: i32) -> bool {
    poll_now(fd, abi::POLLIN) & abi::POLLHUP != 0
}

/// Whether `fd` (the write end of a pipe) has lost its last reader: `ppoll` reports
/// `POLLERR` on it.
pub fn pipe_has_no_reader(fd: i32) -> bool {
    poll_now(fd, abi::POLLOUT) & abi::POLLERR != 0
}

/// `ppoll` of `fd` for `events` with a zero timeout: the `revents`, 0 on any error.
fn poll_now(fd: i32, events: i16) -> i16 {
    #[repr(C)]
    struct PollFd {
        fd: i32,
        events: i16,
        revents: i16,
    }
    let mut pfd = PollFd {
        fd,
        events,
        revents: 0,
    };
    let zero = [0i64; 2];
    // SAFETY: one pollfd and a zero timespec on our stack; no signal mask.
    let r = unsafe {
        syscall4(
            nr::PPOLL as c_long,
            core::ptr::from_mut(&mut pfd) as usize,
            1,
            zero.as_ptr() as usize,
            0,
        )
    };
    if r > 0 { pfd.revents } else { 0 }
}

/// `close(fd)`.
pub fn close(fd: i32) {
    // SAFETY: an integer argument; the caller no longer uses `fd`.
    unsafe { syscall4(nr::CLOSE as c_long, fd as usize, 0, 0, 0) };
}

/// `exit_group(code)`: ends this process.
pub fn exit_group(code: i32) -> ! {
    loop {
        // SAFETY: exit_group ends this process; it never returns (the loop is for the
        // type checker).
        unsafe { syscall4(nr::EXIT_GROUP as c_long, code as usize, 0, 0, 0) };
    }
}

/// Most instructions of a classic BPF program (the kernel's `BPF_MAXINSNS`): the size of
/// the buffer [`load_filter`] reads a seccomp program into, 8 bytes each.
pub const FILTER_MAX_INSNS: usize = 4096;

/// The seccomp program of `--run-stacked`, read once by pid 1 before it forks the
/// program.
struct FilterBuf(core::cell::UnsafeCell<[u64; FILTER_MAX_INSNS]>);

// SAFETY: only `tierbox-init` uses it, a single-threaded process: [`load_filter`] writes
// it before the fork, [`attach_filter`] reads it in the forked child.
unsafe impl Sync for FilterBuf {}

static FILTER: FilterBuf = FilterBuf(core::cell::UnsafeCell::new([0; FILTER_MAX_INSNS]));

/// Reads the seccomp program (`struct sock_filter`s, 8 bytes each) from `fd` to its end
/// into this process's buffer and closes `fd`: the number of instructions, or `-errno`
/// (`-E2BIG` past [`FILTER_MAX_INSNS`], `-EINVAL` for an empty or ragged program). Call
/// it once, before [`fork`].
pub fn load_filter(fd: i32) -> isize {
    let cap = FILTER_MAX_INSNS * 8;
    let base = FILTER.0.get().cast::<u8>();
    let mut got = 0usize;
    let result = loop {
        let (at, room) = if got < cap {
            // SAFETY: `got < cap`: the address is inside the buffer.
            (unsafe { base.add(got) } as usize, cap - got)
        } else {
            // Full: one more byte (into a local) says whether the program is too long.
            let mut extra = 0u8;
            // SAFETY: the kernel writes at most one byte to a local.
            let r = unsafe {
                syscall4(
                    nr::READ as c_long,
                    fd as usize,
                    core::ptr::from_mut(&mut extra) as usize,
                    1,
                    0,
                )
            };
            break if r == 0 {
                got as isize
            } else {
                -(abi::E2BIG as isize)
            };
        };
        // SAFETY: the kernel writes at most `room` bytes at `at`, the unused rest of the
        // buffer, which nothing else touches (single-threaded, before the fork).
        let r = unsafe { syscall4(nr::READ as c_long, fd as usize, at, room, 0) };
        match r {
            0 => break got as isize,
            r if r == -(abi::EINTR as isize) => {}
            r if r < 0 => break r,
            r => got += r as usize,
        }
    };
    close(fd);
    match result {
        0 => -(abi::EINVAL as isize),
        n if n > 0 && n % 8 != 0 => -(abi::EINVAL as isize),
        n if n > 0 => n / 8,
        err => err,
    }
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, flags, prog)` with the first `insns` instructions
/// [`load_filter`] read: stacks the program on the calling process (which must have
/// `no_new_privs`); with [`abi::SECCOMP_FILTER_FLAG_LOG`] the kernel's audit subsystem
/// records what it refuses, with [`abi::SECCOMP_FILTER_FLAG_NEW_LISTENER`] the result is
/// the listener's fd. `-errno` on failure.
pub fn attach_filter(insns: usize, flags: u32) -> isize {
    #[repr(C)]
    struct SockFprog {
        len: u16,
        filter: *const u64,
    }
    let Ok(len) = u16::try_from(insns) else {
        return -(abi::EINVAL as isize);
    };
    if insns == 0 || insns > FILTER_MAX_INSNS {
        return -(abi::EINVAL as isize);
    }
    let prog = SockFprog {
        len,
        filter: FILTER.0.get().cast::<u64>().cast_const(),
    };
    // SAFETY: the kernel reads one `sock_fprog` from a local and `len` 8-byte instructions
    // from the buffer, which [`load_filter`] filled and nothing writes any more.
    unsafe {
        syscall4(
            nr::SECCOMP as c_long,
            abi::SECCOMP_SET_MODE_FILTER as usize,
            flags as usize,
            core::ptr::from_ref(&prog) as usize,
            0,
        )
    }
}

/// Sends `fd` over the unix socket `sock` (`SCM_RIGHTS`, one byte of data): the bytes
/// sent, or `-errno`.
pub fn send_fd(sock: i32, fd: i32) -> isize {
    #[repr(C)]
    struct IoVec {
        base: *const u8,
        len: usize,
    }
    #[repr(C)]
    struct MsgHdr {
        name: usize,
        namelen: u32,
        iov: *const IoVec,
        iovlen: usize,
        control: *const u8,
        controllen: usize,
        flags: i32,
    }
    /// `struct cmsghdr` followed by one int, padded as `CMSG_SPACE(sizeof(int))`.
    #[repr(C, align(8))]
    struct Control {
        len: usize,
        level: i32,
        kind: i32,
        fd: i32,
        _pad: i32,
    }
    let byte = [0u8; 1];
    let iov = IoVec {
        base: byte.as_ptr(),
        len: 1,
    };
    let control = Control {
        // CMSG_LEN(sizeof(int)): the header (16 bytes on 64-bit targets) and the int.
        len: core::mem::size_of::<usize>() + 8 + 4,
        level: abi::SOL_SOCKET,
        kind: abi::SCM_RIGHTS,
        fd,
        _pad: 0,
    };
    let msg = MsgHdr {
        name: 0,
        namelen: 0,
        iov: core::ptr::from_ref(&iov),
        iovlen: 1,
        control: core::ptr::from_ref(&control).cast::<u8>(),
        controllen: core::mem::size_of::<Control>(),
        flags: 0,
    };
    // SAFETY: the kernel reads one msghdr, the iovec and byte it points to, and the
    // control buffer, all locals that outlive the call.
    unsafe {
        syscall4(
            nr::SENDMSG as c_long,
            sock as usize,
            core::ptr::from_ref(&msg) as usize,
            0,
            0,
        )
    }
}

// ---- the freestanding program's own runtime --------------------------------------------

// The entry point: the kernel starts a static executable at `_start` with the stack
// pointer at `argc`, followed by the argv pointers, NULL, the envp pointers, NULL and
// the auxiliary vector. Hand that address to `start` with the stack 16-byte aligned as
// the C ABI wants at a call.
#[cfg(all(tierbox_init, target_arch = "x86_64"))]
core::arch::global_asm!(
    ".globl _start",
    "_start:",
    "xor ebp, ebp",
    "mov rdi, rsp",
    "and rsp, -16",
    "call {start}",
    "ud2",
    start = sym start,
);

#[cfg(all(tierbox_init, target_arch = "aarch64"))]
core::arch::global_asm!(
    ".globl _start",
    "_start:",
    "mov x29, xzr",
    "mov x30, xzr",
    "mov x0, sp",
    "bl {start}",
    "brk #0",
    start = sym start,
);

/// Most decimal digits [`parse_pid`] reads.
#[cfg(tierbox_init)]
const PID_DIGITS_MAX: usize = 10;

/// Reads the arguments off the initial stack and runs the program: `--run PATH ARGV0
/// [ARGS...]` starts `PATH` and reaps as pid 1 of a bwrap sandbox (`super::run_program`);
/// otherwise `argv[1]` is the pid of the program the native sandbox's pid 1 started.
///
/// # Safety
///
/// `sp` is the initial stack pointer the kernel gave `_start`.
#[cfg(tierbox_init)]
unsafe extern "C" fn start(sp: *const usize) -> ! {
    // SAFETY: `sp` is the kernel's initial stack pointer (this function's contract).
    if let Some(target) = unsafe { run_target(sp) } {
        super::run_program(target);
    }
    // SAFETY: the kernel's initial stack: argc, then argc argv pointers and a NULL, each
    // argument a NUL-terminated string in the same (mapped, never freed) stack area.
    let pid = unsafe {
        let argc = *sp;
        if argc < 2 {
            None
        } else {
            let arg = *sp.add(2) as *const u8;
            let mut digits = [0u8; PID_DIGITS_MAX + 1];
            let mut len = 0;
            while len <= PID_DIGITS_MAX {
                let b = *arg.add(len);
                if b == 0 {
                    break;
                }
                digits[len] = b;
                len += 1;
            }
            parse_pid(&digits[..len])
        }
    };
    match pid {
        Some(pid) => super::run(pid),
        None => exit_group(super::reaper::BAD_ARGUMENTS_EXIT),
    }
}

/// `argv[1]` of the program mode: `tierbox-init --run PATH ARGV0 [ARGS...]`.
#[cfg(tierbox_init)]
const RUN_FLAG: &[u8] = b"--run";

/// `argv[1]` of the program mode with a stacked seccomp filter: `tierbox-init
/// --run-stacked FD SOCK LOG PATH ARGV0 [ARGS...]`.
#[cfg(tierbox_init)]
const RUN_STACKED_FLAG: &[u8] = b"--run-stacked";

/// Optional `argv[1]` before either program mode: `tierbox-init --alive FD --run …`.
#[cfg(tierbox_init)]
const ALIVE_FLAG: &[u8] = b"--alive";

/// Optional arguments before the program mode (after `--alive FD`): `tierbox-init --pty
/// SOCK ROWS COLS --run …` ([`ExecTarget::pty`]).
#[cfg(tierbox_init)]
const PTY_FLAG: &[u8] = b"--pty";

/// Most decimal digits of `--run-stacked`'s fds.
#[cfg(tierbox_init)]
const FD_DIGITS_MAX: usize = 4;

/// The program of `tierbox-init --run PATH ARGV0 [ARGS...]` (or `--run-stacked FD SOCK
/// LOG PATH ARGV0 [ARGS...]`: `SOCK` 0 for no listener, `LOG` 0 or 1), read off the
/// initial stack: `PATH` to exec with `argv` from `ARGV0` on and this process's
/// environment.
///
/// # Safety
///
/// `sp` is the initial stack pointer the kernel gave `_start`.
#[cfg(tierbox_init)]
unsafe fn run_target(sp: *const usize) -> Option<ExecTarget> {
    // SAFETY: the kernel's initial stack (see `start`): argc, argc argv pointers, a NULL,
    // the envp pointers and a NULL; every string NUL-terminated in the same area.
    unsafe {
        let argc = *sp;
        let argv = sp.add(1);
        if argc < 2 {
            return None;
        }
        let fd_at = |i: usize| {
            let digits = c_str(*argv.add(i) as *const u8);
            match digits {
                b"0" => Some(-1),
                d if d.len() <= FD_DIGITS_MAX => parse_pid(d),
                _ => None,
            }
        };
        // `--alive FD` shifts the mode two arguments on.
        let (at, alive_fd) = if c_str(*argv.add(1) as *const u8) == ALIVE_FLAG {
            if argc < 4 {
                return None;
            }
            (3, fd_at(2).filter(|fd| *fd > 0)?)
        } else {
            (1, -1)
        };
        let (at, pty) = if c_str(*argv.add(at) as *const u8) == PTY_FLAG {
            if argc < at + 5 {
                return None;
            }
            let dimension = |i: usize| {
                parse_pid(c_str(*argv.add(i) as *const u8)).and_then(|n| u16::try_from(n).ok())
            };
            let sock = fd_at(at + 1).filter(|fd| *fd > 2)?;
            (at + 4, Some((sock, dimension(at + 2)?, dimension(at + 3)?)))
        } else {
            (at, None)
        };
        let flag = c_str(*argv.add(at) as *const u8);
        let (first, filter_fd, listener_sock, log) = if flag == RUN_FLAG {
            (at + 1, -1, -1, false)
        } else if flag == RUN_STACKED_FLAG && argc >= at + 4 {
            let log = match c_str(*argv.add(at + 3) as *const u8) {
                b"0" => false,
                b"1" => true,
                _ => return None,
            };
            (
                at + 4,
                fd_at(at + 1).filter(|fd| *fd > 0)?,
                fd_at(at + 2)?,
                log,
            )
        } else {
            return None;
        };
        if argc < first + 2 {
            return None;
        }
        let path_ptr = *argv.add(first);
        Some(ExecTarget {
            path: c_str(path_ptr as *const u8),
            filter_fd,
            listener_sock,
            log,
            alive_fd,
            pty,
            path_ptr,
            argv: argv.add(first + 1) as usize,
            envp: argv.add(argc + 1) as usize,
        })
    }
}

/// The bytes of a NUL-terminated string, without the NUL.
///
/// # Safety
///
/// `p` points to a NUL-terminated string that stays mapped for the life of the process.
#[cfg(tierbox_init)]
unsafe fn c_str(p: *const u8) -> &'static [u8] {
    let mut len = 0;
    // SAFETY: the caller's contract: every byte up to the NUL is readable. Volatile reads,
    // so the loop is not turned into a call to `strlen` (which this program does not have).
    unsafe {
        while p.add(len).read_volatile() != 0 {
            len += 1;
        }
        core::slice::from_raw_parts(p, len)
    }
}

/// A positive decimal pid of at most [`PID_DIGITS_MAX`] digits.
#[cfg(tierbox_init)]
fn parse_pid(digits: &[u8]) -> Option<i32> {
    if digits.is_empty() || digits.len() > PID_DIGITS_MAX {
        return None;
    }
    let mut v: i64 = 0;
    for d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i64::from(d - b'0');
    }
    i32::try_from(v).ok().filter(|p| *p > 0)
}

/// A panic ends pid 1, and with it the sandbox; the supervisor then reports that pid 1
/// died without reporting (never the program's exit).
#[cfg(tierbox_init)]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    exit_group(super::reaper::PANIC_EXIT)
}

/// The unwinding personality routine the precompiled `core` refers to. Nothing unwinds
/// in this program (`panic = abort`, no foreign frames), so it is never called; if it
/// were, it ends pid 1 as a panic does.
#[cfg(tierbox_init)]
#[unsafe(no_mangle)]
extern "C" fn rust_eh_personality() {
    exit_group(super::reaper::PANIC_EXIT)
}

// The memory functions the compiler may call for copies, fills and comparisons. Each
// moves one byte at a time with volatile accesses, so the optimiser cannot turn the loop
// back into a call to itself. The reaper copies a few dozen bytes per run.

/// `memcpy`.
///
/// # Safety
///
/// The C contract: `n` bytes readable at `src`, writable at `dst`, not overlapping.
#[cfg(tierbox_init)]
#[unsafe(no_mangle)]
unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the caller's contract.
    unsafe { memmove(dst, src, n) }
}

/// `memmove`.
///
/// # Safety
///
/// The C contract: `n` bytes readable at `src` and writable at `dst`.
#[cfg(tierbox_init)]
#[unsafe(no_mangle)]
unsafe extern "C" fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: within the caller's `n` bytes; copying backwards when `dst` is above `src`
    // keeps overlapping bytes intact.
    unsafe {
        if (dst as usize) <= (src as usize) {
            let mut i = 0;
            while i < n {
                dst.add(i).write_volatile(src.add(i).read_volatile());
                i += 1;
            }
        } else {
            let mut i = n;
            while i > 0 {
                i -= 1;
                dst.add(i).write_volatile(src.add(i).read_volatile());
            }
        }
    }
    dst
}

/// `memset`.
///
/// # Safety
///
/// The C contract: `n` bytes writable at `dst`.
#[cfg(tierbox_init)]
#[unsafe(no_mangle)]
unsafe extern "C" fn memset(dst: *mut u8, c: i32, n: usize) -> *mut u8 {
    let mut i = 0;
    while i < n {
        // SAFETY: within the caller's `n` bytes.
        unsafe { dst.add(i).write_volatile(c as u8) };
        i += 1;
    }
    dst
}

/// `memcmp`.
///
/// # Safety
///
/// The C contract: `n` bytes readable at `a` and at `b`.
#[cfg(tierbox_init)]
#[unsafe(no_mangle)]
unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    let mut i = 0;
    while i < n {
        // SAFETY: within the caller's `n` bytes.
        let (x, y) = unsafe { (a.add(i).read_volatile(), b.add(i).read_volatile()) };
        if x != y {
            return i32::from(x) - i32::from(y);
        }
        i += 1;
    }
    0
}

/// `bcmp`: zero when equal.
///
/// # Safety
///
/// The C contract: `n` bytes readable at `a` and at `b`.
#[cfg(tierbox_init)]
#[unsafe(no_mangle)]
unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: the caller's contract.
    unsafe { memcmp(a, b, n) }
}

#[cfg(all(test, not(tierbox_init)))]
mod tests {
    use super::{FILTER_MAX_INSNS, abi, nr};

    #[test]
    fn system_call_numbers_match_libc() {
        assert_eq!(nr::WRITE, libc::SYS_write);
        assert_eq!(nr::KILL, libc::SYS_kill);
        assert_eq!(nr::WAIT4, libc::SYS_wait4);
        assert_eq!(nr::RT_SIGTIMEDWAIT, libc::SYS_rt_sigtimedwait);
        assert_eq!(nr::PRCTL, libc::SYS_prctl);
        assert_eq!(nr::PPOLL, libc::SYS_ppoll);
        assert_eq!(nr::EXIT_GROUP, libc::SYS_exit_group);
        assert_eq!(nr::RT_SIGPROCMASK, libc::SYS_rt_sigprocmask);
        assert_eq!(nr::CLONE, libc::SYS_clone);
        assert_eq!(nr::EXECVE, libc::SYS_execve);
        assert_eq!(nr::GETPID, libc::SYS_getpid);
        assert_eq!(nr::READ, libc::SYS_read);
        assert_eq!(nr::CLOSE, libc::SYS_close);
        assert_eq!(nr::SECCOMP, libc::SYS_seccomp);
        assert_eq!(nr::SENDMSG, libc::SYS_sendmsg);
        assert_eq!(nr::SETSID, libc::SYS_setsid);
        assert_eq!(nr::IOCTL, libc::SYS_ioctl);
        assert_eq!(nr::OPENAT, libc::SYS_openat);
        assert_eq!(nr::DUP3, libc::SYS_dup3);
    }

    #[test]
    fn abi_constants_match_libc() {
        let signals = [
            (abi::SIGHUP, libc::SIGHUP),
            (abi::SIGINT, libc::SIGINT),
            (abi::SIGQUIT, libc::SIGQUIT),
            (abi::SIGKILL, libc::SIGKILL),
            (abi::SIGUSR1, libc::SIGUSR1),
            (abi::SIGUSR2, libc::SIGUSR2),
            (abi::SIGTERM, libc::SIGTERM),
            (abi::SIGCHLD, libc::SIGCHLD),
            (abi::SIGWINCH, libc::SIGWINCH),
        ];
        for (ours, theirs) in signals {
            assert_eq!(ours, theirs);
        }
        assert_eq!(abi::EINTR, libc::EINTR);
        assert_eq!(abi::ENOENT, libc::ENOENT);
        assert_eq!(abi::SIG_SETMASK, libc::SIG_SETMASK);
        assert_eq!(abi::WNOHANG, libc::WNOHANG);
        assert_eq!(abi::WALL, libc::__WALL);
        assert_eq!(abi::PR_SET_PDEATHSIG, libc::PR_SET_PDEATHSIG);
        assert_eq!(abi::PR_SET_DUMPABLE, libc::PR_SET_DUMPABLE);
        assert_eq!(abi::PR_SET_NAME, libc::PR_SET_NAME);
        assert_eq!(abi::POLLOUT, libc::POLLOUT);
        assert_eq!(abi::POLLERR, libc::POLLERR);
        assert_eq!(abi::POLLIN, libc::POLLIN);
        assert_eq!(abi::POLLHUP, libc::POLLHUP);
        assert_eq!(abi::EINVAL, libc::EINVAL);
        assert_eq!(abi::E2BIG, libc::E2BIG);
        assert_eq!(abi::SECCOMP_SET_MODE_FILTER, libc::SECCOMP_SET_MODE_FILTER);
        assert_eq!(
            abi::SECCOMP_FILTER_FLAG_LOG,
            libc::SECCOMP_FILTER_FLAG_LOG as u32
        );
        assert_eq!(
            abi::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as u32
        );
        assert_eq!(abi::SOL_SOCKET, libc::SOL_SOCKET);
        assert_eq!(abi::SCM_RIGHTS, libc::SCM_RIGHTS);
        assert_eq!(abi::TIOCSCTTY, libc::TIOCSCTTY as usize);
        assert_eq!(abi::TIOCSPTLCK, libc::TIOCSPTLCK as usize);
        assert_eq!(abi::TIOCGPTPEER, libc::TIOCGPTPEER as usize);
        assert_eq!(abi::TIOCSWINSZ, libc::TIOCSWINSZ as usize);
        assert_eq!(abi::AT_FDCWD, libc::AT_FDCWD);
        assert_eq!(abi::O_RDWR, libc::O_RDWR);
        assert_eq!(abi::O_NOCTTY, libc::O_NOCTTY);
        assert_eq!(abi::O_CLOEXEC, libc::O_CLOEXEC);
        assert_eq!(FILTER_MAX_INSNS, usize::from(libc::BPF_MAXINSNS as u16));
        assert_eq!(
            std::mem::size_of::<super::Rusage>(),
            std::mem::size_of::<libc::rusage>()
        );
    }
}
