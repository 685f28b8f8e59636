//! Tier B, what a run can reach: files outside the workspace, the supervisor's
//! environment and descriptors, privileges, the network, and other processes.
//!
//! Every guarantee has a negative control next to it: the same probe with the layer
//! relaxed (or without the sandbox at all) must report `BROKEN`, so a probe that always
//! said `HOLDS` would be caught.

use std::io::ErrorKind;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use rustix::io::FdFlags;
use tierbox_policy::EgressMode;
use tierbox_policy::validate::{SYSTEM_READ_ONLY_PATHS, SYSTEM_SECRET_PATHS};

use super::harness::{
    CANARY, CANARY_VALUE, Fixture, HostIpc, NOBODY, Need, PATH_ARG, PATH_VAR, PROBE, assert_broken,
    assert_direct_broken, assert_holds, describe, report, skip,
};

// ---- reading outside the workspace -------------------------------------------------

#[tokio::test]
async fn secret_in_the_workspace_parent_cannot_be_read() {
    let Some(fx) = Fixture::new(
        "secret_in_the_workspace_parent_cannot_be_read",
        &[Need::Landlock],
    ) else {
        return;
    };
    assert_holds(
        &fx.run(&fx.request_with_path("read-denied", &fx.parent_secret))
            .await,
    );
    // Nor can the parent be listed (which would reveal what else is there).
    assert_holds(
        &fx.run(&fx.request_with_path("read-denied", &fx.parent))
            .await,
    );
}

#[tokio::test]
async fn secret_in_the_supervisor_home_cannot_be_read() {
    let Some(fx) = Fixture::new(
        "secret_in_the_supervisor_home_cannot_be_read",
        &[Need::Landlock],
    ) else {
        return;
    };
    // `HOME` is in `env.pass` and points at the fake home; the policy does not grant it,
    // so the run gets a private HOME and the real one stays out of reach.
    assert_eq!(fx.env.get("HOME"), Some(&fx.home.display().to_string()));
    assert_holds(
        &fx.run(&fx.request_with_path("read-denied", &fx.home_secret))
            .await,
    );
    assert_holds(&fx.run(&fx.request_with_path("read-denied", &fx.home)).await);
}

/// The documented carve-out: every host secret under the system paths that exists here.
#[tokio::test]
async fn host_secrets_under_the_system_paths_cannot_be_read() {
    let test = "host_secrets_under_the_system_paths_cannot_be_read";
    let Some(fx) = Fixture::new(test, &[Need::Landlock]) else {
        return;
    };
    let existing: Vec<&str> = SYSTEM_SECRET_PATHS
        .iter()
        .copied()
        .filter(|p| std::fs::metadata(p).is_ok())
        .collect();
    if existing.is_empty() {
        skip(test, "none of the listed host secrets exists here");
        return;
    }
    for secret in existing {
        assert_holds(
            &fx.run(&fx.request_with_path("read-denied", secret.as_ref()))
                .await,
        );
    }
}

/// Files under the system paths that only root may read are readable by a run that keeps
/// uid 0 (root supervisor, root-owned workspace): without capabilities it still passes
/// the owner (or group 0) permission check, and landlock grants the system paths except
/// the fixed [`SYSTEM_SECRET_PATHS`] list. So any root-only file not on that list leaks
/// (on the host these tests were written on: `/etc/default/cacerts`, `/etc/.pwd.lock`).
#[tokio::test]
async fn root_only_files_under_the_system_paths_cannot_be_read_as_uid_0() {
    let Some(fx) = Fixture::new(
        "root_only_files_under_the_system_paths_cannot_be_read_as_uid_0",
        &[Need::Landlock, Need::Root],
    ) else {
        return;
    };
    let mut candidates = Vec::new();
    for root in SYSTEM_READ_ONLY_PATHS {
        root_only_files(std::path::Path::new(root), &mut candidates);
    }
    let mut readable = Vec::new();
    for path in &candidates {
        let o = fx.run(&fx.request_with_path("read-denied", path)).await;
        if o.exit_code != Some(0) {
            readable.push(format!("{}: {}", path.display(), report(&o)));
        }
    }
    assert!(
        readable.is_empty(),
        "{} of {} root-only files are readable:\n{}",
        readable.len(),
        candidates.len(),
        readable.join("\n")
    );
}

