//! Process probes: the process limit, the open-file limit, and processes that try to
//! outlive the run or hold its output open.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::sys::{self, ChildExit, Forked, io_errno_name};
use crate::{ProbeError, ProbeResult, Report};

/// The start time of `pid` in clock ticks since boot (field 22 of `/proc/PID/stat`).
/// With the pid it names one process for good: a reused pid has a later start time.
pub fn start_time(pid: u32) -> Result<u64, ProbeError> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path)
        .map_err(|e| ProbeError(format!("cannot read {path} ({})", io_errno_name(&e))))?;
    // The command name (field 2) is in parentheses and may contain spaces.
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| ProbeError(format!("{path} is malformed")))?;
    // Fields after the name start at field 3 (state); starttime is field 22.
    after
        .split_whitespace()
        .nth(22 - 3)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| ProbeError(format!("{path} has no start time")))
}

/// `fork-bomb LIMIT`: forks sleeping children until `fork` fails, at most 4 × LIMIT of
/// them. Holds when `fork` failed while the run had at most LIMIT processes (the probe
/// and its children; the probe is single-threaded). The children are killed and reaped.
pub fn fork_bomb(limit: usize) -> ProbeResult {
    let max = limit.saturating_mul(4).max(4);
    let mut children = Vec::new();
    let mut failure = None;
    while children.len() < max {
        match sys::fork() {
            Ok(Forked::Child) => sys::pause_forever(),
            Ok(Forked::Parent(pid)) => children.push(pid),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    for &pid in &children {
        let _ = sys::kill(pid, libc::SIGKILL);
    }
    for &pid in &children {
        let _ = sys::waitpid(pid);
    }
    let n = children.len();
    let total = n + 1;
    Ok(match failure {
        Some(e) if total <= limit => Report::Holds(format!(
            "forked {n} children ({total} processes with the probe, limit {limit}), then {e}"
        )),
        Some(e) => Report::Broken(format!(
            "forked {n} children ({total} processes with the probe, more than the limit {limit}) before {e}"
        )),
        None => Report::Broken(format!(
            "forked all {n} children ({total} processes, limit {limit}) and fork never failed"
        )),
    })
}

/// `nofile N`: opens `/dev/null` until `EMFILE`; holds when that happened before any
/// descriptor reached N (`RLIMIT_NOFILE = N` allows descriptors 0 to N-1).
pub fn nofile(n: u64) -> ProbeResult {
    let max_attempts = n.saturating_mul(4).saturating_add(64).min(1 << 20);
    let mut files: Vec<File> = Vec::new();
    let mut failure = None;
    while (files.len() as u64) < max_attempts {
        match File::open("/dev/null") {
            Ok(f) => files.push(f),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let highest = files.iter().map(|f| f.as_raw_fd()).max().unwrap_or(2);
    let count = files.len();
    let within = u64::try_from(highest).is_ok_and(|h| h < n);
    Ok(match failure {
        Some(e) if e.raw_os_error() == Some(libc::EMFILE) && within => Report::Holds(format!(
            "opened {count} files (highest fd {highest}, limit {n}), then EMFILE"
        )),
        Some(e) if e.raw_os_error() == Some(libc::EMFILE) => Report::Broken(format!(
            "opened {count} files up to fd {highest}, past the limit {n}, before EMFILE"
        )),
        Some(e) => {
            return Err(ProbeError(format!(
                "open(/dev/null) failed with {} after {count} files (expected EMFILE)",
                io_errno_name(&e)
            )));
        }
        None => Report::Broken(format!(
            "opened {count} files (highest fd {highest}, limit {n}) without EMFILE"
        )),
    })
}

/// How long `daemon` waits for its daemon to write the pid file.
const PIDFILE_WAIT: Duration = Duration::from_secs(5);

/// How long the daemon sleeps: far longer than any test waits.
const DAEMON_SLEEP: Duration = Duration::from_secs(60);

/// How long the `grandchild-holds-stdout` child sleeps with stdout open.
const GRANDCHILD_SLEEP: Duration = Duration::from_secs(30);

/// `daemon PIDFILE`: the classic escape. Fork; the child calls `setsid` (leaving the run's
/// process group and session), forks the daemon and exits, so the daemon is orphaned. The
/// daemon points its stdio at `/dev/null`, writes `PID START` to PIDFILE and sleeps 60 s.
/// The probe exits as soon as the pid file exists; the caller checks the daemon is gone.
pub fn daemon(pidfile: &Path) -> ProbeResult {
    let _ = std::fs::remove_file(pidfile);
    match sys::fork()? {
        Forked::Child => sys::exit_now(daemon_parent(pidfile)),
        Forked::Parent(pid) => match sys::waitpid(pid)? {
            ChildExit::Code(0) => {}
            other => {
                return Err(ProbeError(format!(
                    "the intermediate child failed: {other:?}"
                )));
            }
        },
    }
    let started = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(pidfile) {
            let text = text.trim();
            if !text.is_empty() {
                return Ok(Report::Done(format!(
                    "left a setsid double-forked daemon sleeping {} s; {} holds its pid and start time: {text}",
                    DAEMON_SLEEP.as_secs(),
                    pidfile.display()
                )));
            }
        }
        if started.elapsed() > PIDFILE_WAIT {
            return Err(ProbeError(format!(
                "the daemon did not write {} within {} s",
                pidfile.display(),
                PIDFILE_WAIT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The intermediate child of [`daemon`]: new session, fork the daemon, exit. Returns the
/// exit code.
fn daemon_parent(pidfile: &Path) -> i32 {
    if sys::setsid().is_err() {
        return 3;
    }
    match sys::fork() {
        Ok(Forked::Child) => {
            daemon_main(pidfile);
            sys::exit_now(0)
        }
        Ok(Forked::Parent(_)) => 0,
        Err(_) => 4,
    }
}

fn daemon_main(pidfile: &Path) {
    if let Ok(null) = OpenOptions::new().read(true).write(true).open("/dev/null") {
        for fd in 0..=2 {
            let _ = sys::dup2(null.as_raw_fd(), fd);
        }
    }
    let pid = std::process::id();
    let Ok(start) = start_time(pid) else { return };
    // Written under a temporary name and renamed, so a reader never sees half of it.
    let tmp = PathBuf::from(format!("{}.tmp", pidfile.display()));
    let written = File::create(&tmp)
        .and_then(|mut f| writeln!(f, "{pid} {start}"))
        .and_then(|()| std::fs::rename(&tmp, pidfile));
    if written.is_ok() {
        std::thread::sleep(DAEMON_SLEEP);
    }
}

/// `grandchild-holds-stdout [--setsid]`: forks a child that keeps the inherited stdout
/// (and stderr) open and sleeps 30 s, prints its pid and start time, and exits at once.
/// With `--setsid` the child also leaves the run's process group and session.
pub fn grandchild_holds_stdout(setsid: bool) -> ProbeResult {
    match sys::fork()? {
        Forked::Child => {
            if setsid {
                let _ = sys::setsid();
            }
            std::thread::sleep(GRANDCHILD_SLEEP);
            sys::exit_now(0)
        }
        Forked::Parent(pid) => {
            let pid =
                u32::try_from(pid).map_err(|_| ProbeError(format!("fork returned pid {pid}")))?;
            let start = start_time(pid)?;
            Ok(Report::Done(format!(
                "left a child holding stdout for {} s{}: pid={pid} start={start}",
                GRANDCHILD_SLEEP.as_secs(),
                if setsid { " in its own session" } else { "" }
            )))
        }
    }
}

/// Size of each `memory` allocation, in bytes.
const MEMORY_CHUNK_BYTES: usize = 1024 * 1024;

/// `memory BYTES`: allocates and touches 2 × BYTES. With a memory limit of BYTES the
/// kernel's OOM killer ends the probe (the caller checks the outcome); if it gets
/// through, the limit did not hold.
pub fn memory(bytes: u64) -> ProbeResult {
    let target = usize::try_from(bytes.saturating_mul(2))
        .map_err(|_| ProbeError(format!("{bytes} is too large")))?;
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    let mut total = 0usize;
    while total < target {
        let mut chunk = vec![0u8; MEMORY_CHUNK_BYTES];
        // Touch every page so it is really charged (a zeroed allocation may be lazy).
        for i in (0..chunk.len()).step_by(4096) {
            chunk[i] = 1;
        }
        total += chunk.len();
        chunks.push(chunk);
    }
    let touched = chunks
        .iter()
        .map(|c| c.iter().step_by(4096).filter(|b| **b == 1).count())
        .sum::<usize>();
    Ok(Report::Broken(format!(
        "allocated and touched {total} bytes ({touched} pages), twice the {bytes}-byte limit"
    )))
}

/// `cpu MS`: spins until the process has used 2 × MS of CPU time. With `RLIMIT_CPU` at
/// MS the kernel sends `SIGXCPU` first (the caller checks the outcome).
pub fn cpu(ms: u64) -> ProbeResult {
    let target = Duration::from_millis(ms.saturating_mul(2));
    let mut spins = 0u64;
    loop {
        let used = sys::process_cpu_time()?;
        if used >= target {
            return Ok(Report::Broken(format!(
                "used {} ms of CPU time, twice the {ms} ms limit ({spins} spins)",
                used.as_millis()
            )));
        }
        for _ in 0..10_000 {
            spins = std::hint::black_box(spins.wrapping_add(1));
        }
    }
}

/// How long `hold` and its child sleep.
const HOLD_SLEEP: Duration = Duration::from_secs(60);

/// `hold PIDFILE [--ignore-term]`: forks a child (same process group, no `setsid`),
/// writes `PID START CHILD_PID CHILD_START` to PIDFILE, and both sleep 60 s. Used to see
/// what happens to a run whose supervisor dies, or that reaches its deadline. With
/// `--ignore-term` both ignore SIGTERM, so only SIGKILL ends them.
pub fn hold(pidfile: &Path, ignore_term: bool) -> ProbeResult {
    if ignore_term {
        sys::ignore_signal(libc::SIGTERM)?;
    }
    let child = match sys::fork()? {
        Forked::Child => {
            std::thread::sleep(HOLD_SLEEP);
            sys::exit_now(0)
        }
        Forked::Parent(pid) => {
            u32::try_from(pid).map_err(|_| ProbeError(format!("fork returned pid {pid}")))?
        }
    };
    let me = std::process::id();
    let line = format!("{me} {} {child} {}", start_time(me)?, start_time(child)?);
    let tmp = PathBuf::from(format!("{}.tmp", pidfile.display()));
    File::create(&tmp)
        .and_then(|mut f| writeln!(f, "{line}"))
        .and_then(|()| std::fs::rename(&tmp, pidfile))
        .map_err(|e| {
            ProbeError(format!(
                "cannot write {} ({})",
                pidfile.display(),
                io_errno_name(&e)
            ))
        })?;
    std::thread::sleep(HOLD_SLEEP);
    Ok(Report::Done(format!(
        "held {line} for {} s",
        HOLD_SLEEP.as_secs()
    )))
}

/// The variable holding what `no-secret-in-cmdlines` looks for (in the environment, so the
/// probe's own command line does not hold it).
pub const NEEDLE_VAR: &str = "TIERBOX_PROBE_NEEDLE";

/// `no-secret-in-cmdlines`: no command line this process can read (`/proc/*/cmdline`:
/// every process of its pid namespace, the host's for Tier B) may hold the value of
/// [`NEEDLE_VAR`]. Reports how many it read, and every one that holds it.
pub fn no_secret_in_cmdlines() -> ProbeResult {
    let needle =
        std::env::var(NEEDLE_VAR).map_err(|_| ProbeError(format!("{NEEDLE_VAR} is not set")))?;
    if needle.len() < 8 {
        return Err(ProbeError(format!(
            "{NEEDLE_VAR} is too short to mean anything"
        )));
    }
    let entries = std::fs::read_dir("/proc")
        .map_err(|e| ProbeError(format!("cannot list /proc ({})", io_errno_name(&e))))?;
    let mut read = 0;
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        read += 1;
        if cmdline
            .windows(needle.len())
            .any(|w| w == needle.as_bytes())
        {
            let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
            found.push(format!("pid {pid} ({})", String::from_utf8_lossy(argv0)));
        }
    }
    Ok(if found.is_empty() {
        Report::Holds(format!("{read} command lines read, none holds the value"))
    } else {
        Report::Broken(format!(
            "{read} command lines read; the value is in: {}",
            found.join(", ")
        ))
    })
}
