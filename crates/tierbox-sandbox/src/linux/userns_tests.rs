//! User-namespace tests: the pure map lines and explanations, a real child mapped from
//! its parent, the live probe, and (only with `TIERBOX_TEST_SYSCTL=1`, as root) the probe
//! with `user.max_user_namespaces` turned off.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Mutex, MutexGuard};

use super::*;
use crate::linux::sys::test_support as ts;

/// Serialises the tests that create user namespaces with the one that disables them.
static USERNS_LOCK: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    USERNS_LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn permissive() -> SysctlFacts {
    SysctlFacts {
        unprivileged_userns_clone: Some(1),
        apparmor_restrict: Some(0),
        namespace_limits: NAMESPACE_LIMIT_SYSCTLS
            .iter()
            .map(|p| (*p, Some(96_365)))
            .collect(),
        seccomp_mode: Some(0),
        privileged: false,
    }
}

#[test]
fn id_map_lines_are_one_id_each() {
    assert_eq!(id_map_lines(1000, 4242), "1000 4242 1\n");
    assert_eq!(id_map_lines(0, 0), "0 0 1\n");
}

#[test]
fn sysctl_keys_come_from_their_files() {
    assert_eq!(
        sysctl_key(SYSCTL_UNPRIVILEGED_USERNS_CLONE),
        "kernel.unprivileged_userns_clone"
    );
    assert_eq!(
        sysctl_key("/proc/sys/user/max_user_namespaces"),
        "user.max_user_namespaces"
    );
}

#[test]
fn explanations_name_the_sysctl_and_its_value() {
    let eperm = NsProbeFailure::Unshare(libc::EPERM);

    let mut f = permissive();
    f.unprivileged_userns_clone = Some(0);
    let r = explain(eperm, &f);
    assert!(
        r.starts_with(
            "unprivileged user namespaces are disabled: kernel.unprivileged_userns_clone=0 \
             (/proc/sys/kernel/unprivileged_userns_clone)"
        ),
        "{r}"
    );
    // The unprivileged-only switch does not explain a privileged caller's failure.
    f.privileged = true;
    let r = explain(eperm, &f);
    assert!(
        !r.starts_with("unprivileged user namespaces are disabled"),
        "{r}"
    );

    let mut f = permissive();
    f.namespace_limits[0].1 = Some(0);
    let r = explain(NsProbeFailure::Unshare(libc::ENOSPC), &f);
    assert!(
        r.starts_with(
            "user namespaces are disabled: user.max_user_namespaces=0 \
             (/proc/sys/user/max_user_namespaces)"
        ),
        "{r}"
    );
    let mut f = permissive();
    f.namespace_limits[3].1 = Some(0);
    let r = explain(NsProbeFailure::Unshare(libc::ENOSPC), &f);
    assert!(
        r.starts_with("net namespaces are disabled: user.max_net_namespaces=0"),
        "{r}"
    );

    let mut f = permissive();
    f.apparmor_restrict = Some(1);
    let r = explain(NsProbeFailure::MountTmpfs(libc::EPERM), &f);
    assert!(
        r.starts_with(
            "AppArmor restricts unprivileged user namespaces: \
             kernel.apparmor_restrict_unprivileged_userns=1"
        ),
        "{r}"
    );
    assert!(
        r.contains("mounting a tmpfs in a new user namespace failed with EPERM"),
        "{r}"
    );

    // Permissive sysctls: seccomp or the container is to blame, and the reason says so.
    let mut f = permissive();
    f.seccomp_mode = Some(2);
    let r = explain(eperm, &f);
    assert!(
        r.contains("failed with EPERM although the sysctls allow user namespaces"),
        "{r}"
    );
    assert!(r.contains("kernel.unprivileged_userns_clone=1"), "{r}");
    assert!(r.contains("seccomp filter"), "{r}");
    let r = explain(eperm, &permissive());
    assert!(r.contains("container runtime or LSM policy"), "{r}");

    let r = explain(NsProbeFailure::Unshare(libc::EUSERS), &permissive());
    assert!(r.contains("nested too deeply"), "{r}");
    let r = explain(NsProbeFailure::Unshare(libc::ENOSPC), &permissive());
    assert!(r.contains("limit is exhausted"), "{r}");
}

