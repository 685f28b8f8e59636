//! Privilege and reach into other processes: capabilities, ptrace, user namespaces,
//! signals, terminal injection and other processes' `/proc` entries.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::sys::{self, ChildExit, Forked, errno_name, io_errno_name};
use crate::{ProbeError, ProbeResult, Report};

/// `no-caps`: every capability set is empty, `no_new_privs` is set and a seccomp filter is
/// installed, as `/proc/self/status` reports them; a process with uid 0 also has
/// `SECBIT_NOROOT` set and locked.
pub fn no_caps() -> ProbeResult {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| {
        ProbeError(format!(
            "cannot read /proc/self/status ({})",
            io_errno_name(&e)
        ))
    })?;
    let field = |name: &str| -> Result<String, ProbeError> {
        status
            .lines()
            .find_map(|l| {
                l.strip_prefix(name)?
                    .strip_prefix(':')
                    .map(|v| v.trim().to_owned())
            })
            .ok_or_else(|| ProbeError(format!("/proc/self/status has no {name} field")))
    };
    let mut wrong = Vec::new();
    let mut seen = Vec::new();
    for name in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        let value = field(name)?;
        let bits = u64::from_str_radix(&value, 16)
            .map_err(|_| ProbeError(format!("{name} is not hex: {value:?}")))?;
        if bits != 0 {
            wrong.push(format!("{name}={value}"));
        }
        seen.push(format!("{name}={value}"));
    }
    // uid 0 keeps root's special treatment at exec unless SECBIT_NOROOT is set (and
    // locked); for any other uid the bits do not matter.
    let bits = sys::securebits()?;
    let locked = (libc::SECBIT_NOROOT | libc::SECBIT_NOROOT_LOCKED) as u32;
    if sys::uids().1 == 0 && bits & locked != locked {
        wrong.push(format!(
            "securebits={bits:#x} (uid 0 without SECBIT_NOROOT locked)"
        ));
    }
    seen.push(format!("securebits={bits:#x}"));
    for (name, want) in [("NoNewPrivs", "1"), ("Seccomp", "2")] {
        let value = field(name)?;
        if value != want {
            wrong.push(format!("{name}={value} (want {want})"));
        }
        seen.push(format!("{name}={value}"));
    }
    Ok(if wrong.is_empty() {
        Report::Holds(seen.join(" "))
    } else {
        Report::Broken(format!("{} [all: {}]", wrong.join(" "), seen.join(" ")))
    })
}

/// `no-ptrace`: `PTRACE_TRACEME` (tried in a forked child, so a success cannot leave the
/// probe itself traced) and `process_vm_readv` on the probe's own memory both fail.
pub fn no_ptrace() -> ProbeResult {
    let traceme = match sys::fork()? {
        Forked::Child => match sys::ptrace_traceme() {
            Ok(()) => sys::exit_now(0),
            Err(e) => sys::exit_now(e.errno().clamp(1, 255)),
        },
        Forked::Parent(pid) => match sys::waitpid(pid)? {
            ChildExit::Code(0) => Ok("ptrace(PTRACE_TRACEME): SUCCEEDED".to_owned()),
            ChildExit::Code(errno) => Err(format!("ptrace(PTRACE_TRACEME): {}", errno_name(errno))),
            ChildExit::Signal(s) => {
                return Err(ProbeError(format!(
                    "the PTRACE_TRACEME child was killed by signal {s}"
                )));
            }
        },
    };
    let secret = *b"process_vm_readv target";
    let mut copy = [0u8; 23];
    let vm = match sys::process_vm_readv(
        std::process::id() as libc::pid_t,
        secret.as_ptr() as usize,
        &mut copy,
    ) {
        Ok(n) => Ok(format!("process_vm_readv(self): SUCCEEDED ({n} bytes)")),
        Err(e) => Err(e.to_string()),
    };
    let text = format!(
        "{}; {}",
        traceme.as_ref().unwrap_or_else(|e| e),
        vm.as_ref().unwrap_or_else(|e| e)
    );
    Ok(if traceme.is_ok() || vm.is_ok() {
        Report::Broken(text)
    } else {
        Report::Holds(text)
    })
}

/// `no-userns`: neither `clone(CLONE_NEWUSER)` nor `unshare(CLONE_NEWUSER)` works.
pub fn no_userns() -> ProbeResult {
    let cloned = match sys::clone_new_user() {
        Ok(Forked::Child) => sys::exit_now(0),
        Ok(Forked::Parent(pid)) => {
            sys::waitpid(pid)?;
            Ok("clone(CLONE_NEWUSER): SUCCEEDED".to_owned())
        }
        Err(e) => Err(e.to_string()),
    };
    let unshared = match sys::unshare(libc::CLONE_NEWUSER, "CLONE_NEWUSER") {
        Ok(()) => Ok("unshare(CLONE_NEWUSER): SUCCEEDED".to_owned()),
        Err(e) => Err(e.to_string()),
    };
    let text = format!(
        "{}; {}",
        cloned.as_ref().unwrap_or_else(|e| e),
        unshared.as_ref().unwrap_or_else(|e| e)
    );
    Ok(if cloned.is_ok() || unshared.is_ok() {
        Report::Broken(text)
    } else {
        Report::Holds(text)
    })
}

