//! What every probe test shares: the feature gate, a fixture (a workspace with secrets
//! around it, a fake supervisor `HOME`, a policy that allows only the probe), running the
//! probe through the real runner or directly, and reading the verdict.
//!
//! Runs go through `tierbox_policy::validate` and `tierbox_runner::run_plan` (what
//! `Runner::run` does), because the tests need to choose the supervisor environment the
//! policy's `env.pass` reads from (`ValidateContext::with_env`).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;
use tierbox_policy::{
    Layer, Policy, ProcessRunRequest, TierCBackend, TierRequest, ValidateContext, validate,
};
use tierbox_runner::{Outcome, RunOptions, run_plan};
use tierbox_sandbox::probe::host_facts;

/// Where fixtures are made: a world-writable sticky directory of the host outside `/tmp`
/// (see [`Fixture::new`]).
pub const FIXTURE_BASE: &str = "/var/tmp";

/// The probe binary Cargo built for these tests.
pub const PROBE: &str = env!("CARGO_BIN_EXE_tierbox-probe");

/// Its name, the only entry of the policy's `allowed_executables`.
pub const PROBE_NAME: &str = "tierbox-probe";

/// A variable of the supervisor's environment that no policy in these tests passes or sets.
pub const CANARY: &str = "TIERBOX_PROBE_CANARY";

/// Its value (long and distinctive; a leak would show it verbatim).
pub const CANARY_VALUE: &str = "canary-7f3a9c1e-supervisor-only";

/// The request variable through which tests hand the probe a path outside the workspace
/// (`env:TIERBOX_PROBE_PATH`). The runner's advisory argument check rejects such paths as
/// arguments, and these tests are about what the kernel layers do once it is bypassed.
pub const PATH_VAR: &str = "TIERBOX_PROBE_PATH";

/// `env:` form of [`PATH_VAR`], as a probe argument.
pub const PATH_ARG: &str = "env:TIERBOX_PROBE_PATH";

/// The unprivileged owner given to workspaces in the uid-switch tests (`nobody`).
pub const NOBODY: u32 = 65534;

/// What a test needs from the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Landlock filesystem rules.
    Landlock,
    /// Landlock signal and abstract-socket scoping (ABI ≥ 6).
    LandlockScopes,
    /// The seccomp filter (also required by `egress.mode = "block_all"`).
    Seccomp,
    /// A usable memory + pids cgroup.
    Cgroup,
    /// The tests run as root (capabilities to lose, a uid to switch from).
    Root,
    /// User namespaces work here (Tier C's namespaces can be created).
    UserNs,
    /// A usable bubblewrap (the Tier C `bwrap` backend).
    Bwrap,
}

impl Need {
    fn layer(self) -> Option<Layer> {
        match self {
            Need::Landlock => Some(Layer::Landlock),
            Need::LandlockScopes => Some(Layer::LandlockScopes),
            Need::Seccomp => Some(Layer::Seccomp),
            Need::Cgroup => Some(Layer::Cgroup),
            Need::Root | Need::UserNs | Need::Bwrap => None,
        }
    }

    /// Why the host lacks this, or `None` when it has it.
    fn missing(self) -> Option<String> {
        let facts = host_facts();
        match self {
            Need::Landlock => facts
                .landlock_abi
                .is_none()
                .then(|| "landlock is not available".to_owned()),
            Need::LandlockScopes => {
                let abi = facts.landlock_abi.unwrap_or(0);
                (abi < 6).then(|| format!("landlock ABI {abi} has no signal scoping (needs 6)"))
            }
            Need::Seccomp => {
                (!facts.seccomp).then(|| "seccomp filters are not available".to_owned())
            }
            Need::Cgroup => (!facts.cgroup.is_usable()).then(|| facts.cgroup.describe()),
            Need::Root => (facts.euid != 0).then(|| format!("needs root (euid is {})", facts.euid)),
            Need::UserNs => tierbox_sandbox::linux::userns::probe_userns_cached()
                .reason()
                .map(|r| format!("tier c is unavailable: {r}")),
            Need::Bwrap => tierbox_sandbox::bwrap::probe_bwrap_cached()
                .err()
                .map(|e| format!("the bwrap backend is unavailable: {e}")),
        }
    }
}

/// The Linux backends a guarantee is checked in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Tier B: direct spawn.
    TierB,
    /// Tier C, the native namespace backend.
    Native,
    /// Tier C, the bubblewrap backend.
    Bwrap,
}

