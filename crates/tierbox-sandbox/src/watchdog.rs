//! The watchdog: a process that outlives its supervisor to clean up after it.
//!
//! A supervisor killed with SIGKILL cannot kill its runs. Tier C runs die with it (their
//! pid 1 has a parent-death signal and takes the namespace down), and so does a Tier B
//! run's first process; but a Tier B program's descendants that left its process group —
//! a daemon of a background process — used to live on past their lifetime until a later
//! run swept their cgroups. The watchdog is a child forked at the supervisor's start,
//! while it is still single-threaded: it holds the read end of a pipe whose write end only
//! the supervisor holds, so the pipe ends when the supervisor does, however it dies. It
//! then kills everything left in the dead supervisor's run cgroups and removes them
//! (`sweep_orphaned_groups`), and exits.
//!
//! It stays in the supervisor's session (so the supervisor's orphan sweep, which only
//! takes children in other sessions, leaves it alone), ignores the signals a terminal
//! or a process-group `kill` sends, and holds none of the supervisor's descriptors but
//! its end of the pipe (its stdio is `/dev/null`). A run without a cgroup (the `cgroup`
//! layer missing on the host) has nothing the watchdog can find: its stray descendants
//! are the gap.
//!
//! The container backends' containers are not the supervisor's descendants (the engine
//! runs them), so their names carry their supervisor (`tierbox-<pid>.<start>-<run id>`)
//! and the supervisor tells the watchdog, once per engine, which engine it used: a line
//! `E<path>` on the pipe. After the supervisor's death the watchdog kills and removes
//! that engine's containers whose supervisor is gone
//! (`sweep_orphaned_containers`).
//!
//! A Tier B run's bounded `/tmp` is a tmpfs the supervisor mounts in the host's mount
//! namespace (a warm slot holds one for as long as the slot lives). A supervisor killed
//! with SIGKILL cannot unmount it, and nothing else would: the mount would stay on the
//! host, holding its memory, for as long as the host runs (every later mount namespace
//! copies it). The supervisor tells the watchdog each directory it makes such trees in —
//! a line `T<path>` — and after its death the watchdog unmounts and removes the trees
//! there whose supervisor is gone (`launch::sweep_orphaned_tmp`).
//!
//! A supervisor about to exit normally with nothing left — every run group it made
//! removed, no private tmp of its own left, no container engine used — says so
//! ([`release`]: a line `C` on the pipe), and the watchdog then exits at the pipe's end
//! without sweeping: a cold `tierbox run` would otherwise leave a process probing the
//! host's cgroups after every call. A note after `C` cancels it; a supervisor killed
//! before writing it gets the sweep.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::launch::sys;

/// Sweeps after the supervisor's death: the first finds the groups; more catch a process
/// that was forking while the first ran (only while a sweep still finds something).
const SWEEP_ROUNDS: usize = 3;

/// Pause between sweeps.
const SWEEP_PAUSE: Duration = Duration::from_millis(100);

/// Longest the watchdog waits, after its pipe ends, for the supervisor to finish exiting
/// (its descriptors close before it is a zombie and its children are handed on): until
/// then the supervisor still counts as alive and nothing of it would be swept.
const EXIT_WAIT: Duration = Duration::from_secs(5);

/// Pause between looks at whether the supervisor has finished exiting.
const EXIT_POLL: Duration = Duration::from_millis(5);

/// Most bytes the watchdog keeps of what the supervisor wrote (engine lines): a few
/// paths; anything past it is ignored rather than grown without bound.
const NOTES_MAX_BYTES: usize = 16 * 1024;

/// The supervisor's end of the pipe, held for the life of the process.
static PIPE: OnceLock<std::fs::File> = OnceLock::new();

/// What the watchdog was told of: `(kind, path)` — [`ENGINE`] lines ([`note_engine`]) and
/// [`TMP_BASE`] lines ([`note_tmp_base`]).
static NOTED: Mutex<Vec<(u8, PathBuf)>> = Mutex::new(Vec::new());

/// The line kind naming a container engine the supervisor used.
const ENGINE: u8 = b'E';

/// The line kind naming a directory the supervisor makes private tmp trees in.
const TMP_BASE: u8 = b'T';

/// Starts the watchdog for this process. Must be called while the process has a single
/// thread (before any runtime or thread pool starts): otherwise it refuses, naming the
/// thread count, and starts nothing. A second call is a no-op.
pub fn start() -> std::io::Result<()> {
    if PIPE.get().is_some() {
        return Ok(());
    }
    let threads = thread_count()?;
    if threads != 1 {
        return Err(std::io::Error::other(format!(
            "the watchdog must be started while the process has one thread ({threads} now)"
        )));
    }
    let (read, write) = sys::pipe_cloexec()?;
    match sys::fork_single_threaded()? {
        None => {
            drop(write);
            sys::detach_descriptors(read.as_raw_fd());
            watch(read)
        }
        Some(_) => {
            drop(read);
            // Held for the life of the process: its closing is the watchdog's signal.
            let _ = PIPE.set(std::fs::File::from(write));
            Ok(())
        }
    }
}

/// Whether this process has a watchdog.
pub fn is_running() -> bool {
    PIPE.get().is_some()
}

/// Tells the watchdog (when there is one) that this process runs containers with the
/// engine at `engine`, once per engine.
pub(crate) fn note_engine(engine: &Path) {
    note(ENGINE, engine);
}

