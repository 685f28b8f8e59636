//! Tier C (Linux namespaces): every guarantee, on both backends (`policy.tier.backend` =
//! `native` and `bwrap`; each test name ends with the backend it runs on).
//!
//! Tier C differs from Tier B in what a denial looks like: host paths outside the grants
//! are not refused but absent (the run has its own root), `/etc/shadow` reads as an empty
//! `/dev/null`, `/tmp` is a private tmpfs, the network is a loopback of its own. So the
//! probes here judge by content and by what the host sees afterwards (`no-content`,
//! `leave-file`, `no-reach`, ...), and every guarantee has a negative control: the same
//! probe without the sandbox (or with the guarantee relaxed) must report `BROKEN`.
//!
//! Every run is checked to have really happened in Tier C on the backend the test names
//! ([`assert_tier_c`]): a bwrap test that silently ran natively would prove nothing.

use std::io::ErrorKind;
use std::net::{TcpListener, UdpSocket};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tierbox_policy::validate::SYSTEM_SECRET_PATHS;
use tierbox_policy::{Layer, ProcessRunRequest, TierCBackend};
use tierbox_runner::{LimitHit, Outcome};

use super::harness::{
    CANARY, Fixture, HostIpc, Need, PATH_ARG, PATH_VAR, PROBE, ProcessId, assert_broken,
    assert_direct_broken, assert_holds, describe, probe_dir, report,
};

const MIB: u64 = 1024 * 1024;

/// How long after a run returns a leftover process may take to disappear.
const DEATH_GRACE: Duration = Duration::from_secs(1);

/// The request variable holding the `no-content` needle (`env:TIERBOX_PROBE_NEEDLE`):
/// a piece of a real secret never goes into an argument list.
const NEEDLE_VAR: &str = "TIERBOX_PROBE_NEEDLE";
const NEEDLE_ARG: &str = "env:TIERBOX_PROBE_NEEDLE";

/// The uid and gid the program has inside Tier C.
const SANDBOX_ID: u32 = 1000;

/// Runs `$body(test_name, backend)` as two tests, one per backend.
macro_rules! on_both_backends {
    ($(#[$doc:meta])* $body:ident => $native:ident, $bwrap:ident) => {
        $(#[$doc])*
        #[tokio::test]
        async fn $native() {
            $body(stringify!($native), TierCBackend::Native).await;
        }

        $(#[$doc])*
        #[tokio::test]
        async fn $bwrap() {
            $body(stringify!($bwrap), TierCBackend::Bwrap).await;
        }
    };
}

/// The name a backend has in outcomes.
fn backend_name(backend: TierCBackend) -> &'static str {
    match backend {
        TierCBackend::Native => tierbox_sandbox::tier_c::NATIVE_BACKEND,
        TierCBackend::Bwrap => tierbox_sandbox::bwrap::BACKEND_NAME,
        TierCBackend::Docker => tierbox_sandbox::container::DOCKER_BACKEND_NAME,
        TierCBackend::Podman => tierbox_sandbox::container::PODMAN_BACKEND_NAME,
    }
}

/// The run happened in Tier C, on `backend`.
#[track_caller]
fn assert_tier_c(o: &Outcome, backend: TierCBackend) {
    assert!(
        o.tier == tierbox_policy::Tier::C && o.backend == backend_name(backend),
        "expected a tier c run on {} (backend {:?}), got tier {:?} backend {:?}:\n{}",
        backend,
        backend_name(backend),
        o.tier,
        o.backend,
        describe(o)
    );
}

/// Runs `req` and checks it ran in Tier C on the fixture's backend.
async fn run_c(fx: &Fixture, req: &ProcessRunRequest) -> Outcome {
    let o = fx.run(req).await;
    assert_tier_c(&o, fx.policy.tier.backend);
    o
}

/// Runs the probe with `args` and checks it ran in Tier C on the fixture's backend.
async fn probe_c(fx: &Fixture, args: &[&str]) -> Outcome {
    run_c(fx, &fx.request(args)).await
}

/// Whether the tests run as root (some negative controls need it).
fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

// ---- an ordinary run -------------------------------------------------------------------

/// A plain run works: exit 0, tier c, the backend's name, uid and gid 1000 inside.
async fn ordinary_run_works(test: &str, backend: TierCBackend) {
    let Some(fx) = Fixture::tier_c(test, &[], backend) else {
        return;
    };
    let o = probe_c(&fx, &["whoami"]).await;
    println!("{}", report(&o));
    assert_eq!(o.exit_code, Some(0), "{}", describe(&o));
    let want = format!(
        "DONE whoami: uid={SANDBOX_ID} euid={SANDBOX_ID} gid={SANDBOX_ID} egid={SANDBOX_ID}"
    );
    assert!(report(&o).starts_with(&want), "{}", describe(&o));
    assert_eq!(
        o.enforcement.tier,
        Some(tierbox_policy::Tier::C),
        "{}",
        describe(&o)
    );
}

on_both_backends!(ordinary_run_works => ordinary_run_works_native, ordinary_run_works_bwrap);

// ---- 1. reading host secrets -------------------------------------------------------------

/// A piece of `path`'s real content that this process can read: for a directory, the
/// first entry name (sorted) that is not on the way to something the run is granted
/// (`avoid`); for a file, its first line up to the first `:` (`root:` of `/etc/shadow`),
/// or its first 16 characters. `None` when unreadable here, empty or not text.
fn needle_of(path: &Path, avoid: &[PathBuf]) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.is_dir() {
        let mut names: Vec<String> = std::fs::read_dir(path)
            .ok()?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| !avoid.iter().any(|a| a.starts_with(path.join(n))))
            .collect();
        names.sort();
        return names.into_iter().next();
    }
    let bytes = std::fs::read(path).ok()?;
    let line = bytes.split(|b| *b == b'\n').find(|l| !l.is_empty())?;
    let line = std::str::from_utf8(line).ok()?;
    let needle: String = match line.find(':') {
        Some(i) => line[..=i].to_owned(),
        None => line.chars().take(16).collect(),
    };
    (!needle.trim().is_empty() && !needle.contains('\0')).then_some(needle)
}