/// Regular files below `dir` (symlinks not followed) that uid 0 / gid 0 can read through
/// plain permissions but others cannot, outside the carved-out secrets.
fn root_only_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if SYSTEM_SECRET_PATHS.iter().any(|s| path.starts_with(s)) {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            root_only_files(&path, out);
        } else if meta.is_file() {
            let mode = meta.mode();
            let root_can =
                (meta.uid() == 0 && mode & 0o400 != 0) || (meta.gid() == 0 && mode & 0o040 != 0);
            if root_can && mode & 0o004 == 0 {
                out.push(path);
            }
        }
    }
}

/// Negative control: a file the run may read is reported readable.
#[tokio::test]
async fn read_probe_reports_a_readable_workspace_file() {
    let Some(fx) = Fixture::new(
        "read_probe_reports_a_readable_workspace_file",
        &[Need::Landlock],
    ) else {
        return;
    };
    std::fs::write(fx.workspace.join("inside.txt"), "readable\n").unwrap();
    assert_broken(&fx.probe(&["read-denied", "inside.txt"]).await);
}

/// A probe error is not a pass: a target that does not exist proves nothing (exit 2).
#[tokio::test]
async fn read_probe_refuses_a_missing_target() {
    let Some(fx) = Fixture::new("read_probe_refuses_a_missing_target", &[]) else {
        return;
    };
    let o = fx.probe(&["read-denied", "no-such-file"]).await;
    assert!(
        o.exit_code == Some(2) && report(&o).starts_with("ERROR "),
        "{}",
        describe(&o)
    );
}

// ---- writing outside the workspace -------------------------------------------------

#[tokio::test]
async fn nothing_outside_the_workspace_can_be_written() {
    let Some(fx) = Fixture::new(
        "nothing_outside_the_workspace_can_be_written",
        &[Need::Landlock],
    ) else {
        return;
    };
    let victim = fx.parent.join("victim.txt");
    std::fs::write(&victim, "original\n").unwrap();
    let real_home = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .filter(|h| h.is_dir());
    let mut targets = vec![
        victim.clone(),
        fx.parent.clone(),
        fx.home.clone(),
        fx.home_secret.clone(),
    ];
    targets.extend(real_home);
    // A root supervisor's run has a /tmp of its own, which it may write (what reaches
    // the host's is `a_root_supervisors_tier_b_run_has_a_tmp_of_its_own`'s).
    if tierbox_sandbox::probe::host_facts().euid != 0 {
        targets.push(std::env::temp_dir());
    }
    for target in &targets {
        let o = fx.run(&fx.request_with_path("write-denied", target)).await;
        assert_holds(&o);
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "original\n");
    assert_eq!(
        std::fs::read_dir(&fx.parent).unwrap().count(),
        4,
        "only ws, home, the secret and the victim are in the parent"
    );
}

/// Negative control: the same attempts inside the workspace succeed and are reported.
#[tokio::test]
async fn write_probe_reports_a_writable_workspace() {
    let Some(fx) = Fixture::new(
        "write_probe_reports_a_writable_workspace",
        &[Need::Landlock],
    ) else {
        return;
    };
    std::fs::create_dir(fx.workspace.join("sub")).unwrap();
    std::fs::write(fx.workspace.join("sub/file.txt"), "x\n").unwrap();
    assert_broken(&fx.probe(&["write-denied", "sub/file.txt"]).await);
}

// ---- metadata outside the workspace --------------------------------------------------

/// In the configuration SECURITY.md recommends for a root supervisor (a non-root
/// workspace owner), a run cannot change the mode of files outside the workspace.
#[tokio::test]
async fn non_root_run_cannot_chmod_outside_the_workspace() {
    let Some(fx) = Fixture::new(
        "non_root_run_cannot_chmod_outside_the_workspace",
        &[Need::Root],
    ) else {
        return;
    };
    fx.chown_workspace(NOBODY);
    for target in [
        fx.parent_secret.as_path(),
        fx.home_secret.as_path(),
        "/etc/passwd".as_ref(),
    ] {
        let o = fx.run(&fx.request_with_path("chmod-denied", target)).await;
        assert_eq!(o.enforcement.uid, Some(NOBODY), "{}", describe(&o));
        assert_holds(&o);
    }
    // Negative control: the run's own workspace can be chmodded.
    assert_broken(&fx.probe(&["chmod-denied", "."]).await);
}

