#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

fn key(backend: tierbox_policy::enforcement::BackendId, tmp_base: &Path) -> SlotKey {
    SlotKey {
        uid: 1000,
        gid: 1000,
        cgroup_limits: CgroupLimits {
            memory_bytes: 1 << 30,
            max_processes: 64,
            cpu_quota_percent: None,
        },
        cgroup: true,
        ..SlotKey::nothing(backend, tmp_base)
    }
}

/// An idle slot goes only to a run of the backend it was made for: a bubblewrap run
/// (whose slot may not be recyclable) never takes, and then destroys, a native run's.
#[test]
fn idle_slots_are_taken_only_by_runs_of_the_same_backend() {
    let dir = tempfile::tempdir().unwrap();
    // A base of this test's own, so no other test's runs can match these keys.
    let base = dir.path().join("tmp");
    let native = key(crate::linux::ns::child::BACKEND, &base);
    let via_bwrap = key(crate::bwrap::BACKEND, &base);
    assert_ne!(native, via_bwrap);
    pool()
        .lock()
        .unwrap()
        .push(Slot::new(native.clone(), base.join("slot"), None, None));
    assert!(take(&via_bwrap).is_none(), "a bwrap run took a native slot");
    let slot = take(&native).expect("the native run gets its slot back");
    assert!(slot.reused);
    assert_eq!(slot.tmp, base.join("slot"));
    assert!(take(&native).is_none(), "taken once");
}

/// A slot's cgroup carries its CPU quota: a run with another quota, or none, never takes
/// it (the quota is written when the group is made, not per run).
#[test]
fn idle_slots_are_taken_only_by_runs_of_the_same_cpu_quota() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("tmp");
    let mut one_cpu = key(crate::linux::ns::child::BACKEND, &base);
    one_cpu.cgroup_limits.cpu_quota_percent = Some(100);
    let unlimited = key(crate::linux::ns::child::BACKEND, &base);
    let mut two_cpus = one_cpu.clone();
    two_cpus.cgroup_limits.cpu_quota_percent = Some(200);
    pool()
        .lock()
        .unwrap()
        .push(Slot::new(one_cpu.clone(), base.join("slot"), None, None));
    assert!(
        take(&unlimited).is_none(),
        "an unlimited run took a 1-CPU slot"
    );
    assert!(take(&two_cpus).is_none(), "a 2-CPU run took a 1-CPU slot");
    assert!(take(&one_cpu).is_some(), "a 1-CPU run gets the 1-CPU slot");
}

/// A slot's landlock ruleset carries its grants: a run whose grants differ in any path,
/// in order, or by one path more or less never takes it, and one with the same grants
/// (compared borrowed from its plan) does.
#[test]
fn idle_slots_are_taken_only_by_runs_of_the_same_grants() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("tmp");
    let mut owned = key(crate::tier_b::BACKEND, &base);
    owned.landlock = true;
    owned.read_only = vec![PathBuf::from("/usr"), PathBuf::from("/etc/hosts")];
    owned.read_write = vec![PathBuf::from("/work/ws")];
    let mut probe = owned.clone();
    probe.read_only.clear();
    probe.read_write.clear();
    pool()
        .lock()
        .unwrap()
        .push(Slot::new(owned.clone(), base.join("slot"), None, None));
    let p = Path::new;
    let rw = [p("/work/ws")];
    for (read_only, read_write) in [
        (&[p("/usr")][..], &rw[..]),
        (&[p("/usr"), p("/etc/hosts"), p("/opt")][..], &rw[..]),
        (&[p("/etc/hosts"), p("/usr")][..], &rw[..]),
        (&[p("/usr"), p("/etc/host")][..], &rw[..]),
        (&[p("/usr"), p("/etc/hosts")][..], &[p("/work/other")][..]),
        (&[p("/usr"), p("/etc/hosts")][..], &[][..]),
    ] {
        assert!(
            take_with_paths(&probe, read_only, read_write).is_none(),
            "took a slot with other grants: {read_only:?} {read_write:?}"
        );
    }
    let mut other_uid = probe.clone();
    other_uid.uid += 1;
    assert!(take_with_paths(&other_uid, &[p("/usr"), p("/etc/hosts")], &rw).is_none());
    let slot = take_with_paths(&probe, &[p("/usr"), p("/etc/hosts")], &rw)
        .expect("the same grants get the slot");
    assert_eq!(slot.key, owned);
}

/// Recycling a slot's tmp removes what a run left, except the mount points a launcher
/// thread holds trees on (and the directories leading to them, emptied of everything
/// else), the shared-memory directory (emptied) and a fresh `home/`; a symlink on the way
/// to a mount point is removed, never followed. A mount point that moved fails the
/// check by inode.
#[test]
fn recycling_keeps_mount_points_and_empties_everything_else() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("keep-me"), "x").unwrap();
    for d in ["home/sub", ".dev-shm/sem", "a/b", "a/other", "c", "d"] {
        std::fs::create_dir_all(tmp.join(d)).unwrap();
    }
    std::fs::write(tmp.join("a/file"), "run").unwrap();
    std::fs::write(tmp.join("f"), "run").unwrap();
    std::fs::write(tmp.join("e"), "").unwrap();
    std::os::unix::fs::symlink(outside.path(), tmp.join("d/link")).unwrap();
    let points = [
        PathBuf::from("a/b"),
        PathBuf::from("e"),
        PathBuf::from("d/link/x"),
    ];
    let ids: Vec<(PathBuf, (u64, u64))> = points[..2]
        .iter()
        .map(|p| {
            let m = std::fs::symlink_metadata(tmp.join(p)).unwrap();
            (p.clone(), (m.dev(), m.ino()))
        })
        .collect();

    empty_dir_in_place(tmp, &points).unwrap();

    let mut left: Vec<String> = walkdir(tmp);
    left.sort();
    assert_eq!(left, [".dev-shm", "a", "a/b", "d", "e", "home"]);
    assert!(
        outside.path().join("keep-me").exists(),
        "a symlink was followed"
    );
    assert!(crate::tier_b::launcher::mount_points_in_place(tmp, &ids));
    std::fs::rename(tmp.join("a"), tmp.join("moved")).unwrap();
    assert!(!crate::tier_b::launcher::mount_points_in_place(tmp, &ids));
}

/// Every path beneath `dir`, relative to it.
fn walkdir(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            out.push(e.path().strip_prefix(root).unwrap().display().to_string());
            if e.file_type().unwrap().is_dir() {
                walk(root, &e.path(), out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out
}