/// The `no-content` request for `path` and `needle`.
fn no_content_request(fx: &Fixture, path: &Path, needle: &str) -> ProcessRunRequest {
    let mut req = fx.request_with_path("no-content", path);
    req.args.push(NEEDLE_ARG.to_owned());
    req.env.insert(NEEDLE_VAR.to_owned(), needle.to_owned());
    req
}

/// `no-content` for `path` and `needle`, without the sandbox.
fn no_content_direct(fx: &Fixture, path: &Path, needle: &str) -> Output {
    let path = path.display().to_string();
    fx.direct_env(
        &["no-content", PATH_ARG, NEEDLE_ARG],
        &[(PATH_VAR, &path), (NEEDLE_VAR, needle)],
    )
}

/// Nothing of the host's secrets reaches a run: the secret next to the workspace (and the
/// parent's listing), the supervisor's `HOME` (the fixture's fake one and the real one),
/// `/root`, `/etc/shadow` and every other host secret under the system paths. Each is
/// absent, covered, or denied; a read that succeeds must return none of the real content.
/// Negative control: the same probe without the sandbox finds each secret it can read.
async fn host_secrets_cannot_be_read(test: &str, backend: TierCBackend) {
    let Some(fx) = Fixture::tier_c(test, &[], backend) else {
        return;
    };
    let granted = vec![fx.workspace.clone(), probe_dir()];
    // (path, needle, whether this process read the needle from the real thing)
    let mut targets: Vec<(PathBuf, String, bool)> = vec![
        (
            fx.parent_secret.clone(),
            "parent secret: do not read".to_owned(),
            true,
        ),
        (fx.parent.clone(), "parent-secret.txt".to_owned(), true),
        (
            fx.home_secret.clone(),
            "BEGIN OPENSSH PRIVATE KEY".to_owned(),
            true,
        ),
        (fx.home.clone(), ".ssh".to_owned(), true),
    ];
    let mut homes = vec![PathBuf::from("/root")];
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from)
        && home.is_dir()
        && home != Path::new("/")
        && !homes.contains(&home)
    {
        homes.push(home);
    }
    for home in homes {
        match needle_of(&home, &granted) {
            Some(n) => targets.push((home, n, true)),
            None => println!(
                "note: {} is not listable here or has nothing the run is not granted; not checked",
                home.display()
            ),
        }
    }
    for secret in SYSTEM_SECRET_PATHS {
        let path = PathBuf::from(secret);
        if std::fs::symlink_metadata(&path).is_err() {
            continue;
        }
        match needle_of(&path, &granted) {
            Some(n) => targets.push((path, n, true)),
            // Unreadable to this process: the run, mapped to the same uid, cannot read it
            // through permissions either, but the cover must still be there. Every
            // shadow file starts with root's entry.
            None if secret.contains("shadow") => targets.push((path, "root:".to_owned(), false)),
            None => println!(
                "note: {secret} is unreadable here, empty or not text: no needle, not checked"
            ),
        }
    }
    assert!(
        targets.iter().any(|(p, ..)| p == Path::new("/etc/shadow")),
        "this host has no /etc/shadow, so the test cannot check it"
    );
    for (path, needle, real) in &targets {
        let o = run_c(&fx, &no_content_request(&fx, path, needle)).await;
        assert_holds(&o);
        if *real {
            assert_direct_broken(&no_content_direct(&fx, path, needle));
        }
    }
}

on_both_backends!(host_secrets_cannot_be_read => host_secrets_cannot_be_read_native, host_secrets_cannot_be_read_bwrap);

// ---- 2. writing outside the workspace ------------------------------------------------------