/// Landlock does not mediate chmod, so without mediation a run could change the mode of
/// any file its uid owns, anywhere it can name it (a user's `~/.ssh`, say). Here the run is
/// uid 65534 and the target, outside every grant, is owned by 65534 too: DAC alone would
/// allow it; the supervisor's mediation refuses it. The run's private `TMPDIR` is a writable
/// grant, so chmod there works (negative control).
#[tokio::test]
async fn non_root_run_cannot_chmod_its_own_files_outside_its_grants() {
    let Some(fx) = Fixture::new(
        "non_root_run_cannot_chmod_its_own_files_outside_its_grants",
        &[Need::Root, Need::Landlock],
    ) else {
        return;
    };
    fx.chown_workspace(NOBODY);
    let owned_outside = fx.parent.join("owned-by-the-run-user");
    std::fs::write(&owned_outside, "x").unwrap();
    std::os::unix::fs::chown(&owned_outside, Some(NOBODY), Some(NOBODY)).unwrap();
    let o = fx
        .run(&fx.request_with_path("chmod-denied", &owned_outside))
        .await;
    assert_eq!(o.enforcement.uid, Some(NOBODY), "{}", describe(&o));
    assert_holds(&o);
    // Negative control: the run's own TMPDIR (a writable grant) can be chmodded.
    assert_broken(&fx.probe(&["chmod-denied", "env:TMPDIR"]).await);
}

/// Regression test for a gap in SECURITY.md's "metadata changes as uid 0" non-goal, which
/// says a uid-0 run "could change the mode of root-owned files it can read". Landlock has
/// no right for chmod at all, so the run can change the mode of files landlock *hides*
/// from it as well: the secret next to the workspace, the supervisor's `~/.ssh`, and
/// `/etc/shadow` (so `chmod 0644 /etc/shadow` or `chmod u+s` on any root-owned binary
/// works from a run). The probe only sets the mode a file already has.
#[tokio::test]
async fn uid0_run_cannot_chmod_files_landlock_hides() {
    let Some(fx) = Fixture::new(
        "uid0_run_cannot_chmod_files_landlock_hides",
        &[Need::Root, Need::Landlock],
    ) else {
        return;
    };
    // Both are unreadable to the run (see the read-denied tests).
    for target in [&fx.parent_secret, &fx.home_secret] {
        let o = fx.run(&fx.request_with_path("chmod-denied", target)).await;
        assert_eq!(o.enforcement.uid, Some(0), "{}", describe(&o));
        assert_holds(&o);
    }
}

/// A uid-0 run's chmod calls are performed by the supervisor only beneath the workspace:
/// a symlink pointing out, a `..` escape, an absolute path and `fchmod` on a file opened
/// read-only outside all fail; the same calls inside the workspace work (negative
/// control: the probe reports BROKEN there).
#[tokio::test]
async fn uid0_chmod_mediation_refuses_every_way_out() {
    let Some(fx) = Fixture::new(
        "uid0_chmod_mediation_refuses_every_way_out",
        &[Need::Root, Need::Landlock],
    ) else {
        return;
    };
    let link = fx.workspace.join("link-out");
    std::os::unix::fs::symlink(&fx.parent_secret, &link).unwrap();
    let secret_name = fx.parent_secret.file_name().unwrap().to_owned();
    let dotdot = PathBuf::from("..").join(&secret_name);
    for target in [link.clone(), dotdot, fx.parent_secret.clone()] {
        let o = fx.run(&fx.request_with_path("chmod-denied", &target)).await;
        assert_eq!(o.enforcement.uid, Some(0), "{}", describe(&o));
        assert_holds(&o);
    }
    let o = fx
        .run(&fx.request_with_path("fchmod-denied", Path::new("/etc/hostname")))
        .await;
    assert_holds(&o);
    // Inside the workspace the same probes must be able to change the mode.
    let inside = fx.workspace.join("inside.txt");
    std::fs::write(&inside, "x").unwrap();
    for probe in ["chmod-denied", "fchmod-denied"] {
        let o = fx.run(&fx.request_with_path(probe, &inside)).await;
        assert_broken(&o);
    }
}

// ---- the supervisor's environment ----------------------------------------------------

/// Variables the child has by design: the fixed PATH, its private HOME and TMPDIR.
const SANDBOX_SET: &[&str] = &["PATH", "HOME", "TMPDIR", "TMP", "TEMP"];

/// Most names checked in one run (a request takes at most 128 arguments).
const MAX_NAMES_CHECKED: usize = 100;