fn process_must_exist(pid: i32) -> Result<(), ProbeError> {
    if pid <= 0 {
        return Err(ProbeError(format!("{pid} is not a single process id")));
    }
    std::fs::metadata(format!("/proc/{pid}"))
        .map(drop)
        .map_err(|e| {
            ProbeError(format!(
                "process {pid} does not exist ({}); the probe needs a live target",
                io_errno_name(&e)
            ))
        })
}

/// `no-signal-outside PID`: `kill(PID, 0)` to a live process outside the sandbox fails
/// with `EPERM`.
///
/// (`kill(-1, 0)` would be no test at all: Linux returns success from it even when every
/// single delivery failed with `EPERM`.)
pub fn no_signal_outside(pid: i32) -> ProbeResult {
    process_must_exist(pid)?;
    match sys::kill(pid, 0) {
        Ok(()) => Ok(Report::Broken(format!(
            "kill({pid}, 0) succeeded: the process can be signalled"
        ))),
        Err(e) if e.errno() == libc::EPERM => Ok(Report::Holds(e.to_string())),
        Err(e) => Err(ProbeError(format!("{e} (expected EPERM)"))),
    }
}

/// `no-tiocsti`: pushing a byte into a terminal's input queue fails on fds 0, 1, 2 and
/// `/dev/tty`. Each attempt is reported as `fd N: RESULT`.
pub fn no_tiocsti() -> ProbeResult {
    let mut results: Vec<(String, Result<(), String>)> = Vec::new();
    for fd in 0..=2 {
        results.push((
            format!("fd {fd}"),
            sys::ioctl_tiocsti(fd, b' ').map_err(|e| errno_name(e.errno())),
        ));
    }
    let tty = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
    {
        Err(e) => Err(format!("open {}", io_errno_name(&e))),
        Ok(f) => {
            use std::os::fd::AsRawFd;
            sys::ioctl_tiocsti(f.as_raw_fd(), b' ').map_err(|e| errno_name(e.errno()))
        }
    };
    results.push(("/dev/tty".to_owned(), tty));
    let text: Vec<String> = results
        .iter()
        .map(|(what, r)| match r {
            Ok(()) => format!("{what}: SUCCEEDED"),
            Err(e) => format!("{what}: {e}"),
        })
        .collect();
    let text = text.join("; ");
    Ok(if results.iter().any(|(_, r)| r.is_ok()) {
        Report::Broken(text)
    } else {
        Report::Holds(text)
    })
}

/// Opens and reads `path`; `Ok` with the byte count when both work.
fn try_read(path: &Path) -> Result<usize, String> {
    let mut f = File::open(path).map_err(|e| format!("open {}", io_errno_name(&e)))?;
    let mut buf = [0u8; 64];
    f.read(&mut buf)
        .map_err(|e| format!("read {}", io_errno_name(&e)))
}