/// The names of the entries of `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Nothing outside the workspace and the declared writable paths can be written: the
/// read-only system and policy binds refuse every way of writing (`write-denied`), and a
/// file left anywhere else (the workspace's parent, the supervisor's `HOME`, `/root`, the
/// host's `/tmp`, ...) never appears on the host, even where the run's own view accepted
/// it (its `/tmp` is a private tmpfs). Negative control: a declared writable directory
/// outside the workspace is writable, and a file left there does appear on the host.
async fn nothing_outside_the_grants_can_be_written(test: &str, backend: TierCBackend) {
    let Some(mut fx) = Fixture::tier_c(test, &[], backend) else {
        return;
    };
    let declared = fx.parent.join("declared-writable");
    std::fs::create_dir(&declared).unwrap();
    fx.policy
        .filesystem
        .writable
        .push(declared.display().to_string());
    let victim = fx.parent.join("victim.txt");
    std::fs::write(&victim, "original\n").unwrap();
    let parent_before = listing(&fx.parent);
    let home_before = listing(&fx.home);

    for target in [Path::new("/usr"), Path::new("/etc"), probe_dir().as_path()] {
        let o = run_c(&fx, &fx.request_with_path("write-denied", target)).await;
        assert_holds(&o);
    }

    let name = format!(
        "tierbox-probe-left-{}",
        fx.parent.file_name().unwrap().to_string_lossy()
    );
    let host_tmp = std::env::temp_dir().join(&name);
    let mut places = vec![
        fx.parent.join(&name),
        fx.home.join(&name),
        fx.home.join(".ssh").join(&name),
        host_tmp.clone(),
        Path::new("/usr").join(&name),
        Path::new("/etc").join(&name),
        Path::new("/root").join(&name),
    ];
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from)
        && home.is_dir()
        && home != Path::new("/")
        && !places.contains(&home.join(&name))
    {
        places.push(home.join(&name));
    }
    let mut cleanup = Vec::new();
    for place in &places {
        let o = run_c(&fx, &fx.request_with_path("leave-file", place)).await;
        println!("{}", report(&o));
        assert_eq!(o.exit_code, Some(0), "{}", describe(&o));
        if place == &host_tmp {
            // The run's own /tmp takes the file: this is where a leak would show.
            assert!(
                report(&o).starts_with("DONE leave-file: created"),
                "the run's private /tmp did not accept a file:\n{}",
                describe(&o)
            );
        }
        if std::fs::symlink_metadata(place).is_ok() {
            cleanup.push(place.clone());
        }
    }
    // The victim exists only on the host: inside, the name is free.
    let o = run_c(&fx, &fx.request_with_path("leave-file", &victim)).await;
    println!("{}", report(&o));
    for place in &cleanup {
        let _ = std::fs::remove_file(place);
    }
    assert!(
        cleanup.is_empty(),
        "files left by the run appeared on the host: {cleanup:?}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "original\n");
    assert_eq!(listing(&fx.parent), parent_before);
    assert_eq!(listing(&fx.home), home_before);

    // Negative control: the declared writable path is writable, and the host sees it.
    assert_broken(&run_c(&fx, &fx.request_with_path("write-denied", &declared)).await);
    let left = declared.join(&name);
    let o = run_c(&fx, &fx.request_with_path("leave-file", &left)).await;
    assert!(
        report(&o).starts_with("DONE leave-file: created") && left.is_file(),
        "a file left in a declared writable path did not reach the host:\n{}",
        describe(&o)
    );
}

on_both_backends!(nothing_outside_the_grants_can_be_written => nothing_outside_the_grants_can_be_written_native, nothing_outside_the_grants_can_be_written_bwrap);

// ---- 4. host processes ----------------------------------------------------------------------

/// Variables the child has by design.
const SANDBOX_SET: &[&str] = &["PATH", "HOME", "TMPDIR", "TMP", "TEMP"];

/// Names of this process's own (initial) environment that no run should see.
fn supervisor_only_variables(fx: &Fixture) -> Vec<String> {
    let allowed = |n: &str| {
        SANDBOX_SET.contains(&n)
            || fx.policy.env.pass.iter().any(|p| p == n)
            || fx.policy.env.set.contains_key(n)
    };
    std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|n| !allowed(n) && !n.is_empty() && n.len() <= 128)
        .take(100)
        .collect()
}

/// No process outside the run is visible: `/proc` lists only the probe and its
/// ancestors (the sandbox's init), so not the supervisor. The sandbox's pid 1 gives away
/// nothing of the supervisor it was cloned from: neither its environment (no variable of
/// the supervisor's environment in `/proc/1/environ`) nor its memory, descriptors or
/// directories. Negative controls: without the sandbox the probe sees the host's
/// processes, and the supervisor's environment.
async fn host_processes_are_invisible(test: &str, backend: TierCBackend) {
    let Some(fx) = Fixture::tier_c(test, &[], backend) else {
        return;
    };
    assert_holds(&probe_c(&fx, &["no-other-procs"]).await);
    assert_direct_broken(&fx.direct(&["no-other-procs"]));

    let names = supervisor_only_variables(&fx);
    assert!(
        !names.is_empty(),
        "the test process has no variable of its own to look for"
    );
    let mut args = vec!["proc-env-absent", "1", CANARY];
    args.extend(names.iter().map(String::as_str));
    assert_holds(&probe_c(&fx, &args).await);

    let supervisor = std::process::id().to_string();
    let mut direct_args = vec!["proc-env-absent", supervisor.as_str()];
    direct_args.extend(names.iter().map(String::as_str));
    assert_direct_broken(&fx.direct(&direct_args));
}

on_both_backends!(host_processes_are_invisible => host_processes_are_invisible_native, host_processes_are_invisible_bwrap);

