//! Shared memory and pseudo-terminals: what `multiprocessing` and `openpty` need.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::sys::{self, PollResult, errno_name, io_errno_name};
use crate::{ProbeError, ProbeResult, Report};

/// How long the pseudo-terminal's line may take to reach the multiplexer.
const PTY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// `shm-pty TAG`: creates `/dev/shm/TAG` (as `shm_open` does), writes and reads it back,
/// removes it; opens `/dev/ptmx`, unlocks it, opens its `/dev/pts/N` and sends a line
/// through the pair; tries `TIOCSTI` on it. One line per step: `shm ok` or the error,
/// `pty ok /dev/pts/N` or the step and error, `tiocsti ERRNO` or `tiocsti SUCCEEDED`.
pub fn shm_pty(tag: &str) -> ProbeResult {
    if tag.is_empty() || tag.contains('/') {
        return Err(ProbeError(format!("{tag:?}: expected a file name")));
    }
    let mut lines = vec![format!(
        "shm {}",
        match shm(&Path::new("/dev/shm").join(tag)) {
            Ok(()) => "ok".to_owned(),
            Err(e) => e,
        }
    )];
    match pty() {
        Ok((name, tiocsti)) => {
            lines.push(format!("pty ok {name}"));
            lines.push(format!("tiocsti {tiocsti}"));
        }
        Err(e) => lines.push(format!("pty {e}")),
    }
    Ok(Report::Done(lines.join("\n")))
}

fn shm(path: &Path) -> Result<(), String> {
    let step = |what: &str, e: std::io::Error| format!("{what} {}", io_errno_name(&e));
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| step("create", e))?;
    f.write_all(b"tierbox").map_err(|e| step("write", e))?;
    let mut back = String::new();
    File::open(path)
        .and_then(|mut r| r.read_to_string(&mut back))
        .map_err(|e| step("read", e))?;
    std::fs::remove_file(path).map_err(|e| step("unlink", e))?;
    if back == "tierbox" {
        Ok(())
    } else {
        Err(format!("read back {back:?}"))
    }
}

/// The pair's name and what `TIOCSTI` on the secondary did.
fn pty() -> Result<(String, String), String> {
    let io = |what: &str, e: std::io::Error| format!("{what} {}", io_errno_name(&e));
    let sys = |e: sys::SysError| format!("{} {}", e.call, errno_name(e.errno()));
    let mut ptmx = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open("/dev/ptmx")
        .map_err(|e| io("open /dev/ptmx", e))?;
    sys::ioctl_unlock_pty(ptmx.as_raw_fd()).map_err(sys)?;
    let name = format!(
        "/dev/pts/{}",
        sys::ioctl_pty_number(ptmx.as_raw_fd()).map_err(sys)?
    );
    let mut secondary = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(&name)
        .map_err(|e| io(&format!("open {name}"), e))?;
    secondary.write_all(b"ping\n").map_err(|e| io("write", e))?;
    match sys::poll_readable(ptmx.as_raw_fd(), PTY_READ_TIMEOUT).map_err(sys)? {
        PollResult::Timeout => return Err("read: nothing arrived".to_owned()),
        PollResult::NotOpen => return Err("read: the multiplexer closed".to_owned()),
        PollResult::Ready => {}
    }
    let mut buf = [0u8; 64];
    let n = ptmx.read(&mut buf).map_err(|e| io("read", e))?;
    if !buf[..n].starts_with(b"ping") {
        return Err(format!("read {:?}", String::from_utf8_lossy(&buf[..n])));
    }
    let tiocsti = match sys::ioctl_tiocsti(secondary.as_raw_fd(), b' ') {
        Ok(()) => "SUCCEEDED".to_owned(),
        Err(e) => errno_name(e.errno()),
    };
    Ok((name, tiocsti))
}