/// Every [`Backend`], in the order tests run them.
pub const BACKENDS: [Backend; 3] = [Backend::TierB, Backend::Native, Backend::Bwrap];

/// Every layer a host may lack; a fixture makes optional the ones its test does not need.
const ALL_LAYERS: [Layer; 6] = [
    Layer::Landlock,
    Layer::LandlockScopes,
    Layer::Seccomp,
    Layer::Cgroup,
    Layer::ProtectedPaths,
    Layer::Disk,
];

/// Skips `test` with a reason: prints `SKIP <test>: <reason>`, or fails when `CI=true`
/// (a CI host must provide every feature; a skip there would hide a lost guarantee).
pub fn skip(test: &str, reason: &str) {
    tierbox_test_support::skip(test, reason);
}

/// Whether the host provides everything in `needs`; otherwise skips `test` (see [`skip`]).
pub fn supported(test: &str, needs: &[Need]) -> bool {
    let missing: Vec<String> = needs.iter().filter_map(|n| n.missing()).collect();
    if missing.is_empty() {
        return true;
    }
    skip(test, &missing.join("; "));
    false
}

/// The directory holding the probe binary: on the sandbox PATH and readable.
pub fn probe_dir() -> PathBuf {
    Path::new(PROBE)
        .parent()
        .expect("the probe binary has a directory")
        .to_path_buf()
}

/// A workspace with a secret next to it, a fake supervisor `HOME` holding a private key,
/// a private state directory, and a policy that runs only the probe.
#[derive(Debug)]
pub struct Fixture {
    _root: TempDir,
    _state: TempDir,
    /// The workspace's parent directory (it holds [`Fixture::parent_secret`]); not the
    /// parent with [`Fixture::in_workspace`].
    pub parent: PathBuf,
    /// The workspace (canonical).
    pub workspace: PathBuf,
    /// The supervisor's `HOME` in [`Fixture::env`].
    pub home: PathBuf,
    /// A secret in the workspace's parent.
    pub parent_secret: PathBuf,
    /// A secret in the supervisor's `HOME`.
    pub home_secret: PathBuf,
    /// The policy; tests adjust it before running.
    pub policy: Policy,
    /// The supervisor environment `validate` sees: this process's environment, with
    /// `HOME` = [`Fixture::home`] and [`CANARY`] added.
    pub env: BTreeMap<String, String>,
    /// The tier [`Fixture::request`] asks for: B, unless made with [`Fixture::tier_c`].
    pub tier: TierRequest,
    state_dir: PathBuf,
}

impl Fixture {
    /// A fixture for `test`, or `None` (after [`skip`]) when the host lacks a need.
    /// Seccomp is always needed: the policy blocks the network, which needs the filter.
    pub fn new(test: &str, needs: &[Need]) -> Option<Self> {
        Self::build(test, needs, None)
    }

    /// A fixture whose requests ask for Tier C on `backend` (`policy.tier.backend`), or
    /// `None` (after [`skip`]) when the host lacks a need, user namespaces, or (for
    /// [`TierCBackend::Bwrap`]) a usable bwrap.
    pub fn tier_c(test: &str, needs: &[Need], backend: TierCBackend) -> Option<Self> {
        let mut needs = needs.to_vec();
        needs.push(Need::UserNs);
        if backend == TierCBackend::Bwrap {
            needs.push(Need::Bwrap);
        }
        let mut fx = Self::build(test, &needs, None)?;
        fx.tier = TierRequest::C;
        fx.policy.tier.backend = backend;
        Some(fx)
    }

    /// A fixture whose requests run on `backend` (see [`Fixture::new`] and
    /// [`Fixture::tier_c`]).
    pub fn on(test: &str, needs: &[Need], backend: Backend) -> Option<Self> {
        match backend {
            Backend::TierB => Self::new(test, needs),
            Backend::Native => Self::tier_c(test, needs, TierCBackend::Native),
            Backend::Bwrap => Self::tier_c(test, needs, TierCBackend::Bwrap),
        }
    }

    /// Like [`Fixture::new`], with an existing directory as the workspace.
    pub fn in_workspace(test: &str, needs: &[Need], workspace: &Path) -> Option<Self> {
        Self::build(test, needs, Some(workspace))
    }

