//! `tierbox-probe`: one subcommand per sandbox guarantee, run *inside* the sandbox.
//!
//! Each probe tries to break one guarantee, prints one line saying what it tried and what
//! happened, and exits with:
//!
//! - `0` and a line starting `HOLDS` — every attempt was stopped;
//! - `1` and a line starting `BROKEN` — some attempt succeeded;
//! - `2` and a line starting `ERROR` — the probe itself could not run (bad arguments, a
//!   target that does not exist, an unexpected failure), which proves nothing.
//!
//! A few probes only set a scene that the *test* then judges from outside (`flood`,
//! `daemon`, `grandchild-holds-stdout`, `hold`, `whoami`, `print-env`, `leave-file`) and print
//! `DONE`, exit 0; `memory`,
//! `cpu` and `fsize --signal` expect to be killed, and print `BROKEN` if they are not.
//!
//! Path arguments may be written `env:NAME`, meaning "the path in environment variable
//! NAME". Tests use it for paths outside the workspace, which the runner's advisory
//! argument check would otherwise reject before the kernel layers are ever reached.
//!
//! The binary is single-threaded on purpose: the process probes fork (see `sys.rs`).

mod cgroup;
mod devices;
mod fs;
mod knobs;
mod leave;
mod net;
mod privilege;
mod process;
mod stdio;
mod surface;
mod sys;

use std::fmt;
use std::path::PathBuf;
use std::process::ExitCode;

/// What a probe found.
#[derive(Debug)]
pub enum Report {
    /// Every attempt was stopped.
    Holds(String),
    /// Some attempt succeeded.
    Broken(String),
    /// A scene-setting probe finished; the caller judges the outcome.
    Done(String),
}

/// The probe could not run; its result proves nothing.
#[derive(Debug)]
pub struct ProbeError(pub String);

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<sys::SysError> for ProbeError {
    fn from(e: sys::SysError) -> Self {
        Self(e.to_string())
    }
}

/// The result of one probe.
pub type ProbeResult = Result<Report, ProbeError>;

