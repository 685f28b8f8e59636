//! Mount-plan tests: golden op list on a hand-built host, the strict policy against real
//! temporary workspaces (protected `.git/hooks` present, absent, a symlink), generic
//! ordering invariants, and every rejection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tierbox_policy::{Plan, Policy, ProcessRunRequest, ValidateContext, validate};

use super::*;

const STRICT_POLICY: &str = include_str!("../../../../../policies/strict.toml");

/// A real Plan from the strict policy for `ls` in `ws`.
fn strict_plan(ws: &Path) -> Plan {
    let policy = Policy::from_toml(STRICT_POLICY).unwrap();
    let mut env = BTreeMap::new();
    env.insert("HOME".to_owned(), "/nonexistent-home".to_owned());
    let ctx = ValidateContext::new(ws).with_env(env);
    validate(&policy, &ProcessRunRequest::new("ls"), &ctx).unwrap()
}

/// The same Plan with fixed, host-independent paths.
fn fixed_plan() -> Plan {
    let dir = tempfile::tempdir().unwrap();
    let mut plan = strict_plan(dir.path());
    let ws = PathBuf::from("/home/u/proj");
    plan.workspace = ws.clone();
    plan.cwd = ws.clone();
    plan.filesystem.system_read_only = [
        "/bin",
        "/etc/ld.so.cache",
        "/etc/localtime",
        "/etc/passwd",
        "/etc/ssl/certs",
        "/lib",
        "/lib64",
        "/sbin",
        "/usr",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    // Entry by entry (the roots form has its own test).
    plan.filesystem.system_roots = Default::default();
    plan.filesystem.system_hidden = Default::default();
    plan.filesystem.protected = vec![ws.join(".git/hooks"), ws.join(".git/config")];
    plan.filesystem.private_home = true;
    plan.limits.memory_bytes = 1 << 30;
    plan
}

/// A host with the usual merged-/usr layout, device nodes, and `/home/u/proj`.
fn fixed_host() -> HostView {
    let mut h = HostView::assume_missing()
        .with_symlink("/bin", "usr/bin")
        .with_symlink("/sbin", "usr/sbin")
        .with_symlink("/lib", "usr/lib")
        .with_symlink("/lib64", "usr/lib64")
        .with_dir("/usr/bin")
        .with_file("/etc/ld.so.cache")
        .with_symlink("/etc/localtime", "/usr/share/zoneinfo/UTC")
        .with_file("/etc/passwd")
        .with_dir("/etc/ssl/certs")
        .with_dir("/home/u/proj/src")
        .with_file("/home/u/.ssh/id_ed25519");
    for node in DEV_NODES {
        h = h.with_device(node);
    }
    h
}

fn lines(mp: &MountPlan) -> Vec<String> {
    mp.ops.iter().map(ToString::to_string).collect()
}

fn index_of(mp: &MountPlan, f: impl Fn(&MountOp) -> bool) -> Option<usize> {
    mp.ops.iter().position(f)
}

/// Independent, generic checks of an op list (deliberately not sharing code with
/// `check_ops`).
fn assert_invariants(plan: &Plan, mp: &MountPlan) {
    let ops = &mp.ops;
    let ws = &plan.workspace;
    assert!(matches!(ops[0], MountOp::TmpfsRoot { .. }));
    assert_eq!(ops[ops.len() - 2], MountOp::PivotRoot);
    assert_eq!(ops[ops.len() - 1], MountOp::RemountRootRo);
    for (i, op) in ops.iter().enumerate() {
        let Some(dst) = op.dst() else { continue };
        assert!(dst.is_absolute() && dst != Path::new("/"), "op {i}: {op}");
        assert!(
            !dst.components()
                .any(|c| c == std::path::Component::ParentDir),
            "op {i}: {op}"
        );
        // Parent exists before: "/" itself, an earlier Dir at the parent, or an earlier
        // mount at or above the parent (host-backed or tmpfs root).
        let parent = dst.parent().unwrap();
        let ok = parent == Path::new("/")
            || ops[..i].iter().any(|e| match e {
                MountOp::Dir { path, .. } => path == parent,
                MountOp::HostPlaceholder { path, .. } => path == parent,
                e if e.is_mount() => e.dst().is_some_and(|d| parent.starts_with(d)),
                _ => false,
            });
        assert!(ok, "op {i} ({op}): parent {parent:?} not created before");
        // Read-only binds are remounted after their bind.
        if matches!(
            op,
            MountOp::BindRo { .. } | MountOp::CoverWithDevNull { .. }
        ) {
            assert!(
                ops[i + 1..]
                    .iter()
                    .any(|l| matches!(l, MountOp::RemountRo { dst: d, .. } if d == dst)),
                "op {i} ({op}) never remounted read-only"
            );
        }
        if let MountOp::RemountRo { .. } = op {
            assert!(
                ops[..i]
                    .iter()
                    .any(|e| e.is_mount() && e.dst() == Some(dst)),
                "op {i} ({op}) remounts before its mount"
            );
        }
        // Nothing is bound from the host's root, proc, sys, root or home unless granted.
        if let Some(src) = op.bind_src() {
            assert_ne!(src, Path::new("/"), "op {i}: {op}");
            let fs = &plan.filesystem;
            let granted = std::iter::once(ws)
                .chain(fs.system_binds())
                .chain(&fs.read_only)
                .chain(&fs.writable)
                .any(|g| src.starts_with(g))
                || DEV_NODES.iter().any(|n| src == Path::new(n));
            assert!(granted, "op {i} ({op}) binds an ungranted path");
            for host in ["/proc", "/sys", "/root", "/home"] {
                if src.starts_with(host) {
                    assert!(granted, "op {i} ({op}) binds {host}");
                }
            }
            assert!(!src.starts_with("/proc"), "op {i}: {op}");
        }
    }
    // The workspace bind comes after every other bind outside it, and every protected
    // or deny cover after the workspace bind.
    let ws_bind = index_of(
        mp,
        |op| matches!(op, MountOp::BindRw { dst, .. } if dst == ws),
    )
    .expect("workspace bind");
    for (i, op) in ops.iter().enumerate() {
        match op {
            MountOp::BindRo { dst, .. } | MountOp::BindRw { dst, .. } if !dst.starts_with(ws) => {
                assert!(i < ws_bind, "op {i} ({op}) after the workspace bind");
            }
            MountOp::CoverWithDevNull { .. }
            | MountOp::CoverWithEmptyDir { .. }
            | MountOp::HostPlaceholder { .. } => {
                assert!(i > ws_bind, "op {i} ({op}) before the workspace bind");
            }
            _ => {}
        }
    }
}

#[test]
fn golden_op_list_for_the_strict_policy_on_a_fixed_host() {
    let plan = fixed_plan();
    let host = fixed_host()
        .with_dir("/home/u/proj/.git/hooks")
        .with_file("/home/u/proj/.git/config");
    let mp = mount_plan(&plan, &host).unwrap();
    assert_invariants(&plan, &mp);
    let expected = [
        "tmpfs-root size=1048576 mode=755",
        "dir /proc mode=755",
        "proc /proc",
        "proc-mask /proc/asound (empty dir, if present)",
        "proc-mask /proc/acpi (empty dir, if present)",
        "proc-mask /proc/scsi (empty dir, if present)",
        "proc-mask /proc/interrupts (dev-null, if present)",
        "proc-mask /proc/kcore (dev-null, if present)",
        "proc-mask /proc/keys (dev-null, if present)",
        "proc-mask /proc/latency_stats (dev-null, if present)",
        "proc-mask /proc/timer_list (dev-null, if present)",
        "proc-mask /proc/timer_stats (dev-null, if present)",
        "proc-mask /proc/sched_debug (dev-null, if present)",
        "dir /dev mode=755",
        "tmpfs /dev size=65536 mode=755",
        "file /dev/null mode=444",
        "dev-node /dev/null -> /dev/null",
        "file /dev/zero mode=444",
        "dev-node /dev/zero -> /dev/zero",
        "file /dev/full mode=444",
        "dev-node /dev/full -> /dev/full",
        "file /dev/random mode=444",
        "dev-node /dev/random -> /dev/random",
        "file /dev/urandom mode=444",
        "dev-node /dev/urandom -> /dev/urandom",
        "file /dev/tty mode=444",
        "dev-node /dev/tty -> /dev/tty",
        "dir /dev/shm mode=755",
        "dir /dev/pts mode=755",
        "symlink /dev/ptmx -> pts/ptmx",
        "symlink /dev/fd -> /proc/self/fd",
        "symlink /dev/stdin -> /proc/self/fd/0",
        "symlink /dev/stdout -> /proc/self/fd/1",
        "symlink /dev/stderr -> /proc/self/fd/2",
        "remount-ro /dev (devices)",
        "tmpfs /dev/shm size=67108864 mode=1777",
        "devpts /dev/pts",
        "dir /tmp mode=755",
        "tmpfs /tmp size=1073741824 mode=1777",
        "dir /tmp/home mode=700",
        "symlink /bin -> usr/bin",
        "dir /etc mode=755",
        "file /etc/ld.so.cache mode=444",
        "bind-ro /etc/ld.so.cache -> /etc/ld.so.cache (File)",
        "remount-ro /etc/ld.so.cache",
        "symlink /etc/localtime -> /usr/share/zoneinfo/UTC",
        "file /etc/passwd mode=444",
        "bind-ro /etc/passwd -> /etc/passwd (File)",
        "remount-ro /etc/passwd",
        "dir /etc/ssl mode=755",
        "dir /etc/ssl/certs mode=755",
        "bind-ro /etc/ssl/certs -> /etc/ssl/certs (Dir)",
        "remount-ro /etc/ssl/certs",
        "symlink /lib -> usr/lib",
        "symlink /lib64 -> usr/lib64",
        "symlink /sbin -> usr/sbin",
        "dir /usr mode=755",
        "bind-ro /usr -> /usr (Dir)",
        "remount-ro /usr",
        "dir /home mode=755",
        "dir /home/u mode=755",
        "dir /home/u/proj mode=755",
        "bind-rw /home/u/proj -> /home/u/proj (Dir)",
        // `.git` pinned (a mount point cannot be renamed away and rebuilt).
        "bind-rw /home/u/proj/.git -> /home/u/proj/.git (Dir)",
        "bind-ro /home/u/proj/.git/config -> /home/u/proj/.git/config (File)",
        "remount-ro /home/u/proj/.git/config",
        "bind-ro /home/u/proj/.git/hooks -> /home/u/proj/.git/hooks (Dir)",
        "remount-ro /home/u/proj/.git/hooks",
        "pivot-root",
        "remount-root-ro",
    ];
    assert_eq!(lines(&mp), expected, "\n{}", lines(&mp).join("\n"));
    assert_eq!(mp.home.as_deref(), Some(Path::new(PRIVATE_HOME)));
    assert!(mp.host_placeholders.is_empty());
    // The supervisor's ssh key is nowhere in the sandbox.
    assert!(
        !mp.ops
            .iter()
            .any(|op| op.dst().is_some_and(|d| d.starts_with("/home/u/.ssh")))
    );
}

#[test]
fn missing_git_is_covered_with_one_empty_directory_only_when_it_is_listed() {
    let mut plan = fixed_plan();
    let ws = plan.workspace.clone();
    plan.filesystem
        .protected
        .splice(0..0, std::iter::once(ws.join(".git")));
    let mp = mount_plan(&plan, &fixed_host()).unwrap();
    assert_invariants(&plan, &mp);
    let tail: Vec<_> = lines(&mp)
        .into_iter()
        .skip_while(|l| !l.starts_with("bind-rw /home/u/proj"))
        .collect();
    assert_eq!(
        tail,
        [
            "bind-rw /home/u/proj -> /home/u/proj (Dir)",
            "host-placeholder /home/u/proj/.git (Dir)",
            "cover-empty-dir /home/u/proj/.git",
            "pivot-root",
            "remount-root-ro",
        ]
    );
    assert_eq!(mp.host_placeholders, [PathBuf::from("/home/u/proj/.git")]);
}

/// Entries of a git directory that does not exist protect nothing yet: the run may `git
/// init` its own repository (the version-control preset), reported after the run.
#[test]
fn entries_of_a_missing_git_directory_leave_it_to_the_run() {
    let plan = fixed_plan();
    let mp = mount_plan(&plan, &fixed_host()).unwrap();
    assert_invariants(&plan, &mp);
    assert!(mp.host_placeholders.is_empty(), "{:?}", lines(&mp));
    assert!(
        !lines(&mp).iter().any(|l| l.contains("/home/u/proj/.git")),
        "{:?}",
        lines(&mp)
    );
}

/// A missing `commondir` is covered by a file git can read (an empty one is fatal to
/// it): the placeholder's content is decided where the op is compiled, from its name.
#[test]
fn a_missing_commondir_gets_a_file_placeholder() {
    let mut plan = fixed_plan();
    let ws = plan.workspace.clone();
    plan.filesystem.protected.push(ws.join(".git/commondir"));
    let host = fixed_host()
        .with_file(ws.join(".git/config"))
        .with_dir(ws.join(".git/hooks"));
    let mp = mount_plan(&plan, &host).unwrap();
    assert_invariants(&plan, &mp);
    let l = lines(&mp);
    assert!(
        l.contains(&"host-placeholder /home/u/proj/.git/commondir (File)".to_owned()),
        "{l:?}"
    );
    assert!(l.contains(
        &"bind-ro /home/u/proj/.git/commondir -> /home/u/proj/.git/commondir (File)".to_owned()
    ));
    assert_eq!(
        tierbox_policy::validate::placeholder_content(&ws.join(".git/commondir")),
        b".\n"
    );
}

#[test]
fn missing_last_component_is_an_empty_read_only_file_and_intermediate_wins_over_last() {
    let mut plan = fixed_plan();
    let ws = plan.workspace.clone();
    // `.git` exists, `hooks` does not: the last component is covered with its own empty
    // placeholder, bound onto itself read-only (readable and empty, as git needs a missing
    // `commondir` to be; an unreadable /dev/null cover made `git status` fail).
    let host = fixed_host().with_file(ws.join(".git/config"));
    let mp = mount_plan(&plan, &host).unwrap();
    assert_invariants(&plan, &mp);
    let l = lines(&mp);
    assert!(l.contains(&"host-placeholder /home/u/proj/.git/hooks (File)".to_owned()));
    assert!(
        l.contains(&"bind-ro /home/u/proj/.git/hooks -> /home/u/proj/.git/hooks (File)".to_owned()),
        "{l:?}"
    );
    assert!(l.contains(&"remount-ro /home/u/proj/.git/hooks".to_owned()));
    assert!(
        !l.iter().any(|op| op.starts_with("cover-dev-null")),
        "{l:?}"
    );
    // `.git` protected as a whole and `.git/hooks` too: one cover, as a directory.
    plan.filesystem.protected = vec![ws.join(".git"), ws.join(".git/hooks")];
    let mp = mount_plan(&plan, &fixed_host()).unwrap();
    assert_eq!(mp.host_placeholders, [ws.join(".git")]);
    assert!(lines(&mp).contains(&"cover-empty-dir /home/u/proj/.git".to_owned()));
}

#[test]
fn symlinked_hooks_are_covered_and_a_writable_target_protected() {
    let plan = fixed_plan();
    let ws = plan.workspace.clone();
    // Pointing outside every grant: only the link is covered.
    let host = fixed_host()
        .with_file(ws.join(".git/config"))
        .with_symlink(ws.join(".git/hooks"), "/home/u/evil-hooks")
        .with_dir("/home/u/evil-hooks");
    let mp = mount_plan(&plan, &host).unwrap();
    assert_invariants(&plan, &mp);
    let l = lines(&mp);
    assert!(l.contains(&"cover-dev-null /home/u/proj/.git/hooks".to_owned()));
    assert!(l.contains(&"remount-ro /home/u/proj/.git/hooks".to_owned()));
    assert!(!l.iter().any(|l| l.contains("evil-hooks")), "{l:#?}");
    // Pointing into the writable workspace: the host's git would run what the sandbox
    // writes there, so the target is protected as well.
    let host = fixed_host()
        .with_file(ws.join(".git/config"))
        .with_symlink(ws.join(".git/hooks"), "../shared/hooks")
        .with_dir(ws.join("shared/hooks"));
    let mp = mount_plan(&plan, &host).unwrap();
    assert_invariants(&plan, &mp);
    let l = lines(&mp);
    assert!(l.contains(&"cover-dev-null /home/u/proj/.git/hooks".to_owned()));
    assert!(l.contains(
        &"bind-ro /home/u/proj/shared/hooks -> /home/u/proj/shared/hooks (Dir)".to_owned()
    ));
    // ... and a missing target in the workspace cannot be created.
    let host = fixed_host()
        .with_file(ws.join(".git/config"))
        .with_symlink(ws.join(".git/hooks"), "/home/u/proj/shared/hooks");
    let mp = mount_plan(&plan, &host).unwrap();
    assert_eq!(mp.host_placeholders, [ws.join("shared")]);
    // A symlink part-way (`.git` itself) is covered; a loop needs nothing more.
    let host = fixed_host().with_symlink(ws.join(".git"), ".git");
    let mp = mount_plan(&plan, &host).unwrap();
    assert!(lines(&mp).contains(&"cover-dev-null /home/u/proj/.git".to_owned()));
    assert!(mp.host_placeholders.is_empty());
}

#[test]
fn a_gitfile_part_way_is_bound_over_itself() {
    let plan = fixed_plan();
    let ws = plan.workspace.clone();
    let host = fixed_host().with_file(ws.join(".git"));
    let mp = mount_plan(&plan, &host).unwrap();
    assert_invariants(&plan, &mp);
    let l = lines(&mp);
    assert!(l.contains(&"bind-ro /home/u/proj/.git -> /home/u/proj/.git (File)".to_owned()));
    assert!(mp.host_placeholders.is_empty());
}

/// The strict policy against real workspaces, probed from the real host.
#[test]
fn strict_policy_on_real_workspaces() {
    let outside = tempfile::tempdir().unwrap();
    for case in ["present", "absent", "symlink"] {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        match case {
            "present" => {
                std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
                std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
            }
            "symlink" => {
                std::fs::create_dir_all(ws.join(".git")).unwrap();
                std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
                std::os::unix::fs::symlink(outside.path(), ws.join(".git/hooks")).unwrap();
            }
            _ => {}
        }
        let plan = strict_plan(&ws);
        let host = HostView::probe(&plan);
        let mp = mount_plan(&plan, &host).unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_invariants(&plan, &mp);
        let has = |want: &MountOp| mp.ops.contains(want);
        match case {
            "present" => {
                // The whole git directory is bound read-only, so the entries it lacks
                // need no placeholder.
                assert!(has(&MountOp::BindRo {
                    src: ws.join(".git"),
                    dst: ws.join(".git"),
                    kind: EntryKind::Dir
                }));
                assert!(mp.host_placeholders.is_empty());
            }
            "absent" => {
                assert_eq!(mp.host_placeholders, [ws.join(".git")]);
                assert!(has(&MountOp::CoverWithEmptyDir {
                    dst: ws.join(".git")
                }));
                // Planning created nothing on the host.
                assert!(!ws.join(".git").exists());
            }
            _ => {
                // `.git` is read-only as a whole, the symlinked hooks in it included; their
                // target lies outside every grant, so nothing is mounted there.
                assert!(has(&MountOp::BindRo {
                    src: ws.join(".git"),
                    dst: ws.join(".git"),
                    kind: EntryKind::Dir
                }));
                let out = outside.path().canonicalize().unwrap();
                assert!(
                    !mp.ops
                        .iter()
                        .any(|op| op.dst().is_some_and(|d| d.starts_with(&out)))
                );
            }
        }
        // The host's system layout: symlinked top-level dirs are symlinks, not binds.
        for top in ["/bin", "/sbin", "/lib", "/lib64"] {
            if let Ok(target) = std::fs::read_link(top) {
                assert!(
                    has(&MountOp::Symlink {
                        target,
                        link: PathBuf::from(top)
                    }),
                    "{top} should be a symlink op"
                );
            }
        }
        // /etc is bound whole and every host secret in it that exists is covered after
        // it; none is ever bound.
        let etc_bind = mp
            .ops
            .iter()
            .position(|op| matches!(op, MountOp::BindRo { dst, .. } if dst == Path::new("/etc")));
        let etc_bind = etc_bind.expect("/etc bound whole");
        for secret in [
            "/etc/shadow",
            "/etc/gshadow",
            "/etc/sudoers",
            "/etc/ssh",
            "/etc/ssl/private",
        ] {
            assert!(
                !mp.ops
                    .iter()
                    .any(|op| op.bind_src().is_some_and(|d| d.starts_with(secret))),
                "{secret} bound"
            );
            if std::fs::symlink_metadata(secret).is_err() {
                continue;
            }
            let dir = Path::new(secret).is_dir();
            let cover = mp.ops.iter().position(|op| match op {
                MountOp::CoverWithEmptyDir { dst } => dir && dst == Path::new(secret),
                MountOp::CoverWithDevNull { dst } => !dir && dst == Path::new(secret),
                _ => false,
            });
            let cover = cover.unwrap_or_else(|| panic!("{secret} not covered"));
            assert!(cover > etc_bind, "{secret} covered before /etc is bound");
        }
        if case == "present" {
            println!("strict policy, workspace {}:", ws.display());
            for op in &mp.ops {
                println!("  {op}");
            }
        }
    }
}

#[test]
fn policy_paths_are_ordered_parents_first_around_the_workspace() {
    let mut plan = fixed_plan();
    let ws = plan.workspace.clone();
    plan.filesystem.read_only = vec![PathBuf::from("/home/u"), ws.join("vendor")];
    plan.filesystem.writable = vec![PathBuf::from("/tmp/cache"), ws.join("target")];
    let host = fixed_host()
        .with_dir(ws.join(".git/hooks"))
        .with_file(ws.join(".git/config"))
        .with_dir(ws.join("vendor"))
        .with_dir(ws.join("target"))
        .with_dir("/tmp/cache");
    let mp = mount_plan(&plan, &host).unwrap();
    assert_invariants(&plan, &mp);
    let pos = |s: &str| {
        lines(&mp)
            .iter()
            .position(|l| l == s)
            .unwrap_or_else(|| panic!("{s}"))
    };
    let home = pos("bind-ro /home/u -> /home/u (Dir)");
    let wsb = pos("bind-rw /home/u/proj -> /home/u/proj (Dir)");
    let vendor = pos("bind-ro /home/u/proj/vendor -> /home/u/proj/vendor (Dir)");
    let cache = pos("bind-rw /tmp/cache -> /tmp/cache (Dir)");
    assert!(home < wsb && wsb < vendor);
    assert!(pos("tmpfs /tmp size=1073741824 mode=1777") < pos("dir /tmp/cache mode=755"));
    assert!(pos("dir /tmp/cache mode=755") < cache && cache < wsb);
    // Under the host bind of /home/u no directories are created for the workspace.
    assert!(!lines(&mp).contains(&"dir /home/u/proj mode=755".to_owned()));
    // Writable inside the workspace is already granted.
    assert!(!lines(&mp).iter().any(|l| l.contains("/home/u/proj/target")));
}

#[test]
fn deny_read_covers_what_is_visible() {
    let mut plan = fixed_plan();
    plan.filesystem.read_only = vec![PathBuf::from("/home/u")];
    plan.filesystem.deny_read = vec![
        PathBuf::from("/home/u/.ssh"),
        PathBuf::from("/home/u/.netrc"),
        PathBuf::from("/home/u/link-to-token"),
        PathBuf::from("/home/u/missing"),
        PathBuf::from("/root/.ssh"),
    ];
    let host = fixed_host()
        .with_dir("/home/u/proj/.git/hooks")
        .with_file("/home/u/proj/.git/config")
        .with_file("/home/u/.netrc")
        .with_symlink("/home/u/link-to-token", ".config/token")
        .with_file("/home/u/.config/token")
        .with_dir("/root/.ssh");
    let mp = mount_plan(&plan, &host).unwrap();
    assert_invariants(&plan, &mp);
    let tail: Vec<_> = lines(&mp)
        .into_iter()
        .skip_while(|l| !l.starts_with("remount-ro /home/u/proj/.git/hooks"))
        .skip(1)
        .collect();
    assert_eq!(
        tail,
        [
            "cover-dev-null /home/u/.config/token",
            "remount-ro /home/u/.config/token",
            "cover-dev-null /home/u/.netrc",
            "remount-ro /home/u/.netrc",
            "cover-empty-dir /home/u/.ssh",
            "pivot-root",
            "remount-root-ro",
        ]
    );
}

fn err(plan: &Plan, host: &HostView) -> MountPlanError {
    mount_plan(plan, host).unwrap_err()
}

#[test]
fn bad_plan_paths_are_rejected() {
    let host = fixed_host();
    let mut p = fixed_plan();
    p.workspace = PathBuf::from("/");
    assert!(matches!(err(&p, &host), MountPlanError::BindsRoot { .. }));

    let mut p = fixed_plan();
    p.filesystem.read_only = vec![PathBuf::from("/")];
    assert!(matches!(err(&p, &host), MountPlanError::BindsRoot { .. }));

    let mut p = fixed_plan();
    p.filesystem.writable = vec![PathBuf::from("/opt/../etc")];
    assert!(matches!(
        err(&p, &host),
        MountPlanError::ParentComponent { .. }
    ));

    let mut p = fixed_plan();
    p.filesystem.read_only = vec![PathBuf::from("opt/tool")];
    assert!(matches!(err(&p, &host), MountPlanError::NotAbsolute { .. }));

    let mut p = fixed_plan();
    p.filesystem.read_only = vec![PathBuf::from(std::ffi::OsStr::from_bytes(b"/opt/\0x"))];
    assert!(matches!(err(&p, &host), MountPlanError::NulByte { .. }));

    for reserved in ["/proc", "/proc/1/root", "/dev/shm/x", "/dev"] {
        let mut p = fixed_plan();
        p.filesystem.writable = vec![PathBuf::from(reserved)];
        assert!(
            matches!(err(&p, &host), MountPlanError::Reserved { .. }),
            "{reserved}"
        );
    }
    let mut p = fixed_plan();
    p.filesystem.writable = vec![PathBuf::from("/tmp")];
    assert!(matches!(
        err(&p, &host),
        MountPlanError::Reserved {
            reserved: PRIVATE_HOME,
            ..
        }
    ));

    let mut p = fixed_plan();
    p.filesystem.protected = vec![PathBuf::from("/home/u/.bashrc")];
    assert!(matches!(
        err(&p, &host),
        MountPlanError::ProtectedOutsideWorkspace { .. }
    ));
    p.filesystem.protected = vec![p.workspace.join("a/../../x")];
    assert!(matches!(
        err(&p, &host),
        MountPlanError::ParentComponent { .. }
    ));

    let mut p = fixed_plan();
    p.filesystem.read_only = vec![PathBuf::from("/opt/tool")];
    p.filesystem.writable = vec![PathBuf::from("/opt/tool")];
    let h = fixed_host().with_dir("/opt/tool");
    assert!(matches!(
        err(&p, &h),
        MountPlanError::ConflictingGrant { .. }
    ));

    let mut p = fixed_plan();
    p.filesystem.read_only = vec![PathBuf::from("/opt/tool")];
    assert!(matches!(err(&p, &host), MountPlanError::Missing { .. }));
    let h = fixed_host().with_symlink("/opt/tool", "/etc");
    assert!(matches!(
        err(&p, &h),
        MountPlanError::UnexpectedSymlink { .. }
    ));
    let h = fixed_host().with(
        "/opt/tool".as_ref(),
        HostNode::Inaccessible {
            errno: libc::EACCES,
        },
    );
    assert!(matches!(err(&p, &h), MountPlanError::Inaccessible { .. }));

    let mut p = fixed_plan();
    p.filesystem.deny_read = vec![PathBuf::from("/home/u")];
    assert!(matches!(
        err(&p, &host),
        MountPlanError::DenyHidesWorkspace { .. }
    ));
    p.filesystem.deny_read = vec![PathBuf::from("/home/u/loop")];
    let h = fixed_host().with_symlink("/home/u/loop", "loop");
    assert!(matches!(err(&p, &h), MountPlanError::SymlinkLoop { .. }));

    let p = fixed_plan();
    let h = fixed_host().with_file("/dev/null");
    assert!(matches!(err(&p, &h), MountPlanError::NoDevNull { .. }));

    // A probed view answers only what it recorded.
    let probed = HostView {
        nodes: BTreeMap::new(),
        unrecorded_missing: false,
    };
    assert!(matches!(err(&p, &probed), MountPlanError::NotProbed { .. }));

    let mut p = fixed_plan();
    p.filesystem.deny_read = vec![PathBuf::from("/x"); MAX_PLAN_PATHS];
    assert!(matches!(
        err(&p, &host),
        MountPlanError::TooManyPaths { .. }
    ));

    // Messages are lowercase and name the value.
    let mut p = fixed_plan();
    p.filesystem.read_only = vec![PathBuf::from("/")];
    let msg = err(&p, &host).to_string();
    assert!(msg.starts_with("filesystem.read_only path \"/\""), "{msg}");
}

#[test]
fn the_checker_refuses_broken_lists() {
    let plan = fixed_plan();
    let host = fixed_host()
        .with_dir("/home/u/proj/.git/hooks")
        .with_file("/home/u/proj/.git/config");
    let good = mount_plan(&plan, &host).unwrap().ops;
    let check = |ops: &[MountOp]| {
        let mut lookup = |p: &Path| host.node(p);
        check_ops(ops, &mut lookup)
    };
    assert!(check(&good).is_ok());
    let rule = |ops: &[MountOp]| match check(ops) {
        Err(MountPlanError::Invariant { rule, .. }) => rule,
        other => panic!("{other:?}"),
    };
    // A read-only bind whose remount was dropped.
    let mut ops = good.clone();
    let i = ops
        .iter()
        .position(|o| {
            *o == MountOp::RemountRo {
                dst: "/usr".into(),
                allow_devices: false,
            }
        })
        .unwrap();
    ops.remove(i);
    assert_eq!(rule(&ops), "read-only bind never remounted read-only");
    // A child before its parent.
    let mut ops = good.clone();
    let i = ops
        .iter()
        .position(|o| {
            *o == MountOp::Dir {
                path: "/etc/ssl".into(),
                mode: 0o755,
            }
        })
        .unwrap();
    let d = ops.remove(i);
    ops.insert(i + 1, d);
    assert_eq!(rule(&ops), "parent directory does not exist yet");
    // A bind from elsewhere.
    let mut ops = good.clone();
    let i = ops
        .iter()
        .position(|o| matches!(o, MountOp::BindRo { dst, .. } if dst == Path::new("/usr")))
        .unwrap();
    ops[i] = MountOp::BindRo {
        src: "/".into(),
        dst: "/usr".into(),
        kind: EntryKind::Dir,
    };
    assert_eq!(rule(&ops), "bind source differs from its destination");
    // A bind at / itself.
    let mut ops = good.clone();
    ops.insert(
        1,
        MountOp::BindRw {
            src: "/".into(),
            dst: "/".into(),
            kind: EntryKind::Dir,
        },
    );
    assert_eq!(rule(&ops), "path not absolute, normalised and below /");
    // The workspace bind moved above the protected covers' remounts still checks out,
    // but moved before /tmp exists it does not.
    let mut ops = good.clone();
    let i = ops
        .iter()
        .position(|o| matches!(o, MountOp::BindRw { .. }))
        .unwrap();
    let b = ops.remove(i);
    ops.insert(2, b);
    assert!(check(&ops).is_err());
    // Devices allowed on a system bind.
    let mut ops = good.clone();
    let i = ops
        .iter()
        .position(|o| {
            *o == MountOp::RemountRo {
                dst: "/usr".into(),
                allow_devices: false,
            }
        })
        .unwrap();
    ops[i] = MountOp::RemountRo {
        dst: "/usr".into(),
        allow_devices: true,
    };
    assert_eq!(rule(&ops), "devices allowed outside /dev");
    // Nothing after the root remount; pivot exactly where expected.
    let mut ops = good.clone();
    ops.push(MountOp::Proc {
        dst: "/proc".into(),
    });
    assert!(check(&ops).is_err());
    // A later mount hiding an earlier one.
    let mut ops = good;
    let i = ops.iter().position(|o| *o == MountOp::PivotRoot).unwrap();
    ops.insert(
        i,
        MountOp::Tmpfs {
            dst: "/etc".into(),
            size_bytes: 1,
            mode: 0o755,
        },
    );
    assert_eq!(rule(&ops), "hidden by a later mount above it");
}

#[test]
fn tmp_size_follows_a_small_memory_limit() {
    let mut plan = fixed_plan();
    plan.limits.memory_bytes = 256 << 20;
    plan.filesystem.private_home = false;
    let mp = mount_plan(&plan, &fixed_host()).unwrap();
    assert!(lines(&mp).contains(&format!("tmpfs /tmp size={} mode=1777", 256u64 << 20)));
    assert_eq!(mp.home, None);
    assert!(!lines(&mp).iter().any(|l| l.starts_with("dir /tmp/home")));
}

#[test]
fn byte_prefix_check_agrees_with_path_starts_with_on_normalised_paths() {
    let paths = ["/", "/a", "/ab", "/a/b", "/a/bc", "/a/b/c", "/b"];
    for p in paths {
        for q in paths {
            assert_eq!(
                super::model::is_at_or_under(Path::new(p), Path::new(q)),
                Path::new(p).starts_with(q),
                "{p} under {q}"
            );
        }
    }
}

/// A writable `/dev/shm` grant (what a Tier B policy needs for `multiprocessing`) is the
/// sandbox's own tmpfs, never a bind of the host's, sized by the memory limit;
/// `dev_shm = "none"` leaves the empty directory of the sealed `/dev`.
#[test]
fn dev_shm_is_the_sandboxs_own_or_none() {
    let host = fixed_host().with_dir("/dev/shm");
    let mut plan = fixed_plan();
    plan.filesystem.writable = vec![PathBuf::from("/dev/shm")];
    plan.limits.memory_bytes = 16 << 20;
    let mp = mount_plan(&plan, &host).unwrap();
    assert_invariants(&plan, &mp);
    let all = lines(&mp);
    assert!(
        all.iter()
            .any(|l| l == "tmpfs /dev/shm size=16777216 mode=1777"),
        "{all:#?}"
    );
    assert!(
        !all.iter()
            .any(|l| l.starts_with("bind") && l.contains("/dev/shm")),
        "{all:#?}"
    );

    plan.filesystem.writable.clear();
    plan.filesystem.dev_shm = tierbox_policy::DevShm::None;
    let mp = mount_plan(&plan, &host).unwrap();
    assert_invariants(&plan, &mp);
    let all = lines(&mp);
    assert!(all.iter().any(|l| l == "dir /dev/shm mode=755"), "{all:#?}");
    assert!(
        !all.iter().any(|l| l.starts_with("tmpfs /dev/shm")),
        "{all:#?}"
    );
}
