//! The system calls of [`super`]: a pseudo-terminal pair opened in the supervisor, and
//! the ioctls the supervisor makes on its primary side.

use std::ffi::c_int;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::TermSize;

fn check(ret: c_int) -> io::Result<c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `fd` moved to a number >= 3 (close-on-exec), so a child's `dup3` onto 0/1/2 cannot
/// clobber it.
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC on an fd we own; the result is a fresh fd.
    let new = check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) })?;
    // SAFETY: fresh fd owned by us; the old one closes when `fd` drops.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// `posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC)`, unlocked, sized, its secondary opened
/// through the primary (`TIOCGPTPEER`: no path lookup), the primary made non-blocking.
pub(crate) fn open_pair(size: TermSize) -> io::Result<(OwnedFd, OwnedFd)> {
    // SAFETY: posix_openpt takes flags only and returns a fresh fd.
    let primary =
        check(unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) })?;
    // SAFETY: a fresh fd the kernel returned, owned by nobody else.
    let primary = above_stdio(unsafe { OwnedFd::from_raw_fd(primary) })?;
    let unlock: c_int = 0;
    // SAFETY: TIOCSPTLCK reads one int from the pointer, which outlives the call.
    check(unsafe { libc::ioctl(primary.as_raw_fd(), libc::TIOCSPTLCK, &unlock) })?;
    set_winsize(primary_fd(&primary), size)?;
    // SAFETY: TIOCGPTPEER takes open flags by value and returns a fresh fd.
    let secondary = check(unsafe {
        libc::ioctl(
            primary.as_raw_fd(),
            libc::TIOCGPTPEER,
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: a fresh fd the kernel returned.
    let secondary = above_stdio(unsafe { OwnedFd::from_raw_fd(secondary) })?;
    set_nonblocking(primary_fd(&primary))?;
    Ok((primary, secondary))
}

fn primary_fd(fd: &OwnedFd) -> BorrowedFd<'_> {
    use std::os::fd::AsFd;
    fd.as_fd()
}

/// `O_NONBLOCK` added to `fd`'s status flags.
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: F_GETFL/F_SETFL on an fd the caller borrows for the call.
    let flags = check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    // SAFETY: as above.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) })?;
    Ok(())
}

/// `TIOCSWINSZ`.
pub(crate) fn set_winsize(fd: BorrowedFd<'_>, size: TermSize) -> io::Result<()> {
    let ws = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize from the pointer, which outlives the call.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &ws) })?;
    Ok(())
}

/// `TIOCGWINSZ`.
pub(crate) fn get_winsize(fd: BorrowedFd<'_>) -> io::Result<TermSize> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize through the pointer, which outlives the call.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) })?;
    Ok(TermSize {
        rows: ws.ws_row,
        cols: ws.ws_col,
    })
}

/// `TIOCGPGRP` on the primary: the foreground process group of the terminal.
pub(crate) fn foreground_group(fd: BorrowedFd<'_>) -> io::Result<i32> {
    let mut group: libc::pid_t = 0;
    // SAFETY: TIOCGPGRP writes one pid_t through the pointer, which outlives the call.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGPGRP, &mut group) })?;
    Ok(group)
}

/// `kill(-group, sig)`.
pub(crate) fn kill_group(group: i32, sig: i32) -> io::Result<()> {
    // SAFETY: kill takes plain integers.
    check(unsafe { libc::kill(-group, sig) })?;
    Ok(())
}

/// `tcgetattr`'s `c_cc[VEOF]`.
pub(crate) fn eof_byte(fd: BorrowedFd<'_>) -> io::Result<u8> {
    // SAFETY: a zeroed termios is a valid value to be overwritten.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: tcgetattr writes one termios through the pointer, which outlives the call.
    check(unsafe { libc::tcgetattr(fd.as_raw_fd(), &mut t) })?;
    Ok(t.c_cc[libc::VEOF])
}

/// `fd` registered with the tokio reactor for reads and writes.
pub(crate) fn register(fd: OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<std::fs::File>> {
    let file = std::fs::File::from(fd);
    // SAFETY: a `File` is a valid open descriptor that stays open, and always returns the
    // same number from `as_raw_fd`, for as long as the `AsyncFd` owns it.
    unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(
            file,
            tokio::io::Interest::READABLE | tokio::io::Interest::WRITABLE,
        )
    }
    .map_err(|e| e.into_parts().1)
}