/// Tells the watchdog (when there is one) that this process makes private tmp trees under
/// `base`, so that after its death the watchdog unmounts and removes those it left. Once
/// per base.
pub(crate) fn note_tmp_base(base: &Path) {
    note(TMP_BASE, base);
}

/// Writes the line `<kind><path>` to the watchdog, once per `(kind, path)`.
fn note(kind: u8, path: &Path) {
    let Some(mut pipe) = PIPE.get() else { return };
    let mut noted = NOTED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if noted.iter().any(|(k, p)| *k == kind && p == path) {
        return;
    }
    let mut line = vec![kind];
    line.extend_from_slice(path.as_os_str().as_bytes());
    line.push(b'\n');
    // One short write, far below the pipe's capacity: it does not block.
    if pipe.write_all(&line).is_ok() {
        noted.push((kind, path.to_path_buf()));
    }
}

/// Tells the watchdog (when there is one) that this process is about to exit with nothing
/// for it to clean up, when that is so: no run group of this process is left
/// (`linux::cgroup`), no private tmp tree of this process is left under a base it noted,
/// and no container engine was used. The last thing a process that starts no more runs
/// does; returns whether the watchdog was told.
pub fn release() -> bool {
    let Some(mut pipe) = PIPE.get() else {
        return false;
    };
    let noted = NOTED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let tmp_left = noted
        .iter()
        .any(|(kind, base)| *kind == TMP_BASE && crate::launch::own_tmp_left(base));
    if noted.iter().any(|(kind, _)| *kind == ENGINE)
        || tmp_left
        || crate::linux::cgroup::dirs_left() != 0
    {
        return false;
    }
    pipe.write_all(CLEAN_EXIT).is_ok()
}

/// The line [`release`] writes.
const CLEAN_EXIT: &[u8] = b"C\n";

/// Whether the supervisor's last note was [`CLEAN_EXIT`].
fn released(notes: &[u8]) -> bool {
    notes.ends_with(CLEAN_EXIT)
        && (notes.len() == CLEAN_EXIT.len() || notes[notes.len() - CLEAN_EXIT.len() - 1] == b'\n')
}

fn watch(read: std::os::fd::OwnedFd) -> ! {
    sys::ignore_termination_signals();
    // Forked by the supervisor: its parent, until the supervisor has exited.
    let supervisor = rustix::process::getppid();
    let mut pipe = std::fs::File::from(read);
    let mut notes = Vec::new();
    let mut buf = [0u8; 512];
    // Returns at EOF, when the supervisor is gone.
    while let Ok(n) = pipe.read(&mut buf) {
        if n == 0 {
            break;
        }
        if notes.len() + n <= NOTES_MAX_BYTES {
            notes.extend_from_slice(&buf[..n]);
        }
    }
    if released(&notes) {
        std::process::exit(0)
    }
    // The pipe ends while the supervisor is still exiting; the kernel hands its children
    // on (a new parent) only after that, when it is a zombie or gone — and only then do
    // the sweeps below take what it owned as orphaned.
    let waiting = std::time::Instant::now();
    while rustix::process::getppid() == supervisor && waiting.elapsed() < EXIT_WAIT {
        std::thread::sleep(EXIT_POLL);
    }
    for round in 0..SWEEP_ROUNDS {
        if crate::launch::sweep_orphaned_groups() == 0 && round > 0 {
            break;
        }
        std::thread::sleep(SWEEP_PAUSE);
    }
    // After the groups' processes are gone: nothing of the run holds its tmpfs then.
    for base in noted(&notes, TMP_BASE) {
        crate::launch::sweep_orphaned_tmp(&base);
    }
    for engine in noted(&notes, ENGINE) {
        crate::container::sweep_orphaned_containers(&engine);
    }
    std::process::exit(0)
}

/// The absolute paths named by `<kind><path>` lines, each once.
fn noted(notes: &[u8], kind: u8) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for line in notes.split(|b| *b == b'\n') {
        if let Some(path) = line.strip_prefix(&[kind]) {
            let path = PathBuf::from(std::ffi::OsStr::from_bytes(path));
            if path.is_absolute() && !out.contains(&path) {
                out.push(path);
            }
        }
    }
    out
}

fn thread_count() -> std::io::Result<usize> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| std::io::Error::other("no Threads line in /proc/self/status"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_a_last_clean_exit_line_releases() {
        use super::released;
        assert!(released(b"C\n"));
        assert!(released(b"E/usr/bin/podman\nC\n"));
        assert!(!released(b""));
        assert!(!released(b"C\nE/usr/bin/podman\n"));
        assert!(!released(b"E/usr/bin/podmanC\n"));
        assert!(!released(b"C"));
    }

    #[test]
    fn noted_lines_are_read_once_each_by_kind_and_only_absolute() {
        use std::path::PathBuf;
        let notes = b"E/usr/bin/podman\nT/var/lib/tierbox/tmp\nE/usr/bin/podman\nErelative\n\
                      X/usr/bin/docker\nTrelative\nE/usr/bin/docker";
        assert_eq!(
            super::noted(notes, super::ENGINE),
            [
                PathBuf::from("/usr/bin/podman"),
                PathBuf::from("/usr/bin/docker")
            ]
        );
        assert_eq!(
            super::noted(notes, super::TMP_BASE),
            [PathBuf::from("/var/lib/tierbox/tmp")]
        );
    }
}
