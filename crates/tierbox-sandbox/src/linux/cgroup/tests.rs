//! Cgroup tests: parsing and both versions against fake trees (pure file I/O in a
//! tempdir), then a real v1 group on this host.

use std::path::Path;

use super::*;
use crate::linux::sys::{self, test_support as ts};

const MIB: u64 = 1024 * 1024;

fn write(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).unwrap();
    }
    fs::write(path, text).unwrap();
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap()
}

fn limits() -> CgroupLimits {
    CgroupLimits {
        memory_bytes: 32 * MIB,
        max_processes: 16,
        cpu_quota_percent: Some(50),
    }
}

const V2_MOUNTINFO: &str = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n\
    22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n";

/// A fake unified hierarchy with our group `/svc` holding only `procs`.
fn fake_v2(procs: &str) -> (tempfile::TempDir, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let cg = root.path().join("sys/fs/cgroup");
    write(
        &cg.join("cgroup.controllers"),
        "cpuset cpu io memory hugetlb pids rdma misc\n",
    );
    write(&cg.join("cgroup.subtree_control"), "cpu memory pids\n");
    let svc = cg.join("svc");
    write(&svc.join("cgroup.type"), "domain\n");
    write(&svc.join("cgroup.controllers"), "cpu memory pids\n");
    write(&svc.join("cgroup.subtree_control"), "");
    write(&svc.join("cgroup.procs"), procs);
    (root, svc)
}

fn me() -> i32 {
    std::process::id() as i32
}

#[test]
fn parses_mountinfo_and_proc_cgroup() {
    let mounts = parse_mountinfo(
        "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
         32 31 0:29 /docker/abc /sys/fs/cgroup/cpu\\040x rw - cgroup cgroup rw,cpu,cpuacct\n\
         41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
         22 1 8:1 / / rw - ext4 /dev/sda1 rw\n",
    );
    assert_eq!(mounts.len(), 3);
    assert_eq!(mounts[1].mount_point, "/sys/fs/cgroup/cpu x");
    assert_eq!(mounts[1].root, "/docker/abc");
    assert!(mounts[1].controllers.iter().any(|c| c == "cpuacct"));
    assert!(mounts[2].v2);
    let m = parse_proc_cgroup("4:memory:/process_api/x\n2:cpu,cpuacct:/\n0::/\n");
    assert_eq!(m[0].controllers, vec!["memory"]);
    assert_eq!(m[0].path, "/process_api/x");
    assert_eq!(m[1].controllers, vec!["cpu", "cpuacct"]);
    assert!(m[2].controllers.is_empty());
}

#[test]
fn group_dir_maps_through_the_mount_root() {
    let mount = CgroupMount {
        v2: false,
        controllers: vec!["memory".into()],
        root: "/docker/abc".into(),
        mount_point: "/sys/fs/cgroup/memory".into(),
    };
    let fs_root = Path::new("/fake");
    assert_eq!(
        group_dir(&mount, "/docker/abc/sub", fs_root).unwrap(),
        PathBuf::from("/fake/sys/fs/cgroup/memory/sub")
    );
    assert_eq!(
        group_dir(&mount, "/docker/abc", fs_root).unwrap(),
        PathBuf::from("/fake/sys/fs/cgroup/memory")
    );
    assert!(group_dir(&mount, "/docker/abcdef", fs_root).is_err());
    assert!(group_dir(&mount, "/other", fs_root).is_err());
    let at_root = CgroupMount {
        root: "/".into(),
        ..mount
    };
    assert_eq!(
        group_dir(&at_root, "/", fs_root).unwrap(),
        PathBuf::from("/fake/sys/fs/cgroup/memory")
    );
}

#[test]
fn limit_plans_are_pure_and_complete() {
    let v1 = limit_plan(CgroupVersion::V1, &limits());
    let files: Vec<_> = v1
        .iter()
        .map(|w| (w.file, w.value.as_str(), w.only_if_present))
        .collect();
    assert_eq!(
        files,
        vec![
            ("memory.limit_in_bytes", "33554432", false),
            ("memory.memsw.limit_in_bytes", "33554432", true),
            ("pids.max", "16", false),
            ("cpu.cfs_period_us", "100000", false),
            ("cpu.cfs_quota_us", "50000", false),
        ]
    );
    let v2 = limit_plan(
        CgroupVersion::V2,
        &CgroupLimits {
            cpu_quota_percent: None,
            ..limits()
        },
    );
    let files: Vec<_> = v2
        .iter()
        .map(|w| (w.file, w.value.as_str(), w.only_if_present))
        .collect();
    assert_eq!(
        files,
        vec![
            ("memory.max", "33554432", false),
            ("memory.swap.max", "0", true),
            ("memory.oom.group", "1", false),
            ("pids.max", "16", false),
        ]
    );
    let tiny = limit_plan(
        CgroupVersion::V2,
        &CgroupLimits {
            cpu_quota_percent: Some(0),
            ..limits()
        },
    );
    assert_eq!(
        tiny.last().unwrap().value,
        "1000 100000",
        "quota clamps to the kernel minimum"
    );
    let two_cpus = limit_plan(
        CgroupVersion::V2,
        &CgroupLimits {
            cpu_quota_percent: Some(200),
            ..limits()
        },
    );
    assert_eq!(two_cpus.last().unwrap().value, "200000 100000");
}

