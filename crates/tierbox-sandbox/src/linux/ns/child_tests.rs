//! Native Tier C tests: the pure op compiler, then real sandboxes on this host (each
//! prints `SKIP <name>: <reason>` when user namespaces are unavailable, and fails instead
//! under `CI=true`), then an `#[ignore]`d spawn-to-exit benchmark paired with bwrap.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, Instant};

use tierbox_policy::plan::Plan;
use tierbox_policy::{ProcessRunRequest, ValidateContext, validate};

use super::child::*;
use super::sys::OpKind;
use crate::linux::mounts::{HostView, mount_plan};
use crate::linux::userns::probe_userns_cached;

// ---- helpers --------------------------------------------------------------------------

use crate::test_fixtures::{policy, scratch};

/// A strict-policy plan for `command`, with `args` appended after validation (these tests
/// name paths outside the workspace on purpose).
fn strict_plan(ws: &Path, command: &str, args: &[&str]) -> Plan {
    let env: BTreeMap<String, String> = [("HOME", "/nonexistent-home"), ("LANG", "C.UTF-8")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let ctx = ValidateContext::new(ws).with_env(env);
    let req = ProcessRunRequest::new(command);
    let mut plan = validate(&policy("strict.toml"), &req, &ctx).unwrap();
    plan.argv.extend(args.iter().map(|a| (*a).to_owned()));
    plan
}

/// A strict-policy plan running `sh -c script` (interpreters allowed for this test).
fn sh_plan(ws: &Path, script: &str) -> Plan {
    let mut pol = policy("strict.toml");
    pol.exec.allowed_executables.push("sh".to_owned());
    pol.exec.allow_interpreters = true;
    let ctx = ValidateContext::new(ws);
    let mut plan = validate(&pol, &ProcessRunRequest::new("sh"), &ctx).unwrap();
    plan.argv.extend(["-c", script].map(str::to_owned));
    plan
}

/// Whether native Tier C can run here; prints SKIP (or fails under CI=true) otherwise.
fn usable(test: &str) -> bool {
    match probe_userns_cached().reason() {
        None => true,
        Some(reason) => !tierbox_test_support::skip(test, reason),
    }
}

struct Ran {
    exit: NativeExit,
    stdout: String,
    stderr: String,
    enforcement: tierbox_policy::Enforcement,
}

fn read_all(fd: OwnedFd) -> String {
    let mut f = std::fs::File::from(fd);
    let mut s = Vec::new();
    f.read_to_end(&mut s).unwrap();
    String::from_utf8_lossy(&s).into_owned()
}

fn run(plan: &Plan) -> Ran {
    let launched = launch_native(plan, &NativeOptions::default()).unwrap();
    let NativeLaunched { stdout, stderr, .. } = &launched;
    let out = read_all(stdout.try_clone().unwrap());
    let err = read_all(stderr.try_clone().unwrap());
    let exit = wait_native(&launched).unwrap();
    crate::placeholders::release(&launched.host_placeholders);
    Ran {
        exit,
        stdout: out,
        stderr: err,
        enforcement: launched.enforcement,
    }
}

fn ok(r: &Ran) {
    assert_eq!(
        r.exit.code,
        Some(0),
        "stdout {:?} stderr {:?}",
        r.stdout,
        r.stderr
    );
}

fn status_field<'a>(status: &'a str, name: &str) -> &'a str {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
        .unwrap_or_else(|| panic!("{name} not in {status}"))
}

// ---- pure -----------------------------------------------------------------------------

#[test]
fn ns_compile_prefixes_paths_and_starts_with_the_staging_prologue() {
    let sc = scratch();
    let plan = strict_plan(&sc.ws, "true", &[]);
    let mplan = mount_plan(&plan, &HostView::probe(&plan)).unwrap();
    let (ops, bind_at) = compile_ops(&mplan).unwrap();
    // One op per planner op, and the hand-over of /tmp after its mount.
    let tmp = mplan
        .ops
        .iter()
        .position(crate::linux::mounts::MountPlan::is_sent)
        .unwrap();
    assert_eq!(ops[bind_at[tmp] + 1].kind(), OpKind::SendFd);
    let expected: Vec<usize> = (0..mplan.ops.len())
        .map(|i| 5 + i + usize::from(i > tmp))
        .collect();
    assert_eq!(bind_at, expected);
    let kinds: Vec<OpKind> = ops.iter().take(5).map(OwnedOp::kind).collect();
    assert_eq!(
        kinds,
        [
            OpKind::Mount,
            OpKind::Mount,
            OpKind::Mkdir,
            OpKind::Mkdir,
            OpKind::PivotInto
        ]
    );
    assert_eq!(ops.len(), mplan.ops.len() + 6);
    let final_pivot = ops
        .iter()
        .position(|o| o.kind() == OpKind::PivotFinal)
        .unwrap();
    for o in ops.get(5..final_pivot).unwrap() {
        let dst = o.dst().to_str().unwrap();
        match o.kind() {
            // Placeholders are made through the host's path.
            OpKind::PlaceholderDir | OpKind::PlaceholderFile => {
                assert!(o.src().unwrap().to_str().unwrap().starts_with(OLD_ROOT));
            }
            _ => assert!(dst.starts_with(NEW_ROOT), "{dst}"),
        }
        if o.kind() == OpKind::BindTree {
            // Binds come from the host, or from the sandbox's own view of a writable
            // bind they lie in (the workspace, maybe idmapped).
            let src = o.src().unwrap().to_str().unwrap();
            let in_workspace = src
                .strip_prefix(NEW_ROOT)
                .is_some_and(|rest| rest.starts_with(sc.ws.to_str().unwrap()));
            assert!(src.starts_with(OLD_ROOT) || in_workspace, "{src}");
        }
    }
    assert_eq!(ops.last().unwrap().kind(), OpKind::Setattr);
    assert_eq!(ops.last().unwrap().dst().to_str().unwrap(), "/");
}