/// The sandbox's pid 1 (the native backend's init; `tierbox-init --run` under bwrap
/// `--as-pid-1`) is out of the program's reach: its environment, memory, descriptors and
/// directories cannot be read through `/proc/1` (it is not dumpable). Negative control:
/// without the sandbox, the supervisor's are reachable the same way.
///
/// Regression (bwrap): bwrap's own init stayed dumpable, so the program could open its
/// `/proc/1/mem` read-write and take over the namespace's init.
async fn sandbox_init_is_unreachable(test: &str, backend: TierCBackend) {
    let Some(fx) = Fixture::tier_c(test, &[], backend) else {
        return;
    };
    let o = probe_c(&fx, &["proc-environ", "1"]).await;
    assert_holds(&o);
    let pid1 = o
        .enforcement
        .namespaces
        .iter()
        .find(|n| n.starts_with("pid"))
        .cloned()
        .unwrap_or_default();
    if backend == TierCBackend::Bwrap {
        assert!(pid1.contains("tierbox-init"), "{test}: {pid1}");
    }
    let supervisor = std::process::id().to_string();
    assert_direct_broken(&fx.direct(&["proc-environ", &supervisor]));
}

on_both_backends!(sandbox_init_is_unreachable => sandbox_init_is_unreachable_native, sandbox_init_is_unreachable_bwrap);

// ---- 5. privileges and the kernel's attack surface ----------------------------------------

/// No capability in any set, `no_new_privs`, a seccomp filter (`no-caps`), and the
/// filter refuses ptrace and `process_vm_readv`, user namespaces, mounts (old and new
/// API, and a new mount namespace), keyrings, bpf, perf events, userfaultfd and io_uring.
/// Negative controls: without the sandbox ptrace works, and as root the rest does too.
async fn no_privileges_and_a_narrow_kernel_surface(test: &str, backend: TierCBackend) {
    let Some(fx) = Fixture::tier_c(test, &[], backend) else {
        return;
    };
    let o = probe_c(&fx, &["no-caps"]).await;
    assert_holds(&o);
    assert!(
        report(&o).contains("NoNewPrivs=1") && report(&o).contains("Seccomp=2"),
        "{}",
        describe(&o)
    );
    assert!(o.enforcement.no_new_privs, "{}", describe(&o));
    assert!(o.enforcement.seccomp.applied, "{}", describe(&o));

    assert_holds(&probe_c(&fx, &["no-ptrace"]).await);
    assert_holds(&probe_c(&fx, &["no-userns"]).await);
    assert_holds(&probe_c(&fx, &["no-mount"]).await);
    let o = probe_c(&fx, &["no-kernel-surface"]).await;
    assert_holds(&o);
    for call in [
        "io_uring_setup",
        "userfaultfd",
        "keyctl",
        "bpf",
        "perf_event_open",
    ] {
        assert!(
            report(&o).contains(&format!("{call}: EPERM")),
            "{call} was not refused by the filter:\n{}",
            describe(&o)
        );
    }

    assert_direct_broken(&fx.direct(&["no-ptrace"]));
    if is_root() {
        for probe in ["no-caps", "no-userns", "no-mount", "no-kernel-surface"] {
            assert_direct_broken(&fx.direct(&[probe]));
        }
    } else {
        println!(
            "note: not root, so the unsandboxed controls of no-caps, no-userns, no-mount and no-kernel-surface are not run"
        );
    }
}

on_both_backends!(no_privileges_and_a_narrow_kernel_surface => no_privileges_and_a_narrow_kernel_surface_native, no_privileges_and_a_narrow_kernel_surface_bwrap);

/// The kernel's global knobs under the sandbox's `/proc` are read-only and the host-wide
/// state the container runtimes mask reads as nothing, on both backends, as a layer of
/// their own (bwrap applies no landlock; the native backend's landlock layer is checked
/// apart in `ns_real_proc_knobs_are_read_only_without_landlock`).
///
/// Regression: the bwrap backend mapped the sandbox's uid to host uid 0 and left
/// `/proc/sys` writable (bwrap covers it only when the directory itself is writable for
/// the mapped user), so a run could set `kernel.core_pattern` and have the host kernel
/// run its helper as root. The probe writes a sysctl back with its own value and only
/// opens `core_pattern`. Negative control: as root, outside the sandbox, it can.
async fn kernel_knobs_are_read_only(test: &str, backend: TierCBackend) {
    let Some(fx) = Fixture::tier_c(test, &[], backend) else {
        return;
    };
    assert_holds(&probe_c(&fx, &["kernel-knobs"]).await);
    assert_holds(&probe_c(&fx, &["proc-masked"]).await);
    if is_root() {
        assert_direct_broken(&fx.direct(&["kernel-knobs"]));
        assert_direct_broken(&fx.direct(&["proc-masked"]));
    } else {
        println!("note: not root, so the unsandboxed control of kernel-knobs is not run");
    }
}

on_both_backends!(kernel_knobs_are_read_only => kernel_knobs_are_read_only_native, kernel_knobs_are_read_only_bwrap);

/// The host's SysV IPC is out of reach: the sandbox's IPC namespace is its own.
/// Negative control: outside the sandbox the probe finds all three objects.
async fn host_sysv_ipc_is_out_of_reach(test: &str, backend: TierCBackend) {
    let Some(fx) = Fixture::tier_c(test, &[], backend) else {
        return;
    };
    let ipc = HostIpc::create(match backend {
        TierCBackend::Native => 2,
        _ => 3,
    });
    let key = ipc.key.to_string();
    assert_holds(&probe_c(&fx, &["no-host-ipc", &key]).await);
    assert_direct_broken(&fx.direct(&["no-host-ipc", &key]));
}