/// `proc-environ PID`: another process's environment, memory, open files and
/// directories cannot be reached through `/proc/PID`: reading `environ`, opening `mem`
/// (which already needs ptrace access; reading offset 0 would fail for unrelated
/// reasons), resolving the `fd/N` links, and listing through `cwd` and `root`.
///
/// Listing `fd/` itself (the descriptor *numbers*) is reported but not counted: the
/// kernel allows it to the owner uid without any ptrace check, and Tier B does not claim
/// to hide it.
pub fn proc_environ(pid: i32) -> ProbeResult {
    process_must_exist(pid)?;
    let dir = Path::new("/proc").join(pid.to_string());
    let mut routes: Vec<(String, Result<String, String>)> = Vec::new();
    routes.push((
        "environ".to_owned(),
        try_read(&dir.join("environ")).map(|n| format!("read {n} bytes")),
    ));
    // Read-write first (taking the process over), then read-only (reading its secrets).
    routes.push((
        "mem".to_owned(),
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.join("mem"))
            .map(|_| "opened read-write".to_owned())
            .or_else(|_| File::open(dir.join("mem")).map(|_| "opened read-only".to_owned()))
            .map_err(|e| format!("open {}", io_errno_name(&e))),
    ));
    for entry in ["cwd", "root"] {
        let listed = std::fs::read_dir(dir.join(entry))
            .map(|d| format!("listed {} entries", d.count()))
            .map_err(|e| format!("list {}", io_errno_name(&e)));
        routes.push((entry.to_owned(), listed));
    }
    let fd_numbers: Vec<String> = match std::fs::read_dir(dir.join("fd")) {
        Ok(entries) => entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect(),
        Err(_) => Vec::new(),
    };
    let listing = if fd_numbers.is_empty() {
        "not listable".to_owned()
    } else {
        format!("{} numbers listable", fd_numbers.len())
    };
    // Resolving the links shows which files the process holds (readlink needs ptrace access).
    let targets: Vec<String> = fd_numbers
        .iter()
        .filter_map(|n| std::fs::read_link(dir.join("fd").join(n)).ok())
        .map(|t| t.display().to_string())
        .collect();
    let fd_links = match fd_numbers.first() {
        None => Err("fd/N: nothing to resolve".to_owned()),
        Some(_) if targets.is_empty() => {
            Err(format!("readlink of {} fd links denied", fd_numbers.len()))
        }
        Some(_) => Ok(format!("resolved {} fd links", targets.len())),
    };
    routes.push(("fd/N".to_owned(), fd_links));
    let mut text: Vec<String> = routes
        .iter()
        .map(|(what, r)| match r {
            Ok(done) => format!("{}/{what}: SUCCEEDED ({done})", dir.display()),
            Err(e) => format!("{}/{what}: {e}", dir.display()),
        })
        .collect();
    text.push(format!("(fd/: {listing})"));
    let text = text.join("; ");
    Ok(if routes.iter().any(|(_, r)| r.is_ok()) {
        Report::Broken(text)
    } else {
        Report::Holds(text)
    })
}

/// `no-core`: core dumps are off for good: `RLIMIT_CORE` is 0 (soft and hard) and cannot
/// be raised.
pub fn no_core() -> ProbeResult {
    let (soft, hard) = sys::getrlimit(libc::RLIMIT_CORE, "RLIMIT_CORE")?;
    let raised = sys::setrlimit(libc::RLIMIT_CORE, "RLIMIT_CORE", 1 << 20, 1 << 20);
    let text = format!(
        "RLIMIT_CORE soft {soft} hard {hard}; {}",
        match &raised {
            Ok(()) => "setrlimit(RLIMIT_CORE, 1 MiB): SUCCEEDED".to_owned(),
            Err(e) => e.to_string(),
        }
    );
    Ok(if soft == 0 && hard == 0 && raised.is_err() {
        Report::Holds(text)
    } else {
        Report::Broken(text)
    })
}

/// `whoami`: prints the real and effective uid and gid and the supplementary groups.
pub fn whoami() -> ProbeResult {
    let (uid, euid) = sys::uids();
    let (gid, egid, groups) = sys::gids()?;
    let groups: Vec<String> = groups.iter().map(u32::to_string).collect();
    Ok(Report::Done(format!(
        "uid={uid} euid={euid} gid={gid} egid={egid} groups=[{}]",
        groups.join(",")
    )))
}

/// `setuid-exec PATH`: PATH is a setuid-root copy of this probe; running it (as `whoami`)
/// must not give an effective uid of 0. Needs a non-root caller.
pub fn setuid_exec(path: &Path) -> ProbeResult {
    let (uid, euid) = sys::uids();
    if uid == 0 || euid == 0 {
        return Err(ProbeError(format!(
            "running as uid {uid} euid {euid}: a setuid-root binary proves nothing to root"
        )));
    }
    let meta = std::fs::metadata(path).map_err(|e| {
        ProbeError(format!(
            "cannot stat {} ({})",
            path.display(),
            io_errno_name(&e)
        ))
    })?;
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        if meta.uid() != 0 || meta.permissions().mode() & 0o4000 == 0 {
            return Err(ProbeError(format!("{} is not setuid root", path.display())));
        }
    }
    let out = match std::process::Command::new(path)
        .arg("whoami")
        .stdin(std::process::Stdio::null())
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            return Ok(Report::Holds(format!(
                "exec {}: {}",
                path.display(),
                io_errno_name(&e)
            )));
        }
    };
    let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let child_euid = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("euid="))
        .and_then(|v| v.parse::<u32>().ok());
    match child_euid {
        Some(0) => Ok(Report::Broken(format!(
            "{} ran with {line}",
            path.display()
        ))),
        Some(_) => Ok(Report::Holds(format!(
            "{} ran with {line} (the setuid bit gave nothing)",
            path.display()
        ))),
        None => Err(ProbeError(format!(
            "{} printed {line:?}, status {:?}",
            path.display(),
            out.status
        ))),
    }
}

/// The parent pid of `pid` (field 4 of `/proc/PID/stat`).
fn parent_of(pid: u32) -> Result<u32, ProbeError> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path)
        .map_err(|e| ProbeError(format!("cannot read {path} ({})", io_errno_name(&e))))?;
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok())
        .ok_or_else(|| ProbeError(format!("{path} has no parent pid")))
}