// ---- real sandboxes -------------------------------------------------------------------

#[test]
fn ns_real_identity_capabilities_no_new_privs_and_seccomp() {
    if !usable("ns_real_identity_capabilities_no_new_privs_and_seccomp") {
        return;
    }
    let sc = scratch();
    let r = run(&strict_plan(&sc.ws, "id", &["-u"]));
    ok(&r);
    assert_eq!(r.stdout.trim(), SANDBOX_UID.to_string());
    let e = &r.enforcement;
    assert_eq!(e.backend, BACKEND_NAME);
    assert_eq!(e.namespaces.len(), 7);
    assert!(e.seccomp.applied);

    let r = run(&strict_plan(&sc.ws, "cat", &["/proc/self/status"]));
    ok(&r);
    let st = &r.stdout;
    assert!(status_field(st, "Uid").starts_with(&SANDBOX_UID.to_string()));
    assert!(status_field(st, "Gid").starts_with(&SANDBOX_GID.to_string()));
    assert_eq!(status_field(st, "CapEff"), "0000000000000000");
    assert_eq!(status_field(st, "CapPrm"), "0000000000000000");
    assert_eq!(status_field(st, "CapBnd"), "0000000000000000");
    assert_eq!(status_field(st, "CapAmb"), "0000000000000000");
    assert_eq!(status_field(st, "NoNewPrivs"), "1");
    assert_eq!(status_field(st, "Seccomp"), "2");
    // The program is pid 2 of its own namespace (the sandbox's procfs shows its pids only).
    assert_eq!(status_field(st, "NSpid"), "2", "{st}");
}

#[test]
fn ns_real_root_holds_only_the_plan() {
    if !usable("ns_real_root_holds_only_the_plan") {
        return;
    }
    let sc = scratch();
    let r = run(&strict_plan(&sc.ws, "ls", &["-a", "/"]));
    ok(&r);
    let entries: Vec<&str> = r.stdout.lines().collect();
    for absent in [
        "root", "home", "sys", "run", "newroot", "oldroot", "boot", "srv",
    ] {
        assert!(!entries.contains(&absent), "/{absent} visible: {entries:?}");
    }
    for present in ["usr", "proc", "dev", "tmp"] {
        assert!(
            entries.contains(&present),
            "/{present} missing: {entries:?}"
        );
    }
    // /dev is the minimal one.
    let r = run(&strict_plan(&sc.ws, "ls", &["/dev"]));
    ok(&r);
    let dev: Vec<&str> = r.stdout.lines().collect();
    assert!(dev.contains(&"null") && dev.contains(&"urandom") && dev.contains(&"pts"));
    assert!(
        !dev.iter()
            .any(|d| d.starts_with("sd") || d.starts_with("vd") || *d == "mem")
    );
    // The root is read-only, so is /usr.
    for target in ["/tierbox-probe", "/usr/tierbox-probe"] {
        let r = run(&strict_plan(&sc.ws, "touch", &[target]));
        assert_ne!(r.exit.code, Some(0), "{target} writable");
        assert!(r.stderr.contains("Read-only"), "{}", r.stderr);
    }
}

#[test]
fn ns_real_workspace_is_writable_and_its_parent_is_not_there() {
    if !usable("ns_real_workspace_is_writable_and_its_parent_is_not_there") {
        return;
    }
    let sc = scratch();
    let inside = sc.ws.join("written-inside.txt");
    let r = run(&strict_plan(&sc.ws, "touch", &[inside.to_str().unwrap()]));
    ok(&r);
    assert!(
        inside.exists(),
        "workspace write is not visible on the host"
    );
    let (euid, _) = crate::launch::sys::current_ids();
    let owner = crate::launch::sys::owner_of(&inside).unwrap();
    assert_eq!(owner.0, euid, "files are owned by the supervisor's euid");

    let secret = sc.root.join("secret.txt");
    std::fs::write(&secret, "top secret").unwrap();
    let r = run(&strict_plan(&sc.ws, "cat", &[secret.to_str().unwrap()]));
    assert_ne!(r.exit.code, Some(0));
    assert!(!r.stdout.contains("top secret"));
    assert!(r.stderr.contains("No such file"), "{}", r.stderr);

    // Writing beside the workspace lands in the sandbox's private /tmp at most.
    let beside = sc.root.join("beside.txt");
    let _ = run(&strict_plan(&sc.ws, "touch", &[beside.to_str().unwrap()]));
    assert!(!beside.exists(), "written beside the workspace on the host");
}