/// A child enters a new user namespace; the parent writes its maps (uid and gid 1000
/// inside → our euid/egid outside); the child sees itself as 1000:1000.
#[test]
fn parent_maps_a_child_to_uid_1000() {
    let _g = lock();
    if !probe_userns().is_available() {
        tierbox_test_support::skip_here("user namespaces unavailable here");
        return;
    }
    let (ready_r, ready_w) = ts::pipe();
    let (go_r, go_w) = ts::pipe();
    let pid = ts::fork_child(|| {
        if ts::unshare(libc::CLONE_NEWUSER).is_err() {
            return 10;
        }
        if crate::linux::sys::write_all_raw(ready_w, b"r").is_err() {
            return 11;
        }
        let mut buf = [0u8; 1];
        if ts::read(go_r, &mut buf) != Ok(1) {
            return 12;
        }
        let (ruid, euid, suid) = ts::getresuid();
        let (rgid, egid, sgid) = ts::getresgid();
        if (ruid, euid, suid) != (1000, 1000, 1000) {
            return 20;
        }
        if (rgid, egid, sgid) != (1000, 1000, 1000) {
            return 21;
        }
        0
    });
    ts::close(ready_w);
    ts::close(go_r);
    let mut buf = [0u8; 1];
    assert_eq!(ts::read(ready_r, &mut buf), Ok(1), "child did not unshare");
    // SAFETY-free: plain libc getters.
    let (euid, egid) = (
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    );
    let maps = IdMaps {
        inside_uid: 1000,
        outside_uid: euid,
        inside_gid: 1000,
        outside_gid: egid,
    };
    let written = write_id_maps(pid, &maps);
    crate::linux::sys::write_all_raw(go_w, b"g").unwrap();
    ts::close(go_w);
    ts::close(ready_r);
    let code = ts::wait_exit(pid);
    written.unwrap();
    assert_eq!(code, 0, "child exit code (20: wrong uid, 21: wrong gid)");
    // Maps can be written only once.
    let (r2, w2) = ts::pipe();
    let (g2r, g2w) = ts::pipe();
    let pid = ts::fork_child(|| {
        if ts::unshare(libc::CLONE_NEWUSER).is_err() {
            return 10;
        }
        let _ = crate::linux::sys::write_all_raw(w2, b"r");
        let mut buf = [0u8; 1];
        let _ = ts::read(g2r, &mut buf);
        0
    });
    ts::close(w2);
    ts::close(g2r);
    assert_eq!(ts::read(r2, &mut buf), Ok(1));
    write_id_maps(pid, &maps).unwrap();
    let again = write_id_maps(pid, &maps).unwrap_err();
    assert!(again.to_string().contains("uid_map"), "{again}");
    crate::linux::sys::write_all_raw(g2w, b"g").unwrap();
    ts::close(g2w);
    ts::close(r2);
    assert_eq!(ts::wait_exit(pid), 0);
}

#[test]
fn probe_reports_this_host() {
    let _g = lock();
    let start = std::time::Instant::now();
    let support = probe_userns();
    println!("probe_userns: {support:?} in {:?}", start.elapsed());
    println!("sysctls: {:?}", SysctlFacts::read());
    match &support {
        UsernsSupport::Available => assert_eq!(support.reason(), None),
        other => {
            let reason = other.reason().unwrap();
            assert!(!reason.is_empty());
            assert!(
                reason.contains("failed with") || reason.contains("probe"),
                "{reason}"
            );
        }
    }
    // The probe leaves this process as it was.
    let before = std::fs::read_link("/proc/self/ns/user").unwrap();
    let _ = probe_userns();
    assert_eq!(std::fs::read_link("/proc/self/ns/user").unwrap(), before);
}

/// Restores a sysctl when dropped, panics included.
struct RestoreSysctl {
    path: &'static str,
    old: String,
}

impl Drop for RestoreSysctl {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(self.path, &self.old) {
            eprintln!("FAILED to restore {} to {:?}: {e}", self.path, self.old);
        }
    }
}

