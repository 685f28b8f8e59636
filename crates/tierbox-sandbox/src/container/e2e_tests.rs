//! End-to-end runs through a real container engine (podman), with an image made here
//! from the host's static busybox (`podman import`; nothing is pulled from a registry).
//!
//! Skipped, with the reason printed, when podman is not installed or when there is no
//! static busybox to build the image from (hosts may have no container engine at all).
//! Under `CI=true`, where `.ci/run` installs podman, runc and busybox-static, an installed
//! engine that does not answer is a failure, not a skip.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use tierbox_policy::{Layer, Plan, ProcessRunRequest, TierCBackend, ValidateContext, validate};

use super::Engine;
use super::probe::{ENGINE_ENV, probe_engine};
use crate::launch::LaunchOptions;
use crate::running::RunningSandbox;
use crate::test_fixtures::{Scratch, policy, scratch};

/// The image the tests build.
const IMAGE: &str = "localhost/tierbox-e2e:busybox";

fn skip(test: &str, reason: &str) -> bool {
    !tierbox_test_support::skip_optional(
        test,
        &format!("{reason} (this host has no usable container engine)"),
    )
}

fn engine_cmd(path: &Path) -> Command {
    let mut c = Command::new(path);
    c.env_clear().envs(ENGINE_ENV.iter().copied());
    c
}

/// Podman is reachable and the test image exists (built on first use).
fn usable(test: &str) -> bool {
    let info = match probe_engine(Engine::Podman) {
        Ok(info) => info,
        Err(e) => {
            let installed = ["/usr/bin/podman", "/usr/local/bin/podman"]
                .iter()
                .any(|p| Path::new(p).exists());
            assert!(
                !(installed && tierbox_test_support::in_ci()),
                "{test}: podman is installed but unusable under CI: {e}"
            );
            return skip(test, &e.to_string());
        }
    };
    let exists = engine_cmd(&info.path)
        .args(["image", "exists", IMAGE])
        .status()
        .is_ok_and(|s| s.success());
    if exists {
        return true;
    }
    match tierbox_test_support::container_image::build_busybox_image(&info.path, ENGINE_ENV, IMAGE)
    {
        Ok(()) => true,
        Err(reason) => skip(test, &reason),
    }
}

fn plan(s: &Scratch, command: &str, args: &[&str]) -> Plan {
    let mut p = policy("strict.toml");
    p.tier.backend = TierCBackend::Podman;
    p.tier.container.image = Some(IMAGE.to_owned());
    p.tier.optional_layers.push(Layer::Landlock);
    p.exec.allowed_executables.push("id".to_owned());
    let ctx = ValidateContext::new(&s.ws).with_env(Default::default());
    let mut req = ProcessRunRequest::new(command);
    req.args = args.iter().map(|a| (*a).to_owned()).collect();
    validate(&p, &req, &ctx).unwrap()
}

/// A workspace the container's user (65534) can write.
fn workspace() -> Scratch {
    let s = scratch();
    std::fs::set_permissions(&s.ws, std::fs::Permissions::from_mode(0o777)).unwrap();
    s
}

