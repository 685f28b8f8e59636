//! Launching a container run: the engine CLI started like `bwrap` (a trusted helper in
//! the run's cgroup, new session, `PR_SET_PDEATHSIG`, every other fd closed), and a
//! [`ContainerGuard`] that removes the container by name when the run's handle is dropped.
//!
//! Killing the CLI does not stop a container: the engine (a daemon, or podman's conmon)
//! owns it. Teardown therefore always runs `<engine> rm -f tierbox-<run id>`, which kills
//! and removes it, whether the run ended by itself (then the container is already gone
//! with `--rm` and the command only finds nothing) or was killed at its deadline.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tierbox_policy::plan::Plan;
use tierbox_policy::{Enforcement, Layer, LayerReport, Rejection, Tier};

use super::probe::{ENGINE_ENV, EngineInfo, probe_engine_cached};
use super::{
    ContainerError, ContainerOptions, Engine, container_name, host_mount_points, run_argv,
};
use crate::launch::slots::SlotGuard;
use crate::launch::{self, HelperSpawn, LaunchError, LaunchOptions};
use crate::probe::host_facts;
use crate::running::{Root, Running, RunningSandbox};

/// How long teardown waits for `<engine> rm -f` before giving up (the container then
/// outlives the run; it is labelled `tierbox=1` for an operator to find).
pub const REMOVE_TIMEOUT: Duration = Duration::from_secs(15);

/// Removes the run's container when dropped (see the module documentation), then
/// unmounts the overlay's upper layer of a review-mode run.
#[derive(Debug)]
pub struct ContainerGuard {
    engine: PathBuf,
    name: String,
    /// Unmounted after the container is removed (fields drop after `Drop::drop`); held
    /// for that alone.
    _layer: Option<super::layer::LayerMount>,
}

impl ContainerGuard {
    /// The container's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for ContainerGuard {
    fn drop(&mut self) {
        let child = Command::new(&self.engine)
            .args(["rm", "-f", &self.name])
            .env_clear()
            .envs(ENGINE_ENV.iter().copied())
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let Ok(mut child) = child else { return };
        let deadline = Instant::now() + REMOVE_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// How long a sweep waits for one engine command (`ps`, `kill`, `rm`) before it gives up.
pub const SWEEP_COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// Kills and removes the containers of `engine` whose supervisor is gone (their names,
/// `tierbox-<pid>.<start>-<run id>`, say whose they are; see [`crate::watchdog`]).
/// Returns how many it found. An engine that does not answer finds none.
pub fn sweep_orphaned_containers(engine: &Path) -> usize {
    let Some(listed) = engine_output(
        engine,
        &[
            "ps",
            "-a",
            "--filter",
            &format!("name={}", super::NAME_PREFIX),
            "--format",
            "{{.Names}}",
        ],
    ) else {
        return 0;
    };
    let orphans: Vec<&str> = listed
        .lines()
        .map(str::trim)
        .filter(|n| n.starts_with(super::NAME_PREFIX) && launch::owner_is_gone(n))
        .collect();
    if orphans.is_empty() {
        return 0;
    }
    // SIGKILL first: `rm -f` alone stops with the engine's grace period (podman: 10 s).
    let mut kill = vec!["kill", "--signal", "KILL"];
    kill.extend(&orphans);
    let _ = engine_output(engine, &kill);
    let mut rm = vec!["rm", "-f"];
    rm.extend(&orphans);
    let _ = engine_output(engine, &rm);
    orphans.len()
}

/// [`sweep_orphaned_containers`] once per engine in this process.
fn sweep_orphaned_containers_once(engine: &Path) {
    static SWEPT: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());
    let mut swept = SWEPT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if swept.iter().any(|e| e == engine) {
        return;
    }
    swept.push(engine.to_path_buf());
    sweep_orphaned_containers(engine);
}

/// The engine's stdout for `args` (the engine's fixed environment, `/` as cwd), or
/// `None` when it cannot start, fails, or takes longer than [`SWEEP_COMMAND_TIMEOUT`].
fn engine_output(engine: &Path, args: &[&str]) -> Option<String> {
    let mut child = Command::new(engine)
        .args(args)
        .env_clear()
        .envs(ENGINE_ENV.iter().copied())
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdout = child.stdout.take()?;
    // Read on a thread of its own, so a full pipe never holds the engine up.
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stdout, &mut out);
        out
    });
    let deadline = Instant::now() + SWEEP_COMMAND_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    };
    let out = reader.join().ok()?;
    status
        .success()
        .then(|| String::from_utf8_lossy(&out).into_owned())
}

