//! The watchdog's process: a `clone(CLONE_VM)` child that shares the supervisor's memory
//! while it waits, and `execve`s the sweeper only once the supervisor is gone.
//!
//! A forked watchdog had a copy of the supervisor's address space: every page the
//! supervisor wrote after the fork was copied first (copy-on-write), on every call of a
//! one-shot `tierbox run`. This child shares the memory instead, so the supervisor pays
//! one `clone` and no copies. Sharing it has rules, all kept here:
//!
//! - The child runs only system calls on its own stack (a mapping with a guard page,
//!   never unmapped) and on [`ChildSpec`], which the parent writes once before the clone
//!   and never again. No allocator, no lock, no thread-local but the C library's `errno`,
//!   which the child shares with the supervisor's main thread: every call the child makes
//!   while the supervisor lives has arguments it cannot fail with (descriptors the parent
//!   opened for it, `read` with every signal blocked), so it never writes `errno` then.
//! - Every signal is blocked in the child (the parent blocks them around the clone and the
//!   child inherits that mask): no handler of the supervisor's can ever run on the child.
//! - The supervisor's end of the pipe is close-on-exec and held by it alone, so the pipe
//!   ends only when the supervisor has exited or `exec`'d — when nothing else runs on
//!   this memory. Only then does the child decide (released, or sweep) and, for a sweep,
//!   `execve` this program's image (`/proc/self/exe`) with [`super::SWEEP_ARG`]: a fresh
//!   process whose main calls [`super::entry`], which sweeps.

use std::ffi::{c_char, c_int, c_void};
use std::io;
use std::os::fd::RawFd;

/// The child's stack: its notes buffer ([`super::NOTES_MAX_BYTES`]), the argument
/// vector, a few frames. Mapped once per process.
const STACK_BYTES: usize = 128 * 1024;

/// An inaccessible mapping below the stack: an overflow faults in the child instead of
/// writing the supervisor's memory. 64 KiB covers every page size Linux uses.
const GUARD_BYTES: usize = 64 * 1024;

/// The name the sweeper runs under (`ps`, `/proc/<pid>/comm`).
const SWEEPER_NAME: &std::ffi::CStr = c"tierbox-watchdog";

/// What the child needs, written by the parent before the clone and never after.
pub(super) struct ChildSpec {
    /// The read end of the watchdog's pipe (the child's copy of the descriptor table
    /// holds it; the parent closes its own after the clone).
    pub(super) pipe: RawFd,
    /// `/dev/null`, open read-write, for the child's stdin, stdout and stderr.
    pub(super) null: RawFd,
    /// The supervisor's pid in decimal, NUL-terminated.
    pub(super) supervisor: [u8; 12],
}

/// Starts the watchdog's child on `spec`; its pid.
pub(super) fn clone_watchdog(spec: &'static ChildSpec) -> io::Result<libc::pid_t> {
    let len = GUARD_BYTES + STACK_BYTES;
    // SAFETY: a new anonymous private mapping; the result is checked.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let unmap = |e: io::Error| {
        // SAFETY: the mapping made above, used by nobody.
        unsafe { libc::munmap(base, len) };
        e
    };
    // SAFETY: the lowest GUARD_BYTES of the mapping made above.
    if unsafe { libc::mprotect(base, GUARD_BYTES, libc::PROT_NONE) } != 0 {
        return Err(unmap(io::Error::last_os_error()));
    }
    // SAFETY: sigset_t is plain data; sigfillset initialises it.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid sigset pointers; sigfillset and pthread_sigmask cannot fail with them.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    // The stack grows down on every Linux target: the child starts at the top, which is
    // page-aligned (so 16-byte aligned).
    // SAFETY: `base + len` is one past the mapping's end, the stack's initial top.
    let top = unsafe { base.cast::<u8>().add(len) }.cast::<c_void>();
    let arg = std::ptr::from_ref(spec).cast_mut().cast::<c_void>();
    // SAFETY: `child` runs on the fresh stack with `arg` pointing at a 'static ChildSpec;
    // it keeps the rules in the module docs. CLONE_VM without CLONE_THREAD: a process of
    // its own (its own descriptor table, signal handlers and mask) sharing the memory.
    let pid = unsafe { libc::clone(child, top, libc::CLONE_VM | libc::SIGCHLD, arg) };
    let err = io::Error::last_os_error();
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    if pid == -1 {
        return Err(unmap(err));
    }
    // The mapping stays: the child runs on it until it exits or execs.
    Ok(pid)
}