/// Turns `user.max_user_namespaces` off and checks the probe names it. Only as root and
/// with `TIERBOX_TEST_SYSCTL=1` (it affects the whole host for a few milliseconds; run it
/// with a test filter or `--test-threads=1`, since other tests that create namespaces
/// would fail meanwhile).
#[test]
fn probe_names_max_user_namespaces_when_it_is_zero() {
    let _g = lock();
    if std::env::var("TIERBOX_TEST_SYSCTL").as_deref() != Ok("1") {
        tierbox_test_support::skip_optional_here(
            "opt-in: set TIERBOX_TEST_SYSCTL=1 (as root) to let this test change a sysctl",
        );
        return;
    }
    if rustix::process::geteuid().as_raw() != 0 {
        tierbox_test_support::skip_optional_here("needs root to change user.max_user_namespaces");
        return;
    }
    let path = "/proc/sys/user/max_user_namespaces";
    let old = std::fs::read_to_string(path).unwrap();
    if let Err(e) = std::fs::write(path, old.trim()) {
        // Writing the user.* limits needs CAP_SYS_RESOURCE in the initial user namespace,
        // which some VMs and containers drop even for root.
        tierbox_test_support::skip_optional_here(&format!(
            "cannot write {path} ({e}); see the nested-namespace variant"
        ));
        return;
    }
    let guard = RestoreSysctl {
        path,
        old: old.clone(),
    };
    std::fs::write(path, "0").unwrap();
    let support = probe_userns();
    drop(guard);
    assert_eq!(
        std::fs::read_to_string(path).unwrap(),
        old,
        "sysctl restored"
    );
    println!("with user.max_user_namespaces=0: {support:?}");
    let UsernsSupport::Unavailable { failure, reason } = support else {
        panic!("probe should fail with user.max_user_namespaces=0, got {support:?}");
    };
    assert_eq!(failure, NsProbeFailure::Unshare(libc::ENOSPC));
    assert!(reason.contains("user.max_user_namespaces=0"), "{reason}");
    assert!(
        reason.contains("/proc/sys/user/max_user_namespaces"),
        "{reason}"
    );
    assert!(
        probe_userns().is_available(),
        "available again after restoring"
    );
}

/// The same check without touching the host: `user.*` limits are per user namespace, so
/// the test binary re-runs itself under `unshare --user --map-root-user`, turns the limit
/// off in that namespace only (root there holds `CAP_SYS_RESOURCE` over it) and probes.
#[test]
fn probe_names_max_user_namespaces_zero_in_a_nested_namespace() {
    let _g = lock();
    if !probe_userns().is_available() {
        tierbox_test_support::skip_here("user namespaces unavailable here");
        return;
    }
    let Some(unshare) = ["/usr/bin/unshare", "/bin/unshare"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
    else {
        tierbox_test_support::skip_here("util-linux unshare not installed");
        return;
    };
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(unshare)
        .args(["--user", "--map-root-user", "--"])
        .arg(exe)
        .args([
            "--exact",
            "linux::userns::tests::nested_probe_helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TIERBOX_USERNS_NESTED", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "nested run failed:\n{stdout}\n{stderr}"
    );
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("NESTED-OK ").map(|(_, reason)| reason))
        .unwrap_or_else(|| panic!("helper did not run:\n{stdout}\n{stderr}"));
    println!("{line}");
    assert!(line.contains("user.max_user_namespaces=0"), "{line}");
}

/// Runs only inside [`probe_names_max_user_namespaces_zero_in_a_nested_namespace`].
#[test]
fn nested_probe_helper() {
    if std::env::var("TIERBOX_USERNS_NESTED").as_deref() != Ok("1") {
        return;
    }
    std::fs::write("/proc/sys/user/max_user_namespaces", "0").unwrap();
    let support = probe_userns();
    let UsernsSupport::Unavailable { failure, reason } = support else {
        panic!("probe should fail with user.max_user_namespaces=0, got {support:?}");
    };
    assert_eq!(failure, NsProbeFailure::Unshare(libc::ENOSPC));
    assert!(
        reason.contains("user.max_user_namespaces=0 (/proc/sys/user/max_user_namespaces)"),
        "{reason}"
    );
    println!("NESTED-OK {reason}");
}

/// A positive probe kept in the state directory is reused only under the same facts, and
/// only from a private file: a stale or foreign one is probed over and rewritten.
#[test]
fn a_kept_probe_is_reused_only_when_its_facts_hold() {
    if !matches!(probe_userns(), UsernsSupport::Available) {
        tierbox_test_support::skip_here("user namespaces are not available to this process");
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let file = state.path().join(USERNS_PROBE_FILE);
    assert!(matches!(
        probe_through_state_dir(state.path()),
        UsernsSupport::Available
    ));
    let kept = std::fs::read_to_string(&file).unwrap();
    assert_eq!(kept, format!("{}\navailable\n", probe_key()));
    // Reused: the file is not rewritten.
    let ino = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let before = ino(&file);
    assert!(matches!(
        probe_through_state_dir(state.path()),
        UsernsSupport::Available
    ));
    assert_eq!(ino(&file), before, "a valid kept probe was not reused");
    // Another kernel, boot or sysctl: probed again, and the file replaced.
    std::fs::write(&file, "tierbox-sandbox 0 | kernel other\navailable\n").unwrap();
    probe_through_state_dir(state.path());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), kept);
    // Writable by others: not used (probed again and replaced by a private file).
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    }
    let before = ino(&file);
    probe_through_state_dir(state.path());
    assert_ne!(ino(&file), before, "a world-writable kept probe was used");
}