const USAGE: &str = "\
usage: tierbox-probe PROBE [ARGS]
  read-denied PATH              reading PATH must fail, also via a symlink, a hard link and
                                /proc/self/root (PATH must exist)
  no-content PATH NEEDLE        nothing read of PATH (directly, via a symlink, a hard link or
                                /proc/self/root) may contain NEEDLE (a directory: no entry NEEDLE);
                                PATH may be absent
  write-denied PATH             append/truncate/move out, and create/mkdir/symlink/rename/link
                                into PATH (a directory, or a file and its directory) must fail
  leave-file PATH               create PATH and say whether that worked (the caller judges)
  mkdirs PATH...                create each directory with its parents (the caller judges)
  disk-bomb DIR BYTES           writing BYTES in 1 MiB files to DIR must fail with ENOSPC first
  replace-denied PATH           PATH (relative, existing) cannot be written, moved, removed,
                                replaced or exchanged, nor swapped by renaming an ancestor
  create-denied PATH            PATH (relative, missing) cannot be created, as a directory or a
                                file, nor by renaming or removing an existing ancestor
  chmod-denied PATH             chmod of PATH (to its current mode) must fail
  env-absent NAME...            none of the variables may be set
  print-env NAME                print NAME=VALUE on stdout and stderr
  fd-closed N                   fd N (and every fd above 2) must be closed
  no-caps                       all capability sets empty, NoNewPrivs 1, Seccomp 2
  fork-bomb LIMIT               spawning must fail before the run has more than LIMIT processes
  fsize BYTES [--signal] [FILE] a file cannot grow past BYTES (SIGXFSZ ignored unless --signal)
  nofile N                      opening files must fail with EMFILE before fd N
  daemon PIDFILE                leave a setsid double-forked daemon; write 'PID START' to PIDFILE
  flood BYTES                   write BYTES to stdout in 1 MiB writes (report on stderr)
  stdin-closed                  stdin must be at end of file at once
  hold PIDFILE [--ignore-term]  fork a child, write 'PID START CHILD START' to PIDFILE, sleep 60 s
                                (--ignore-term: both ignore SIGTERM)
  grandchild-holds-stdout [--setsid]
                                leave a child holding stdout for 30 s, print its pid
  no-net PORT                   inet/inet6/unix sockets and a connect to 127.0.0.1:PORT must fail
  no-reach TCP UDP NAME         tcp connect to 127.0.0.1:TCP, a udp echo from 127.0.0.1:UDP and
                                a connect to the abstract unix socket @NAME must all fail
  no-ptrace                     PTRACE_TRACEME and process_vm_readv must fail
  no-userns                     unshare(CLONE_NEWUSER) and clone(CLONE_NEWUSER) must fail
  no-kernel-surface             io_uring, userfaultfd, keyctl, bpf, perf_event_open,
                                personality changes and name_to_handle_at must fail
  no-mount                      mount(tmpfs), fsopen, open_tree and unshare(CLONE_NEWNS) must fail
  kernel-knobs                  no sysctl can be written (printk_ratelimit_burst is written back
                                with its own value); core_pattern, drop_caches and sysrq-trigger
                                must not open for writing (nothing is written to them)
  no-host-ipc KEY               the host's SysV shm segment, message queue and semaphore set under
                                KEY cannot be found
  proc-masked                   /proc/kcore, keys, timer_list, sched_debug and interrupts must read
                                as empty or not at all
  fs-ops TAG (d:DIR|f:FILE)...  tries list, create, delete and rename in each DIR and read and write
                                of each FILE, and reports each result (the caller checks the host)
  plant-setid DIR READY RELEASE try every route to a setuid/setgid file or a device node in
                                DIR, create READY, wait for RELEASE (the caller checks the host)
  shm-pty TAG                   creates, maps and removes a file TAG in /dev/shm, and opens a
                                pseudo-terminal pair and sends a line through it; reports each
                                step (the caller checks the host)
  no-secret-in-cmdlines         no /proc/PID/cmdline this process can read may hold the value of
                                the variable TIERBOX_PROBE_NEEDLE (the needle is never in argv)
  no-signal-outside PID         kill(PID, 0) must fail with EPERM
  no-tiocsti                    TIOCSTI on fds 0-2 and /dev/tty must fail
  proc-environ PID              /proc/PID/environ, mem, fd/N links, cwd and root must be unreachable
  proc-env-absent PID NAME...   none of the variables may appear in /proc/PID/environ
  no-other-procs                /proc must list no process but the probe and its ancestors
  sethostname NAME              sethostname(NAME) must fail (prints the nodename)
  comm-write-denied             writing /proc/self/comm must fail
  cgroup-escape                 cgroup.procs of the own and root cgroups must not open for writing
  memory BYTES                  allocating and touching 2 x BYTES must not succeed
  cpu MS                        using 2 x MS of CPU time must not succeed
  no-core                       RLIMIT_CORE is 0 and cannot be raised
  setuid-exec PATH              a setuid-root copy of this probe must not run with euid 0
  whoami                        print uids, gids and groups (run by setuid-exec)
PATH and NEEDLE arguments may be env:NAME (the value of variable NAME).";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((probe, rest)) = args.split_first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let result = run(probe, rest);
    let (status, line) = match result {
        Ok(Report::Holds(d)) => (0, format!("HOLDS {probe}: {d}")),
        Ok(Report::Done(d)) => (0, format!("DONE {probe}: {d}")),
        Ok(Report::Broken(d)) => (1, format!("BROKEN {probe}: {d}")),
        Err(e) => (2, format!("ERROR {probe}: {e}")),
    };
    // `flood` owns stdout: its byte count is what the caller checks.
    if probe == "flood" {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
    ExitCode::from(status)
}