#[test]
fn ns_real_protected_paths_stay_read_only() {
    if !usable("ns_real_protected_paths_stay_read_only") {
        return;
    }
    let sc = scratch();
    std::fs::create_dir_all(sc.ws.join(".git/hooks")).unwrap();
    std::fs::write(sc.ws.join(".git/config"), "[core]\n").unwrap();
    let hook = sc.ws.join(".git/hooks/pre-commit");
    let r = run(&strict_plan(&sc.ws, "touch", &[hook.to_str().unwrap()]));
    assert_ne!(r.exit.code, Some(0));
    assert!(!hook.exists());
    let config = sc.ws.join(".git/config");
    let r = run(&strict_plan(
        &sc.ws,
        "rm",
        &["-f", config.to_str().unwrap()],
    ));
    assert_ne!(r.exit.code, Some(0));
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "[core]\n");
}

#[test]
fn ns_real_missing_git_is_covered_and_the_placeholder_removed() {
    if !usable("ns_real_missing_git_is_covered_and_the_placeholder_removed") {
        return;
    }
    let sc = scratch();
    let git = sc.ws.join(".git");
    let r = run(&strict_plan(
        &sc.ws,
        "mkdir",
        &["-p", git.join("hooks").to_str().unwrap()],
    ));
    assert_ne!(r.exit.code, Some(0));
    assert!(!git.exists(), "placeholder left behind");
}

/// Overlay mode compiles the workspace into a staging bind of the lower layer, the
/// upper layer's tmpfs sized by the disk limit, the overlay, and the hand-over of the
/// upper layer; the lower bind is where an idmapped tree is moved in.
#[test]
fn ns_compile_overlay_stages_both_layers_and_sends_the_upper_one() {
    let sc = scratch();
    let mut plan = strict_plan(&sc.ws, "true", &[]);
    plan.workspace_mode = tierbox_policy::WorkspaceMode::Overlay;
    plan.limits.disk_bytes = 3 << 20;
    let mplan = mount_plan(&plan, &HostView::probe(&plan)).unwrap();
    assert!(mplan.has_overlay());
    let (ops, bind_at) = compile_ops(&mplan).unwrap();
    let at = mplan
        .ops
        .iter()
        .position(|op| matches!(op, crate::linux::mounts::MountOp::Overlay { .. }))
        .unwrap();
    let bind = &ops[bind_at[at]];
    assert_eq!(bind.kind(), OpKind::BindTree);
    assert_eq!(bind.dst(), c"/lower");
    let ws = format!("/oldroot{}", sc.ws.display());
    assert_eq!(bind.src().unwrap().to_str().unwrap(), ws);
    let tmpfs = &ops[bind_at[at] + 1];
    assert_eq!(tmpfs.dst(), c"/layer");
    assert!(tmpfs.describe.contains("upper layer"), "{}", tmpfs.describe);
    let mount = ops
        .iter()
        .find(|o| o.kind() == OpKind::Mount && o.src() == Some(c"overlay"))
        .unwrap();
    assert_eq!(
        mount.dst().to_str().unwrap(),
        format!("/newroot{}", sc.ws.display())
    );
    let send = ops.iter().position(|o| o.kind() == OpKind::SendFd).unwrap();
    let pivot = ops
        .iter()
        .position(|o| o.kind() == OpKind::PivotFinal)
        .unwrap();
    assert!(
        send < pivot,
        "the upper layer is sent before the staging tmpfs goes"
    );
    // Every later planner op keeps its own index.
    assert_eq!(bind_at[at + 1], bind_at[at] + 7);
}

/// A run in overlay mode writes, deletes and creates through the overlay; the real
/// workspace is untouched and the supervisor reads the changes from the upper layer it
/// was handed, after the sandbox is gone. Past the disk limit, writes fail with ENOSPC.
#[test]
fn ns_real_overlay_leaves_the_workspace_and_hands_back_the_upper_layer() {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileTypeExt;
    if !usable("ns_real_overlay_leaves_the_workspace_and_hands_back_the_upper_layer") {
        return;
    }
    let sc = scratch();
    std::fs::write(sc.ws.join("keep.txt"), "old\n").unwrap();
    std::fs::write(sc.ws.join("gone.txt"), "bye\n").unwrap();
    let mut plan = sh_plan(
        &sc.ws,
        "cd \"$1\" && echo new > keep.txt && rm gone.txt && mkdir d && echo x > d/f && cat keep.txt && ! head -c 2000000 /dev/zero > big 2>/dev/null && echo full",
    );
    plan.argv
        .extend(["sh", sc.ws.to_str().unwrap()].map(str::to_owned));
    plan.workspace_mode = tierbox_policy::WorkspaceMode::Overlay;
    plan.limits.disk_bytes = 1 << 20;
    let launched = launch_native(&plan, &NativeOptions::default()).unwrap();
    let out = read_all(launched.stdout.try_clone().unwrap());
    let err = read_all(launched.stderr.try_clone().unwrap());
    let exit = wait_native(&launched).unwrap();
    crate::placeholders::release(&launched.host_placeholders);
    assert_eq!(exit.code, Some(0), "stdout {out:?} stderr {err:?}");
    assert_eq!(out, "new\nfull\n");
    // The real workspace: as it was.
    assert_eq!(
        std::fs::read_to_string(sc.ws.join("keep.txt")).unwrap(),
        "old\n"
    );
    assert_eq!(
        std::fs::read_to_string(sc.ws.join("gone.txt")).unwrap(),
        "bye\n"
    );
    assert!(!sc.ws.join("d").exists());
    assert!(!sc.ws.join("big").exists());
    // The upper layer, through the fd the sandbox handed over.
    let layer = launched.upper_layer.expect("the upper layer's fd");
    let upper = std::path::PathBuf::from(format!("/proc/self/fd/{}/upper", layer.as_raw_fd()));
    assert_eq!(
        std::fs::read_to_string(upper.join("keep.txt")).unwrap(),
        "new\n"
    );
    assert_eq!(std::fs::read_to_string(upper.join("d/f")).unwrap(), "x\n");
    let whiteout = std::fs::symlink_metadata(upper.join("gone.txt")).unwrap();
    assert!(
        whiteout.file_type().is_char_device(),
        "a whiteout for the deletion"
    );
    // The partial write that hit the limit is bounded by it.
    let big = std::fs::metadata(upper.join("big")).map_or(0, |m| m.len());
    assert!(big < 1 << 20, "{big} bytes past a 1 MiB upper layer");
}