#[test]
fn rejects_bad_names_and_limits() {
    for bad in [
        "",
        ".",
        "..",
        "a/b",
        "tierbox-supervisor",
        "cgroup.procs",
        "x\0y",
    ] {
        assert!(
            matches!(validate_name(bad), Err(CgroupError::InvalidName { .. })),
            "{bad:?}"
        );
    }
    assert!(validate_name(&"x".repeat(201)).is_err());
    assert!(validate_name("tierbox-run-1234-7").is_ok());
    assert!(matches!(
        validate_limits(&CgroupLimits {
            memory_bytes: 0,
            ..limits()
        }),
        Err(CgroupError::InvalidLimit {
            limit: "memory_bytes",
            ..
        })
    ));
    assert!(matches!(
        validate_limits(&CgroupLimits {
            cpu_quota_percent: Some(0),
            ..limits()
        }),
        Err(CgroupError::InvalidLimit {
            limit: "cpu_quota_percent",
            ..
        })
    ));
}

/// v2, our group holds only us: the supervisor moves into the leaf, controllers are
/// enabled, the run group gets every limit; stats, kill and remove use the v2 files.
#[test]
fn fake_v2_tree_full_cycle() {
    let (root, svc) = fake_v2(&format!("{}\n", me()));
    let support = CgroupSupport::from_roots(V2_MOUNTINFO, "0::/svc\n", root.path());
    assert_eq!(support.version, Some(CgroupVersion::V2), "{support:?}");
    assert!(support.is_usable(), "{support:?}");
    assert_eq!(support.memory.dir.as_deref(), Some(svc.as_path()));
    assert!(support.cpu.usable);

    let run = RunCgroup::create(&support, "run-1", &limits()).unwrap();
    let dir = svc.join("run-1");
    assert_eq!(run.dirs(), std::slice::from_ref(&dir));
    assert_eq!(
        read(&svc.join(SUPERVISOR_LEAF).join("cgroup.procs")),
        me().to_string()
    );
    assert_eq!(
        read(&svc.join("cgroup.subtree_control")),
        "+memory +pids +cpu"
    );
    assert_eq!(read(&dir.join("memory.max")), "33554432");
    assert_eq!(read(&dir.join("pids.max")), "16");
    assert_eq!(read(&dir.join("memory.oom.group")), "1");
    assert_eq!(read(&dir.join("cpu.max")), "50000 100000");
    assert!(
        !dir.join("memory.swap.max").exists(),
        "optional file absent: not created"
    );

    // The child's side: write "0" through the kept fd.
    assert_eq!(run.procs_fds().len(), 1);
    sys::write_all_raw(run.procs_fds()[0], b"0").unwrap();
    assert_eq!(read(&dir.join("cgroup.procs")), "0");

    write(&dir.join("cgroup.procs"), "");
    write(&dir.join("memory.peak"), "1234\n");
    write(
        &dir.join("memory.events"),
        "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\noom_group_kill 1\n",
    );
    write(&dir.join("pids.events"), "max 5\n");
    assert_eq!(
        run.stats(),
        CgroupStats {
            memory_peak_bytes: Some(1234),
            oom_kills: 2,
            pids_limit_hit: 5
        }
    );

    write(&dir.join("cgroup.kill"), "");
    run.kill_all().unwrap();
    assert_eq!(read(&dir.join("cgroup.kill")), "1");

    // Emulate the kernel: control files vanish with the group.
    for entry in fs::read_dir(&dir).unwrap() {
        fs::remove_file(entry.unwrap().path()).unwrap();
    }
    run.remove().unwrap();
    assert!(!dir.exists());

    // Second run: controllers already enabled, nothing moves again.
    fs::remove_file(svc.join(SUPERVISOR_LEAF).join("cgroup.procs")).unwrap();
    write(&svc.join("cgroup.subtree_control"), "memory pids cpu\n");
    let again = RunCgroup::create(
        &support,
        "run-2",
        &CgroupLimits {
            cpu_quota_percent: None,
            ..limits()
        },
    )
    .unwrap();
    assert!(!svc.join(SUPERVISOR_LEAF).join("cgroup.procs").exists());
    assert_eq!(
        read(&svc.join("cgroup.subtree_control")),
        "memory pids cpu\n"
    );
    drop(again); // best-effort removal fails on the fake files; it must not panic
}