    fn build(test: &str, needs: &[Need], existing_workspace: Option<&Path>) -> Option<Self> {
        if crate::POOLED {
            tierbox_sandbox::launch::slots::set_pooling(true);
        }
        let mut needs = needs.to_vec();
        needs.push(Need::Seccomp);
        if !supported(test, &needs) {
            return None;
        }
        // Outside /tmp: a root supervisor's Tier B run has a /tmp of its own, in which
        // the host's files outside its grants do not exist at all; the fixtures next to
        // the workspace (the parent's secret, the fake home) must be in the host's view
        // for the probes to prove what landlock and the mediator refuse.
        let root = tempfile::Builder::new()
            .tempdir_in(FIXTURE_BASE)
            .expect("tempdir");
        let parent = std::fs::canonicalize(root.path()).expect("canonical tempdir");
        let workspace = match existing_workspace {
            Some(w) => std::fs::canonicalize(w).expect("canonical workspace"),
            None => {
                let w = parent.join("ws");
                std::fs::create_dir(&w).expect("create workspace");
                w
            }
        };
        let home = parent.join("home");
        std::fs::create_dir_all(home.join(".ssh")).expect("create fake home");
        let parent_secret = parent.join("parent-secret.txt");
        std::fs::write(&parent_secret, "parent secret: do not read\n")
            .expect("write parent secret");
        let home_secret = home.join(".ssh/id_ed25519");
        std::fs::write(&home_secret, "-----BEGIN OPENSSH PRIVATE KEY-----\nfake\n")
            .expect("write home secret");

        // The run's private TMPDIR is created under the state directory, owned by the
        // child's uid; 0711 lets an unprivileged child reach it.
        let state = tempfile::tempdir().expect("state tempdir");
        std::fs::set_permissions(state.path(), std::fs::Permissions::from_mode(0o711))
            .expect("chmod state dir");
        let state_dir = state.path().to_path_buf();

        let mut policy = Policy {
            description: format!("tierbox-probe test {test}: only the probe runs"),
            ..Policy::default()
        };
        policy.tier.optional_layers = ALL_LAYERS
            .iter()
            .copied()
            .filter(|l| !needs.iter().any(|n| n.layer() == Some(*l)))
            .collect();
        policy.exec.allowed_executables = vec![PROBE_NAME.to_owned()];
        policy.env.path = format!("{}:/usr/bin:/bin", probe_dir().display());
        policy.filesystem.read_only = vec![probe_dir().display().to_string()];
        policy.filesystem.protected = Vec::new();
        policy.limits.timeout_ms = 20_000;

        let mut env: BTreeMap<String, String> = ValidateContext::new(&workspace).supervisor_env;
        env.insert("HOME".to_owned(), home.display().to_string());
        env.insert(CANARY.to_owned(), CANARY_VALUE.to_owned());

        Some(Self {
            _root: root,
            _state: state,
            parent,
            workspace,
            home,
            parent_secret,
            home_secret,
            policy,
            env,
            tier: TierRequest::B,
            state_dir,
        })
    }

    /// A request for the probe with `args`, at the fixture's tier ([`Fixture::tier`]).
    pub fn request(&self, args: &[&str]) -> ProcessRunRequest {
        self.request_tier(self.tier, args)
    }

    /// A request for the probe with `args` at `tier`.
    pub fn request_tier(&self, tier: TierRequest, args: &[&str]) -> ProcessRunRequest {
        let mut req = ProcessRunRequest::new(PROBE_NAME);
        req.args = args.iter().map(|a| (*a).to_owned()).collect();
        req.tier = tier;
        req
    }

    /// A request whose `env:` path argument points at `path` (see [`PATH_VAR`]).
    pub fn request_with_path(&self, probe: &str, path: &Path) -> ProcessRunRequest {
        let mut req = self.request(&[probe, PATH_ARG]);
        req.env
            .insert(PATH_VAR.to_owned(), path.display().to_string());
        req
    }

    /// Validates and runs `req` under the fixture's policy and supervisor environment.
    /// Panics on a rejection or a launch failure: every run here is expected to start.
    pub async fn run(&self, req: &ProcessRunRequest) -> Outcome {
        let ctx = ValidateContext::new(&self.workspace).with_env(self.env.clone());
        let plan = validate(&self.policy, req, &ctx)
            .unwrap_or_else(|r| panic!("request {:?} rejected: {r}", req.args));
        let opts = RunOptions {
            state_dir: self.state_dir.clone(),
        };
        run_plan(&plan, &opts)
            .await
            .unwrap_or_else(|e| panic!("run of {:?} failed: {e}", req.args))
    }

