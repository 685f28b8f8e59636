//! Tier B under an unprivileged supervisor: the run's own `/tmp` and `/dev/shm`, and its
//! protected paths, in a user namespace of its own where the host allows one — and where
//! it does not, a refusal that names the fix instead of a bare `EACCES`.
//!
//! The tests run as root, so each case runs in a second process of this test binary
//! (the `#[ignore]`d helper below) as an unprivileged uid ([`SUPERVISOR_UID`]); with
//! `restricted`, that process starts under a seccomp filter that refuses every user
//! namespace, as a container's profile does — a host that refuses them, for this
//! process tree only. The helper makes its
//! fixtures itself (as that uid) and asserts inside; the test checks the host after it.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use tierbox_policy::{Layer, ProcessRunRequest};

use super::harness::{Fixture, Need, assert_holds, describe, supported};

/// The unprivileged supervisor's uid and gid: not an account (no other process uses it,
/// so nothing else counts against its `RLIMIT_NPROC`).
const SUPERVISOR_UID: u32 = 61_234;

/// Names the case the helper process runs.
const CASE_ENV: &str = "TIERBOX_PROBE_UNPRIVILEGED_CASE";

/// A file the test leaves in the host's `/tmp`, which no run's `/tmp` may show.
const HOST_MARKER_ENV: &str = "TIERBOX_PROBE_HOST_MARKER";

/// What a run makes in its `/tmp`: never on the host.
const RUN_FILE_ENV: &str = "TIERBOX_PROBE_RUN_FILE";

/// Runs `case` in the helper as [`SUPERVISOR_UID`] (under a filter that refuses user
/// namespaces when `restricted`) and checks that it passed and left nothing on the
/// host: no file in the host's `/tmp`, nothing under the state directory's tmp base.
fn run_case(test: &str, case: &str, restricted: bool) {
    let needs = [Need::Root, Need::Landlock, Need::Seccomp];
    if !supported(test, &needs) {
        return;
    }
    if !restricted
        && let Some(why) = tierbox_sandbox::linux::userns::probe_tier_b_userns_cached().reason()
    {
        super::harness::skip(test, &format!("user namespaces are refused here: {why}"));
        return;
    }
    let home = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(home.path(), Some(SUPERVISOR_UID), Some(SUPERVISOR_UID)).unwrap();
    // Named after the case too: the cases run in parallel in this process.
    let marker = PathBuf::from(format!(
        "/tmp/tierbox-probe-host-marker-{}-{case}",
        std::process::id()
    ));
    std::fs::write(&marker, "the host's /tmp\n").unwrap();
    let run_file = PathBuf::from(format!(
        "/tmp/tierbox-probe-run-file-{}-{case}",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&run_file);
    let tmp = home.path().join("tmp");
    let runtime = home.path().join("runtime");
    for dir in [&tmp, &runtime] {
        std::fs::create_dir(dir).unwrap();
        std::os::unix::fs::chown(dir, Some(SUPERVISOR_UID), Some(SUPERVISOR_UID)).unwrap();
    }
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "suite::private_tmp::unprivileged_supervisor_helper",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads",
        "1",
    ])
    .env(CASE_ENV, case)
    .env(HOST_MARKER_ENV, &marker)
    .env(RUN_FILE_ENV, &run_file)
    .env("HOME", home.path())
    .env("TMPDIR", &tmp)
    .env("XDG_RUNTIME_DIR", &runtime)
    .env_remove("XDG_STATE_HOME")
    .uid(SUPERVISOR_UID)
    .gid(SUPERVISOR_UID)
    .stdin(Stdio::null());
    if restricted {
        super::sys::without_user_namespaces(&mut cmd);
    }
    let out: Output = cmd.output().unwrap();
    let _ = std::fs::remove_file(&marker);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the unprivileged supervisor's case {case:?} failed ({:?}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        std::fs::symlink_metadata(&run_file).is_err(),
        "{} reached the host's /tmp",
        run_file.display()
    );
    // Nothing of the runs is left where the supervisor keeps their private tmps.
    let leftovers: Vec<PathBuf> = walk(&tmp)
        .into_iter()
        .filter(|p| {
            p.to_string_lossy().contains("/tmp/run-") || p.to_string_lossy().contains("tierbox-")
        })
        .collect();
    assert!(leftovers.is_empty(), "left on the host: {leftovers:?}");
}