/// Probing from inside the leaf finds the delegated base again.
#[test]
fn fake_v2_probe_from_the_supervisor_leaf() {
    let (root, svc) = fake_v2("");
    fs::create_dir(svc.join(SUPERVISOR_LEAF)).unwrap();
    let support =
        CgroupSupport::from_roots(V2_MOUNTINFO, "0::/svc/tierbox-supervisor\n", root.path());
    assert_eq!(support.memory.dir.as_deref(), Some(svc.as_path()));
    assert!(support.is_usable());
}

/// Another process shares our v2 group: we refuse to move it, and create nothing.
#[test]
fn fake_v2_other_processes_block_delegation() {
    let (root, svc) = fake_v2(&format!("{}\n424242\n", me()));
    let support = CgroupSupport::from_roots(V2_MOUNTINFO, "0::/svc\n", root.path());
    let err = RunCgroup::create(&support, "run-1", &limits()).unwrap_err();
    match err {
        CgroupError::V2InternalProcesses { pids, .. } => assert_eq!(pids, vec![424242]),
        other => panic!("unexpected {other}"),
    }
    assert!(!svc.join("run-1").exists());
    assert!(!svc.join(SUPERVISOR_LEAF).exists());
    assert_eq!(read(&svc.join("cgroup.subtree_control")), "");
}

/// Controllers not delegated to us, or our group being the real v2 root.
#[test]
fn fake_v2_unusable_cases() {
    let (root, svc) = fake_v2("");
    write(&svc.join("cgroup.controllers"), "cpu\n");
    let support = CgroupSupport::from_roots(V2_MOUNTINFO, "0::/svc\n", root.path());
    assert!(!support.is_usable());
    assert!(
        support
            .reason
            .as_deref()
            .unwrap()
            .contains("memory is not delegated"),
        "{support:?}"
    );
    let err = RunCgroup::create(&support, "r", &limits()).unwrap_err();
    assert!(
        matches!(
            err,
            CgroupError::ControllerUnavailable {
                controller: "memory",
                ..
            }
        ),
        "{err}"
    );

    // Our group is the hierarchy root and its subtree_control lacks pids.
    let (root, _) = fake_v2("");
    write(
        &root.path().join("sys/fs/cgroup/cgroup.subtree_control"),
        "memory\n",
    );
    let support = CgroupSupport::from_roots(V2_MOUNTINFO, "0::/\n", root.path());
    assert!(support.memory.usable);
    assert!(!support.pids.usable);
    assert!(
        support.pids.reason.as_deref().unwrap().contains("root"),
        "{support:?}"
    );
}

const V1_MOUNTINFO: &str = "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755\n\
    32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
    35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
    37 31 0:34 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer\n\
    39 31 0:36 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n\
    41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";

const V1_PROC_CGROUP: &str =
    "8:pids:/\n6:freezer:/\n4:memory:/process_api/abc\n1:cpu,cpuacct:/\n0::/\n";