    /// Like [`Fixture::run`], for runs that may be refused: the refusal (by validation or
    /// by the runner) as text instead of a panic.
    pub async fn try_run(&self, req: &ProcessRunRequest) -> Result<Outcome, String> {
        let ctx = ValidateContext::new(&self.workspace).with_env(self.env.clone());
        let plan = validate(&self.policy, req, &ctx).map_err(|r| r.to_string())?;
        let opts = RunOptions {
            state_dir: self.state_dir.clone(),
        };
        run_plan(&plan, &opts).await.map_err(|e| e.to_string())
    }

    /// Runs the probe with `args` in the sandbox.
    pub async fn probe(&self, args: &[&str]) -> Outcome {
        self.run(&self.request(args)).await
    }

    /// Runs the probe with `args` directly, without any sandbox, in the workspace (for
    /// negative controls: the probe must be able to report a broken guarantee).
    pub fn direct(&self, args: &[&str]) -> Output {
        Command::new(PROBE)
            .args(args)
            .current_dir(&self.workspace)
            .stdin(Stdio::null())
            .output()
            .expect("run the probe directly")
    }

    /// [`Fixture::direct`] with extra environment variables.
    pub fn direct_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        Command::new(PROBE)
            .args(args)
            .envs(env.iter().copied())
            .current_dir(&self.workspace)
            .stdin(Stdio::null())
            .output()
            .expect("run the probe directly")
    }

    /// Runs with `dir` as the state directory (its `tmp/` the base of the runs' private
    /// temporary directories), instead of the fixture's own.
    pub fn use_state_dir(&mut self, dir: &Path) {
        self.state_dir = dir.to_path_buf();
    }

    /// Protects `entries` (relative to the workspace, as `filesystem.protected` names
    /// them), as a layer the run must enforce (not an optional one).
    pub fn protect(&mut self, entries: &[&str]) {
        self.policy.filesystem.protected = entries.iter().map(|p| (*p).to_owned()).collect();
        self.policy
            .tier
            .optional_layers
            .retain(|l| *l != Layer::ProtectedPaths);
    }

    /// Makes `uid` the owner of the workspace, so a root supervisor runs the child as it.
    pub fn chown_workspace(&self, uid: u32) {
        std::os::unix::fs::chown(&self.workspace, Some(uid), Some(uid)).expect("chown workspace");
    }
}

/// The run happened on the fixture's backend: Tier B, or Tier C on its `tier.backend`.
#[track_caller]
pub fn assert_backend(o: &Outcome, fx: &Fixture) {
    let expected = match fx.tier {
        TierRequest::C => (
            "c",
            match fx.policy.tier.backend {
                TierCBackend::Native => tierbox_sandbox::tier_c::NATIVE_BACKEND,
                TierCBackend::Bwrap => tierbox_sandbox::bwrap::BACKEND_NAME,
                TierCBackend::Docker => tierbox_sandbox::container::DOCKER_BACKEND_NAME,
                TierCBackend::Podman => tierbox_sandbox::container::PODMAN_BACKEND_NAME,
            },
        ),
        _ => ("b", tierbox_sandbox::tier_b::BACKEND_NAME),
    };
    assert!(
        o.tier.to_string() == expected.0 && o.backend == expected.1,
        "expected a run on {expected:?}, got tier {:?} backend {:?}:\n{}",
        o.tier,
        o.backend,
        describe(o)
    );
}

/// The first line of the probe's report (stdout).
pub fn report(o: &Outcome) -> &str {
    o.stdout.text.lines().next().unwrap_or("")
}

/// Everything worth seeing when an assertion about `o` fails.
pub fn describe(o: &Outcome) -> String {
    let e = &o.enforcement;
    format!(
        "exit {:?}, signal {:?}, timed_out {}, limit_hit {:?}, {} ms\n\
         stdout ({} bytes): {}\nstderr ({} bytes): {}\n\
         uid {:?}, landlock {:?}, seccomp {:?}, cgroup {:?}, missing layers {:?}, rlimits {:?}",
        o.exit_code,
        o.signal,
        o.timed_out,
        o.limit_hit,
        o.duration_ms,
        o.stdout.total_bytes,
        clip(&o.stdout.text),
        o.stderr.total_bytes,
        clip(&o.stderr.text),
        e.uid,
        e.landlock.detail,
        e.seccomp.detail,
        e.cgroup.detail,
        e.missing_layers,
        e.rlimits,
    )
}