/// The `comm` of `pid`, or `?`.
fn comm_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim_end().to_owned())
        .unwrap_or_else(|_| "?".to_owned())
}

/// `no-other-procs`: `/proc` shows no process but the probe itself and its ancestors (in
/// Tier C: the sandbox's init). Any other pid is a process outside the run.
pub fn no_other_procs() -> ProbeResult {
    let me = std::process::id();
    let mut own = vec![me];
    let mut pid = me;
    loop {
        let parent = parent_of(pid)?;
        if parent == 0 || own.contains(&parent) {
            break;
        }
        own.push(parent);
        pid = parent;
    }
    let listed: Vec<u32> = std::fs::read_dir("/proc")
        .map_err(|e| ProbeError(format!("cannot list /proc ({})", io_errno_name(&e))))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let mut others: Vec<u32> = listed.into_iter().filter(|p| !own.contains(p)).collect();
    others.sort_unstable();
    let own_text: Vec<String> = own
        .iter()
        .map(|p| format!("{p} ({})", comm_of(*p)))
        .collect();
    let own_text = format!("itself and its ancestors: {}", own_text.join(", "));
    Ok(if others.is_empty() {
        Report::Holds(format!("/proc lists only {own_text}"))
    } else {
        let shown: Vec<String> = others
            .iter()
            .take(10)
            .map(|p| format!("{p} ({})", comm_of(*p)))
            .collect();
        Report::Broken(format!(
            "/proc lists {} other processes, e.g. {}; besides {own_text}",
            others.len(),
            shown.join(", ")
        ))
    })
}

/// `proc-env-absent PID NAME...`: none of the variables appears in `/proc/PID/environ`
/// (unreadable counts as absent). Values are never printed.
pub fn proc_env_absent(pid: i32, names: &[String]) -> ProbeResult {
    process_must_exist(pid)?;
    let path = format!("/proc/{pid}/environ");
    let environ = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) => {
            return Ok(Report::Holds(format!("{path}: read {}", io_errno_name(&e))));
        }
    };
    let entries: Vec<&[u8]> = environ
        .split(|b| *b == 0)
        .filter(|e| !e.is_empty())
        .collect();
    let present: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| {
            entries.iter().any(|e| {
                e.strip_prefix(n.as_bytes())
                    .is_some_and(|r| r.first() == Some(&b'='))
            })
        })
        .collect();
    Ok(if present.is_empty() {
        Report::Holds(format!(
            "{path}: read {} bytes ({} variables), none of the {} names",
            environ.len(),
            entries.len(),
            names.len()
        ))
    } else {
        Report::Broken(format!(
            "{path}: read {} bytes; it holds {}",
            environ.len(),
            present.join(", ")
        ))
    })
}

/// `sethostname NAME`: the hostname cannot be changed. Reports the nodename before (what
/// `uname -n` prints); a success is undone at once.
pub fn sethostname(name: &str) -> ProbeResult {
    let before = sys::hostname()?;
    Ok(match sys::sethostname(name) {
        Ok(()) => {
            let after = sys::hostname().unwrap_or_else(|e| e.to_string());
            let restored = match sys::sethostname(&before) {
                Ok(()) => "restored".to_owned(),
                Err(e) => format!("restoring failed: {e}"),
            };
            Report::Broken(format!(
                "nodename={before}; sethostname({name:?}) SUCCEEDED: nodename became {after:?} ({restored})"
            ))
        }
        Err(e) => Report::Holds(format!("nodename={before}; {e}")),
    })
}

/// `comm-write-denied`: writing `/proc/self/comm` (which the kernel allows any process on
/// itself) fails. The probe writes back the name it already has, so a success changes
/// nothing. In Tier C landlock grants `/proc` read-only, so this fails with `EACCES`
/// there and nowhere else: the proof that landlock is on.
pub fn comm_write_denied() -> ProbeResult {
    let comm = std::fs::read_to_string("/proc/self/comm").map_err(|e| {
        ProbeError(format!(
            "cannot read /proc/self/comm ({})",
            io_errno_name(&e)
        ))
    })?;
    let written = std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/self/comm")
        .map_err(|e| format!("open for writing: {}", io_errno_name(&e)))
        .and_then(|mut f| {
            use std::io::Write;
            f.write_all(comm.trim_end().as_bytes())
                .map_err(|e| format!("write: {}", io_errno_name(&e)))
        });
    Ok(match written {
        Ok(()) => Report::Broken(format!(
            "/proc/self/comm: write of {:?} SUCCEEDED",
            comm.trim_end()
        )),
        Err(e) => Report::Holds(format!("/proc/self/comm: {e}")),
    })
}