/// v1 like this machine (plus a co-mounted cpu,cpuacct): one directory per controller
/// under our own group; the empty unified hierarchy is ignored.
#[test]
fn fake_v1_tree_full_cycle() {
    let root = tempfile::tempdir().unwrap();
    let cg = root.path().join("sys/fs/cgroup");
    for d in [
        "cpu,cpuacct",
        "memory/process_api/abc",
        "freezer",
        "pids",
        "unified",
    ] {
        fs::create_dir_all(cg.join(d)).unwrap();
    }
    write(&cg.join("unified/cgroup.controllers"), "");
    let support = CgroupSupport::from_roots(V1_MOUNTINFO, V1_PROC_CGROUP, root.path());
    assert_eq!(support.version, Some(CgroupVersion::V1), "{support:?}");
    assert!(support.is_usable(), "{support:?}");
    assert_eq!(support.memory.dir, Some(cg.join("memory/process_api/abc")));
    assert_eq!(support.pids.dir, Some(cg.join("pids")));
    assert_eq!(support.cpu.dir, Some(cg.join("cpu,cpuacct")));
    assert!(support.freezer.usable);

    let run = RunCgroup::create(&support, "run-9", &limits()).unwrap();
    let mem = cg.join("memory/process_api/abc/run-9");
    assert_eq!(read(&mem.join("memory.limit_in_bytes")), "33554432");
    assert!(!mem.join("memory.memsw.limit_in_bytes").exists());
    assert_eq!(read(&cg.join("pids/run-9/pids.max")), "16");
    assert_eq!(
        read(&cg.join("cpu,cpuacct/run-9/cpu.cfs_quota_us")),
        "50000"
    );
    assert!(cg.join("freezer/run-9").is_dir());
    assert_eq!(run.procs_fds().len(), 4, "memory, pids, cpu, freezer");
    assert_eq!(run.dirs().len(), 4);

    write(&mem.join("memory.max_usage_in_bytes"), "4096\n");
    write(
        &mem.join("memory.oom_control"),
        "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
    );
    write(&cg.join("pids/run-9/pids.events"), "max 7\n");
    assert_eq!(
        run.stats(),
        CgroupStats {
            memory_peak_bytes: Some(4096),
            oom_kills: 3,
            pids_limit_hit: 7
        }
    );
    assert!(run.pids().is_empty());
    // Emptiness: the pids controller's count when it is zero, the procs lists otherwise.
    write(&cg.join("pids/run-9/pids.current"), "0\n");
    assert!(run.is_empty());
    write(&cg.join("pids/run-9/pids.current"), "1\n");
    write(&mem.join("cgroup.procs"), "4242\n");
    assert!(!run.is_empty(), "a listed process");
    write(&mem.join("cgroup.procs"), "");
    assert!(run.is_empty(), "a charged zombie is listed nowhere");
    fs::remove_file(cg.join("pids/run-9/pids.current")).unwrap();
    write(&mem.join("cgroup.procs"), "4242\n");
    assert!(!run.is_empty(), "no count: the procs lists decide");
    write(&mem.join("cgroup.procs"), "");
    run.kill_all().unwrap();
    for d in run.dirs() {
        for entry in fs::read_dir(d).unwrap() {
            fs::remove_file(entry.unwrap().path()).unwrap();
        }
    }
    let dirs = run.dirs().to_vec();
    run.remove().unwrap();
    assert!(dirs.iter().all(|d| !d.exists()));
}

/// A failure midway removes what was already created.
#[test]
fn fake_v1_partial_failure_cleans_up() {
    let root = tempfile::tempdir().unwrap();
    let cg = root.path().join("sys/fs/cgroup");
    for d in ["cpu,cpuacct", "memory/process_api/abc", "freezer", "pids"] {
        fs::create_dir_all(cg.join(d)).unwrap();
    }
    let support = CgroupSupport::from_roots(V1_MOUNTINFO, V1_PROC_CGROUP, root.path());
    // A stale pids group of the same name: mkdir fails with EEXIST after memory was made.
    fs::create_dir(cg.join("pids/run-x")).unwrap();
    let err = RunCgroup::create(&support, "run-x", &limits()).unwrap_err();
    assert!(matches!(err, CgroupError::Mkdir { .. }), "{err}");
    // Directories are all made before any file is written, so the memory group is
    // still empty and was removed; the stale group we did not create is left alone.
    assert!(!cg.join("memory/process_api/abc/run-x").exists());
    assert!(cg.join("pids/run-x").is_dir());
}

#[test]
fn no_cgroups_at_all() {
    let root = tempfile::tempdir().unwrap();
    let support =
        CgroupSupport::from_roots("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n", "", root.path());
    assert_eq!(support.version, None);
    assert!(!support.is_usable());
    assert!(matches!(
        RunCgroup::create(&support, "r", &limits()),
        Err(CgroupError::Unavailable { .. })
    ));
}

// ---------------------------------------------------------------------------------------
// Real cgroups on this host.
// ---------------------------------------------------------------------------------------

/// The real support, or `None` (after printing why) when this host cannot run the test.
/// Under `CI=true` a missing v1 memory hierarchy fails instead.
fn real_v1() -> Option<CgroupSupport> {
    let support = probe();
    let ok = support.version == Some(CgroupVersion::V1) && support.is_usable();
    if !ok {
        tierbox_test_support::skip_here(&format!(
            "no writable cgroup v1 memory+pids here: {support:?}"
        ));
        return None;
    }
    Some(support)
}

fn unique_name(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("tierbox-test-{tag}-{}-{nanos}", std::process::id())
}