fn clip(s: &str) -> &str {
    match s.char_indices().nth(2000) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// The probe ran to the end and found its guarantee held (exit 0, `HOLDS`).
#[track_caller]
pub fn assert_holds(o: &Outcome) {
    println!("{}", report(o));
    assert!(
        o.exit_code == Some(0) && report(o).starts_with("HOLDS "),
        "expected the guarantee to hold:\n{}",
        describe(o)
    );
}

/// The probe ran to the end and found its guarantee broken (exit 1, `BROKEN`).
#[track_caller]
pub fn assert_broken(o: &Outcome) {
    println!("{}", report(o));
    assert!(
        o.exit_code == Some(1) && report(o).starts_with("BROKEN "),
        "expected the probe to report BROKEN:\n{}",
        describe(o)
    );
}

/// A direct (unsandboxed) run of the probe reported its guarantee broken.
#[track_caller]
pub fn assert_direct_broken(out: &Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("unsandboxed: {}", stdout.trim_end());
    assert!(
        out.status.code() == Some(1) && stdout.starts_with("BROKEN "),
        "expected the unsandboxed probe to report BROKEN: {:?}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One process for good: its pid and its start time (clock ticks since boot), so that a
/// reused pid is never mistaken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessId {
    /// Process id.
    pub pid: i32,
    /// Field 22 of `/proc/PID/stat`.
    pub start: u64,
}

impl ProcessId {
    /// Parses `"PID START"`.
    pub fn parse_pair(text: &str) -> Option<Self> {
        let mut words = text.split_whitespace();
        Some(Self {
            pid: words.next()?.parse().ok()?,
            start: words.next()?.parse().ok()?,
        })
    }

    /// Finds `pid=N start=T` in a probe report.
    pub fn parse_report(line: &str) -> Option<Self> {
        let field = |key: &str| -> Option<u64> {
            let value = line.split_whitespace().find_map(|w| w.strip_prefix(key))?;
            value
                .trim_end_matches(|c: char| !c.is_ascii_digit())
                .parse()
                .ok()
        };
        Some(Self {
            pid: i32::try_from(field("pid=")?).ok()?,
            start: field("start=")?,
        })
    }

    /// Whether this process still runs. Gone, a zombie (`Z`/`X`: dead, not yet reaped),
    /// or a different process under a reused pid all count as dead.
    pub fn alive(&self) -> bool {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) else {
            return false;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            return false;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let state = fields.first().copied().unwrap_or("X");
        let start: Option<u64> = fields.get(22 - 3).and_then(|s| s.parse().ok());
        start == Some(self.start) && state != "Z" && state != "X"
    }

    /// Polls for up to `limit` until the process is dead; returns whether it died.
    pub fn dead_within(&self, limit: Duration) -> bool {
        let started = Instant::now();
        loop {
            if !self.alive() {
                return true;
            }
            if started.elapsed() >= limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILLs the process if it is still this one (cleanup after a failed check).
    pub fn kill_if_alive(&self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.pid).filter(|_| self.alive()) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

/// A SysV shared memory segment, message queue and semaphore set made on the host under
/// one key, mode 0600 (owner only), removed when dropped: what a run must not reach.
pub struct HostIpc {
    /// The key the three objects share.
    pub key: libc::key_t,
    ids: [libc::c_int; 3],
}

impl HostIpc {
    /// Makes the three objects under a key unique to this test process and `salt`.
    pub fn create(salt: u32) -> Self {
        let key =
            (0x7b00_0000 | ((std::process::id() & 0xffff) << 8) | (salt & 0xff)) as libc::key_t;
        let flags = libc::IPC_CREAT | libc::IPC_EXCL | 0o600;
        // SAFETY: the three calls take integer arguments only.
        let ids = unsafe {
            [
                libc::shmget(key, 4096, flags),
                libc::msgget(key, flags),
                libc::semget(key, 1, flags),
            ]
        };
        assert!(
            ids.iter().all(|id| *id >= 0),
            "cannot create the host's IPC objects under {key:#x}: {}",
            std::io::Error::last_os_error()
        );
        Self { key, ids }
    }
}

impl Drop for HostIpc {
    fn drop(&mut self) {
        let [shm, msg, sem] = self.ids;
        // SAFETY: IPC_RMID of the objects this guard made; no buffer is passed.
        unsafe {
            libc::shmctl(shm, libc::IPC_RMID, std::ptr::null_mut());
            libc::msgctl(msg, libc::IPC_RMID, std::ptr::null_mut());
            libc::semctl(sem, 0, libc::IPC_RMID);
        }
    }
}