/// Neither the canary (only in the supervisor environment `validate` sees) nor any
/// variable of this test process's real environment (Cargo's `CARGO_*`, the harness's
/// own) reaches the run, except what the policy passes or the sandbox sets.
#[tokio::test]
async fn supervisor_environment_does_not_leak() {
    let Some(fx) = Fixture::new("supervisor_environment_does_not_leak", &[]) else {
        return;
    };
    assert!(
        !fx.policy.env.pass.iter().any(|n| n == CANARY) && !fx.policy.env.set.contains_key(CANARY)
    );
    let allowed = |n: &str| {
        SANDBOX_SET.contains(&n)
            || fx.policy.env.pass.iter().any(|p| p == n)
            || fx.policy.env.set.contains_key(n)
    };
    let real: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|n| !allowed(n) && !n.is_empty() && n.len() <= 128)
        .take(MAX_NAMES_CHECKED)
        .collect();
    assert!(
        !real.is_empty(),
        "the test process has no variable of its own to check, so the check would prove nothing"
    );
    let mut args = vec!["env-absent", CANARY];
    args.extend(real.iter().map(String::as_str));
    assert_holds(&fx.probe(&args).await);
}

/// Negative control: a variable the policy passes is reported present.
#[tokio::test]
async fn env_probe_reports_a_passed_variable() {
    let Some(mut fx) = Fixture::new("env_probe_reports_a_passed_variable", &[]) else {
        return;
    };
    fx.policy.env.pass.push(CANARY.to_owned());
    assert_broken(&fx.probe(&["env-absent", CANARY]).await);
}

/// Values of variables the policy marks sensitive never leave the runner, on either
/// stream, even when the run prints them.
#[tokio::test]
async fn sensitive_values_are_redacted_from_output() {
    // Neither looks like a credential, so only the sensitive list can redact it (a name
    // with TOKEN or a value with "secret" in it would be caught by the generic patterns).
    const TOKEN: &str = "TIERBOX_PROBE_LABEL";
    const VALUE: &str = "plain-words-label-for-the-redaction-test";
    let Some(mut fx) = Fixture::new("sensitive_values_are_redacted_from_output", &[]) else {
        return;
    };
    fx.env.insert(TOKEN.to_owned(), VALUE.to_owned());
    fx.policy.env.pass.push(TOKEN.to_owned());
    fx.policy.env.sensitive.push(TOKEN.to_owned());
    let o = fx.probe(&["print-env", TOKEN]).await;
    assert_eq!(o.exit_code, Some(0), "{}", describe(&o));
    assert!(
        !o.stdout.text.contains(VALUE) && !o.stderr.text.contains(VALUE),
        "the secret value leaked:\n{}",
        describe(&o)
    );
    assert!(
        o.redacted && o.stdout.redacted && o.stderr.redacted,
        "{}",
        describe(&o)
    );

    // Negative control: not marked sensitive, the same value comes through.
    fx.policy.env.sensitive.clear();
    let o = fx.probe(&["print-env", TOKEN]).await;
    assert!(
        o.stdout.text.contains(VALUE) && !o.redacted,
        "{}",
        describe(&o)
    );
}

// ---- inherited descriptors -----------------------------------------------------------

#[tokio::test]
async fn descriptor_leaked_without_cloexec_is_not_inherited() {
    let Some(fx) = Fixture::new("descriptor_leaked_without_cloexec_is_not_inherited", &[]) else {
        return;
    };
    // The supervisor "leaks" a descriptor to a secret: open, then clear FD_CLOEXEC.
    let leaked = std::fs::File::open(&fx.parent_secret).unwrap();
    rustix::io::fcntl_setfd(&leaked, FdFlags::empty()).unwrap();
    assert!(
        !rustix::io::fcntl_getfd(&leaked)
            .unwrap()
            .contains(FdFlags::CLOEXEC)
    );
    let n = leaked.as_raw_fd().to_string();
    assert_holds(&fx.probe(&["fd-closed", &n]).await);

    // Negative control: without the sandbox the same descriptor is inherited.
    assert_direct_broken(&fx.direct(&["fd-closed", &n]));
    drop(leaked);
}

// ---- privileges ----------------------------------------------------------------------