#[test]
fn ns_real_pid_namespace_hostname_and_loopback_only_network() {
    if !usable("ns_real_pid_namespace_hostname_and_loopback_only_network") {
        return;
    }
    let sc = scratch();
    // pid 1 is our reaper; the supervisor's argv is not visible through it. Before its
    // exec of tierbox-init pid 1 shows the wiped argv (all NULs); after it, the reaper's
    // own (its name and the program's pid). The exec names the process after the file it
    // ran until the reaper renames itself, so the name may briefly be the memfd's.
    let r = run(&strict_plan(&sc.ws, "cat", &["/proc/1/comm"]));
    ok(&r);
    let comm = r.stdout.trim();
    assert!(
        comm == INIT_NAME.to_str().unwrap()
            || comm.starts_with("memfd:")
            || comm.parse::<u32>().is_ok(),
        "pid 1 is called {comm:?}"
    );
    let r = run(&strict_plan(&sc.ws, "cat", &["/proc/1/cmdline"]));
    ok(&r);
    assert!(
        r.stdout.bytes().all(|b| b == 0) || r.stdout == "tierbox-init\u{0}2\u{0}",
        "supervisor argv visible: {:?}",
        r.stdout
    );
    // pid 1's memory and environment are not readable.
    let r = run(&strict_plan(&sc.ws, "cat", &["/proc/1/environ"]));
    assert_ne!(
        r.exit.code,
        Some(0),
        "pid 1 environ readable: {:?}",
        r.stdout
    );
    // Only the sandbox's processes: 1 (reaper) and the program itself.
    let r = run(&strict_plan(&sc.ws, "ls", &["/proc"]));
    ok(&r);
    let pids: Vec<u32> = r.stdout.lines().filter_map(|l| l.parse().ok()).collect();
    assert_eq!(pids, [1, 2], "{}", r.stdout);

    let r = run(&strict_plan(&sc.ws, "cat", &["/proc/net/dev"]));
    ok(&r);
    let interfaces: Vec<String> = r
        .stdout
        .lines()
        .skip(2)
        .filter_map(|l| Some(l.split(':').next()?.trim().to_owned()))
        .collect();
    assert_eq!(interfaces, ["lo"]);

    let r = run(&strict_plan(&sc.ws, "uname", &["-n"]));
    ok(&r);
    assert_eq!(r.stdout.trim(), DEFAULT_HOSTNAME);
}

#[test]
fn ns_real_exit_status_and_environment() {
    if !usable("ns_real_exit_status_and_environment") {
        return;
    }
    let sc = scratch();
    let r = run(&strict_plan(&sc.ws, "false", &[]));
    assert_eq!(r.exit.code, Some(1));
    let plan = strict_plan(&sc.ws, "env", &[]);
    let r = run(&plan);
    ok(&r);
    let got: BTreeMap<&str, &str> = r.stdout.lines().filter_map(|l| l.split_once('=')).collect();
    assert_eq!(got.get("HOME"), Some(&"/tmp/home"));
    assert_eq!(got.get("TMPDIR"), Some(&"/tmp"));
    assert_eq!(got.get("LANG"), Some(&"C.UTF-8"));
    assert!(
        !got.contains_key("CARGO_MANIFEST_DIR"),
        "supervisor env leaked"
    );
    let r = run(&strict_plan(&sc.ws, "pwd", &[]));
    ok(&r);
    assert_eq!(r.stdout.trim(), sc.ws.to_str().unwrap());
}

