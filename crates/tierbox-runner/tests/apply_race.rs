//! `changes apply` raced by a swapper: while a kept change set is applied (as root), a
//! process with write access to the workspace flips, in a tight loop with random pauses,
//!
//! - a directory whose mode the change set changes ↔ a symlink to a file outside,
//! - a file the change set rewrites ↔ a symlink to a file outside,
//! - a directory whose mode the change set changes ↔ a hard link to a file outside,
//!
//! each pair with `renameat2(RENAME_EXCHANGE)`. The swapper is the workspace's
//! unprivileged owner in one test and a direct-mode Tier C run in the same workspace in
//! the other. After every attempt (the swapper paused and the names put back), no byte,
//! mode or owner of any file outside the workspace has changed, and the apply either did
//! exactly what it verified or was refused with nothing applied and nothing left behind.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use tierbox_runner::review::{ChangeStore, ReviewError};

/// Apply attempts per test.
const ATTEMPTS: usize = 500;

/// The most a test may take (the attempts take a few seconds on an idle machine).
const TIME_BOUND: Duration = Duration::from_secs(240);

/// The uid and gid of the unprivileged workspace owner.
const NOBODY: u32 = 65534;

/// The swapper, in Python (it runs inside the sandbox as well): flips the pairs until
/// `.ctl/stop` appears; while `.ctl/pause` exists it puts every pair back in its first
/// arrangement, says so with `.ctl/paused` and waits.
const SWAPPER: &str = r#"
import ctypes, os, random, stat, time
libc = ctypes.CDLL(None, use_errno=True)
pairs = [(b"d", b"d.alt", stat.S_ISDIR), (b"f", b"f.alt", stat.S_ISREG), (b"h", b"h.alt", stat.S_ISDIR)]
def flip(a, b):
    libc.renameat2(-100, a, -100, b, 2)
def normal():
    for a, b, right in pairs:
        try:
            if not right(os.lstat(a).st_mode):
                flip(a, b)
        except FileNotFoundError:
            pass
open(".ctl/ready", "w").close()
while not os.path.exists(".ctl/stop"):
    if os.path.exists(".ctl/pause"):
        normal()
        open(".ctl/paused", "w").close()
        while os.path.exists(".ctl/pause"):
            time.sleep(0.0002)
        os.unlink(".ctl/paused")
        time.sleep(random.random() * 0.002)
        continue
    a, b, _ = random.choice(pairs)
    for _ in range(random.randrange(1, 40)):
        flip(a, b)
    time.sleep(random.random() * 0.001)
"#;

struct Race {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    upper: PathBuf,
    outside: PathBuf,
    store: ChangeStore,
    _state: tempfile::TempDir,
}

/// `(name, content, mode, uid)` of every file outside the workspace.
fn outside_snapshot(dir: &Path) -> Vec<(String, Vec<u8>, u32, u32)> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let meta = std::fs::symlink_metadata(e.path()).unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
                meta.mode() & 0o7777,
                meta.uid(),
            )
        })
        .collect();
    out.sort();
    out
}

fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
}