/// SECURITY.md: "every capability set cleared (bounding, ambient, effective, permitted,
/// inheritable)", and the outcome's `enforcement.capabilities` says so for every run.
/// (Under a non-root supervisor the bounding set is not cleared — it cannot be without
/// `CAP_SETPCAP` — and this test fails: run the suite as non-root to see it.)
#[tokio::test]
async fn run_has_no_capabilities_and_no_new_privs() {
    let Some(fx) = Fixture::new("run_has_no_capabilities_and_no_new_privs", &[]) else {
        return;
    };
    let o = fx.probe(&["no-caps"]).await;
    assert_holds(&o);
    assert!(o.enforcement.no_new_privs, "{}", describe(&o));
    // Otherwise, in a long-lived supervisor the chmod hand-off comes with the other filters from the
    // slot's launcher thread (the child attaches nothing): `pooled.rs` covers that path.
    // Without pooling the child attaches the hand-off filter on top of what it inherits,
    // or, on a host with audit enabled (where the unpooled launcher thread, armed without
    // the log flags, is skipped), the whole filter itself.
    // A run with a private /tmp and /dev/shm (a root supervisor's) makes its mount
    // namespace before it restricts itself, so unpooled it inherits no filter and
    // attaches the whole one; pooled, its slot's launcher thread made the namespace
    // before arming itself (the fixture's workspace is not beneath /tmp), and the child
    // inherits both.
    let detail = &o.enforcement.seccomp.detail;
    let private_mounts = o
        .enforcement
        .namespaces
        .iter()
        .any(|n| n.starts_with("mount: a private /tmp"));
    if private_mounts && !crate::POOLED {
        assert!(
            !detail.contains("inherited from the launcher thread"),
            "{detail}"
        );
    } else if detail.contains("chmod performed by the supervisor") {
        let attaches_nothing = detail.contains("inherited from the launcher thread")
            && !detail.contains("hand-off filter");
        assert_eq!(attaches_nothing, crate::POOLED, "{detail}");
    }
}

/// Negative control: root outside the sandbox has capabilities and no filter.
#[tokio::test]
async fn caps_probe_reports_root_outside_the_sandbox() {
    let Some(fx) = Fixture::new("caps_probe_reports_root_outside_the_sandbox", &[Need::Root])
    else {
        return;
    };
    assert_direct_broken(&fx.direct(&["no-caps"]));
}

#[tokio::test]
async fn ptrace_and_process_vm_readv_are_denied() {
    let Some(fx) = Fixture::new("ptrace_and_process_vm_readv_are_denied", &[]) else {
        return;
    };
    assert_holds(&fx.probe(&["no-ptrace"]).await);
    // Negative control: both work without the sandbox.
    assert_direct_broken(&fx.direct(&["no-ptrace"]));
}

#[tokio::test]
async fn user_namespaces_are_denied() {
    let Some(fx) = Fixture::new("user_namespaces_are_denied", &[]) else {
        return;
    };
    assert_holds(&fx.probe(&["no-userns"]).await);
}

/// Negative control: root outside the sandbox can create a user namespace.
#[tokio::test]
async fn userns_probe_reports_root_outside_the_sandbox() {
    let Some(fx) = Fixture::new(
        "userns_probe_reports_root_outside_the_sandbox",
        &[Need::Root],
    ) else {
        return;
    };
    assert_direct_broken(&fx.direct(&["no-userns"]));
}

/// `no_new_privs`: a setuid-root binary run by a non-root run gains nothing. The binary
/// is a setuid-root copy of the probe in a directory the policy makes readable.
#[tokio::test]
async fn setuid_binary_gains_nothing() {
    let Some(mut fx) = Fixture::new("setuid_binary_gains_nothing", &[Need::Root]) else {
        return;
    };
    let (_dir, suid) = setuid_probe_copy();
    fx.policy
        .filesystem
        .read_only
        .push(suid.parent().unwrap().display().to_string());
    fx.chown_workspace(NOBODY);
    let o = fx.run(&fx.request_with_path("setuid-exec", &suid)).await;
    assert_eq!(o.enforcement.uid, Some(NOBODY), "{}", describe(&o));
    assert_holds(&o);
    assert!(
        report(&o).contains("euid=65534"),
        "the setuid binary did not run:\n{}",
        describe(&o)
    );

    // Negative control: the same uid outside the sandbox does become root.
    use std::os::unix::process::CommandExt;
    let out = std::process::Command::new(PROBE)
        .args(["setuid-exec", suid.to_str().unwrap()])
        .current_dir("/")
        .uid(NOBODY)
        .gid(NOBODY)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_direct_broken(&out);
}

