//! Tier B, what a run can do to the host over its lifetime: fork bombs, big files, many
//! descriptors, daemons that try to outlive it, output floods, stdin, and descendants
//! that hold its output open.
//!
//! As in `tier_b.rs`, each family has a negative control that must report `BROKEN`.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tierbox_policy::QuotaMode;
use tierbox_runner::{LimitHit, Outcome};

use super::harness::{
    Fixture, NOBODY, Need, PROBE, ProcessId, assert_broken, assert_direct_broken, assert_holds,
    describe, report,
};

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;

/// How long after a run returns a leftover process may take to disappear.
const DEATH_GRACE: Duration = Duration::from_secs(1);

// ---- fork bombs ----------------------------------------------------------------------

/// As root, `RLIMIT_NPROC` is not enforced, so the pids cgroup is what stops the bomb.
#[tokio::test]
async fn fork_bomb_is_stopped_by_the_pids_cgroup_as_root() {
    let Some(mut fx) = Fixture::new(
        "fork_bomb_is_stopped_by_the_pids_cgroup_as_root",
        &[Need::Root, Need::Cgroup],
    ) else {
        return;
    };
    fx.policy.limits.max_processes = 16;
    let o = fx.probe(&["fork-bomb", "16"]).await;
    assert_eq!(o.enforcement.uid, Some(0), "{}", describe(&o));
    assert_holds(&o);
    assert_eq!(o.limit_hit, Some(LimitHit::Processes), "{}", describe(&o));
}

/// Under a non-root uid (a root supervisor runs the child as the workspace owner),
/// `RLIMIT_NPROC` stops the bomb. It equals `pids.max` and the kernel checks it first in
/// `copy_process`, so if the cgroup reports its limit hit, `RLIMIT_NPROC` did not work.
#[tokio::test]
async fn fork_bomb_is_stopped_by_rlimit_nproc_as_the_workspace_owner() {
    let Some(mut fx) = Fixture::new(
        "fork_bomb_is_stopped_by_rlimit_nproc_as_the_workspace_owner",
        &[Need::Root],
    ) else {
        return;
    };
    fx.chown_workspace(NOBODY);
    fx.policy.limits.max_processes = 16;
    let o = fx.probe(&["fork-bomb", "16"]).await;
    assert_eq!(o.enforcement.uid, Some(NOBODY), "{}", describe(&o));
    assert!(
        o.enforcement.rlimits.iter().any(|r| r == "RLIMIT_NPROC=16"),
        "{}",
        describe(&o)
    );
    assert_holds(&o);
    assert!(report(&o).contains("EAGAIN"), "{}", describe(&o));
    assert_ne!(
        o.limit_hit,
        Some(LimitHit::Processes),
        "the cgroup, not RLIMIT_NPROC, stopped the bomb:\n{}",
        describe(&o)
    );
}

/// Negative control: a limit far above what the probe tries is reported as not holding.
#[tokio::test]
async fn fork_bomb_probe_reports_a_loose_limit() {
    let Some(mut fx) = Fixture::new("fork_bomb_probe_reports_a_loose_limit", &[]) else {
        return;
    };
    fx.policy.limits.max_processes = 128;
    assert_broken(&fx.probe(&["fork-bomb", "8"]).await);
}

// ---- memory, CPU ----------------------------------------------------------------------

/// The cgroup memory limit ends a run that allocates twice as much (OOM kill).
#[tokio::test]
async fn memory_limit_kills_the_run() {
    let Some(mut fx) = Fixture::new("memory_limit_kills_the_run", &[Need::Cgroup]) else {
        return;
    };
    fx.policy.limits.memory_bytes = 64 * MIB;
    let o = fx.probe(&["memory", &(64 * MIB).to_string()]).await;
    assert_eq!(o.signal, Some(libc::SIGKILL), "{}", describe(&o));
    assert_eq!(o.limit_hit, Some(LimitHit::Memory), "{}", describe(&o));
}

/// Negative control: under a generous limit the same allocation succeeds and is reported.
#[tokio::test]
async fn memory_probe_reports_a_loose_limit() {
    let Some(mut fx) = Fixture::new("memory_probe_reports_a_loose_limit", &[]) else {
        return;
    };
    fx.policy.limits.memory_bytes = 1024 * MIB;
    assert_broken(&fx.probe(&["memory", &(16 * MIB).to_string()]).await);
}