/// The fd number at which the engine CLI reads the container's environment
/// (`--env-file /dev/fd/3`).
pub const ENV_FILE_FD: i32 = 3;

/// The fd number at which the engine CLI reads the run's seccomp profile
/// (`--security-opt seccomp=/dev/fd/4`; [`super::seccomp`]).
pub const SECCOMP_PROFILE_FD: i32 = 4;

fn unavailable(reason: String) -> LaunchError {
    LaunchError::Rejected(Rejection::TierUnavailable {
        tier: Tier::C,
        reason,
    })
}

fn argv_error(e: ContainerError) -> LaunchError {
    LaunchError::Rejected(match e {
        ContainerError::EgressProxyUnsupported | ContainerError::HostNetwork { .. } => {
            Rejection::TierUnsupported {
                tier: Tier::C,
                feature: "egress through the container backends".to_owned(),
                reason: e.to_string(),
            }
        }
        other => Rejection::TierUnavailable {
            tier: Tier::C,
            reason: other.to_string(),
        },
    })
}

/// Launches `plan` with the container engine its backend names.
///
/// Layer policy: landlock and Tierbox's seccomp filter are not applied (the engine's
/// default seccomp profile is), so `landlock` must be in `tier.optional_layers`, as for
/// bwrap; the run's memory, pids and CPU limits are the engine's cgroup.
pub fn launch(plan: &Plan, opts: &LaunchOptions) -> Result<RunningSandbox, LaunchError> {
    let engine = Engine::for_backend(plan.tier.backend)
        .ok_or_else(|| argv_error(ContainerError::NoImage))?;
    let info = probe_engine_cached(engine).map_err(|e| unavailable(e.to_string()))?;
    let facts = host_facts();
    let mut missing = crate::layers::layers_for(Tier::C, plan, facts)?;
    // Containers of supervisors that died without a watchdog, before this one's first.
    sweep_orphaned_containers_once(&info.path);
    // The container's name carries its supervisor (`tierbox-<pid>.<start>-<run id>`), so
    // a sweep can tell a dead supervisor's containers from a live one's.
    let owned_id = launch::owned_id(&opts.run_id);
    let mut copts = ContainerOptions::probe(engine, &owned_id, plan);
    copts.env_file = Some(format!("/dev/fd/{ENV_FILE_FD}"));
    // On a terminal the engine's CLI has it as stdio and controlling terminal
    // (`spawn_helper`), and relays it to the container's own.
    copts.terminal = opts.terminal.is_some();
    // Never the engine's default alone: it lets the container leave setuid files.
    let profile = super::seccomp::host_profile().map_err(|e| unavailable(e.to_string()))?;
    copts.seccomp_profile = Some(format!("/dev/fd/{SECCOMP_PROFILE_FD}"));
    let (layer, upper_layer) = match plan.workspace_mode {
        tierbox_policy::WorkspaceMode::Direct => (None, None),
        tierbox_policy::WorkspaceMode::Overlay => {
            let (layer, fd) = upper_layer_for(plan, opts)?;
            copts.overlay_layer = Some(layer.dir().to_path_buf());
            (Some(layer), Some(fd))
        }
    };
    let argv = run_argv(plan, &copts).map_err(argv_error)?;
    let env_file = launch::data_fd(
        c"tierbox-container-env",
        super::env_file_contents(plan)
            .map_err(argv_error)?
            .as_bytes(),
        "the container's environment",
    )?;
    let profile_fd = launch::data_fd(
        c"tierbox-container-seccomp",
        profile.as_bytes(),
        "the container's seccomp profile",
    )?;
    let name = container_name(&owned_id).map_err(argv_error)?;
    let claim = crate::placeholders::claim(&host_mount_points(&copts));
    // The CLI's own cgroup: optional (the container's limits are the engine's).
    let mut cli_missing = Vec::new();
    let slot = SlotGuard::new(launch::cgroup_slot(
        info.engine.backend_id(),
        plan,
        opts,
        (facts.euid, facts.egid),
        &mut cli_missing,
    )?);
    let mut full_argv = vec![info.path.clone().into_os_string()];
    full_argv.extend(argv.iter().map(Into::into));
    let env: Vec<(String, String)> = ENGINE_ENV
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let inherit = [
        (env_file.as_fd(), ENV_FILE_FD),
        (profile_fd.as_fd(), SECCOMP_PROFILE_FD),
    ];
    let helper = HelperSpawn {
        inherit: &inherit,
        ..HelperSpawn::plain(&info.path, &full_argv, &env)
    };
    // The guard exists before the CLI starts, so a failed start still cleans up.
    let guard = ContainerGuard {
        engine: info.path.clone(),
        name,
        _layer: layer,
    };
    crate::watchdog::note_engine(&info.path);
    // A failure hands the slot back (its guard).
    let (child, _) = launch::spawn_helper(plan, opts, &slot, &helper)?;
    missing.sort();
    missing.dedup();
    let mut root = Root::spawned(child, (facts.euid, facts.egid));
    root.terminal = root.terminal.take().map(|t| {
        t.relayed(crate::launch::terminal::Relay {
            engine: info.path.clone(),
            env: ENGINE_ENV,
            container: guard.name.clone(),
        })
    });
    let backend = Running::Container {
        container: guard,
        upper_layer,
    };
    let audit = {
        let mut audit = crate::linux::audit::RunAudit::not_recorded(
            "the container engine applies no landlock domain",
            "the container engine loads its own seccomp profile; its refusals are not read",
        );
        if plan.tier.file_refusals {
            audit.files = Err(crate::linux::audit::NotRecorded::Backend {
                why: "the container engine starts the run's processes, outside the supervisor's audit sessions",
            });
        }
        audit
    };
    Ok(
        RunningSandbox::new(root, enforcement(plan, &info, missing), audit, backend)
            .in_slot(slot)
            .with_placeholders(claim.keep()),
    )
}