/// The watchdog's child (module docs): detach from the supervisor's descriptors, read the
/// notes until the pipe ends, then exit (released) or exec the sweeper.
extern "C" fn child(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the 'static ChildSpec given to `clone_watchdog`, never written
    // after the clone.
    let spec = unsafe { &*arg.cast::<ChildSpec>() };
    // SAFETY: dup2 of an open descriptor onto 0..=2 and close_range of the others but
    // the pipe, with arguments none of them can fail with (this process's own table).
    unsafe {
        for fd in 0..3 {
            libc::dup2(spec.null, fd);
        }
        let keep = spec.pipe;
        for (first, last) in [(3, keep - 1), (keep + 1, c_int::MAX)] {
            if first <= last {
                libc::syscall(
                    libc::SYS_close_range,
                    first as libc::c_uint,
                    last as libc::c_uint,
                    0,
                );
            }
        }
    }
    let mut notes = [0u8; super::NOTES_MAX_BYTES + 1];
    let mut len = 0usize;
    let mut buf = [0u8; 512];
    loop {
        // SAFETY: reads into a buffer on this stack; with every signal blocked it returns
        // data, or 0 when the supervisor is gone.
        let n = unsafe { libc::read(spec.pipe, buf.as_mut_ptr().cast(), buf.len()) };
        let Ok(n) = usize::try_from(n) else { break };
        if n == 0 {
            break;
        }
        if len + n <= super::NOTES_MAX_BYTES {
            notes[len..len + n].copy_from_slice(&buf[..n]);
            len += n;
        }
    }
    // From here the supervisor runs no more on this memory (module docs).
    if super::released(&notes[..len]) {
        // SAFETY: ends this process only (its own thread group).
        unsafe { libc::_exit(0) }
    }
    // Notes are paths and kinds, never a NUL; the buffer has room for the terminator.
    notes[len] = 0;
    let argv: [*const c_char; 5] = [
        SWEEPER_NAME.as_ptr(),
        super::SWEEP_ARG_C.as_ptr(),
        spec.supervisor.as_ptr().cast(),
        notes.as_ptr().cast(),
        std::ptr::null(),
    ];
    let envp: [*const c_char; 1] = [std::ptr::null()];
    // SAFETY: NUL-terminated path, argv and envp arrays of NUL-terminated strings on this
    // stack; returns only on failure, and then this process exits.
    unsafe {
        libc::execve(c"/proc/self/exe".as_ptr(), argv.as_ptr(), envp.as_ptr());
        libc::_exit(127)
    }
}

/// `pid` in decimal, NUL-terminated, at the start of the buffer.
pub(super) fn decimal_pid(pid: libc::pid_t) -> [u8; 12] {
    let mut buf = [0u8; 12];
    let mut out = [0u8; 12];
    let text = crate::linux::sys::decimal(pid, &mut buf);
    out[..text.len()].copy_from_slice(text);
    out
}

/// The sweeper's signals: the termination ones a terminal or a process-group `kill` sends
/// ignored, then nothing blocked (the child's all-blocked mask came through the exec).
pub(super) fn sweeper_signals() {
    for sig in [
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGPIPE,
    ] {
        // SAFETY: installs SIG_IGN, which runs no code of ours.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
    // SAFETY: an empty, initialised sigset; pthread_sigmask cannot fail with it.
    unsafe {
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    }
}