impl Race {
    /// A workspace owned by `owner` with the three pairs, and a change set's upper layer.
    fn new(owner: u32) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let ws = dir.path().join("ws");
        let upper = dir.path().join("upper");
        let outside = dir.path().join("outside");
        for d in [&ws, &upper, &outside] {
            std::fs::create_dir(d).unwrap();
        }
        for (i, name) in ["x1", "x2", "x3"].iter().enumerate() {
            let path = outside.join(name);
            std::fs::write(&path, format!("secret {i}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        std::fs::create_dir(ws.join("d")).unwrap();
        std::fs::write(ws.join("d/inner"), "inner\n").unwrap();
        std::os::unix::fs::symlink(outside.join("x1"), ws.join("d.alt")).unwrap();
        std::os::unix::fs::symlink(outside.join("x2"), ws.join("f.alt")).unwrap();
        std::fs::create_dir(ws.join("h")).unwrap();
        std::fs::hard_link(outside.join("x3"), ws.join("h.alt")).unwrap();
        std::fs::create_dir(ws.join(".ctl")).unwrap();
        for p in ["", "d", "d/inner", "d.alt", "f.alt", "h", ".ctl"] {
            chown(&ws.join(p), owner);
        }
        std::fs::create_dir(upper.join("d")).unwrap();
        std::fs::create_dir(upper.join("h")).unwrap();
        std::fs::write(upper.join("f"), "new\n").unwrap();
        for p in ["d", "h", "f"] {
            let mode = if p == "f" { 0o644 } else { 0o755 };
            std::fs::set_permissions(upper.join(p), std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let state = tempfile::tempdir().unwrap();
        let race = Self {
            store: ChangeStore::new(state.path()),
            _state: state,
            _dir: dir,
            ws,
            upper,
            outside,
        };
        race.reset(owner);
        race
    }

    /// The workspace as the run started from it (the swapper paused).
    fn reset(&self, owner: u32) {
        for d in ["d", "h"] {
            std::fs::set_permissions(self.ws.join(d), std::fs::Permissions::from_mode(0o700))
                .unwrap();
        }
        let f = self.ws.join("f");
        std::fs::write(&f, "old\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        chown(&f, owner);
    }

    fn ctl(&self, name: &str) -> PathBuf {
        self.ws.join(".ctl").join(name)
    }

    fn wait_for(&self, name: &str, present: bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.ctl(name).exists() != present {
            assert!(
                Instant::now() < deadline,
                "the swapper did not {} .ctl/{name}",
                if present { "make" } else { "remove" }
            );
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    fn pause(&self) {
        std::fs::write(self.ctl("pause"), "").unwrap();
        self.wait_for("paused", true);
    }

    fn resume(&self) {
        std::fs::remove_file(self.ctl("pause")).unwrap();
        self.wait_for("paused", false);
    }

    /// Runs the attempts against the swapper already started; returns (applied, refused).
    fn attempts(&self, owner: u32) -> (usize, usize) {
        self.wait_for("ready", true);
        let outside = outside_snapshot(&self.outside);
        let started = Instant::now();
        let (mut applied, mut refused) = (0, 0);
        for attempt in 0..ATTEMPTS {
            assert!(
                started.elapsed() < TIME_BOUND,
                "{attempt} attempts in {TIME_BOUND:?}"
            );
            self.pause();
            self.reset(owner);
            let run_id = format!("{:032x}", attempt + 1);
            self.store
                .keep(
                    &run_id,
                    &self.upper,
                    &self.ws,
                    SystemTime::now() + Duration::from_secs(3600),
                    &tierbox_runner::review::Keeping {
                        owner: "uid:0",
                        keep_for: Duration::from_secs(3600),
                        caps: tierbox_runner::review::KeepCaps::default(),
                    },
                )
                .changes
                .unwrap();
            self.resume();
            let result = self.store.apply(&run_id, None, false);
            self.pause();
            assert_eq!(
                outside_snapshot(&self.outside),
                outside,
                "attempt {attempt}: a file outside the workspace changed ({result:?})"
            );
            let leftovers: Vec<_> = std::fs::read_dir(&self.ws)
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".tierbox-apply-"))
                .collect();
            assert!(
                leftovers.is_empty(),
                "attempt {attempt}: {leftovers:?} left ({result:?})"
            );
            let state = (
                mode_of(&self.ws.join("d")),
                mode_of(&self.ws.join("h")),
                std::fs::read_to_string(self.ws.join("f")).unwrap(),
            );
            assert_eq!(
                std::fs::read_to_string(self.ws.join("d/inner")).unwrap(),
                "inner\n"
            );
            match result {
                Ok(done) => {
                    assert_eq!(done.staging_left, None);
                    assert_eq!(
                        state,
                        (0o755, 0o755, "new\n".to_owned()),
                        "attempt {attempt}: applied, but not as verified"
                    );
                    assert_eq!(
                        std::fs::symlink_metadata(self.ws.join("f")).unwrap().uid(),
                        owner
                    );
                    applied += 1;
                }
                Err(e) => {
                    assert!(
                        !matches!(e, ReviewError::RollbackIncomplete { .. }),
                        "attempt {attempt}: {e}"
                    );
                    assert_eq!(
                        state,
                        (0o700, 0o700, "old\n".to_owned()),
                        "attempt {attempt}: refused ({e}), but something was applied"
                    );
                    self.store.discard(&run_id).unwrap();
                    refused += 1;
                }
            }
            self.resume();
        }
        std::fs::write(self.ctl("stop"), "").unwrap();
        eprintln!(
            "{ATTEMPTS} attempts in {:?}: {applied} applied, {refused} refused",
            started.elapsed()
        );
        (applied, refused)
    }
}

fn check_counts((applied, refused): (usize, usize)) {
    assert!(
        applied > 0 && refused > 0,
        "the swapper must both let applies through and race them: {applied} applied, {refused} refused"
    );
}

#[test]
fn apply_raced_by_the_unprivileged_workspace_owner_touches_nothing_outside() {
    use std::os::unix::process::CommandExt;
    let race = Race::new(NOBODY);
    let mut swapper = std::process::Command::new("python3")
        .args(["-c", SWAPPER])
        .current_dir(&race.ws)
        .uid(NOBODY)
        .gid(NOBODY)
        .spawn()
        .expect("python3 runs the swapper");
    let counts = race.attempts(NOBODY);
    let status = swapper.wait().unwrap();
    assert!(status.success(), "the swapper failed: {status}");
    check_counts(counts);
}

#[test]
fn apply_raced_by_a_direct_mode_sandboxed_run_touches_nothing_outside() {
    let facts = tierbox_sandbox::probe::host_facts();
    if let Err(e) = tierbox_sandbox::select::tier_available(tierbox_policy::Tier::C, facts) {
        tierbox_test_support::skip(
            "apply_raced_by_a_direct_mode_sandboxed_run_touches_nothing_outside",
            &e.to_string(),
        );
        return;
    }
    let race = Race::new(0);
    let ws = race.ws.clone();
    let swapper = std::thread::spawn(move || {
        let mut policy = tierbox_policy::Policy::builtin_default();
        policy.exec.allowed_executables = vec!["python3".to_owned()];
        policy.exec.allow_interpreters = true;
        policy.exec.allow_eval = true;
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(
                tierbox_runner::Sandbox::command("python3")
                    .args(["-c", SWAPPER])
                    .policy(policy)
                    .working_dir(ws)
                    .tier(tierbox_policy::TierRequest::C)
                    .timeout(TIME_BOUND)
                    .execute(),
            )
    });
    let counts = race.attempts(0);
    let outcome = swapper.join().unwrap().expect("the sandboxed swapper ran");
    assert_eq!(
        outcome.exit_code,
        Some(0),
        "the sandboxed swapper failed: {}",
        outcome.stderr.text
    );
    check_counts(counts);
}