/// Every path under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = e.path();
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

/// `sh -c 'touch /tmp/x && ls -a /tmp'` works and shows the run's own `/tmp`, not the
/// host's (whose marker it does not list); the file made there never reaches the host.
/// Regression: under an unprivileged supervisor Tier B had the host's `/tmp`, which
/// landlock grants nothing of: `touch` failed with `EACCES` and no hint.
#[test]
fn an_unprivileged_supervisors_run_has_its_own_tmp() {
    run_case(
        "an_unprivileged_supervisors_run_has_its_own_tmp",
        "tmp",
        false,
    );
}

/// Python's `multiprocessing` (a `SemLock` in `/dev/shm`) works without a `/dev/shm`
/// grant: the run's `/dev/shm` is its own. Regression: it needed `writable =
/// ["/dev/shm"]`, the host's, shared with every process of the supervisor's uid.
#[test]
fn an_unprivileged_supervisors_run_has_its_own_dev_shm() {
    run_case(
        "an_unprivileged_supervisors_run_has_its_own_dev_shm",
        "multiprocessing",
        false,
    );
}

/// The protected paths are read-only under an unprivileged supervisor too, and nothing
/// is left in the workspace (see `protected.rs`).
#[test]
fn an_unprivileged_supervisors_run_cannot_change_protected_paths() {
    run_case(
        "an_unprivileged_supervisors_run_cannot_change_protected_paths",
        "protected",
        false,
    );
}

/// Where the host refuses user namespaces, an argument naming a path in `/tmp` is refused
/// before anything runs, naming both fixes (a writable grant of the host's `/tmp`, and
/// Tier C), and the fix works; a run that writes `/tmp` itself is reported without a
/// private `/tmp` (`disk` missing, with the same fix) and no namespace.
#[test]
fn without_user_namespaces_a_tmp_argument_is_refused_with_its_fix() {
    run_case(
        "without_user_namespaces_a_tmp_argument_is_refused_with_its_fix",
        "fallback",
        true,
    );
}

