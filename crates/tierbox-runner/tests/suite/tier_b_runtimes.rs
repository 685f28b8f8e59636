//! Common runtimes in Tier B under a root supervisor, which gives the run a private
//! `/tmp` and `/dev/shm` and keeps uid 0 for a root-owned workspace: POSIX semaphores,
//! programs writing `/tmp` directly, and tools restoring modes and owners (`tar -x`,
//! `cp -a`, `install -m`). Each test skips with a printed reason without root or Tier B
//! (failing instead under `CI=true`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use tierbox_policy::{Policy, ProcessRunRequest, TierRequest};
use tierbox_runner::{RunOptions, Runner};

use super::runs::tier_b_available;

/// Tier B is available, the supervisor is root (the private mount namespace and the
/// uid-0 run need it), and `programs` are installed.
fn runs_here(test: &str, programs: &[&str]) -> bool {
    if !tier_b_available(test) {
        return false;
    }
    // The effective uid, from /proc (this crate has no unsafe).
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    if !root {
        return !tierbox_test_support::skip(test, "needs a root supervisor");
    }
    for p in programs {
        let found = ["/usr/bin", "/bin"]
            .iter()
            .any(|d| Path::new(d).join(p).exists());
        if !found {
            return !tierbox_test_support::skip(test, &format!("{p} is not installed"));
        }
    }
    true
}

struct Env {
    ws: tempfile::TempDir,
    state: tempfile::TempDir,
    policy: Policy,
}

impl Env {
    fn new(allowed: &[&str]) -> Self {
        let mut policy = Policy::builtin_default();
        policy.exec.allowed_executables = allowed.iter().map(|s| (*s).to_owned()).collect();
        Self {
            ws: tempfile::tempdir().unwrap(),
            state: tempfile::tempdir().unwrap(),
            policy,
        }
    }

    /// Runs `command args` in Tier B; returns the exit code and stderr.
    fn run(&self, command: &str, args: &[&str]) -> (Option<i32>, String) {
        let out = self.outcome(command, args);
        (out.exit_code, out.stderr.text.clone())
    }

    /// Runs `command args` in Tier B; its outcome.
    fn outcome(&self, command: &str, args: &[&str]) -> tierbox_runner::Outcome {
        let mut r = ProcessRunRequest::new(command);
        r.args = args.iter().map(|s| (*s).to_owned()).collect();
        r.tier = TierRequest::B;
        let runner = Runner::new(self.policy.clone())
            .with_workspace(self.ws.path())
            .with_options(RunOptions {
                state_dir: self.state.path().to_path_buf(),
            });
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(runner.run(&r))
            .unwrap()
    }

    fn mode(&self, rel: &str) -> u32 {
        std::fs::symlink_metadata(self.ws.path().join(rel))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    }

    /// `src/` 0750 with a 0640 file and a 0700 subdirectory, made on the host.
    fn mode_tree(&self) {
        let src = self.ws.path().join("src");
        std::fs::create_dir_all(src.join("private")).unwrap();
        std::fs::write(src.join("notes.txt"), "notes\n").unwrap();
        let set = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        set(&src.join("notes.txt"), 0o640);
        set(&src.join("private"), 0o700);
        set(&src, 0o750);
    }
}