/// A setuid-root copy of the probe in a fresh world-readable directory (kept alive by the
/// returned guard).
fn setuid_probe_copy() -> (tempfile::TempDir, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let suid = std::fs::canonicalize(dir.path())
        .unwrap()
        .join("tierbox-probe-suid");
    std::fs::copy(PROBE, &suid).unwrap();
    std::os::unix::fs::chown(&suid, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    (dir, suid)
}

#[tokio::test]
async fn core_dumps_are_disabled() {
    let Some(fx) = Fixture::new("core_dumps_are_disabled", &[]) else {
        return;
    };
    assert_holds(&fx.probe(&["no-core"]).await);
}

/// Negative control: root outside the sandbox can raise its core limit.
#[tokio::test]
async fn core_probe_reports_root_outside_the_sandbox() {
    let Some(fx) = Fixture::new("core_probe_reports_root_outside_the_sandbox", &[Need::Root])
    else {
        return;
    };
    assert_direct_broken(&fx.direct(&["no-core"]));
}

/// The seccomp deny-list: each call that an unprivileged process could otherwise make is
/// refused by the filter itself (`EPERM`), not by some incidental check.
#[tokio::test]
async fn kernel_attack_surface_is_denied() {
    let Some(fx) = Fixture::new("kernel_attack_surface_is_denied", &[]) else {
        return;
    };
    let o = fx.probe(&["no-kernel-surface"]).await;
    assert_holds(&o);
    for call in [
        "io_uring_setup",
        "userfaultfd",
        "keyctl",
        "bpf",
        "perf_event_open",
        "personality",
        "name_to_handle_at",
    ] {
        assert!(
            report(&o).contains(&format!("{call}: EPERM")),
            "{call} was not refused by the filter:\n{}",
            describe(&o)
        );
    }
}

/// No sysctl can be written and `kernel.core_pattern` and `/proc/sysrq-trigger` do not
/// open for writing, even for a run that keeps uid 0 (root supervisor, root-owned
/// workspace): Tier B has no mount namespace, so landlock (which grants `/proc` read-only)
/// is the layer that holds. Negative control: root outside the sandbox can.
#[tokio::test]
async fn kernel_knobs_cannot_be_written() {
    let Some(fx) = Fixture::new("kernel_knobs_cannot_be_written", &[Need::Landlock]) else {
        return;
    };
    assert_holds(&fx.probe(&["kernel-knobs"]).await);
    if rustix::process::geteuid().is_root() {
        assert_direct_broken(&fx.direct(&["kernel-knobs"]));
    }
}

/// The host's SysV IPC is out of reach, even for a run that keeps uid 0 (root
/// supervisor, root-owned workspace), whose uid owns root's mode-0600 objects: Tier B has
/// no IPC namespace, so the seccomp filter refuses the SysV IPC and message queue calls.
/// Regression: a Tier B run read, overwrote and drained root's shared memory and message
/// queue. Negative control: outside the sandbox the probe finds all three.
#[tokio::test]
async fn host_sysv_ipc_is_out_of_reach() {
    let Some(fx) = Fixture::new("host_sysv_ipc_is_out_of_reach", &[]) else {
        return;
    };
    let ipc = HostIpc::create(1);
    let key = ipc.key.to_string();
    let o = fx.probe(&["no-host-ipc", &key]).await;
    assert_holds(&o);
    assert!(
        report(&o).contains("shmget: EPERM") && report(&o).contains("msgget: EPERM"),
        "the IPC calls are not refused by the filter itself: {}",
        describe(&o)
    );
    assert!(
        o.enforcement.seccomp.detail.contains("SysV IPC"),
        "{}",
        describe(&o)
    );
    assert_direct_broken(&fx.direct(&["no-host-ipc", &key]));
}

/// Negative control: root outside the sandbox can make those calls.
#[tokio::test]
async fn kernel_surface_probe_reports_root_outside_the_sandbox() {
    let Some(fx) = Fixture::new(
        "kernel_surface_probe_reports_root_outside_the_sandbox",
        &[Need::Root],
    ) else {
        return;
    };
    assert_direct_broken(&fx.direct(&["no-kernel-surface"]));
}

/// A root supervisor runs the child as the workspace owner, with that owner's gid and no
/// supplementary groups (root's groups would open group-readable files); the outcome
/// reports the identity that actually ran.
#[tokio::test]
async fn run_executes_as_the_workspace_owner_without_groups() {
    let Some(fx) = Fixture::new(
        "run_executes_as_the_workspace_owner_without_groups",
        &[Need::Root],
    ) else {
        return;
    };
    fx.chown_workspace(NOBODY);
    let o = fx.probe(&["whoami"]).await;
    assert_eq!(
        report(&o),
        "DONE whoami: uid=65534 euid=65534 gid=65534 egid=65534 groups=[]",
        "{}",
        describe(&o)
    );
    assert_eq!(
        (o.enforcement.uid, o.enforcement.gid),
        (Some(NOBODY), Some(NOBODY)),
        "{}",
        describe(&o)
    );

    // Negative control: a root-owned workspace keeps uid 0, and the probe shows it.
    let Some(root_fx) = Fixture::new(
        "run_executes_as_the_workspace_owner_without_groups",
        &[Need::Root],
    ) else {
        return;
    };
    let o = root_fx.probe(&["whoami"]).await;
    assert!(
        report(&o).starts_with("DONE whoami: uid=0 euid=0"),
        "{}",
        describe(&o)
    );
    assert_eq!(o.enforcement.uid, Some(0), "{}", describe(&o));
}

// ---- other processes -----------------------------------------------------------------

#[tokio::test]
async fn processes_outside_the_run_cannot_be_signalled() {
    let Some(fx) = Fixture::new(
        "processes_outside_the_run_cannot_be_signalled",
        &[Need::LandlockScopes],
    ) else {
        return;
    };
    let supervisor = std::process::id().to_string();
    // The supervisor, and init. As root (same uid, no capabilities needed) only landlock's
    // signal scoping stops these.
    assert_holds(&fx.probe(&["no-signal-outside", &supervisor]).await);
    assert_holds(&fx.probe(&["no-signal-outside", "1"]).await);
    // Negative control: without the sandbox the supervisor can be signalled.
    assert_direct_broken(&fx.direct(&["no-signal-outside", &supervisor]));
}

#[tokio::test]
async fn supervisor_environ_and_memory_are_unreadable() {
    let Some(fx) = Fixture::new(
        "supervisor_environ_and_memory_are_unreadable",
        &[Need::Landlock],
    ) else {
        return;
    };
    let supervisor = std::process::id().to_string();
    let o = fx.probe(&["proc-environ", &supervisor]).await;
    assert_holds(&o);
    assert!(!o.stdout.text.contains(CANARY_VALUE), "{}", describe(&o));
    // Negative control: without the sandbox the same reads work.
    assert_direct_broken(&fx.direct(&["proc-environ", &supervisor]));
}

#[tokio::test]
async fn terminal_injection_is_denied() {
    let Some(fx) = Fixture::new("terminal_injection_is_denied", &[]) else {
        return;
    };
    let o = fx.probe(&["no-tiocsti"]).await;
    assert_holds(&o);
    // stdin is /dev/null, so without the filter TIOCSTI on fd 0 would fail with ENOTTY;
    // EPERM shows the filter refused the call before any terminal was looked at.
    assert!(
        report(&o).contains("fd 0: EPERM"),
        "TIOCSTI is not refused by the seccomp filter:\n{}",
        describe(&o)
    );
}

/// Negative control: outside the sandbox, root can push input into a terminal (a pty the
/// test owns) — unless the host disabled TIOCSTI altogether.
#[tokio::test]
async fn tiocsti_probe_reports_a_terminal_outside_the_sandbox() {
    let test = "tiocsti_probe_reports_a_terminal_outside_the_sandbox";
    let Some(fx) = Fixture::new(test, &[Need::Root]) else {
        return;
    };
    if std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti").is_ok_and(|v| v.trim() == "0") {
        skip(
            test,
            "dev.tty.legacy_tiocsti = 0: the kernel refuses TIOCSTI for everyone",
        );
        return;
    }
    let (master, slave) = tierbox_test_support::open_pty();
    let out = std::process::Command::new(PROBE)
        .arg("no-tiocsti")
        .current_dir(&fx.workspace)
        .stdin(slave)
        .output()
        .unwrap();
    assert_direct_broken(&out);
    drop(master);
}