/// Not a test on its own: the cases above start this test binary again, as an
/// unprivileged supervisor, to run one case ([`CASE_ENV`]) here.
#[tokio::test]
#[ignore = "helper process of the unprivileged supervisor tests; does nothing on its own"]
async fn unprivileged_supervisor_helper() {
    let Ok(case) = std::env::var(CASE_ENV) else {
        return;
    };
    assert_ne!(
        rustix::process::geteuid().as_raw(),
        0,
        "the helper must not be root"
    );
    let marker = std::env::var(HOST_MARKER_ENV).unwrap();
    let run_file = std::env::var(RUN_FILE_ENV).unwrap();
    let Some(mut fx) = Fixture::new(&format!("unprivileged {case}"), &[]) else {
        panic!("no fixture");
    };
    fx.policy.exec.allow_interpreters = true;
    fx.policy.exec.allow_eval = true;
    fx.policy.exec.allowed_executables = ["tierbox-probe", "sh", "ls", "touch", "python3"]
        .map(str::to_owned)
        .to_vec();
    let req = |command: &str, args: &[&str]| {
        let mut r = ProcessRunRequest::new(command);
        r.args = args.iter().map(|a| (*a).to_owned()).collect();
        r.tier = tierbox_policy::TierRequest::B;
        r
    };
    match case.as_str() {
        "tmp" => {
            let script = format!("touch {run_file} && ls -a /tmp");
            let o = fx.run(&req("sh", &["-c", &script])).await;
            println!("{}", describe(&o));
            assert_eq!(o.exit_code, Some(0), "{}", describe(&o));
            let name = Path::new(&run_file).file_name().unwrap().to_string_lossy();
            let marker_name = Path::new(&marker).file_name().unwrap().to_string_lossy();
            assert!(o.stdout.text.contains(name.as_ref()), "{}", describe(&o));
            assert!(
                !o.stdout.text.contains(marker_name.as_ref()),
                "the run sees the host's /tmp:\n{}",
                describe(&o)
            );
            let ns = &o.enforcement.namespaces;
            assert!(
                ns.iter().any(|l| l.starts_with("user:"))
                    && ns.iter().any(|l| l.starts_with("mount:")),
                "{ns:?}"
            );
            assert!(
                o.enforcement.capabilities.starts_with("none:"),
                "{}",
                o.enforcement.capabilities
            );
        }
        "multiprocessing" => {
            let code = "import multiprocessing as m\n\
                        l = m.Lock(); l.acquire(); l.release()\n\
                        with m.Pool(2) as p: print(sum(p.map(abs, range(-10, 10))))\n";
            let o = fx.run(&req("python3", &["-c", code])).await;
            println!("{}", describe(&o));
            assert_eq!(o.exit_code, Some(0), "{}", describe(&o));
            assert_eq!(o.stdout.text.trim(), "100", "{}", describe(&o));
        }
        "protected" => {
            fx.protect(&[".git/hooks", ".git/config", ".git/info"]);
            let git = fx.workspace.join(".git");
            std::fs::create_dir_all(git.join("hooks")).unwrap();
            std::fs::write(git.join("hooks/pre-commit"), "#!/bin/sh\nexit 0\n").unwrap();
            std::fs::write(git.join("config"), "[core]\n\tbare = false\n").unwrap();
            // `.git/info` is missing: a placeholder stands in for it during each run.
            for (probe, target) in [
                ("replace-denied", ".git/hooks"),
                ("replace-denied", ".git/config"),
                ("replace-denied", ".git/info"),
                ("create-denied", ".git/hooks/post-checkout"),
            ] {
                let o = fx.probe(&[probe, target]).await;
                assert!(o.enforcement.protected_paths.applied, "{}", describe(&o));
                assert_holds(&o);
            }
            assert!(
                std::fs::symlink_metadata(git.join("info")).is_err(),
                "placeholder left"
            );
            assert_eq!(
                std::fs::read_to_string(git.join("config")).unwrap(),
                "[core]\n\tbare = false\n"
            );
        }
        "fallback" => {
            let refused = fx
                .try_run(&req("touch", &[&run_file]))
                .await
                .expect_err("a /tmp argument without a private /tmp must be refused");
            println!("{refused}");
            assert!(
                refused.contains("filesystem.writable += \"/tmp\"") && refused.contains("--tier c"),
                "{refused}"
            );
            // The same when the tier is left to the host: Tier C is unavailable here too,
            // and the refusal is the argument's, not a tier's.
            let mut auto = req("touch", &[&run_file]);
            auto.tier = tierbox_policy::TierRequest::Auto;
            let refused = fx.try_run(&auto).await.expect_err("refused under auto too");
            assert!(refused.starts_with("args[0]"), "{refused}");
            // The fix it names works (the host's /tmp, granted).
            let mut granted = fx.policy.clone();
            granted.filesystem.writable.push("/tmp".to_owned());
            std::mem::swap(&mut fx.policy, &mut granted);
            let o = fx.run(&req("ls", &[&marker])).await;
            assert_eq!(o.exit_code, Some(0), "{}", describe(&o));
            std::mem::swap(&mut fx.policy, &mut granted);
            // Written by the program itself: no namespace, and the report says what is
            // missing and how to get it.
            let script = format!("touch {run_file}");
            let o = fx.run(&req("sh", &["-c", &script])).await;
            println!("{}", describe(&o));
            assert_ne!(o.exit_code, Some(0), "{}", describe(&o));
            assert!(
                o.enforcement.namespaces.is_empty(),
                "{:?}",
                o.enforcement.namespaces
            );
            assert!(o.enforcement.missing_layers.contains(&Layer::Disk));
            let disk = &o.enforcement.disk.detail;
            assert!(
                disk.contains("/tmp") && disk.contains("filesystem.writable"),
                "{disk}"
            );
        }
        other => panic!("unknown case {other}"),
    }
}