/// The mount layer alone keeps the kernel's global knobs read-only (landlock off here,
/// as on a host without it): `test -w` asks the kernel whether the file could be opened
/// for writing, which a read-only mount refuses (`EROFS`) while the sandbox's uid, mapped
/// to the supervisor's, would pass the permission check. Masked host-wide state reads as
/// empty. Negative control: as root on the host the same `test -w` succeeds.
#[test]
fn ns_real_proc_knobs_are_read_only_without_landlock() {
    if !usable("ns_real_proc_knobs_are_read_only_without_landlock") {
        return;
    }
    let sc = scratch();
    let mut pol = policy("strict.toml");
    pol.exec
        .allowed_executables
        .extend(["test".to_owned(), "cat".to_owned()]);
    let ctx = ValidateContext::new(&sc.ws);
    let no_landlock = NativeOptions {
        landlock: false,
        ..NativeOptions::default()
    };
    let run_without_landlock = |command: &str, args: &[&str]| {
        let mut plan = validate(&pol, &ProcessRunRequest::new(command), &ctx).unwrap();
        plan.argv.extend(args.iter().map(|a| (*a).to_owned()));
        let l = launch_native(&plan, &no_landlock).unwrap();
        let out = read_all(l.stdout.try_clone().unwrap());
        let exit = wait_native(&l).unwrap();
        crate::placeholders::release(&l.host_placeholders);
        assert!(!l.enforcement.landlock.applied, "landlock was applied");
        (exit, out)
    };
    for knob in [
        "/proc/sys/kernel/core_pattern",
        "/proc/sys/kernel/printk_ratelimit_burst",
        "/proc/sys/vm/drop_caches",
    ] {
        let (exit, _) = run_without_landlock("test", &["-w", knob]);
        assert_eq!(exit.code, Some(1), "{knob} is writable in the sandbox");
        if rustix::process::geteuid().is_root() {
            let host = std::process::Command::new("test")
                .args(["-w", knob])
                .status()
                .unwrap();
            assert!(
                host.success(),
                "negative control: {knob} not writable on the host"
            );
        }
    }
    for masked in [
        "/proc/kcore",
        "/proc/keys",
        "/proc/timer_list",
        "/proc/interrupts",
    ] {
        if !Path::new(masked).exists() {
            continue;
        }
        let (exit, out) = run_without_landlock("cat", &[masked]);
        assert!(
            out.is_empty(),
            "{masked} shows {} bytes in the sandbox ({exit:?})",
            out.len()
        );
    }
}

#[test]
fn ns_real_killing_pid_1_ends_the_run() {
    if !usable("ns_real_killing_pid_1_ends_the_run") {
        return;
    }
    let sc = scratch();
    let launched = launch_native(
        &strict_plan(&sc.ws, "sleep", &["30"]),
        &NativeOptions::default(),
    )
    .unwrap();
    let start = Instant::now();
    crate::launch::sys::pidfd_signal(&launched.pidfd, libc::SIGTERM).unwrap();
    let exit = wait_native(&launched).unwrap();
    assert!(start.elapsed() < Duration::from_secs(5));
    // SIGTERM is forwarded to the program, which dies of it; pid 1 reports that.
    assert_eq!(exit.signal, Some(libc::SIGTERM), "{exit:?}");
}

// ---- benchmark ------------------------------------------------------------------------

/// Runs per configuration in [`ns_bench_spawn_to_exit_p50`].
const BENCH_RUNS: usize = 200;
/// Warm-up runs (not counted).
const BENCH_WARMUP: usize = 10;