/// Review mode: the upper layer's tmpfs (`limits.disk_bytes`) mounted in the run's tmp
/// directory, its `upper` given the workspace root's owner and mode.
fn upper_layer_for(
    plan: &Plan,
    opts: &LaunchOptions,
) -> Result<(super::layer::LayerMount, std::os::fd::OwnedFd), LaunchError> {
    use std::os::unix::fs::MetadataExt;
    let io = |what: &str, e: std::io::Error| {
        unavailable(format!("the overlay's upper layer for podman: {what}: {e}"))
    };
    let ws = std::fs::metadata(&plan.workspace).map_err(|e| io("stat the workspace", e))?;
    std::fs::create_dir_all(&opts.tmp_base).map_err(|e| io("create the tmp directory", e))?;
    let dir = opts.tmp_base.join(format!("{}.layer", opts.run_id));
    super::layer::LayerMount::create(
        &dir,
        plan.limits.disk_bytes,
        (ws.uid(), ws.gid(), ws.mode()),
    )
    .map_err(|e| io(&format!("mount a tmpfs on {}", dir.display()), e))
}

fn enforcement(plan: &Plan, info: &EngineInfo, missing: Vec<Layer>) -> Enforcement {
    let facts = host_facts();
    let limits = &plan.limits;
    let user = plan
        .tier
        .container
        .as_ref()
        .map_or("?", |c| c.user.as_str());
    Enforcement {
        tier: Some(Tier::C),
        backend: info.engine.backend_id(),
        kernel: facts.kernel.clone(),
        uid: None,
        gid: None,
        capabilities: format!(
            "none: --cap-drop ALL, --security-opt no-new-privileges, --user {user} ({} {})",
            info.engine, info.detail
        ),
        no_new_privs: true,
        landlock: LayerReport::missing("not applied by the container backends"),
        seccomp: LayerReport::applied(format!(
            "the {} engine's default seccomp profile, narrowed by Tierbox's rules on setuid/setgid modes and device nodes (Tierbox's own filter is not installed)",
            info.engine
        )),
        cgroup: LayerReport::applied(format!(
            "engine cgroup: --memory {} (no swap), --pids-limit {}, --cpus {}",
            limits.memory_bytes,
            limits.max_processes,
            limits.cpus.unwrap_or(super::DEFAULT_CPUS)
        )),
        namespaces: vec![match plan.workspace_mode {
            tierbox_policy::WorkspaceMode::Direct => {
                "the engine's: mount (read-only image root), pid, net (none), ipc (private), uts"
                    .to_owned()
            }
            tierbox_policy::WorkspaceMode::Overlay => format!(
                "the engine's: mount (read-only image root; the workspace through podman's overlay volume, the run's writes in an upper tmpfs of {} bytes kept for review), pid, net (none), ipc (private), uts",
                limits.disk_bytes
            ),
        }],
        rlimits: crate::launch::rlimit_report(limits, ""),
        network: "--network none: only the container's own loopback".to_owned(),
        protected_paths: LayerReport::applied(format!(
            "{} protected path(s) mounted read-only or covered",
            plan.filesystem.protected.len()
        )),
        disk: LayerReport::applied(format!(
            "/tmp: the engine's tmpfs of {} bytes; the workspace is bounded per file only",
            super::tmp_size_bytes(plan)
        )),
        missing_layers: missing,
        passed_over: None,
        grants: Vec::new(),
        denial_reports: std::collections::BTreeMap::new(),
    }
}