/// Child side: attach to every group, fork `grandchildren` more (each blocks on `block`),
/// report how many forks succeeded on `ready`, then block.
fn attach_and_fork(fds: &[i32], grandchildren: usize, ready: i32, block: i32) -> i32 {
    for &fd in fds {
        if sys::write_all_raw(fd, b"0").is_err() {
            return 30;
        }
    }
    let mut made: u8 = 0;
    for _ in 0..grandchildren {
        match ts::raw_fork() {
            Ok(0) => {
                let mut b = [0u8; 1];
                let _ = ts::read(block, &mut b);
                return 0;
            }
            Ok(_) => made += 1,
            Err(_) => break,
        }
    }
    if sys::write_all_raw(ready, &[made]).is_err() {
        return 31;
    }
    let mut b = [0u8; 1];
    let _ = ts::read(block, &mut b);
    0
}

#[test]
fn real_v1_group_attach_limit_kill_remove() {
    let Some(support) = real_v1() else { return };
    let run = RunCgroup::create(
        &support,
        &unique_name("cycle"),
        &CgroupLimits {
            memory_bytes: 32 * MIB,
            max_processes: 16,
            cpu_quota_percent: Some(50),
        },
    )
    .unwrap();
    let dirs = run.dirs().to_vec();
    assert!(dirs.len() >= 3, "{dirs:?}");
    let cpu = dirs
        .iter()
        .find(|d| d.join("cpu.cfs_quota_us").exists())
        .unwrap();
    assert_eq!(read(&cpu.join("cpu.cfs_quota_us")).trim(), "50000");
    assert_eq!(
        read(&dirs[0].join("memory.limit_in_bytes")).trim(),
        "33554432"
    );
    let fds = run.procs_fds().to_vec();
    let (ready_r, ready_w) = ts::pipe();
    let (block_r, block_w) = ts::pipe();
    // 40 forks attempted; pids.max = 16 counts the child itself, so 15 succeed.
    let pid = ts::fork_child(|| {
        ts::close(ready_r);
        ts::close(block_w);
        attach_and_fork(&fds, 40, ready_w, block_r)
    });
    ts::close(ready_w);
    ts::close(block_r);
    let mut made = [0u8; 1];
    assert_eq!(ts::read(ready_r, &mut made), Ok(1), "child never reported");
    assert_eq!(made[0], 15, "pids.max=16 must stop the 16th task");

    let pids = run.pids();
    assert!(pids.contains(&pid), "{pid} not in {pids:?}");
    assert_eq!(pids.len(), 16, "{pids:?}");
    let stats = run.stats();
    assert!(stats.pids_limit_hit >= 1, "{stats:?}");
    assert!(stats.memory_peak_bytes.is_some_and(|b| b > 0), "{stats:?}");

    run.kill_all().unwrap();
    assert!(run.pids().is_empty(), "left: {:?}", run.pids());
    assert_eq!(ts::wait_exit(pid), 128 + libc::SIGKILL);
    ts::close(ready_r);
    ts::close(block_w);

    run.remove().unwrap();
    for d in &dirs {
        assert!(!d.exists(), "{} still exists", d.display());
    }
}

#[test]
fn real_v1_memory_limit_oom_kills() {
    let Some(support) = real_v1() else { return };
    let run = RunCgroup::create(
        &support,
        &unique_name("oom"),
        &CgroupLimits {
            memory_bytes: 32 * MIB,
            max_processes: 16,
            cpu_quota_percent: None,
        },
    )
    .unwrap();
    // Read once before the run: the figures below come through the same open files
    // (pread at offset 0), so they must be generated afresh, not the values seen here.
    let before = run.stats();
    assert_eq!(before.oom_kills, 0, "{before:?}");
    assert_eq!(run.charged_pids(), Some(0));
    let fds = run.procs_fds().to_vec();
    let code = ts::fork_with(|| {
        for &fd in &fds {
            if sys::write_all_raw(fd, b"0").is_err() {
                return 30;
            }
        }
        match ts::touch_anon(128 * MIB as usize) {
            Ok(()) => 0,
            Err(_) => 31,
        }
    });
    assert_eq!(
        code,
        128 + libc::SIGKILL,
        "128 MiB in a 32 MiB group must be OOM-killed"
    );
    let stats = run.stats();
    assert!(stats.oom_kills >= 1, "{stats:?}");
    assert!(
        stats.memory_peak_bytes.is_some_and(|b| b <= 33 * MIB),
        "{stats:?}"
    );
    run.remove().unwrap();
}

#[test]
fn real_probe_finds_our_groups() {
    let support = probe();
    println!("{support:#?}");
    let cached = probe_cached();
    assert_eq!(cached.version, support.version);
    if let Some(dir) = &support.memory.dir {
        assert!(dir.is_dir(), "{}", dir.display());
    }
}
