//! The watchdog: a process that outlives its supervisor to clean up after it.
//!
//! A supervisor killed with SIGKILL cannot kill its runs. Tier C runs die with it (their
//! pid 1 has a parent-death signal and takes the namespace down), and so does a Tier B
//! run's first process; but a Tier B program's descendants that left its process group —
//! a daemon of a background process — used to live on past their lifetime until a later
//! run swept their cgroups. The watchdog is a child started with the supervisor
//! ([`start`]): it holds the read end of a pipe whose write end only the supervisor holds,
//! so the pipe ends when the supervisor does, however it dies. It then kills everything
//! left in the dead supervisor's run cgroups and removes them (`sweep_orphaned_groups`),
//! and exits.
//!
//! While it waits it shares the supervisor's memory (`clone(CLONE_VM)`, `sys.rs`), so a
//! one-shot `tierbox run` pays no copy of its pages for it; to sweep it `exec`s this
//! program's own image, whose `main` must therefore call [`entry`] first: that is where
//! the sweep runs. [`start`] refuses in a program that did not.
//!
//! It stays in the supervisor's session (so the supervisor's orphan sweep, which only
//! takes children in other sessions, leaves it alone), blocks every signal while it waits
//! and ignores the ones a terminal or a process-group `kill` sends while it sweeps, and
//! holds none of the supervisor's descriptors but its end of the pipe (its stdio is
//! `/dev/null`). A run without a cgroup (the `cgroup`
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

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

#[allow(unsafe_code)]
mod sys;

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

/// The argument (`argv[1]`) with which the watchdog execs this program's image to sweep:
/// [`entry`] recognises it.
pub const SWEEP_ARG: &str = "--tierbox-watchdog-sweep";

/// [`SWEEP_ARG`] for `execve`.
const SWEEP_ARG_C: &std::ffi::CStr = c"--tierbox-watchdog-sweep";

/// The supervisor's end of the pipe, held for the life of the process.
static PIPE: OnceLock<std::fs::File> = OnceLock::new();

/// What the watchdog's child reads (`sys::ChildSpec`), written once before its clone.
static CHILD: OnceLock<sys::ChildSpec> = OnceLock::new();

/// Whether this program's `main` called [`entry`].
static ENTERED: AtomicBool = AtomicBool::new(false);

/// What the watchdog was told of: `(kind, path)` — [`ENGINE`] lines ([`note_engine`]) and
/// [`TMP_BASE`] lines ([`note_tmp_base`]).
static NOTED: Mutex<Vec<(u8, PathBuf)>> = Mutex::new(Vec::new());

/// The line kind naming a container engine the supervisor used.
const ENGINE: u8 = b'E';

/// The line kind naming a directory the supervisor makes private tmp trees in.
const TMP_BASE: u8 = b'T';

/// The first call of the `main` of every program that may [`start`] a watchdog: in a
/// process the watchdog exec'd to sweep (`argv[1]` is [`SWEEP_ARG`]) it sweeps and exits;
/// otherwise it returns at once, and [`start`] may be used.
///
/// ```no_run
/// // First thing in main:
/// tierbox_sandbox::watchdog::entry();
/// tierbox_sandbox::watchdog::start().ok();
/// // … the supervisor's work …
/// ```
pub fn entry() {
    ENTERED.store(true, Ordering::Relaxed);
    let mut args = std::env::args_os();
    if args.nth(1).as_deref() != Some(std::ffi::OsStr::new(SWEEP_ARG)) {
        return;
    }
    let supervisor = args
        .next()
        .and_then(|p| p.to_str()?.parse::<i32>().ok())
        .filter(|p| *p > 0);
    let notes = args.next().map(OsStringExt::into_vec).unwrap_or_default();
    match supervisor {
        Some(pid) => sweep(pid, &notes),
        // Not started by a watchdog: nothing to sweep for.
        None => std::process::exit(2),
    }
}

/// Starts the watchdog for this process; a second call is a no-op. Refuses (and starts
/// nothing) when this program's `main` did not call [`entry`] first, since the watchdog
/// sweeps by running this program's image.
pub fn start() -> std::io::Result<()> {
    if PIPE.get().is_some() {
        return Ok(());
    }
    if !ENTERED.load(Ordering::Relaxed) {
        return Err(std::io::Error::other(
            "the watchdog sweeps by running this program again: its main must call \
             tierbox_sandbox::watchdog::entry() (tierbox_runner::host::watchdog_entry()) first",
        ));
    }
    let (read, write) = crate::launch::sys::pipe_cloexec()?;
    // Above stdin, stdout and stderr, which the child points at /dev/null.
    let read = crate::launch::pipes::dup_at_least(read.as_fd(), 3)?;
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    let spec = CHILD.get_or_init(|| sys::ChildSpec {
        pipe: read.as_raw_fd(),
        null: null.as_raw_fd(),
        supervisor: sys::decimal_pid(i32::try_from(std::process::id()).unwrap_or(0)),
    });
    if spec.pipe != read.as_raw_fd() || spec.null != null.as_raw_fd() {
        // A start that failed after CHILD was written: its numbers are not these.
        return Err(std::io::Error::other(
            "the watchdog failed to start before in this process",
        ));
    }
    sys::clone_watchdog(spec)?;
    // The child has its own copies of both.
    drop((read, null));
    // Held for the life of the process: its closing is the watchdog's signal.
    let _ = PIPE.set(std::fs::File::from(write));
    Ok(())
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

/// The sweeper (a process the watchdog exec'd with [`SWEEP_ARG`]): waits for the
/// supervisor `supervisor` to finish exiting, then sweeps what it left, as `notes` (what
/// it wrote on the pipe) say, and exits.
fn sweep(supervisor: i32, notes: &[u8]) -> ! {
    sys::sweeper_signals();
    // The pipe ends while the supervisor is still exiting; the kernel hands its children
    // on (a new parent) only after that, when it is a zombie or gone — and only then do
    // the sweeps below take what it owned as orphaned.
    let waiting = std::time::Instant::now();
    let parent = || rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
    while parent() == supervisor && waiting.elapsed() < EXIT_WAIT {
        std::thread::sleep(EXIT_POLL);
    }
    for round in 0..SWEEP_ROUNDS {
        if crate::launch::sweep_orphaned_groups() == 0 && round > 0 {
            break;
        }
        std::thread::sleep(SWEEP_PAUSE);
    }
    // After the groups' processes are gone: nothing of the run holds its tmpfs then.
    for base in noted(notes, TMP_BASE) {
        crate::launch::sweep_orphaned_tmp(&base);
    }
    for engine in noted(notes, ENGINE) {
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

#[cfg(test)]
mod tests {
    /// This test program's main does not call `entry`: a watchdog would exec the test
    /// binary to sweep, so none is started.
    #[test]
    fn no_watchdog_starts_in_a_program_whose_main_did_not_call_entry() {
        let err = super::start().expect_err("started without entry");
        assert!(err.to_string().contains("watchdog::entry()"), "{err}");
        assert!(!super::is_running());
    }

    #[test]
    fn the_supervisor_pid_is_passed_in_decimal_with_its_terminator() {
        for (pid, text) in [
            (1, "1"),
            (42, "42"),
            (4_194_304, "4194304"),
            (i32::MAX, "2147483647"),
        ] {
            let out = super::sys::decimal_pid(pid);
            let end = out.iter().position(|b| *b == 0).expect("a NUL");
            assert_eq!(&out[..end], text.as_bytes());
        }
    }

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