fn run(probe: &str, args: &[String]) -> ProbeResult {
    let arg = |i: usize| {
        args.get(i)
            .map(String::as_str)
            .ok_or_else(|| ProbeError(format!("missing argument {}\n{USAGE}", i + 1)))
    };
    match probe {
        "read-denied" => fs::read_denied(&path_arg(arg(0)?)?),
        "no-content" => fs::no_content(&path_arg(arg(0)?)?, &text_arg(arg(1)?)?),
        "write-denied" => fs::write_denied(&path_arg(arg(0)?)?),
        "leave-file" => fs::leave_file(&path_arg(arg(0)?)?),
        "mkdirs" => fs::mkdirs(args),
        "disk-bomb" => fs::disk_bomb(&path_arg(arg(0)?)?, number(arg(1)?)?),
        "replace-denied" => fs::replace_denied(&path_arg(arg(0)?)?),
        "create-denied" => fs::create_denied(&path_arg(arg(0)?)?),
        "chmod-denied" => fs::chmod_denied(&path_arg(arg(0)?)?),
        "fchmod-denied" => fs::fchmod_denied(&path_arg(arg(0)?)?),
        "fsize" => {
            let signal = args.iter().any(|a| a == "--signal");
            let file = args
                .iter()
                .skip(1)
                .find(|a| !a.starts_with("--"))
                .map(|a| path_arg(a))
                .transpose()?;
            fs::fsize(number(arg(0)?)?, signal, file)
        }
        "env-absent" if !args.is_empty() => stdio::env_absent(args),
        "env-absent" => Err(ProbeError(format!("missing argument 1\n{USAGE}"))),
        "print-env" => stdio::print_env(arg(0)?),
        "fd-closed" => stdio::fd_closed(number(arg(0)?)?),
        "flood" => stdio::flood(number(arg(0)?)?),
        "stdin-closed" => stdio::stdin_closed(),
        "no-caps" => privilege::no_caps(),
        "no-ptrace" => privilege::no_ptrace(),
        "no-userns" => privilege::no_userns(),
        "no-signal-outside" => privilege::no_signal_outside(number(arg(0)?)?),
        "no-tiocsti" => privilege::no_tiocsti(),
        "proc-environ" => privilege::proc_environ(number(arg(0)?)?),
        "proc-env-absent" if args.len() >= 2 => {
            privilege::proc_env_absent(number(arg(0)?)?, &args[1..])
        }
        "proc-env-absent" => Err(ProbeError(format!("missing arguments\n{USAGE}"))),
        "no-other-procs" => privilege::no_other_procs(),
        "sethostname" => privilege::sethostname(arg(0)?),
        "comm-write-denied" => privilege::comm_write_denied(),
        "fork-bomb" => process::fork_bomb(number(arg(0)?)?),
        "nofile" => process::nofile(number(arg(0)?)?),
        "daemon" => process::daemon(&path_arg(arg(0)?)?),
        "grandchild-holds-stdout" => {
            process::grandchild_holds_stdout(args.iter().any(|a| a == "--setsid"))
        }
        "no-net" => net::no_net(number(arg(0)?)?),
        "no-reach" => net::no_reach(number(arg(0)?)?, number(arg(1)?)?, arg(2)?),
        "cgroup-escape" => cgroup::cgroup_escape(),
        "no-kernel-surface" => surface::no_kernel_surface(),
        "no-mount" => surface::no_mount(),
        "kernel-knobs" => knobs::kernel_knobs(),
        "proc-masked" => knobs::proc_masked(),
        "no-host-ipc" => knobs::no_host_ipc(number(arg(0)?)?),
        "no-secret-in-cmdlines" => process::no_secret_in_cmdlines(),
        "fs-ops" => fs::fs_ops(arg(0)?, args.get(1..).unwrap_or_default()),
        "plant-setid" => leave::plant_setid(
            &path_arg(arg(0)?)?,
            &path_arg(arg(1)?)?,
            &path_arg(arg(2)?)?,
        ),
        "shm-pty" => devices::shm_pty(arg(0)?),
        "memory" => process::memory(number(arg(0)?)?),
        "cpu" => process::cpu(number(arg(0)?)?),
        "hold" => process::hold(
            &path_arg(arg(0)?)?,
            args.iter().any(|a| a == "--ignore-term"),
        ),
        "no-core" => privilege::no_core(),
        "setuid-exec" => privilege::setuid_exec(&path_arg(arg(0)?)?),
        "whoami" => privilege::whoami(),
        "help" | "--help" | "-h" => Err(ProbeError(USAGE.to_owned())),
        other => Err(ProbeError(format!("unknown probe {other:?}\n{USAGE}"))),
    }
}

/// A decimal argument.
fn number<T: std::str::FromStr>(text: &str) -> Result<T, ProbeError> {
    text.parse()
        .map_err(|_| ProbeError(format!("{text:?} is not a valid number")))
}

/// A text argument: the text itself, or with `env:NAME` the value of variable `NAME`.
fn text_arg(text: &str) -> Result<String, ProbeError> {
    match text.strip_prefix("env:") {
        Some(name) => std::env::var(name).map_err(|_| {
            ProbeError(format!(
                "environment variable {name} (named by {text:?}) is not set"
            ))
        }),
        None => Ok(text.to_owned()),
    }
}

/// A path argument: the text itself, or with `env:NAME` the value of variable `NAME`.
fn path_arg(text: &str) -> Result<PathBuf, ProbeError> {
    match text.strip_prefix("env:") {
        Some(name) => std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .ok_or_else(|| {
                ProbeError(format!(
                    "environment variable {name} (named by {text:?}) is not set"
                ))
            }),
        None => Ok(PathBuf::from(text)),
    }
}