on_both_backends!(host_sysv_ipc_is_out_of_reach => host_sysv_ipc_is_out_of_reach_native, host_sysv_ipc_is_out_of_reach_bwrap);

/// The host credentials of every process in another pid namespace than this one (inside a
/// sandbox: bwrap's monitor outside it shares the argv) whose command line has `marker` as
/// an argument: `(pid, Uid line, Gid line, Groups line)` of `/proc/<pid>/status`.
fn host_credentials_of(marker: &str) -> Vec<(u32, String, String, String)> {
    let mut found = Vec::new();
    let ours = std::fs::read_link("/proc/self/ns/pid").expect("own pid namespace");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if !cmdline.split(|b| *b == 0).any(|a| a == marker.as_bytes())
            || std::fs::read_link(format!("/proc/{pid}/ns/pid")).is_ok_and(|ns| ns == ours)
        {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name}:")))
                .unwrap_or("")
                .trim()
                .to_owned()
        };
        found.push((pid, field("Uid"), field("Gid"), field("Groups")));
    }
    found
}

/// Seen from the host, no process of the sandbox runs as host root: real, effective,
/// saved and filesystem uid and gid, and every supplementary group, are unprivileged
/// host ids (the workspace owner's, or the default sandbox id when root owns it), the
/// enforcement report names that uid, and what the sandbox writes in the workspace
/// belongs to the workspace owner on the host.
///
/// Regression: on the bwrap backend a root supervisor's `--unshare-user --uid 1000`
/// mapped the sandbox's uid to host uid 0, which every check that looks at the host uid
/// alone (global sysctls, root-owned files, SysV IPC, signals) treats as root. Observed
/// from the host while the probe holds (`hold`, ended by the run's timeout).
async fn the_sandbox_is_never_host_root(test: &str, backend: TierCBackend) {
    let Some(mut fx) = Fixture::tier_c(test, &[], backend) else {
        return;
    };
    if !is_root() {
        println!(
            "note: not root: the sandbox is the supervisor's own uid; checking only that it is not 0"
        );
    }
    fx.policy.limits.timeout_ms = 3_000;
    for owner in [0u32, 4321] {
        if !is_root() && owner != 0 {
            break;
        }
        if is_root() {
            fx.chown_workspace(owner);
        }
        let pidfile = fx.workspace.join(format!("held-{owner}.pid"));
        let marker = pidfile.display().to_string();
        let watch = async {
            let deadline = Instant::now() + Duration::from_secs(2);
            while !pidfile.exists() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            host_credentials_of(&marker)
        };
        let args = ["hold", marker.as_str()];
        let (o, seen) = tokio::join!(probe_c(&fx, &args), watch);
        assert!(
            seen.len() >= 2,
            "the probe and its child were not found on the host: {seen:?}\n{}",
            describe(&o)
        );
        let (want, want_gid) = if !is_root() {
            (
                rustix::process::geteuid().as_raw(),
                rustix::process::getegid().as_raw(),
            )
        } else if owner == 0 {
            tierbox_sandbox::linux::identity::root_workspace_ids().0
        } else {
            (owner, tierbox_sandbox::linux::identity::run_gid(owner))
        };
        for (pid, uid, gid, groups) in &seen {
            let (want_uid, want_gid_text) = (want.to_string(), want_gid.to_string());
            assert!(
                uid.split_whitespace().all(|id| *id == want_uid)
                    && gid.split_whitespace().all(|id| *id == want_gid_text),
                "pid {pid} (workspace owner {owner}): Uid {uid:?} Gid {gid:?}, want uid {want} gid {want_gid}"
            );
            assert!(
                groups.split_whitespace().all(|g| g != "0"),
                "pid {pid} keeps host group 0: {groups:?}"
            );
        }
        assert_eq!(o.enforcement.uid, Some(want), "{}", describe(&o));
        let meta = std::fs::metadata(&pidfile).expect("the probe's pid file");
        if is_root() {
            use std::os::unix::fs::MetadataExt;
            let group = if owner == 0 { 0 } else { want_gid };
            assert_eq!(
                (meta.uid(), meta.gid()),
                (owner, group),
                "host owner of the file the sandbox wrote"
            );
        }
    }
}

on_both_backends!(the_sandbox_is_never_host_root => the_sandbox_is_never_host_root_native, the_sandbox_is_never_host_root_bwrap);

// ---- 6. terminal injection ------------------------------------------------------------------

/// The probe run directly with a pty the test owns as stdin.
fn tiocsti_on_a_pty(fx: &Fixture) -> Output {
    let (master, slave) = tierbox_test_support::open_pty();
    let out = Command::new(PROBE)
        .arg("no-tiocsti")
        .current_dir(&fx.workspace)
        .stdin(slave)
        .output()
        .unwrap();
    drop(master);
    out
}