/// `multiprocessing.Lock()` (a POSIX semaphore in `/dev/shm`) works without granting the
/// host's `/dev/shm`, and `/tmp/…` written by the run is its own: the host's `/tmp` is
/// untouched.
///
/// Regression: Tier B had neither a private `/tmp` nor a `/dev/shm`: `SemLock` failed
/// with `EACCES` and landlock refused writing `/tmp` (`EACCES`).
#[test]
fn regression_tier_b_semaphores_and_tmp_are_refused() {
    if !runs_here(
        "regression_tier_b_semaphores_and_tmp_are_refused",
        &["python3"],
    ) {
        return;
    }
    let mut env = Env::new(&["python3"]);
    env.policy.exec.allow_interpreters = true;
    env.policy.exec.allow_eval = true;
    let name = format!("tierbox-private-tmp-{}", std::process::id());
    let host_tmp = Path::new("/tmp").join(&name);
    let _ = std::fs::remove_file(&host_tmp);
    let script = format!(
        "import multiprocessing, os\n\
         multiprocessing.Lock()\n\
         open('/tmp/{name}', 'w').write('run')\n\
         assert open('/tmp/{name}').read() == 'run'\n\
         assert os.environ['TMPDIR'] == '/tmp', os.environ['TMPDIR']\n\
         print('ok')\n"
    );
    let (code, stderr) = env.run("python3", &["-c", &script]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        !host_tmp.exists(),
        "the run wrote the host's /tmp: {}",
        host_tmp.display()
    );
    // The workspace lies in the host's /tmp, which the private one covers: still there.
    let (code, stderr) = env.run("python3", &["-c", "open('in-ws', 'w').write('x')"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(env.ws.path().join("in-ws").exists());
}

/// `tar -x` run as uid 0 restores a 0750 directory (through glibc's
/// `chmod("/proc/self/fd/N")`) and root's ownership (a chown to root's ids, a no-op).
///
/// Regression: the mediator refused the procfs chmod and the filter every chown
/// (`EPERM`): tar exited 2 with "Cannot change ownership".
#[test]
fn regression_tier_b_uid0_tar_cannot_restore_modes_or_owners() {
    if !runs_here(
        "regression_tier_b_uid0_tar_cannot_restore_modes_or_owners",
        &["tar"],
    ) {
        return;
    }
    let env = Env::new(&["tar", "mkdir"]);
    env.mode_tree();
    let (code, stderr) = env.run("tar", &["-cf", "src.tar", "src"]);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stderr) = env.run("mkdir", &["out"]);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stderr) = env.run("tar", &["-xf", "src.tar", "-C", "out"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(env.mode("out/src"), 0o750);
    assert_eq!(env.mode("out/src/private"), 0o700);
    assert_eq!(env.mode("out/src/notes.txt"), 0o640);
}

/// `cp -a` run as uid 0 preserves modes and (root's) ownership.
///
/// Regression: every chown was `EPERM`: "failed to preserve ownership", exit 1.
#[test]
fn regression_tier_b_uid0_cp_a_cannot_preserve_ownership() {
    if !runs_here(
        "regression_tier_b_uid0_cp_a_cannot_preserve_ownership",
        &["cp"],
    ) {
        return;
    }
    let env = Env::new(&["cp"]);
    env.mode_tree();
    let (code, stderr) = env.run("cp", &["-a", "src", "dst"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(env.mode("dst"), 0o750);
    assert_eq!(env.mode("dst/notes.txt"), 0o640);
}

/// `install -m 0755` and `install -d -m 0750` run as uid 0 set their modes: the ACL
/// attribute coreutils writes first is "not supported", and it falls back to chmod; a
/// setuid mode is still refused.
///
/// Regression: the attribute write got `EPERM`, and install failed "setting permissions".
#[test]
fn regression_tier_b_uid0_install_m_fails_setting_permissions() {
    if !runs_here(
        "regression_tier_b_uid0_install_m_fails_setting_permissions",
        &["install"],
    ) {
        return;
    }
    let env = Env::new(&["install"]);
    std::fs::write(env.ws.path().join("tool.sh"), "#!/bin/sh\necho tool\n").unwrap();
    let (code, stderr) = env.run("install", &["-D", "-m", "0755", "tool.sh", "bin/tool"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(env.mode("bin/tool"), 0o755);
    let (code, stderr) = env.run("install", &["-d", "-m", "0750", "share"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(env.mode("share"), 0o750);
    let (code, _) = env.run("install", &["-m", "4755", "tool.sh", "setuid-tool"]);
    assert_ne!(code, Some(0), "a setuid mode was set");
    let mode = std::fs::metadata(env.ws.path().join("setuid-tool"))
        .map(|m| m.permissions().mode() & 0o7000)
        .unwrap_or(0);
    assert_eq!(mode, 0, "setuid or setgid left behind");
}

/// What the enforcement report says of the covers, when it says anything.
const COVERED: &str = "host secret(s) beneath the system roots covered";

/// A shell script that lists `/etc`, then tries every existing host secret of
/// [`SYSTEM_SECRET_PATHS`] and every root-only file directly under `/etc` (each read, or
/// listed for a directory), printing `READ <path>` for any that works.
fn secrets_script() -> (String, usize) {
    use std::os::unix::fs::MetadataExt;
    let mut targets: Vec<String> = tierbox_policy::validate::SYSTEM_SECRET_PATHS
        .iter()
        .filter(|p| Path::new(p).exists())
        .map(|p| (*p).to_owned())
        .collect();
    for entry in std::fs::read_dir("/etc").unwrap().flatten() {
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        if meta.is_file() && meta.mode() & 0o004 == 0 {
            targets.push(entry.path().display().to_string());
        }
    }
    targets.sort();
    targets.dedup();
    let mut script = String::from("ls /etc >/dev/null && echo etc-listed\n");
    for t in &targets {
        script.push_str(&format!(
            "if [ -d '{t}' ]; then ls '{t}' >/dev/null 2>&1 && echo 'READ {t}'; else cat '{t}' >/dev/null 2>&1 && echo 'READ {t}'; fi\n"
        ));
    }
    script.push_str("exit 0\n");
    (script, targets.len())
}

/// A Tier B run with its own mount namespace gets the system roots as one landlock rule
/// each — `ls /etc` works, as on the host and in Tier C — and every host secret beneath
/// them is covered in that namespace: no secret of the list, and no root-only file in
/// `/etc`, can be read or listed by a run that keeps uid 0; the enforcement report says
/// how many are covered.
///
/// Regression: `/etc` was granted as its ~150 entries around the secrets, so `ls /etc`
/// failed with `EACCES` (and each cold start paid four system calls per entry).
#[test]
fn regression_tier_b_system_roots_are_whole_and_their_secrets_covered() {
    let test = "regression_tier_b_system_roots_are_whole_and_their_secrets_covered";
    if !runs_here(test, &["sh"]) {
        return;
    }
    let mut env = Env::new(&["sh"]);
    env.policy.exec.allow_eval = true;
    env.policy.exec.allow_interpreters = true;
    let (script, n) = secrets_script();
    assert!(n > 0, "this host has no host secret under /etc to check");
    let out = env.outcome("sh", &["-c", &script]);
    assert_eq!(out.exit_code, Some(0), "{}", out.stderr.text);
    assert_eq!(out.stdout.text, "etc-listed\n", "{n} secrets tried");
    let covered = out
        .enforcement
        .namespaces
        .iter()
        .any(|l| l.contains(COVERED));
    assert!(covered, "{:?}", out.enforcement.namespaces);
}

/// Negative control of the test above, and the fallback: with more covers than one run
/// makes (`deny_read` naming 65 entries of `/etc`), the run keeps the carved
/// grants — `/etc` itself is not listable, no cover is reported — and the secrets are
/// still unreadable.
#[test]
fn tier_b_with_too_many_covers_keeps_the_carved_grants() {
    let test = "tier_b_with_too_many_covers_keeps_the_carved_grants";
    if !runs_here(test, &["sh"]) {
        return;
    }
    // Files and directories (a symbolic link keeps the carving for another reason), but
    // not what `sh` itself needs to start and look the run's user up.
    let needed = [
        "passwd",
        "group",
        "nsswitch.conf",
        "ld.so.cache",
        "ld.so.conf",
        "ld.so.conf.d",
    ];
    let mut names: Vec<String> = std::fs::read_dir("/etc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file() || t.is_dir()))
        .filter(|e| !needed.iter().any(|n| e.file_name() == *n))
        .map(|e| e.path().display().to_string())
        .collect();
    names.sort();
    if names.len() <= 64 {
        tierbox_test_support::skip(test, "/etc has too few entries to name more than 64");
        return;
    }
    let mut env = Env::new(&["sh"]);
    env.policy.exec.allow_eval = true;
    env.policy.exec.allow_interpreters = true;
    env.policy.filesystem.deny_read = names[..65].to_vec();
    let (script, _) = secrets_script();
    let out = env.outcome("sh", &["-c", &script]);
    assert_eq!(out.exit_code, Some(0), "{}", out.stderr.text);
    assert_eq!(out.stdout.text, "", "{}", out.stderr.text);
    let covered = out
        .enforcement
        .namespaces
        .iter()
        .any(|l| l.contains(COVERED));
    assert!(!covered, "{:?}", out.enforcement.namespaces);
}

/// The helper process's state directory and workspace (environment variables).
const HELPER_STATE: &str = "TIERBOX_TEST_POOLED_STATE";
const HELPER_WS: &str = "TIERBOX_TEST_POOLED_WS";

/// Helper process of [`an_embedder_that_exits_with_pooled_slots_leaves_no_mount`]: an
/// embedder that turns pooling on, makes one Tier B run and returns from `main` without
/// draining the pool.
#[test]
#[ignore = "helper process of an_embedder_that_exits_with_pooled_slots_leaves_no_mount; does nothing on its own"]
fn pooled_embedder_for_the_exit_test() {
    let (Ok(state), Ok(ws)) = (std::env::var(HELPER_STATE), std::env::var(HELPER_WS)) else {
        return;
    };
    tierbox_runner::host::set_pooling(true);
    let mut policy = Policy::builtin_default();
    policy.exec.allowed_executables = vec!["true".to_owned()];
    let mut r = ProcessRunRequest::new("true");
    r.tier = TierRequest::B;
    let runner = Runner::new(policy)
        .with_workspace(&ws)
        .with_options(RunOptions {
            state_dir: state.into(),
        });
    let out = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(runner.run(&r))
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{}", out.stderr.text);
}

/// A process that pools slots (as `tierbox serve` does) and ends normally without
/// draining them — an embedder, or a test binary — leaves no tmpfs mounted on the host:
/// its idle Tier B slot's bounded tmp is unmounted at exit.
///
/// Regression: each such process left its idle slots' `tierbox-tmp` mounts in place for
/// the host's lifetime (twelve after one run of the probe suites), since only a later
/// supervisor using the same state directory swept them.
#[test]
fn an_embedder_that_exits_with_pooled_slots_leaves_no_mount() {
    let test = "an_embedder_that_exits_with_pooled_slots_leaves_no_mount";
    if !runs_here(test, &["true"]) {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "suite::tier_b_runtimes::pooled_embedder_for_the_exit_test",
        ])
        .env(HELPER_STATE, state.path())
        .env(HELPER_WS, ws.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let state_dir = std::fs::canonicalize(state.path()).unwrap();
    let left: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| {
            l.split(' ')
                .nth(4)
                .is_some_and(|point| Path::new(point).starts_with(&state_dir))
        })
        .map(str::to_owned)
        .collect();
    assert!(
        left.is_empty(),
        "mounts left under the state directory: {left:?}"
    );
}