fn p(sorted: &[Duration], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

#[test]
#[ignore = "benchmark: cargo test -p tierbox-sandbox ns_bench -- --ignored --nocapture"]
fn ns_bench_spawn_to_exit_p50() {
    if !usable("ns_bench_spawn_to_exit_p50") {
        return;
    }
    let sc = scratch();
    let plan = strict_plan(&sc.ws, "true", &[]);
    let bwrap = crate::bwrap::probe_bwrap(None).ok();
    let bwrap_cmd = bwrap.as_ref().map(|info| {
        use crate::linux::seccomp::{SeccompProgram, SeccompSpec};
        let o =
            crate::bwrap::BwrapOptions::new(info.features, crate::bwrap::HostLayout::probe(&plan));
        let argv = crate::bwrap::bwrap_argv(&plan, &o).unwrap();
        let _ = SeccompProgram::build(&SeccompSpec::locked_down());
        (info.path.clone(), argv)
    });
    let native_with = |opts: &NativeOptions| {
        let t = Instant::now();
        let l = launch_native(&plan, opts).unwrap();
        let e = wait_native(&l).unwrap();
        let d = t.elapsed();
        crate::placeholders::release(&l.host_placeholders);
        assert_eq!(e.code, Some(0));
        d
    };
    let exec_reaper = NativeOptions::default();
    let in_process = NativeOptions {
        exec_reaper: false,
        ..NativeOptions::default()
    };
    let native_once = || native_with(&exec_reaper);
    let bwrap_once = || {
        let (path, argv) = bwrap_cmd.as_ref()?;
        let t = Instant::now();
        let s = std::process::Command::new(path)
            .args(argv)
            .env_clear()
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        let d = t.elapsed();
        assert!(s.success());
        Some(d)
    };
    let plain_once = || {
        let t = Instant::now();
        let s = std::process::Command::new("/bin/true").status().unwrap();
        assert!(s.success());
        t.elapsed()
    };
    for _ in 0..BENCH_WARMUP {
        native_once();
        native_with(&in_process);
        let _ = bwrap_once();
        plain_once();
    }
    let (mut n, mut k, mut b, mut t) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // Interleaved, so load changes hit every configuration alike.
    for _ in 0..BENCH_RUNS {
        n.push(native_once());
        k.push(native_with(&in_process));
        if let Some(d) = bwrap_once() {
            b.push(d);
        }
        t.push(plain_once());
    }
    for (name, v) in [
        ("native tier c", &mut n),
        ("native tier c, in-process reaper", &mut k),
        ("bwrap strict", &mut b),
        ("plain /bin/true", &mut t),
    ] {
        if v.is_empty() {
            println!("{name}: not measured");
            continue;
        }
        v.sort();
        println!(
            "{name}: p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms ({} runs)",
            p(v, 0.5),
            p(v, 0.9),
            p(v, 0.99),
            v.len()
        );
    }
}

/// Runs `sh -c 'readlink /proc/self/ns/net; exec sleep 60'` in a strict-policy sandbox,
/// opens the sandbox's network namespace from the host once the line is out, and kills
/// the run: the line, the namespace (held, so that its number cannot be given to a later
/// namespace while the caller keeps it) and what was enforced. A namespace number is
/// unique only among namespaces alive at once: the kernel reuses a freed one's.
fn run_pinning_netns(ws: &Path) -> (String, OwnedFd, tierbox_policy::Enforcement) {
    use std::io::BufRead;
    let plan = sh_plan(ws, "readlink /proc/self/ns/net; exec sleep 60");
    let launched = launch_native(&plan, &NativeOptions::default()).unwrap();
    let mut out =
        std::io::BufReader::new(std::fs::File::from(launched.stdout.try_clone().unwrap()));
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let pinned: OwnedFd = std::fs::File::open(format!("/proc/{}/ns/net", launched.pid))
        .unwrap()
        .into();
    crate::launch::sys::kill(launched.pid, libc::SIGKILL).unwrap();
    let _ = wait_native(&launched);
    crate::placeholders::release(&launched.host_placeholders);
    (line.trim().to_owned(), pinned, launched.enforcement)
}

/// Launches take network namespaces from the pool once it has filled (a supervisor with
/// `CAP_SYS_ADMIN`, as in CI): every run still gets its own, never the host's nor an
/// earlier run's, with `lo` up (its `::1` configured, where the host has IPv6).
#[test]
fn ns_pooled_network_namespaces_are_fresh_per_run_with_loopback_up() {
    if !usable("ns_pooled_network_namespaces") {
        return;
    }
    let sc = scratch();
    let host = std::fs::read_link("/proc/self/ns/net")
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let ipv6 = Path::new("/proc/net/if_inet6").exists();
    let from_pool = |r: &Ran| {
        r.enforcement
            .namespaces
            .iter()
            .any(|n| n.starts_with("net (loopback only; made for this run ahead of time"))
    };
    let (mut seen, mut pinned, mut pooled, mut lo_checked) = (Vec::new(), Vec::new(), 0, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while (pooled < 3 || lo_checked < 2) && Instant::now() < deadline {
        // Every namespace seen stays open here, so a repeated number is a namespace
        // handed out twice, never a freed number the kernel reused.
        let (ns, held, enforcement) = run_pinning_netns(&sc.ws);
        pinned.push(held);
        assert!(ns.starts_with("net:["), "{ns}");
        assert_ne!(ns, host, "the sandbox ran in the host's network namespace");
        assert!(!seen.contains(&ns), "{ns} handed out twice: {seen:?}");
        seen.push(ns);
        pooled += usize::from(
            enforcement
                .namespaces
                .iter()
                .any(|n| n.starts_with("net (loopback only; made for this run ahead of time")),
        );
        if ipv6 {
            let r = run(&strict_plan(&sc.ws, "cat", &["/proc/net/if_inet6"]));
            ok(&r);
            let lo_up = r.stdout.lines().any(|l| {
                l.starts_with("00000000000000000000000000000001") && l.trim_end().ends_with("lo")
            });
            assert!(lo_up, "lo is not up: {:?}", r.stdout);
            lo_checked += usize::from(from_pool(&r));
        } else {
            lo_checked = usize::MAX;
        }
        if !super::netns_pool::active() {
            break;
        }
    }
    if super::netns_pool::active() {
        assert!(
            pooled >= 3 && lo_checked >= 2,
            "the pool served too few launches: {pooled}, {lo_checked}"
        );
    } else {
        tierbox_test_support::skip(
            "ns_pooled_network_namespaces (pool part)",
            "no CAP_SYS_ADMIN here: the network namespace pool is not active",
        );
    }
}

/// pid 1 lets go of its copy-on-write copy of the supervisor's memory once the program
/// runs by exec'ing tierbox-init: from then on every one of its mappings is the static
/// reaper's own (its image, its stack, the kernel's vDSO) — no libc, no dynamic loader, no
/// page of the supervisor's binary or heap — whatever the CPU or the build profile. Its
/// private anonymous memory is a few pages, however large the supervisor is, and it is
/// named and non-dumpable again.
///
/// Regression: pid 1 used to unmap the supervisor's writable memory and carry on in the
/// same program, whose compiler-chosen calls into libc's `memmove` then read unmapped
/// pages on CPUs where glibc picks an AVX2 or SSE2 variant (SIGSEGV in every run of the
/// debug build there). This test failed on that design: libc and the supervisor's binary
/// stayed mapped in pid 1.
#[test]
fn ns_pid_1_runs_tierbox_init_and_holds_nothing_of_the_supervisor() {
    if !usable("ns_pid_1_runs_tierbox_init_and_holds_nothing_of_the_supervisor") {
        return;
    }
    if super::init::image_fd().is_err() {
        tierbox_test_support::skip_here(&format!(
            "pid 1 cannot exec tierbox-init here: {}",
            super::init::reaper_description()
        ));
        return;
    }
    let status_field_of = |pid: i32, name: &str| -> String {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status_field(&status, name).to_owned()
    };
    let rss_anon_kib = |pid: i32| -> u64 {
        status_field_of(pid, "RssAnon")
            .trim_end_matches("kB")
            .trim()
            .parse()
            .unwrap()
    };
    // Make the supervisor's anonymous memory large and resident, so a copy would show.
    let ballast = vec![1u8; 32 << 20];
    let sc = scratch();
    let launched = launch_native(
        &strict_plan(&sc.ws, "sleep", &["5"]),
        &NativeOptions::default(),
    )
    .unwrap();
    let supervisor = rss_anon_kib(std::process::id() as i32);
    // pid 1 execs the reaper right after it reports the program started.
    let exe = |pid: i32| {
        std::fs::read_link(format!("/proc/{pid}/exe"))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let deadline = Instant::now() + Duration::from_secs(3);
    while !exe(launched.pid).starts_with("/memfd:tierbox-init")
        || status_field_of(launched.pid, "Name") != INIT_NAME.to_str().unwrap()
    {
        assert!(
            Instant::now() < deadline,
            "pid 1 is still {:?}, named {:?}",
            exe(launched.pid),
            status_field_of(launched.pid, "Name")
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", launched.pid)).unwrap();
    let pid1_rss = rss_anon_kib(launched.pid);
    let _ = crate::launch::sys::pidfd_signal(&launched.pidfd, libc::SIGKILL);
    let _ = wait_native(&launched);
    crate::placeholders::release(&launched.host_placeholders);
    assert!(ballast.iter().step_by(4096).all(|b| *b == 1));
    for line in maps.lines() {
        let file = line.split_whitespace().nth(5).unwrap_or("");
        assert!(
            file.is_empty()
                || file.starts_with("/memfd:tierbox-init")
                || ["[stack]", "[vdso]", "[vvar]", "[vvar_vclock]", "[vsyscall]"].contains(&file),
            "pid 1 still maps {file:?}:\n{maps}"
        );
    }
    assert!(
        supervisor > 32 * 1024,
        "supervisor RssAnon {supervisor} KiB"
    );
    assert!(
        pid1_rss <= 64,
        "pid 1 holds {pid1_rss} KiB of anonymous memory (the supervisor: {supervisor} KiB)"
    );
}

#[test]
fn ns_launch_stacks_are_kept_per_thread_and_runs_on_reused_ones_work() {
    use super::sys::LaunchStacks;
    let first = LaunchStacks::take();
    assert_ne!(first.init.range(), first.program.range());
    // While one set is in use on this thread, another launch here gets its own.
    let second = LaunchStacks::take();
    let kept = second.init.range();
    assert_ne!(kept, first.init.range());
    drop(second); // kept for this thread's next launch
    drop(first); // the thread holds a set already: unmapped
    let again = LaunchStacks::take();
    assert_eq!(
        again.init.range(),
        kept,
        "the idle set comes back on this thread"
    );
    drop(again);
    // Another thread never gets this thread's set (still mapped, so no other mapping
    // can have its address).
    let other = std::thread::spawn(|| LaunchStacks::take().init.range())
        .join()
        .unwrap();
    assert_ne!(other, kept);
    // Runs one after another on the same reused stacks all work.
    if !usable("ns_launch_stacks_are_kept_per_thread_and_runs_on_reused_ones_work") {
        return;
    }
    let sc = scratch();
    let plan = strict_plan(&sc.ws, "printf", &["ok"]);
    for _ in 0..3 {
        let r = run(&plan);
        ok(&r);
        assert_eq!(r.stdout, "ok");
    }
    assert_eq!(
        LaunchStacks::take().init.range(),
        kept,
        "the runs used this thread's set"
    );
}

/// pid 1 reports the program's exit only once every other process of the namespace is
/// dead and reaped (the supervisor may end the run on that record alone): an orphan that
/// still held stdout has let go of it by the time the record is readable, and the record
/// carries the CPU time of what pid 1 reaped.
#[test]
fn ns_real_exit_record_comes_after_every_other_process_is_gone() {
    if !usable("ns_real_exit_record_comes_after_every_other_process_is_gone") {
        return;
    }
    let sc = scratch();
    let plan = sh_plan(
        &sc.ws,
        "(sleep 1000 &) ; i=0; while [ $i -lt 40000 ]; do i=$((i+1)); done; exit 3",
    );
    for _ in 0..3 {
        let launched = launch_native(&plan, &NativeOptions::default()).unwrap();
        // Blocks until pid 1 writes the record (or is gone).
        let exit = crate::tier_c::program_exit(&launched.report).expect("an exit record");
        // Right now, not after pid 1's exit: no writer of stdout is left (EOF, where an
        // orphan still alive would make this read EAGAIN).
        let out = &launched.stdout;
        let flags = rustix::fs::fcntl_getfl(out).unwrap();
        rustix::fs::fcntl_setfl(out, flags | rustix::fs::OFlags::NONBLOCK).unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(
            rustix::io::read(out, &mut buf).map_err(|e| e.to_string()),
            Ok(0),
            "stdout still has a writer when the exit record is readable"
        );
        assert_eq!((exit.code, exit.signal), (Some(3), None));
        assert!(exit.user_us + exit.sys_us > 0, "{exit:?}");
        assert!(exit.max_rss_bytes > 0, "{exit:?}");
        let _ = crate::launch::sys::wait_pidfd(&launched.pidfd, false);
        crate::placeholders::release(&launched.host_placeholders);
    }
}

/// The in-process reaper (what pid 1 runs when it cannot exec `tierbox-init`) does what
/// the exec'd one does: reaps orphans, reports only once every other process is gone,
/// with the program's status and usage — and pid 1 then stays the supervisor's program.
#[test]
fn ns_real_the_in_process_reaper_reports_as_the_exec_d_one_does() {
    if !usable("ns_real_the_in_process_reaper_reports_as_the_exec_d_one_does") {
        return;
    }
    let sc = scratch();
    let plan = sh_plan(&sc.ws, "(sleep 1000 &) ; echo out; exit 7");
    let opts = NativeOptions {
        exec_reaper: false,
        ..NativeOptions::default()
    };
    let launched = launch_native(&plan, &opts).unwrap();
    let exit = crate::tier_c::program_exit(&launched.report).expect("an exit record");
    assert_eq!((exit.code, exit.signal), (Some(7), None));
    let exe = std::fs::read_link(format!("/proc/{}/exe", launched.pid))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    assert!(
        exe.is_empty() || !exe.contains("memfd:"),
        "pid 1 exec'd {exe} with exec_reaper off"
    );
    let _ = crate::launch::sys::wait_pidfd(&launched.pidfd, false);
    assert_eq!(read_all(launched.stdout.try_clone().unwrap()), "out\n");
    crate::placeholders::release(&launched.host_placeholders);
}

#[test]
fn report_records_round_trip_with_their_usage() {
    use super::sys::{REPORT_BYTES, ReapedUsage, Report, ReportTag};
    let r = Report {
        tag: ReportTag::Exited as u32,
        value: 0x0300,
        usage: ReapedUsage {
            user_us: 1_234_567_890_123,
            sys_us: 42,
            max_rss_kib: u64::MAX,
        },
        ..Report::default()
    };
    let bytes = r.encode();
    assert_eq!(bytes.len(), REPORT_BYTES);
    assert_eq!(Report::decode(&bytes), r);
    let exit = crate::tier_c::program_exit_from(&bytes).unwrap();
    assert_eq!((exit.code, exit.signal), (Some(3), None));
    assert_eq!((exit.user_us, exit.sys_us), (1_234_567_890_123, 42));
    assert_eq!(
        exit.max_rss_bytes,
        u64::MAX,
        "saturates instead of wrapping"
    );
    let started = Report {
        tag: ReportTag::Started as u32,
        ..r
    };
    assert_eq!(crate::tier_c::program_exit_from(&started.encode()), None);
}

/// Under a root supervisor the sandbox is never host root: the program and, once it runs,
/// pid 1 are an unprivileged host uid — the workspace owner, or the default sandbox id
/// for a root-owned workspace — while files the sandbox creates in the workspace belong
/// to the workspace owner on the host, and the workspace shows as the sandbox's own
/// inside (an idmapped mount).
///
/// Regression: the sandbox's uid 1000 was the supervisor's own uid — host uid 0 under a
/// root supervisor — so every check that looks at the host uid alone (global sysctls,
/// root-owned files, `core_pattern`) passed.
#[test]
fn ns_real_the_sandbox_is_never_host_root_and_host_ownership_stays() {
    if !usable("ns_real_the_sandbox_is_never_host_root_and_host_ownership_stays") {
        return;
    }
    if !rustix::process::geteuid().is_root() {
        tierbox_test_support::skip_here("not root (the sandbox is the supervisor's own uid)");
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let host_uid_of = |pid: i32| -> u32 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status_field(&status, "Uid")
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    for owner in [0u32, 4321] {
        let sc = scratch();
        std::os::unix::fs::chown(&sc.ws, Some(owner), Some(owner)).unwrap();
        let want = if owner == 0 {
            crate::linux::identity::root_workspace_ids().0.0
        } else {
            owner
        };
        // The program's host uid, seen from the host while it runs.
        let launched = launch_native(
            &strict_plan(&sc.ws, "sleep", &["5"]),
            &NativeOptions::default(),
        )
        .unwrap();
        let children =
            std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", launched.pid)).unwrap();
        let program: i32 = children.split_whitespace().next().unwrap().parse().unwrap();
        let program_uid = host_uid_of(program);
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut init_uid = host_uid_of(launched.pid);
        while init_uid != want && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
            init_uid = host_uid_of(launched.pid);
        }
        assert_eq!(launched.enforcement.uid, Some(want));
        let _ = crate::launch::sys::pidfd_signal(&launched.pidfd, libc::SIGKILL);
        let _ = wait_native(&launched);
        crate::placeholders::release(&launched.host_placeholders);
        assert_eq!(
            program_uid, want,
            "the program's host uid (workspace owner {owner})"
        );
        assert_eq!(init_uid, want, "pid 1's host uid once the program runs");

        // Inside, the workspace is the sandbox's own (uid 1000); a file it makes there
        // belongs to the workspace owner on the host, in the run's group (the owner's
        // primary group, or the sandbox's own for an owner /etc/passwd does not know:
        // never the workspace directory's).
        let r = run(&strict_plan(&sc.ws, "stat", &["-c", "%u", "."]));
        ok(&r);
        assert_eq!(r.stdout.trim(), SANDBOX_UID.to_string(), "{}", r.stderr);
        let r = run(&strict_plan(&sc.ws, "touch", &["made-inside"]));
        ok(&r);
        let meta = std::fs::metadata(sc.ws.join("made-inside")).unwrap();
        let group = if owner == 0 {
            0
        } else {
            crate::linux::identity::run_gid(owner)
        };
        assert_eq!(
            (meta.uid(), meta.gid()),
            (owner, group),
            "host owner of a new file"
        );
    }
}