/// TIOCSTI is refused by the filter itself (`EPERM` on fd 0, before any terminal is
/// looked at). Negative control: as root, without the sandbox, a pty accepts it (unless
/// the kernel disabled TIOCSTI for everyone).
async fn terminal_injection_is_denied(test: &str, backend: TierCBackend) {
    let Some(fx) = Fixture::tier_c(test, &[], backend) else {
        return;
    };
    let o = probe_c(&fx, &["no-tiocsti"]).await;
    assert_holds(&o);
    assert!(
        report(&o).contains("fd 0: EPERM"),
        "TIOCSTI is not refused by the seccomp filter:\n{}",
        describe(&o)
    );
    let disabled =
        std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti").is_ok_and(|v| v.trim() == "0");
    if is_root() && !disabled {
        assert_direct_broken(&tiocsti_on_a_pty(&fx));
    } else {
        println!(
            "note: not root, or dev.tty.legacy_tiocsti = 0: the unsandboxed control is not run"
        );
    }
}

on_both_backends!(terminal_injection_is_denied => terminal_injection_is_denied_native, terminal_injection_is_denied_bwrap);

// ---- 7. the host's network ------------------------------------------------------------------

/// A UDP echo server on 127.0.0.1 of the host, on its own thread, counting what it
/// echoed.
struct UdpEcho {
    port: u16,
    stop: Arc<AtomicBool>,
    echoed: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl UdpEcho {
    fn start() -> Self {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let port = socket.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let echoed = Arc::new(AtomicUsize::new(0));
        let thread = {
            let (stop, echoed) = (stop.clone(), echoed.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 512];
                while !stop.load(Ordering::SeqCst) {
                    if let Ok((n, from)) = socket.recv_from(&mut buf) {
                        echoed.fetch_add(1, Ordering::SeqCst);
                        let _ = socket.send_to(&buf[..n], from);
                    }
                }
            })
        };
        Self {
            port,
            stop,
            echoed,
            thread: Some(thread),
        }
    }

    /// How many datagrams were echoed so far.
    fn count(&self) -> usize {
        self.echoed.load(Ordering::SeqCst)
    }
}