fn launch(s: &Scratch, plan: &Plan) -> RunningSandbox {
    static N: AtomicU32 = AtomicU32::new(0);
    let opts = LaunchOptions {
        run_id: format!(
            "e2e{}x{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ),
        tmp_base: s.root.join("state"),
        launcher_thread: false,
        terminal: None,
        trust: None,
    };
    std::fs::create_dir_all(&opts.tmp_base).unwrap();
    crate::tier_c::launch(plan, &opts).expect("launch")
}

fn read_all(fd: &OwnedFd) -> String {
    let mut s = Vec::new();
    std::fs::File::from(fd.try_clone().unwrap())
        .read_to_end(&mut s)
        .unwrap();
    String::from_utf8_lossy(&s).into_owned()
}

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run(s: &Scratch, plan: &Plan) -> Ran {
    let mut l = launch(s, plan);
    let stdout = read_all(l.stdout());
    let stderr = read_all(l.stderr());
    let exit = crate::launch::sys::wait_pidfd(l.pidfd(), false)
        .unwrap()
        .unwrap();
    l.release(Box::new(|| {}));
    Ran {
        code: exit.code,
        stdout,
        stderr,
    }
}

#[test]
fn podman_runs_the_plan_as_an_unprivileged_user_in_the_workspace() {
    if !usable("podman_runs_the_plan_as_an_unprivileged_user_in_the_workspace") {
        return;
    }
    let s = workspace();
    let r = run(&s, &plan(&s, "id", &["-u"]));
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    assert_eq!(r.stdout.trim(), "65534");
    let r = run(&s, &plan(&s, "touch", &["made-inside"]));
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    assert!(
        s.ws.join("made-inside").is_file(),
        "written through to the host"
    );
}

#[test]
fn podman_keeps_protected_paths_and_the_root_read_only() {
    if !usable("podman_keeps_protected_paths_and_the_root_read_only") {
        return;
    }
    let s = workspace();
    let hooks = s.ws.join(".git/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    std::fs::set_permissions(&hooks, std::fs::Permissions::from_mode(0o777)).unwrap();
    let r = run(&s, &plan(&s, "touch", &[".git/hooks/pre-commit"]));
    assert_ne!(r.code, Some(0), "wrote a protected path: {}", r.stdout);
    assert!(r.stderr.contains("Read-only file system"), "{}", r.stderr);
    assert!(!hooks.join("pre-commit").exists());
    // `.git/config` does not exist: covered, so it cannot be created; the mount point
    // the engine made on the host is removed after the run.
    let r = run(&s, &plan(&s, "touch", &[".git/config"]));
    assert_ne!(r.code, Some(0));
    assert!(
        !s.ws.join(".git/config").exists(),
        "placeholder left behind"
    );
}

#[test]
fn podman_has_no_network() {
    if !usable("podman_has_no_network") {
        return;
    }
    let s = workspace();
    // Validation refuses paths outside the workspace in arguments; the Plan is data, so
    // the test points `cat` at the network device table after validation.
    let mut p = plan(&s, "cat", &["/dev/null"]);
    p.argv[1] = "/proc/net/dev".to_owned();
    let r = run(&s, &p);
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    let ifaces: Vec<&str> = r
        .stdout
        .lines()
        .filter_map(|l| l.split_once(':').map(|(name, _)| name.trim()))
        .collect();
    assert_eq!(ifaces, ["lo"], "only loopback");
}

#[test]
fn killing_a_run_removes_its_container() {
    if !usable("killing_a_run_removes_its_container") {
        return;
    }
    let s = workspace();
    let plan = plan(&s, "sleep", &["60"]);
    let l = launch(&s, &plan);
    let name = l.container_name().unwrap().to_owned();
    let podman = super::probe::find_engine(Engine::Podman).unwrap();
    let running = |name: &str| {
        let out = engine_cmd(&podman)
            .args(["ps", "-a", "--format", "{{.Names}}"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.trim() == name)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !running(&name) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(running(&name), "{name} never started");
    // What the supervisor does at a deadline: SIGKILL the CLI's process group.
    crate::launch::sys::kill(-l.pid(), libc::SIGKILL).unwrap();
    let _ = crate::launch::sys::wait_pidfd(l.pidfd(), false);
    // Dropping the handle hands the slot back and removes the container.
    drop(l);
    assert!(!running(&name), "{name} outlived its run");
}

/// Review mode on podman: the workspace through podman's overlay volume, the run's writes
/// in the supervisor's size-limited tmpfs (read through the fd the launch hands back),
/// the real workspace untouched; the tmpfs is unmounted when the run's handle goes.
#[test]
fn podman_overlay_mode_keeps_the_workspace_and_hands_back_the_upper_layer() {
    if !usable("podman_overlay_mode_keeps_the_workspace_and_hands_back_the_upper_layer") {
        return;
    }
    let s = workspace();
    let mut p = plan(&s, "touch", &["made-in-review"]);
    p.workspace_mode = tierbox_policy::WorkspaceMode::Overlay;
    p.limits.disk_bytes = 4 << 20;
    let mut l = launch(&s, &p);
    let stderr = read_all(l.stderr());
    let exit = crate::launch::sys::wait_pidfd(l.pidfd(), false)
        .unwrap()
        .unwrap();
    assert_eq!(exit.code, Some(0), "stderr: {stderr}");
    assert!(
        !s.ws.join("made-in-review").exists(),
        "written through to the workspace"
    );
    let layer = l.take_scratch().upper_layer.expect("the upper layer's fd");
    let upper = layer.changes_dir();
    assert!(upper.join("made-in-review").is_file());
    let mount_point = s
        .root
        .join("state")
        .read_dir()
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().ends_with(".layer"));
    let mount_point = mount_point.expect("the layer's mount point").path();
    // Dropping the handle hands the slot back and removes the container.
    drop(l);
    assert!(!mount_point.exists(), "the layer's tmpfs was not removed");
    // Still readable through the fd after the unmount.
    assert!(upper.join("made-in-review").is_file());
}

/// Nothing a container run leaves in the workspace is setuid, setgid or a device node,
/// judged on the host while the run lives and after it: the engine's default profile
/// narrowed by Tierbox's rules refuses `chmod 4755`, `chmod 2755`, `install -m 4755`
/// and `mknod c 0 0`. Negative control: the same script under the engine's own default
/// profile leaves a setuid file.
///
/// Regression: the container backends ran with the engine's default profile only, under
/// which the container's user (65534 here) could leave setuid-65534 files on the host.
#[test]
fn podman_runs_leave_no_setid_file_or_device() {
    use std::os::unix::fs::MetadataExt;
    if !usable("podman_runs_leave_no_setid_file_or_device") {
        return;
    }
    let script = "cd \"$0\" && busybox cp /bin/busybox x && \
        busybox chmod 4755 x; busybox chmod 2755 x; busybox install -m 4755 x y; \
        busybox mknod c0 c 0 0; echo planted > ready; busybox sleep 3";
    let privileged = |ws: &Path| -> Vec<String> {
        std::fs::read_dir(ws)
            .unwrap()
            .flatten()
            .filter_map(|e| {
                let m = std::fs::symlink_metadata(e.path()).ok()?;
                let kind = m.mode() & libc::S_IFMT;
                (m.mode() & (libc::S_ISUID | libc::S_ISGID) != 0
                    || kind == libc::S_IFCHR
                    || kind == libc::S_IFBLK)
                    .then(|| format!("{:?} {:o}", e.file_name(), m.mode()))
            })
            .collect()
    };
    let s = workspace();
    let mut p = plan(&s, "touch", &["x"]);
    let ws = s.ws.display().to_string();
    p.argv = vec!["/bin/sh".to_owned(), "-c".to_owned(), script.to_owned(), ws];
    p.program = "/bin/sh".into();
    let mut l = launch(&s, &p);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !s.ws.join("ready").exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(s.ws.join("ready").exists(), "the script never got to wait");
    let alive = privileged(&s.ws);
    let stderr = read_all(l.stderr());
    let _ = crate::launch::sys::wait_pidfd(l.pidfd(), false);
    l.release(Box::new(|| {}));
    assert!(alive.is_empty(), "while the run lived: {alive:?}\n{stderr}");
    assert!(
        privileged(&s.ws).is_empty(),
        "after the run: {:?}",
        privileged(&s.ws)
    );
    assert!(stderr.contains("Operation not permitted"), "{stderr}");

    // The control: the engine's own default profile lets the same user do it.
    let control = workspace();
    let podman = super::probe::find_engine(Engine::Podman).unwrap();
    let volume = format!("{}:{}", control.ws.display(), control.ws.display());
    let out = engine_cmd(&podman)
        .args([
            "run",
            "--rm",
            "--network",
            "none",
            "--user",
            "65534:65534",
            "--cap-drop",
            "ALL",
            // The engine's default rlimits may exceed the test process's own.
            "--ulimit",
            "nofile=256:256",
            "--ulimit",
            "nproc=128:128",
        ])
        .args(["--volume", &volume, IMAGE, "/bin/sh", "-c", script])
        .arg(control.ws.display().to_string())
        .output()
        .unwrap();
    let left = privileged(&control.ws);
    assert!(
        left.iter().any(|l| l.contains("\"x\"")),
        "the control left no setuid file ({left:?}): the test cannot fail\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