// ---- network -------------------------------------------------------------------------

#[tokio::test]
async fn network_is_denied() {
    let Some(fx) = Fixture::new("network_is_denied", &[]) else {
        return;
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    assert_holds(&fx.probe(&["no-net", &port]).await);
    let accepted = listener.accept();
    assert!(
        matches!(&accepted, Err(e) if e.kind() == ErrorKind::WouldBlock),
        "the listener accepted a connection from the sandbox: {accepted:?}"
    );
}

/// Negative control: with `egress.mode = "allow_all"` the same probe connects.
#[tokio::test]
async fn net_probe_reports_an_open_network() {
    let Some(mut fx) = Fixture::new("net_probe_reports_an_open_network", &[]) else {
        return;
    };
    fx.policy.egress.mode = EgressMode::AllowAll;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    assert_broken(&fx.probe(&["no-net", &port]).await);
    assert!(
        listener.accept().is_ok(),
        "the probe reported a connection the listener never saw"
    );
}

/// `preflight` and `allow_all` runs of one workspace share a launch slot (same grants)
/// but not a seccomp filter: only `allow_all` may make unix sockets. In a long-lived
/// supervisor (`pooled.rs`) the slot's launcher thread holds the filter it was armed
/// with, so alternating the modes must re-arm it, never hand a run the other mode's.
#[tokio::test]
async fn alternating_egress_modes_on_one_workspace_each_get_their_filter() {
    let Some(mut fx) = Fixture::new(
        "alternating_egress_modes_on_one_workspace_each_get_their_filter",
        &[],
    ) else {
        return;
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    for mode in [
        EgressMode::Preflight,
        EgressMode::AllowAll,
        EgressMode::Preflight,
        EgressMode::AllowAll,
    ] {
        fx.policy.egress.mode = mode;
        let o = fx.probe(&["no-net", &port]).await;
        let unix = o
            .stdout
            .text
            .contains("socket(AF_UNIX, SOCK_STREAM): SUCCEEDED");
        assert_eq!(
            unix,
            mode == EgressMode::AllowAll,
            "{mode:?}: {}",
            describe(&o)
        );
    }
}

// The `env:` indirection is what lets these tests reach the kernel layers at all: a path
// the run does not see, as a plain argument, is refused by validation before anything
// runs.
#[tokio::test]
async fn paths_outside_the_workspace_are_refused_as_arguments() {
    let Some(fx) = Fixture::new("paths_outside_the_workspace_are_refused_as_arguments", &[]) else {
        return;
    };
    let ctx = tierbox_policy::ValidateContext::new(&fx.workspace).with_env(fx.env.clone());
    // The fixture's parent lies in /tmp, which as an argument names the run's own private
    // /tmp, not the host's: a path outside the workspace that no run sees lies elsewhere.
    // A target directory under /tmp (a checkout there) gives way to /var/tmp.
    let target_tmp = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let base = if std::fs::canonicalize(target_tmp).is_ok_and(|t| t.starts_with("/tmp")) {
        std::path::Path::new("/var/tmp")
    } else {
        target_tmp
    };
    let elsewhere = tempfile::tempdir_in(base).expect("tempdir");
    let secret = std::fs::canonicalize(elsewhere.path())
        .expect("canonical tempdir")
        .join("secret.txt");
    std::fs::write(&secret, "secret\n").expect("write secret");
    let req = fx.request(&["read-denied", secret.to_str().unwrap()]);
    let err = tierbox_policy::validate(&fx.policy, &req, &ctx).unwrap_err();
    assert_eq!(err.code(), "scope.path_outside_workspace", "{err}");
    let req = fx.request(&["read-denied", "/etc/shadow"]);
    let err = tierbox_policy::validate(&fx.policy, &req, &ctx).unwrap_err();
    assert_eq!(err.code(), "scope.path_secret", "{err}");
    assert_eq!(
        fx.request_with_path("read-denied", &fx.parent_secret)
            .env
            .get(PATH_VAR)
            .map(String::as_str),
        fx.parent_secret.to_str()
    );
    assert_eq!(PATH_ARG, format!("env:{PATH_VAR}"));
}

/// A request's environment values appear in no command line a Tier B run can read —
/// every process of the host — while another run holds them: here a Tier C run on the
/// bwrap backend, whose helper took its environment as `--setenv NAME VALUE` arguments.
/// Negative control: a host process with the value among its arguments is found.
///
/// Regression: the bwrap backend passed the environment in bwrap's argv, and the
/// container backends as `--env NAME=VALUE`; `/proc/<pid>/cmdline` is world-readable.
#[tokio::test]
async fn request_env_values_are_in_no_command_line() {
    let test = "request_env_values_are_in_no_command_line";
    let Some(scan) = Fixture::new(test, &[]) else {
        return;
    };
    let Some(mut held) = Fixture::tier_c(test, &[], tierbox_policy::TierCBackend::Bwrap) else {
        return;
    };
    held.policy.limits.timeout_ms = 3_000;
    let secret = format!(
        "tbx-secret-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let scan_request = || {
        let mut r = scan.request(&["no-secret-in-cmdlines"]);
        r.env
            .insert("TIERBOX_PROBE_NEEDLE".to_owned(), secret.clone());
        r
    };

    let pidfile = held.workspace.join("held.pid");
    let marker = pidfile.display().to_string();
    let mut hold = held.request(&["hold", &marker]);
    hold.env.insert("SECRET_TOKEN".to_owned(), secret.clone());
    let scan_while_held = async {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while !pidfile.exists() && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(pidfile.exists(), "the held run did not start");
        scan.run(&scan_request()).await
    };
    let (_, o) = tokio::join!(held.run(&hold), scan_while_held);
    assert_eq!(o.tier, tierbox_policy::Tier::B, "{}", describe(&o));
    assert_holds(&o);

    // Negative control: the value in a host process's arguments is seen.
    let mut control = std::process::Command::new("sh")
        .args(["-c", "sleep 3", &secret])
        .spawn()
        .unwrap();
    let o = scan.run(&scan_request()).await;
    let _ = control.kill();
    let _ = control.wait();
    assert_broken(&o);
}
