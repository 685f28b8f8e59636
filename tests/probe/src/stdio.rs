//! What a run inherits: environment variables, descriptors, stdin; and the output flood.

use std::io::Write;
use std::os::fd::AsFd;
use std::time::Duration;

use crate::sys::{self, PollResult, errno_name, io_errno_name};
use crate::{ProbeError, ProbeResult, Report};

/// `env-absent NAME...`: none of the variables is set. Values are never printed.
pub fn env_absent(names: &[String]) -> ProbeResult {
    let present: Vec<String> = names
        .iter()
        .filter_map(|n| std::env::var_os(n).map(|v| format!("{n} ({} bytes)", v.len())))
        .collect();
    Ok(if present.is_empty() {
        Report::Holds(format!("not set: {}", names.join(", ")))
    } else {
        Report::Broken(format!("set: {}", present.join(", ")))
    })
}

/// Descriptors above stderr that are open, from `/proc/self/fd`, checked one by one with
/// `fcntl` after the listing is closed (the listing's own descriptor is not counted).
fn open_fds_above_stderr() -> Result<Vec<i32>, ProbeError> {
    let listed: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map_err(|e| ProbeError(format!("cannot list /proc/self/fd ({})", io_errno_name(&e))))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    Ok(listed
        .into_iter()
        .filter(|fd| sys::fcntl_getfd(*fd).is_ok())
        .collect())
}

/// `fd-closed N`: descriptor N is closed (`fcntl(N, F_GETFD)` gives `EBADF`), and so is
/// every other descriptor above 2.
pub fn fd_closed(fd: i32) -> ProbeResult {
    let others = open_fds_above_stderr()?;
    let target = match sys::fcntl_getfd(fd) {
        Ok(flags) => Err(format!("fd {fd} is open (flags {flags:#x})")),
        Err(e) if e.errno() == libc::EBADF => Ok(format!("fcntl({fd}, F_GETFD): EBADF")),
        Err(e) => Err(format!(
            "fcntl({fd}, F_GETFD): {} (expected EBADF)",
            errno_name(e.errno())
        )),
    };
    let others_text = if others.is_empty() {
        "no other fd above 2 is open".to_owned()
    } else {
        format!("other open fds above 2: {others:?}")
    };
    Ok(match target {
        Ok(t) if others.is_empty() => Report::Holds(format!("{t}; {others_text}")),
        Ok(t) | Err(t) => Report::Broken(format!("{t}; {others_text}")),
    })
}

/// Size of each `flood` write, in bytes.
const FLOOD_CHUNK_BYTES: usize = 1024 * 1024;

/// A line of harmless text (nothing a redactor would take for a secret).
const FLOOD_LINE: &[u8] = b"the quick brown fox jumps over the lazy dog\n";

/// `flood BYTES`: writes exactly BYTES to stdout, in 1 MiB writes, as fast as it can.
/// Stdout is written unbuffered (a duplicate of fd 1), so the count is exact.
pub fn flood(bytes: u64) -> ProbeResult {
    let chunk: Vec<u8> = FLOOD_LINE
        .iter()
        .copied()
        .cycle()
        .take(FLOOD_CHUNK_BYTES)
        .collect();
    let fd = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| ProbeError(format!("dup(1): {}", io_errno_name(&e))))?;
    let mut out = std::fs::File::from(fd);
    let mut written = 0u64;
    while written < bytes {
        let n = usize::try_from(bytes - written)
            .unwrap_or(usize::MAX)
            .min(chunk.len());
        out.write_all(&chunk[..n]).map_err(|e| {
            ProbeError(format!(
                "write to stdout failed after {written} bytes: {}",
                io_errno_name(&e)
            ))
        })?;
        written += n as u64;
    }
    Ok(Report::Done(format!("wrote {written} bytes to stdout")))
}

/// How long `stdin-closed` waits for stdin to become readable. `/dev/null` is readable at
/// once; an open pipe nobody writes to never is.
const STDIN_WAIT: Duration = Duration::from_secs(2);

/// `stdin-closed`: stdin is at end of file immediately (`/dev/null`): readable at once,
/// and a read returns 0 bytes.
pub fn stdin_closed() -> ProbeResult {
    match sys::poll_readable(0, STDIN_WAIT)? {
        PollResult::Timeout => {
            return Ok(Report::Broken(format!(
                "stdin is open and not readable after {} ms: a read would block",
                STDIN_WAIT.as_millis()
            )));
        }
        PollResult::NotOpen => {
            return Ok(Report::Broken(
                "fd 0 is not open: the next file opened would become stdin".to_owned(),
            ));
        }
        PollResult::Ready => {}
    }
    let mut buf = [0u8; 4096];
    Ok(match sys::read(0, &mut buf) {
        Ok(0) => Report::Holds("read(0) returned 0 bytes (end of file) at once".to_owned()),
        Ok(n) => Report::Broken(format!("read(0) returned {n} bytes")),
        Err(e) => Report::Broken(format!("{e} (expected end of file)")),
    })
}

/// `print-env NAME`: prints `NAME=VALUE` on stdout and on stderr (for the redaction test:
/// the value must not leave the runner when the policy marks it sensitive).
pub fn print_env(name: &str) -> ProbeResult {
    let value = std::env::var(name).map_err(|_| ProbeError(format!("{name} is not set")))?;
    eprintln!("{name}={value}");
    Ok(Report::Done(format!("{name}={value}")))
}