impl Drop for UdpEcho {
    /// Stops the server (also when an assertion failed first).
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Listeners of the host cannot be reached: a TCP listener and a UDP echo server on
/// 127.0.0.1, and an abstract unix socket (all per network namespace in Linux). None of
/// them sees anything of the run. Negative control: without the sandbox the probe
/// reaches all three.
async fn host_listeners_cannot_be_reached(test: &str, backend: TierCBackend) {
    let Some(fx) = Fixture::tier_c(test, &[], backend) else {
        return;
    };
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let tcp_port = tcp.local_addr().unwrap().port().to_string();
    let echo = UdpEcho::start();
    let udp_port = echo.port.to_string();
    let name = format!(
        "tierbox-probe-{}",
        fx.parent.file_name().unwrap().to_string_lossy()
    );
    let unix = {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        UnixListener::bind_addr(&addr).unwrap()
    };
    unix.set_nonblocking(true).unwrap();

    let o = probe_c(&fx, &["no-reach", &tcp_port, &udp_port, &name]).await;
    let seen_tcp = tcp.accept();
    let seen_unix = unix.accept();
    let echoed = echo.count();
    assert_holds(&o);
    assert!(
        matches!(&seen_tcp, Err(e) if e.kind() == ErrorKind::WouldBlock),
        "the tcp listener accepted a connection from the run: {seen_tcp:?}"
    );
    assert!(
        matches!(&seen_unix, Err(e) if e.kind() == ErrorKind::WouldBlock),
        "the abstract socket accepted a connection from the run: {seen_unix:?}"
    );
    assert_eq!(echoed, 0, "the udp echo server heard from the run");

    // Negative control: without the sandbox, all three are reached.
    assert_direct_broken(&fx.direct(&["no-reach", &tcp_port, &udp_port, &name]));
    assert!(
        tcp.accept().is_ok(),
        "the direct probe's tcp connection never arrived"
    );
    assert!(
        unix.accept().is_ok(),
        "the direct probe's unix connection never arrived"
    );
    assert!(
        echo.count() >= 1,
        "the direct probe's datagram never arrived"
    );
}

on_both_backends!(host_listeners_cannot_be_reached => host_listeners_cannot_be_reached_native, host_listeners_cannot_be_reached_bwrap);

// ---- 8. memory and process limits ----------------------------------------------------------

/// The cgroup memory limit kills a run that allocates twice as much, and says so.
/// Negative control: under a generous limit the same allocation succeeds.
async fn memory_limit_kills_an_allocation_bomb(test: &str, backend: TierCBackend) {
    let Some(mut fx) = Fixture::tier_c(test, &[Need::Cgroup], backend) else {
        return;
    };
    fx.policy.limits.memory_bytes = 64 * MIB;
    let o = probe_c(&fx, &["memory", &(64 * MIB).to_string()]).await;
    println!("{}", report(&o));
    assert!(
        !report(&o).starts_with("BROKEN"),
        "the allocation went through:\n{}",
        describe(&o)
    );
    assert_eq!(o.limit_hit, Some(LimitHit::Memory), "{}", describe(&o));
    // Reported as a kill, like in Tier B: not as an exit code a program could choose.
    assert_eq!(
        (o.exit_code, o.signal),
        (None, Some(libc::SIGKILL)),
        "{}",
        describe(&o)
    );

    fx.policy.limits.memory_bytes = 1024 * MIB;
    assert_broken(&probe_c(&fx, &["memory", &(16 * MIB).to_string()]).await);
}

on_both_backends!(memory_limit_kills_an_allocation_bomb => memory_limit_kills_an_allocation_bomb_native, memory_limit_kills_an_allocation_bomb_bwrap);

/// `limits.cpus` is the run cgroup's CPU quota, stated in the enforcement report (the
/// quota's files are checked on a live Tier B run; both tiers make the group the same
/// way). Negative control: without it, no CPU quota is reported.
async fn cpus_limit_is_the_cgroup_cpu_quota(test: &str, backend: TierCBackend) {
    let Some(mut fx) = Fixture::tier_c(test, &[Need::Cgroup], backend) else {
        return;
    };
    fx.policy.limits.cpus = Some(2);
    let o = probe_c(&fx, &["whoami"]).await;
    let cgroup = &o.enforcement.cgroup;
    assert!(
        cgroup.applied
            && cgroup
                .detail
                .contains("cpu 200% of one CPU (CFS quota 200000 us"),
        "{cgroup:?}"
    );

    fx.policy.limits.cpus = None;
    let o = probe_c(&fx, &["whoami"]).await;
    assert!(
        o.enforcement.cgroup.applied && !o.enforcement.cgroup.detail.contains("of one CPU"),
        "{:?}",
        o.enforcement.cgroup
    );
}

on_both_backends!(cpus_limit_is_the_cgroup_cpu_quota => cpus_limit_is_the_cgroup_cpu_quota_native, cpus_limit_is_the_cgroup_cpu_quota_bwrap);

/// A fork bomb stops within the process limit (the pids cgroup, which also holds the
/// sandbox's init). Negative control: a limit far above what the probe tries is
/// reported as not holding.
async fn fork_bomb_is_stopped(test: &str, backend: TierCBackend) {
    let Some(mut fx) = Fixture::tier_c(test, &[Need::Cgroup], backend) else {
        return;
    };
    fx.policy.limits.max_processes = 16;
    let o = probe_c(&fx, &["fork-bomb", "16"]).await;
    assert_holds(&o);
    println!("limit_hit: {:?}", o.limit_hit);

    fx.policy.limits.max_processes = 128;
    assert_broken(&probe_c(&fx, &["fork-bomb", "8"]).await);
}

on_both_backends!(fork_bomb_is_stopped => fork_bomb_is_stopped_native, fork_bomb_is_stopped_bwrap);

// ---- 9. daemons ------------------------------------------------------------------------------

/// The host's view of a process the run reported from inside its pid namespace: the host
/// process whose innermost `NSpid` is `inner.pid`, with the same start time, named
/// `tierbox-probe`.
fn host_process(inner: ProcessId) -> Option<ProcessId> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let nspid: Vec<i32> = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .map(|v| {
                v.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        let named = status
            .lines()
            .find_map(|l| l.strip_prefix("Name:"))
            .is_some_and(|n| n.trim() == "tierbox-probe");
        let candidate = ProcessId {
            pid,
            start: inner.start,
        };
        if nspid.len() >= 2 && nspid.last() == Some(&inner.pid) && named && candidate.alive() {
            return Some(candidate);
        }
    }
    None
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

/// Polls until no host process matches `inner` any more; whether that happened in time.
fn gone_within(inner: ProcessId, limit: Duration) -> bool {
    let started = Instant::now();
    loop {
        match host_process(inner) {
            None => return true,
            Some(_) if started.elapsed() >= limit => return false,
            Some(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// A `setsid` double-forked daemon dies with the run (the pid namespace ends with its
/// init). The daemon reports its pid inside the namespace; the test finds it on the host
/// by `NSpid` and start time. Control of that lookup: while a run is live, it finds the
/// run's processes (and dropping the run's future kills them).
async fn setsid_daemon_dies_with_the_run(test: &str, backend: TierCBackend) {
    let Some(fx) = Fixture::tier_c(test, &[], backend) else {
        return;
    };
    // Control: the lookup finds the processes of a live run.
    let pidfile = fx.workspace.join("hold.pid");
    let req = fx.request(&["hold", "hold.pid"]);
    let mut run = Box::pin(fx.run(&req));
    let text = tokio::select! {
        o = &mut run => panic!("the hold run ended early:\n{}", describe(&o)),
        text = file_appears(&pidfile) => text,
    };
    let n: Vec<&str> = text.split_whitespace().collect();
    let held = [
        ProcessId::parse_pair(&n[..2].join(" ")).unwrap(),
        ProcessId::parse_pair(&n[2..4].join(" ")).unwrap(),
    ];
    // The run is still live (its future exists, unpolled); dropping it kills it.
    let found: Vec<Option<ProcessId>> = held.iter().map(|p| host_process(*p)).collect();
    drop(run);
    let gone: Vec<bool> = held.iter().map(|p| gone_within(*p, DEATH_GRACE)).collect();
    for p in found.iter().flatten() {
        p.kill_if_alive();
    }
    assert!(
        found.iter().all(Option::is_some),
        "the host lookup did not find the live run's processes {held:?}: {found:?}"
    );
    assert!(
        gone.iter().all(|g| *g),
        "processes of a dropped run survived: {found:?}"
    );

    let o = probe_c(&fx, &["daemon", "daemon.pid"]).await;
    assert!(
        o.exit_code == Some(0) && report(&o).starts_with("DONE "),
        "{}",
        describe(&o)
    );
    let text = std::fs::read_to_string(fx.workspace.join("daemon.pid")).unwrap();
    let daemon = ProcessId::parse_pair(&text).unwrap_or_else(|| panic!("bad pid file {text:?}"));
    let dead = gone_within(daemon, DEATH_GRACE);
    if let Some(p) = host_process(daemon) {
        p.kill_if_alive();
    }
    assert!(
        dead,
        "daemon {daemon:?} (pid inside the run) survived the run by {DEATH_GRACE:?}\n{}",
        describe(&o)
    );
}

on_both_backends!(setsid_daemon_dies_with_the_run => setsid_daemon_dies_with_the_run_native, setsid_daemon_dies_with_the_run_bwrap);

// ---- 10. hostname ----------------------------------------------------------------------------

/// The host's hostname.
fn host_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim_end()
        .to_owned()
}

/// The probe run directly in a UTS namespace of its own (root only).
fn sethostname_in_a_private_uts_namespace(fx: &Fixture, name: &str) -> Output {
    let mut cmd = Command::new(PROBE);
    cmd.args(["sethostname", name])
        .current_dir(&fx.workspace)
        .stdin(Stdio::null());
    super::sys::in_private_uts_namespace(&mut cmd);
    cmd.output().unwrap()
}

/// Inside, `uname -n` is `tierbox`, and the hostname cannot be changed (no
/// capabilities); the host's hostname is the same after the run. Negative control: as
/// root, in a UTS namespace of its own, the probe can change the hostname (and the
/// host's still does not change).
async fn hostname_is_private_and_fixed(test: &str, backend: TierCBackend) {
    let Some(fx) = Fixture::tier_c(test, &[], backend) else {
        return;
    };
    let before = host_hostname();
    let o = probe_c(&fx, &["sethostname", "tierbox-probe-was-here"]).await;
    assert_eq!(host_hostname(), before, "the host's hostname changed");
    assert_holds(&o);
    assert!(
        report(&o).contains("nodename=tierbox;"),
        "uname -n inside is not tierbox:\n{}",
        describe(&o)
    );
    if is_root() {
        assert_direct_broken(&sethostname_in_a_private_uts_namespace(
            &fx,
            "tierbox-probe-was-here",
        ));
        assert_eq!(host_hostname(), before, "the host's hostname changed");
    } else {
        println!("note: not root: the unsandboxed control is not run");
    }
}

on_both_backends!(hostname_is_private_and_fixed => hostname_is_private_and_fixed_native, hostname_is_private_and_fixed_bwrap);

// ---- 11. landlock --------------------------------------------------------------------------

/// Landlock is really on in Tier C: its signal scoping is the only layer between the
/// program and the sandbox's pid 1, which runs as the same uid in the same pid namespace
/// but outside the program's landlock domain, so `kill(1, 0)` fails with `EPERM`.
/// Negative control: on the bwrap backend, which applies no landlock, the same signal
/// goes through. (Writing `/proc/self/comm` used to be the check; the sandbox's `/proc`
/// is now read-only as a mount, which refuses it before landlock is asked.)
///
/// The bwrap backend applies no landlock layer (by design; see `tier.backend`). What it
/// must do instead is never pretend: a policy that requires landlock is refused, and a
/// policy that makes it optional gets an outcome that reports it missing.
async fn landlock_applies(test: &str, backend: TierCBackend) {
    let Some(mut fx) = Fixture::tier_c(test, &[Need::Landlock], backend) else {
        return;
    };
    if backend == TierCBackend::Bwrap {
        let refused = fx.try_run(&fx.request(&["comm-write-denied"])).await;
        match &refused {
            Err(e) => println!("refused as it should be: {e}"),
            Ok(o) => panic!(
                "a policy requiring landlock ran on bwrap, which applies none:\n{}",
                describe(o)
            ),
        }
        assert!(
            refused.as_ref().is_err_and(|e| e.contains("landlock")),
            "{refused:?}"
        );
        fx.policy.tier.optional_layers.push(Layer::Landlock);
        let o = probe_c(&fx, &["comm-write-denied"]).await;
        println!("without landlock: {}", report(&o));
        assert!(
            !o.enforcement.landlock.applied
                && o.enforcement.missing_layers.contains(&Layer::Landlock),
            "the outcome does not report landlock missing:\n{}",
            describe(&o)
        );
        // Negative control of the native check below: without landlock's signal
        // scoping, the program signals its sandbox's pid 1 (same uid, same pid
        // namespace).
        assert_broken(&probe_c(&fx, &["no-signal-outside", "1"]).await);
        return;
    }
    // Landlock's signal scoping is the only layer between the program and the sandbox's
    // pid 1 (same uid, same pid namespace; pid 1 is outside the program's landlock
    // domain): kill(1, 0) is refused by landlock alone.
    let o = probe_c(&fx, &["no-signal-outside", "1"]).await;
    assert_holds(&o);
    assert!(report(&o).contains("EPERM"), "{}", describe(&o));
    assert!(o.enforcement.landlock.applied, "{}", describe(&o));
}

on_both_backends!(landlock_applies => landlock_applies_native, landlock_applies_bwrap);