/// `RLIMIT_CPU` (1 s) ends a run that spins for 2 s of CPU time.
#[tokio::test]
async fn cpu_time_limit_kills_the_run() {
    let Some(mut fx) = Fixture::new("cpu_time_limit_kills_the_run", &[]) else {
        return;
    };
    fx.policy.limits.cpu_time_ms = Some(1_000);
    let o = fx.probe(&["cpu", "1000"]).await;
    assert_eq!(o.signal, Some(libc::SIGXCPU), "{}", describe(&o));
    assert_eq!(o.limit_hit, Some(LimitHit::CpuTime), "{}", describe(&o));
}

/// Negative control: under a generous CPU limit the spin completes and is reported.
#[tokio::test]
async fn cpu_probe_reports_a_loose_limit() {
    let Some(mut fx) = Fixture::new("cpu_probe_reports_a_loose_limit", &[]) else {
        return;
    };
    fx.policy.limits.cpu_time_ms = Some(10_000);
    assert_broken(&fx.probe(&["cpu", "200"]).await);
}

/// The CFS quota (`cpu.cfs_quota_us` or `cpu.max`) of the run cgroup holding a live
/// `hold` run, read from the host (the run itself cannot read cgroupfs), and the
/// enforcement report's cgroup line. `"-1"`/`"max"` is no quota, and so is
/// `"no cpu controller"` (the run's groups include none).
async fn cpu_quota_of_a_live_run(fx: &Fixture) -> (String, String) {
    let pidfile = fx.workspace.join("hold.pid");
    let _ = std::fs::remove_file(&pidfile);
    let run = fx.probe(&["hold", "hold.pid"]);
    let observe = async {
        let started = Instant::now();
        let text = loop {
            if let Ok(text) = std::fs::read_to_string(&pidfile) {
                break text;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the run never wrote its pid file"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let pid = ProcessId::parse_pair(&text).unwrap().pid;
        run_cgroup_dirs(pid)
            .iter()
            .find_map(|dir| {
                std::fs::read_to_string(dir.join("cpu.cfs_quota_us"))
                    .or_else(|_| std::fs::read_to_string(dir.join("cpu.max")))
                    .ok()
            })
            .map(|q| q.split_whitespace().next().unwrap_or_default().to_owned())
            .unwrap_or_else(|| "no cpu controller".to_owned())
    };
    let (outcome, quota) = tokio::join!(run, observe);
    (quota, outcome.enforcement.cgroup.detail)
}

/// `limits.cpus` is the run cgroup's CPU quota (1 CPU: 100 ms per 100 ms period), which
/// the enforcement report states. Negative control, in the same process (so a warm slot
/// with the quota would be found): without `limits.cpus` the run's group has no quota.
#[tokio::test]
async fn cpus_limit_is_the_cgroup_cpu_quota() {
    let Some(mut fx) = Fixture::new(
        "cpus_limit_is_the_cgroup_cpu_quota",
        &[Need::Root, Need::Cgroup],
    ) else {
        return;
    };
    // The run ends at its deadline; the quota is read while it holds.
    fx.policy.limits.timeout_ms = 1_500;
    fx.policy.limits.cpus = Some(1);
    let (quota, report) = cpu_quota_of_a_live_run(&fx).await;
    assert_eq!(quota, "100000", "{report}");
    assert!(report.contains("cpu 100% of one CPU"), "{report}");

    fx.policy.limits.cpus = None;
    let (quota, report) = cpu_quota_of_a_live_run(&fx).await;
    // A group made without a quota is not in the cpu controller at all (v1), or says
    // "max" (v2); a reused quota group would say 100000.
    assert!(
        ["-1", "max", "no cpu controller"].contains(&quota.as_str()),
        "{quota}: {report}"
    );
    assert!(!report.contains("of one CPU"), "{report}");
}

/// A run cannot move itself out of its cgroup (out of its limits and the end-of-run kill).
#[tokio::test]
async fn run_cannot_leave_its_cgroup() {
    let Some(fx) = Fixture::new(
        "run_cannot_leave_its_cgroup",
        &[Need::Cgroup, Need::Landlock],
    ) else {
        return;
    };
    let o = fx.probe(&["cgroup-escape"]).await;
    assert_holds(&o);
    assert!(
        report(&o).contains("tierbox-"),
        "the probe did not find the run's own cgroup:\n{}",
        describe(&o)
    );
}

/// Negative control: root outside the sandbox can open `cgroup.procs` for writing (the
/// probe only opens; it moves nothing).
#[tokio::test]
async fn cgroup_probe_reports_root_outside_the_sandbox() {
    let Some(fx) = Fixture::new(
        "cgroup_probe_reports_root_outside_the_sandbox",
        &[Need::Root, Need::Cgroup],
    ) else {
        return;
    };
    assert_direct_broken(&fx.direct(&["cgroup-escape"]));
}

// ---- file size and open files --------------------------------------------------------

#[tokio::test]
async fn file_size_limit_stops_writes_with_efbig() {
    let Some(mut fx) = Fixture::new("file_size_limit_stops_writes_with_efbig", &[]) else {
        return;
    };
    fx.policy.limits.file_size_bytes = MIB;
    assert_holds(&fx.probe(&["fsize", &MIB.to_string()]).await);
}

/// With the default `SIGXFSZ` disposition the writer is killed, and the outcome says why.
#[tokio::test]
async fn file_size_limit_kills_with_sigxfsz_by_default() {
    let Some(mut fx) = Fixture::new("file_size_limit_kills_with_sigxfsz_by_default", &[]) else {
        return;
    };
    fx.policy.limits.file_size_bytes = MIB;
    let o = fx
        .probe(&["fsize", &MIB.to_string(), "--signal", "big.bin"])
        .await;
    assert_eq!(o.signal, Some(libc::SIGXFSZ), "{}", describe(&o));
    assert_eq!(o.limit_hit, Some(LimitHit::FileSize), "{}", describe(&o));
    let len = std::fs::metadata(fx.workspace.join("big.bin"))
        .unwrap()
        .len();
    assert!(
        len <= MIB,
        "the file grew to {len} bytes, past the {MIB}-byte limit"
    );
}

/// Negative control: a limit above the 2 × BYTES the probe writes is reported.
#[tokio::test]
async fn fsize_probe_reports_a_loose_limit() {
    let Some(mut fx) = Fixture::new("fsize_probe_reports_a_loose_limit", &[]) else {
        return;
    };
    fx.policy.limits.file_size_bytes = 4 * MIB;
    assert_broken(&fx.probe(&["fsize", &MIB.to_string()]).await);
}

#[tokio::test]
async fn open_files_limit_holds() {
    let Some(mut fx) = Fixture::new("open_files_limit_holds", &[]) else {
        return;
    };
    fx.policy.limits.open_files = 64;
    assert_holds(&fx.probe(&["nofile", "64"]).await);
}

/// Negative control: a limit above what the probe opens is reported.
#[tokio::test]
async fn nofile_probe_reports_a_loose_limit() {
    let Some(mut fx) = Fixture::new("nofile_probe_reports_a_loose_limit", &[]) else {
        return;
    };
    fx.policy.limits.open_files = 1024;
    assert_broken(&fx.probe(&["nofile", "64"]).await);
}

// ---- outliving the run ---------------------------------------------------------------

/// A `setsid` double-forked daemon leaves the process group; the run's cgroup still
/// holds it, and it is killed when the run ends.
#[tokio::test]
async fn setsid_daemon_does_not_survive_the_run() {
    let Some(fx) = Fixture::new("setsid_daemon_does_not_survive_the_run", &[Need::Cgroup]) else {
        return;
    };
    let o = fx.probe(&["daemon", "daemon.pid"]).await;
    assert!(
        o.exit_code == Some(0) && report(&o).starts_with("DONE "),
        "{}",
        describe(&o)
    );
    let text = std::fs::read_to_string(fx.workspace.join("daemon.pid")).unwrap();
    let daemon = ProcessId::parse_pair(&text).unwrap_or_else(|| panic!("bad pid file {text:?}"));
    let dead = daemon.dead_within(DEATH_GRACE);
    daemon.kill_if_alive();
    assert!(
        dead,
        "daemon {daemon:?} survived the run by {DEATH_GRACE:?}\n{}",
        describe(&o)
    );
}

/// Negative control: without the sandbox the daemon does survive (and is then killed).
#[tokio::test]
async fn daemon_outside_the_sandbox_survives() {
    let Some(fx) = Fixture::new("daemon_outside_the_sandbox_survives", &[]) else {
        return;
    };
    let out = fx.direct(&["daemon", "daemon.pid"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let text = std::fs::read_to_string(fx.workspace.join("daemon.pid")).unwrap();
    let daemon = ProcessId::parse_pair(&text).unwrap();
    let dead = daemon.dead_within(DEATH_GRACE);
    daemon.kill_if_alive();
    assert!(
        !dead,
        "the unsandboxed daemon {daemon:?} died by itself: the check above cannot fail"
    );
}

/// The variable that turns [`supervisor_for_the_death_test`] into a supervisor.
const HELPER_WORKSPACE_ENV: &str = "TIERBOX_PROBE_HELPER_WORKSPACE";

/// Not a test on its own: `run_dies_with_its_supervisor` starts this test binary again to
/// run only this function, as a supervisor process it can SIGKILL mid-run.
#[tokio::test]
#[ignore = "helper process of run_dies_with_its_supervisor; does nothing on its own"]
async fn supervisor_for_the_death_test() {
    let Some(workspace) = std::env::var_os(HELPER_WORKSPACE_ENV) else {
        return;
    };
    let Some(mut fx) = Fixture::in_workspace(
        "supervisor_for_the_death_test",
        &[Need::Cgroup],
        Path::new(&workspace),
    ) else {
        return;
    };
    if let Some(state) = std::env::var_os(HELPER_STATE_ENV) {
        fx.use_state_dir(Path::new(&state));
    }
    fx.policy.limits.timeout_ms = 30_000;
    let _ = fx.probe(&["hold", "hold.pid"]).await;
}

/// What is left of a run whose supervisor was SIGKILLed mid-run: the run's direct child
/// and the child it forked (pid and start time of each), and the run's cgroups. The
/// killed supervisor's state directory goes with it: its tmp trees (a bounded tmpfs
/// under a root supervisor) are swept as the next supervisor there would, so a test
/// leaves no mount on the host.
struct Orphans {
    direct: ProcessId,
    forked: ProcessId,
    cgroups: Vec<PathBuf>,
    state: tempfile::TempDir,
}

impl Drop for Orphans {
    fn drop(&mut self) {
        tierbox_sandbox::launch::sweep_orphaned_tmp(&self.state.path().join("tmp"));
    }
}

/// Starts a separate supervisor process running `hold`, waits for the pid file, then
/// SIGKILLs the supervisor.
fn kill_a_supervisor_mid_run() -> Orphans {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    std::fs::set_permissions(state.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let mut helper = Command::new(std::env::current_exe().unwrap())
        .args([
            "suite::tier_b_lifecycle::supervisor_for_the_death_test",
            "--exact",
            "--ignored",
            "--test-threads",
            "1",
        ])
        .env(HELPER_WORKSPACE_ENV, dir.path())
        .env(
            HELPER_STATE_ENV,
            std::fs::canonicalize(state.path()).unwrap(),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pidfile = dir.path().join("hold.pid");
    let started = Instant::now();
    let text = loop {
        if let Ok(text) = std::fs::read_to_string(&pidfile) {
            break text;
        }
        if started.elapsed() > Duration::from_secs(20) || helper.try_wait().unwrap().is_some() {
            let _ = helper.kill();
            panic!("the helper supervisor never started the run");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let n: Vec<&str> = text.split_whitespace().collect();
    let direct = ProcessId::parse_pair(&n[..2].join(" ")).unwrap();
    let forked = ProcessId::parse_pair(&n[2..4].join(" ")).unwrap();
    let cgroups = run_cgroup_dirs(direct.pid);
    helper.kill().unwrap();
    helper.wait().unwrap();
    Orphans {
        direct,
        forked,
        cgroups,
        state,
    }
}

/// The `tierbox-*` cgroup directories `pid` is in, on every mounted hierarchy.
fn run_cgroup_dirs(pid: i32) -> Vec<PathBuf> {
    let membership = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let mounts: Vec<PathBuf> = std::fs::read_dir("/sys/fs/cgroup")
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    let mut dirs = Vec::new();
    for line in membership.lines() {
        let Some(path) = line.splitn(3, ':').nth(2) else {
            continue;
        };
        if !path
            .rsplit('/')
            .next()
            .is_some_and(|last| last.starts_with("tierbox-"))
        {
            continue;
        }
        for mount in mounts
            .iter()
            .chain(std::iter::once(&PathBuf::from("/sys/fs/cgroup")))
        {
            let dir = mount.join(path.trim_start_matches('/'));
            if dir.is_dir() && !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
    }
    dirs
}

impl Orphans {
    /// Kills what survived and removes the run's cgroups (the dead supervisor cannot).
    fn clean_up(&self) {
        self.direct.kill_if_alive();
        self.forked.kill_if_alive();
        for dir in &self.cgroups {
            for _ in 0..100 {
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// `PR_SET_PDEATHSIG`: when the supervisor dies (SIGKILL, no cleanup), the run's direct
/// child dies with it.
#[tokio::test]
async fn run_dies_with_its_supervisor() {
    if !super::harness::supported(
        "run_dies_with_its_supervisor",
        &[Need::Seccomp, Need::Cgroup],
    ) {
        return;
    }
    let orphans = kill_a_supervisor_mid_run();
    let direct_dead = orphans.direct.dead_within(DEATH_GRACE);
    orphans.clean_up();
    assert!(
        direct_dead,
        "the run's direct child {:?} survived its supervisor",
        orphans.direct
    );
}

/// The rest of the run dies with the supervisor too: a process the direct child forked
/// (same process group, same cgroup, no `setsid`) must not outlive a SIGKILLed supervisor.
#[tokio::test]
#[ignore = "known limit of tier b (no pid namespace): descendants of a SIGKILLed supervisor live until the next supervisor starts and sweeps them; see orphans_of_a_killed_supervisor_are_swept_by_the_next_one"]
async fn descendants_die_with_their_supervisor() {
    if !super::harness::supported(
        "descendants_die_with_their_supervisor",
        &[Need::Seccomp, Need::Cgroup],
    ) {
        return;
    }
    let orphans = kill_a_supervisor_mid_run();
    let forked_dead = orphans.forked.dead_within(DEATH_GRACE);
    let leftover: Vec<String> = orphans
        .cgroups
        .iter()
        .filter(|d| d.exists())
        .map(|d| d.display().to_string())
        .collect();
    orphans.clean_up();
    assert!(
        forked_dead,
        "the run's forked child {:?} survived its SIGKILLed supervisor (run cgroups left: {leftover:?})",
        orphans.forked
    );
}

/// Waits (asynchronously) until `path` exists, for at most 20 s.
async fn file_appears(path: &Path) -> String {
    let started = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return text;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A caller that gives up on a run — `tokio::time::timeout`, `select!`, an aborted task —
/// drops the `run_plan` future. Nothing of the run may survive that: not the direct child,
/// not what it forked.
#[tokio::test]
async fn dropping_the_run_future_kills_the_run() {
    let Some(fx) = Fixture::new("dropping_the_run_future_kills_the_run", &[]) else {
        return;
    };
    let pidfile = fx.workspace.join("hold.pid");
    let req = fx.request(&["hold", "hold.pid"]);
    let text = tokio::select! {
        o = fx.run(&req) => panic!("the run ended before it was cancelled:\n{}", describe(&o)),
        text = file_appears(&pidfile) => text,
    };
    // The run future is dropped here, mid-run.
    let n: Vec<&str> = text.split_whitespace().collect();
    let direct = ProcessId::parse_pair(&n[..2].join(" ")).unwrap();
    let orphans = Orphans {
        cgroups: run_cgroup_dirs(direct.pid),
        direct,
        forked: ProcessId::parse_pair(&n[2..4].join(" ")).unwrap(),
        state: tempfile::tempdir().unwrap(),
    };
    let direct_dead = orphans.direct.dead_within(DEATH_GRACE);
    let forked_dead = orphans.forked.dead_within(DEATH_GRACE);
    orphans.clean_up();
    assert!(
        direct_dead && forked_dead,
        "after the run future was dropped, direct child {:?} dead: {direct_dead}, forked child {:?} dead: {forked_dead}",
        orphans.direct,
        orphans.forked
    );
}

/// A descendant that keeps stdout open must not hold the run past its deadline (3 s),
/// and must be dead afterwards. `setsid` takes it out of the process group too.
async fn grandchild_holding_stdout(test: &str, setsid: bool) {
    let needs: &[Need] = if setsid { &[Need::Cgroup] } else { &[] };
    let Some(mut fx) = Fixture::new(test, needs) else {
        return;
    };
    fx.policy.limits.timeout_ms = 3_000;
    let mut args = vec!["grandchild-holds-stdout"];
    if setsid {
        args.push("--setsid");
    }
    let started = Instant::now();
    let o = fx.probe(&args).await;
    let elapsed = started.elapsed();
    let child = ProcessId::parse_report(report(&o));
    let dead = child.is_some_and(|c| c.dead_within(DEATH_GRACE));
    if let Some(c) = child {
        c.kill_if_alive();
    }
    // Generous on purpose: the child sleeps 30 s; the deadline is 3 s.
    assert!(
        elapsed < Duration::from_secs(15),
        "the run took {elapsed:?}\n{}",
        describe(&o)
    );
    assert!(
        o.exit_code == Some(0) && report(&o).starts_with("DONE "),
        "{}",
        describe(&o)
    );
    assert!(child.is_some(), "no pid in the report\n{}", describe(&o));
    assert!(
        dead,
        "the child holding stdout ({child:?}) survived the run\n{}",
        describe(&o)
    );
}

#[tokio::test]
async fn grandchild_holding_stdout_does_not_delay_the_return() {
    grandchild_holding_stdout("grandchild_holding_stdout_does_not_delay_the_return", false).await;
}

#[tokio::test]
async fn setsid_grandchild_holding_stdout_does_not_delay_the_return() {
    grandchild_holding_stdout(
        "setsid_grandchild_holding_stdout_does_not_delay_the_return",
        true,
    )
    .await;
}

/// Negative control: without the sandbox the child holding stdout outlives the probe.
#[tokio::test]
async fn grandchild_outside_the_sandbox_survives() {
    let Some(fx) = Fixture::new("grandchild_outside_the_sandbox_survives", &[]) else {
        return;
    };
    let mut probe = Command::new(PROBE)
        .arg("grandchild-holds-stdout")
        .current_dir(&fx.workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Read only the report line: reading to EOF would wait for the child's 30 s.
    let mut line = String::new();
    BufReader::new(probe.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(probe.wait().unwrap().success(), "{line}");
    let child = ProcessId::parse_report(&line).unwrap_or_else(|| panic!("no pid in {line:?}"));
    let dead = child.dead_within(DEATH_GRACE);
    child.kill_if_alive();
    assert!(
        !dead,
        "the unsandboxed child {child:?} died by itself: the check above cannot fail"
    );
}

/// Runs `hold` (with `extra` arguments) to its 1 s deadline; returns the outcome and
/// whether the direct child and the child it forked are dead (any left are killed).
async fn hold_until_the_deadline(fx: &mut Fixture, extra: &[&str]) -> (Outcome, bool, bool) {
    fx.policy.limits.timeout_ms = 1_000;
    let _ = std::fs::remove_file(fx.workspace.join("hold.pid"));
    let mut args = vec!["hold", "hold.pid"];
    args.extend_from_slice(extra);
    let o = fx.probe(&args).await;
    let text = std::fs::read_to_string(fx.workspace.join("hold.pid")).unwrap();
    let n: Vec<&str> = text.split_whitespace().collect();
    let direct = ProcessId::parse_pair(&n[..2].join(" ")).unwrap();
    let forked = ProcessId::parse_pair(&n[2..4].join(" ")).unwrap();
    let (direct_dead, forked_dead) = (
        direct.dead_within(DEATH_GRACE),
        forked.dead_within(DEATH_GRACE),
    );
    direct.kill_if_alive();
    forked.kill_if_alive();
    assert!(
        o.timed_out && o.limit_hit == Some(LimitHit::WallTime),
        "{}",
        describe(&o)
    );
    (o, direct_dead, forked_dead)
}

/// The deadline kills the whole tree: the direct child and what it forked. SIGTERM
/// comes first, and a program that does not ignore it dies of it.
#[tokio::test]
async fn timeout_kills_the_whole_tree() {
    let Some(mut fx) = Fixture::new("timeout_kills_the_whole_tree", &[]) else {
        return;
    };
    let (o, direct_dead, forked_dead) = hold_until_the_deadline(&mut fx, &[]).await;
    assert!(
        direct_dead && forked_dead,
        "direct dead: {direct_dead}, forked dead: {forked_dead}\n{}",
        describe(&o)
    );
    assert_eq!(o.signal, Some(libc::SIGTERM), "{}", describe(&o));
}

/// A tree that ignores SIGTERM is SIGKILLed once the grace (`TERM_GRACE_MS`) is over:
/// the direct child dies of SIGKILL, and what it forked dies too.
#[tokio::test]
async fn timeout_escalates_to_sigkill_for_a_tree_ignoring_sigterm() {
    let Some(mut fx) = Fixture::new(
        "timeout_escalates_to_sigkill_for_a_tree_ignoring_sigterm",
        &[],
    ) else {
        return;
    };
    let (o, direct_dead, forked_dead) = hold_until_the_deadline(&mut fx, &["--ignore-term"]).await;
    assert!(
        direct_dead && forked_dead,
        "direct dead: {direct_dead}, forked dead: {forked_dead}\n{}",
        describe(&o)
    );
    assert_eq!(o.signal, Some(libc::SIGKILL), "{}", describe(&o));
}

// ---- output and input ----------------------------------------------------------------

/// 1 GiB on stdout: the child is never blocked (it writes everything and exits 0), the
/// count is exact, and only the quota (head + tail) is kept.
#[tokio::test]
async fn gigabyte_on_stdout_is_capped_without_blocking_the_child() {
    let Some(mut fx) = Fixture::new(
        "gigabyte_on_stdout_is_capped_without_blocking_the_child",
        &[],
    ) else {
        return;
    };
    fx.policy.output.max_bytes = MIB;
    fx.policy.limits.timeout_ms = 60_000;
    let o = fx.probe(&["flood", &GIB.to_string()]).await;
    assert!(o.exit_code == Some(0) && !o.timed_out, "{}", describe(&o));
    assert!(
        o.stderr
            .text
            .starts_with("DONE flood: wrote 1073741824 bytes"),
        "{}",
        describe(&o)
    );
    let out = &o.stdout;
    assert_eq!(out.total_bytes, GIB, "{}", describe(&o));
    assert!(out.truncated, "{}", describe(&o));
    let marker = format!("\n[tierbox: {} bytes omitted]\n", out.omitted_bytes);
    assert!(
        out.text.contains(&marker),
        "no omission marker {marker:?} in the kept text"
    );
    let kept = (out.text.len() - marker.len()) as u64;
    assert!(
        kept > 0 && kept <= MIB,
        "kept {kept} bytes with a {MIB}-byte quota"
    );
    assert_eq!(
        out.omitted_bytes,
        GIB - kept,
        "omitted bytes do not add up with the kept text"
    );
}

/// In `kill` mode, passing the output quota ends the run (long before 1 GiB is written).
#[tokio::test]
async fn output_quota_in_kill_mode_ends_the_run() {
    let Some(mut fx) = Fixture::new("output_quota_in_kill_mode_ends_the_run", &[]) else {
        return;
    };
    fx.policy.output.max_bytes = MIB;
    fx.policy.output.mode = QuotaMode::Kill;
    let o = fx.probe(&["flood", &GIB.to_string()]).await;
    assert!(
        o.quota_exceeded && o.limit_hit == Some(LimitHit::Output),
        "{}",
        describe(&o)
    );
    assert!(
        o.exit_code.is_none() && o.signal.is_some(),
        "the flood was not killed:\n{}",
        describe(&o)
    );
    assert!(
        o.stdout.total_bytes >= MIB && o.stdout.total_bytes < GIB,
        "{}",
        describe(&o)
    );
}

/// Negative control: output under the quota is kept whole and not marked truncated.
#[tokio::test]
async fn output_under_the_quota_is_kept_whole() {
    let Some(mut fx) = Fixture::new("output_under_the_quota_is_kept_whole", &[]) else {
        return;
    };
    fx.policy.output.max_bytes = 4 * MIB;
    let bytes = 3 * MIB / 2;
    let o = fx.probe(&["flood", &bytes.to_string()]).await;
    assert_eq!(o.exit_code, Some(0), "{}", describe(&o));
    assert!(
        !o.stdout.truncated && o.stdout.omitted_bytes == 0,
        "{}",
        describe(&o)
    );
    assert_eq!(
        (o.stdout.total_bytes, o.stdout.text.len() as u64),
        (bytes, bytes)
    );
}

#[tokio::test]
async fn stdin_is_closed_by_default() {
    let Some(fx) = Fixture::new("stdin_is_closed_by_default", &[]) else {
        return;
    };
    assert_holds(&fx.probe(&["stdin-closed"]).await);
}

/// Negative control: with data on stdin the probe reports it.
#[tokio::test]
async fn stdin_probe_reports_data() {
    let Some(fx) = Fixture::new("stdin_probe_reports_data", &[]) else {
        return;
    };
    let mut req = fx.request(&["stdin-closed"]);
    req.stdin = Some("data for the child\n".to_owned());
    assert_broken(&fx.run(&req).await);
}

/// A probe error is never mistaken for a verdict: an unknown probe exits 2.
#[test]
fn unknown_probe_is_an_error() {
    let out = Command::new(PROBE).arg("no-such-probe").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ERROR "));
}

/// A supervisor that is SIGKILLed cannot clean up; the next one removes what it left: the
/// run's descendants are killed and its cgroups removed.
#[tokio::test]
async fn orphans_of_a_killed_supervisor_are_swept_by_the_next_one() {
    if !super::harness::supported(
        "orphans_of_a_killed_supervisor_are_swept_by_the_next_one",
        &[Need::Seccomp, Need::Cgroup],
    ) {
        return;
    }
    let orphans = kill_a_supervisor_mid_run();
    assert!(
        !orphans.cgroups.is_empty(),
        "the run had no cgroup to sweep"
    );
    let removed = tierbox_sandbox::launch::sweep_orphaned_groups();
    let forked_dead = orphans.forked.dead_within(DEATH_GRACE);
    let left: Vec<String> = orphans
        .cgroups
        .iter()
        .filter(|d| d.exists())
        .map(|d| d.display().to_string())
        .collect();
    orphans.clean_up();
    assert!(removed >= 1, "nothing was swept");
    assert!(forked_dead, "the orphaned descendant survived the sweep");
    assert!(left.is_empty(), "cgroups left after the sweep: {left:?}");
}

/// Where [`supervisor_for_the_sweep_test`] keeps its state (shared with the test).
const HELPER_STATE_ENV: &str = "TIERBOX_PROBE_HELPER_STATE";

/// Not a test on its own: `a_killed_supervisors_bounded_tmp_is_swept` starts this test
/// binary again to run only this function, as a supervisor it SIGKILLs mid-run.
#[tokio::test]
#[ignore = "helper process of a_killed_supervisors_bounded_tmp_is_swept; does nothing on its own"]
async fn supervisor_for_the_sweep_test() {
    let (Some(workspace), Some(state)) = (
        std::env::var_os(HELPER_WORKSPACE_ENV),
        std::env::var_os(HELPER_STATE_ENV),
    ) else {
        return;
    };
    let Some(mut fx) = Fixture::in_workspace(
        "supervisor_for_the_sweep_test",
        &[Need::Root],
        Path::new(&workspace),
    ) else {
        return;
    };
    fx.use_state_dir(Path::new(&state));
    fx.policy.limits.timeout_ms = 30_000;
    let _ = fx.probe(&["hold", "hold.pid"]).await;
}

/// The tmpfs mounts below `dir`, from this process's mount table.
fn tmpfs_mounts_below(dir: &Path) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let point = fields.get(4)?;
            let fstype = fields.iter().skip_while(|f| **f != "-").nth(1)?;
            (Path::new(point).starts_with(dir) && *fstype == "tmpfs").then(|| (*point).to_owned())
        })
        .collect()
}

/// A Tier B run's `TMPDIR` is a size-limited tmpfs its root supervisor mounted; when the
/// supervisor is SIGKILLed mid-run the mount is left, and the next supervisor to use the
/// same state directory unmounts and removes it.
#[tokio::test]
async fn a_killed_supervisors_bounded_tmp_is_swept() {
    if !super::harness::supported(
        "a_killed_supervisors_bounded_tmp_is_swept",
        &[Need::Seccomp, Need::Root],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    std::fs::set_permissions(state.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let state_path = std::fs::canonicalize(state.path()).unwrap();
    let mut helper = Command::new(std::env::current_exe().unwrap())
        .args([
            "suite::tier_b_lifecycle::supervisor_for_the_sweep_test",
            "--exact",
            "--ignored",
            "--test-threads",
            "1",
        ])
        .env(HELPER_WORKSPACE_ENV, dir.path())
        .env(HELPER_STATE_ENV, &state_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pidfile = dir.path().join("hold.pid");
    let started = Instant::now();
    let text = loop {
        if let Ok(text) = std::fs::read_to_string(&pidfile) {
            break text;
        }
        if started.elapsed() > Duration::from_secs(20) || helper.try_wait().unwrap().is_some() {
            let _ = helper.kill();
            panic!("the helper supervisor never started the run");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mounted = tmpfs_mounts_below(&state_path);
    helper.kill().unwrap();
    helper.wait().unwrap();
    let n: Vec<&str> = text.split_whitespace().collect();
    for pair in [&n[..2], &n[2..4]] {
        if let Some(p) = ProcessId::parse_pair(&pair.join(" ")) {
            p.kill_if_alive();
        }
    }
    assert_eq!(mounted.len(), 1, "the live run's TMPDIR tmpfs: {mounted:?}");
    assert_eq!(
        tmpfs_mounts_below(&state_path),
        mounted,
        "left by the killed supervisor"
    );
    let removed = tierbox_sandbox::launch::sweep_orphaned_tmp(&state_path.join("tmp"));
    assert!(removed >= 1, "nothing was swept");
    assert!(
        tmpfs_mounts_below(&state_path).is_empty(),
        "mounts left after the sweep: {:?}",
        tmpfs_mounts_below(&state_path)
    );
    assert!(
        !Path::new(&mounted[0]).exists(),
        "the directory is gone too"
    );
}
