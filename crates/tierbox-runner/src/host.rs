//! The process-level switches a program embedding Tierbox sets once, and the checks that
//! look at this host — so a front end (the CLI, a server) needs the runner only, not the
//! sandbox crate's internals.
//!
//! ```no_run
//! // A long-lived server: hardened, watched, with warm per-run resources.
//! tierbox_runner::host::watchdog_entry(); // first thing in main
//! tierbox_runner::host::harden_supervisor();
//! tierbox_runner::host::start_watchdog().ok();
//! tierbox_runner::host::set_pooling(true);
//! ```

use tierbox_policy::plan::Plan;
use tierbox_policy::{Rejection, Tier};

pub use tierbox_sandbox::contract::GrantFinding;

pub use tierbox_sandbox::contract::Engine;
pub use tierbox_sandbox::contract::denials::NotRecorded;
/// What this host offers, probed once per process: the facts tier selection reads, and
/// each backend's own probe (for `doctor` and for tests that must know whether a tier can
/// run here).
pub use tierbox_sandbox::contract::probe_bwrap_cached;
pub use tierbox_sandbox::contract::probe_engine_cached;
pub use tierbox_sandbox::contract::reaper_description;
/// Whether this process may join a sandbox's network namespace (publishing a port from native
/// Tier C takes it).
pub use tierbox_sandbox::contract::supervisor_can_join_namespaces;
pub use tierbox_sandbox::contract::tier_available;
pub use tierbox_sandbox::contract::{HostFacts, HostSummary, host_facts};
pub use tierbox_sandbox::contract::{SANDBOX_UID, probe_idmapped_mounts, root_workspace_ids};
pub use tierbox_sandbox::contract::{probe_userns_cached, set_probe_state_dir};

/// The supervisor is not dumpable (sandboxed processes of the same uid cannot read its
/// memory or environment) and is a child subreaper (daemons that leave the process group
/// are re-parented here and killed with their run). Best effort: a host that refuses
/// either leaves the process as it was.
pub fn harden_supervisor() {
    let _ = tierbox_sandbox::contract::process::set_not_dumpable();
    let _ = crate::enable_subreaper();
}

/// Creates the state directory `dir` when missing (mode
/// [`crate::supervisor::STATE_DIR_MODE`]) and checks it is this user's to trust: owned by
/// this user or root, writable by nobody else, and so every directory above it (a sticky
/// world-writable parent such as `/tmp` is accepted for an entry of ours). The error
/// names the path, its owner and mode, and the fix.
pub fn ensure_state_dir(dir: &std::path::Path) -> Result<(), crate::RunError> {
    crate::supervisor::ensure_state_dir(dir)
}

/// The first call in the `main` of a program that starts a watchdog: the watchdog sweeps
/// by running the program's own image again, and this is where that run sweeps and
/// exits; in every other run it returns at once. [`start_watchdog`] refuses in a program
/// that did not call it.
///
/// ```no_run
/// // First thing in main:
/// tierbox_runner::host::watchdog_entry();
/// tierbox_runner::host::start_watchdog().ok();
/// ```
pub fn watchdog_entry() {
    tierbox_sandbox::contract::watchdog::entry();
}

/// Starts the watchdog that kills what this process's runs leave in their cgroups if the
/// process is killed outright (see `tierbox_sandbox::contract::watchdog`). The program's
/// `main` must have called [`watchdog_entry`] first.
pub fn start_watchdog() -> std::io::Result<()> {
    tierbox_sandbox::contract::watchdog::start()
}

/// Tells the watchdog that this process is about to exit with nothing left for it to
/// clean up, when that is so (every run group removed, no container engine used), so it
/// exits without sweeping the host's cgroups; a no-op otherwise. The last call of a
/// process that starts no more runs; returns whether the watchdog was told.
///
/// ```no_run
/// tierbox_runner::host::watchdog_entry(); // first thing in main
/// tierbox_runner::host::start_watchdog().ok();
/// // … one run, its outcome printed …
/// tierbox_runner::host::release_watchdog();
/// ```
pub fn release_watchdog() -> bool {
    tierbox_sandbox::contract::watchdog::release()
}

/// Keeps per-run resources (cgroups, landlock rulesets, private directories) warm between
/// runs — for a long-lived process — or, with `false`, destroys the idle ones.
pub fn set_pooling(on: bool) {
    tierbox_sandbox::contract::process::set_pooling(on);
}

/// Makes network namespaces ahead of time for Tier C runs (a long-lived process), or not
/// (a process that makes one run, where they would only cost CPU).
pub fn set_network_namespace_pool(on: bool) {
    tierbox_sandbox::contract::process::set_network_namespace_pool(on);
}

/// Restores the default SIGPIPE disposition (Rust ignores it), so a CLI whose output pipe
/// closes ends as command-line programs do.
pub fn default_sigpipe() {
    tierbox_sandbox::contract::process::default_sigpipe();
}

/// Whether landlock and seccomp denials can be read from the kernel's audit records on
/// this host now, or why not (see [`tierbox_sandbox::contract::denials`]).
pub fn denial_audit() -> Result<(), NotRecorded> {
    tierbox_sandbox::contract::denials::availability()
}

/// Waits, at most [`tierbox_sandbox::contract::denials::FLUSH_TIMEOUT`], until the
/// kernel audit rules that this process's ended Tier C runs added to record their file
/// refusals (`audit.file_refusals`) are removed; whether they all were. A process about
/// to exit calls it: a rule left behind costs every process of the host until the next
/// supervisor removes it.
pub fn flush_audit_rules() -> bool {
    tierbox_sandbox::contract::denials::flush_rule_removals()
}

/// Whether the seccomp argument rules' refusals (a socket family, an `ioctl` request,
/// namespace flags) are handed to the supervisor and recorded with their arguments on
/// this host (Tier B, and Tier C with either backend; seccomp user notification).
pub fn seccomp_arguments_recorded() -> bool {
    tierbox_sandbox::contract::host_facts().seccomp
        && tierbox_sandbox::contract::user_notif_available()
}

/// The tier a run of `plan` gets on this host, as a run would select it, or why none.
pub fn select_tier(plan: &Plan) -> Result<Tier, Rejection> {
    tierbox_sandbox::contract::select_tier(plan, tierbox_sandbox::contract::host_facts())
}

/// [`select_tier`], with what `auto` passed over to pick it: the stronger tier, its
/// backend and why it cannot run the plan here (the outcome's `enforcement.passed_over`).
pub fn select_tier_passing_over(plan: &Plan) -> Result<(Tier, Option<String>), Rejection> {
    tierbox_sandbox::contract::select(plan, tierbox_sandbox::contract::host_facts())
        .map(|s| (s.tier, s.passed_over))
}

/// What each Linux backend would refuse or narrow of `plan`'s filesystem grants here
/// (`tierbox_sandbox::contract::grant_findings`).
pub fn grant_findings(plan: &Plan) -> Vec<GrantFinding> {
    tierbox_sandbox::contract::grant_findings(plan)
}

/// What `check` adds to a valid plan: the tier and backend this host would pick, and
/// what each Linux backend would refuse or narrow of the filesystem grants
/// ([`grant_findings`]) — so a check never approves what a run refuses.
///
/// ```
/// use tierbox_policy::{Policy, ProcessRunRequest, ValidateContext};
/// let ws = tempfile::tempdir().unwrap();
/// let plan = tierbox_policy::validate::validate(
///     &Policy::builtin_default(),
///     &ProcessRunRequest::new("true"),
///     &ValidateContext::new(ws.path()),
/// )
/// .unwrap();
/// let pre = tierbox_runner::host::Preflight::of(&plan);
/// assert!(pre.to_json()["backend"].is_string());
/// ```
#[derive(Debug, Clone)]
pub struct Preflight {
    /// The tier a run of the plan gets on this host, or why none.
    pub tier: Result<Tier, Rejection>,
    /// The backend that tier uses: `tier_b`, or the policy's Tier C backend.
    pub backend: String,
    /// Under `auto`: the stronger tier passed over, and why
    /// ([`tierbox_sandbox::contract::Selection::passed_over`]).
    pub passed_over: Option<String>,
    /// What each backend refuses or narrows.
    pub findings: Vec<GrantFinding>,
}

impl Preflight {
    /// Selects the tier as a run would and asks every backend's planner about the grants.
    pub fn of(plan: &Plan) -> Self {
        let (tier, passed_over) = match select_tier_passing_over(plan) {
            Ok((tier, passed_over)) => (Ok(tier), passed_over),
            Err(rej) => (Err(rej), None),
        };
        let backend = match tier {
            Ok(Tier::C) => plan.tier.backend.to_string(),
            _ => "tier_b".to_owned(),
        };
        Self {
            tier,
            backend,
            passed_over,
            findings: grant_findings(plan),
        }
    }

    /// The finding that would stop a run of this plan: a refusal by the backend the
    /// selected tier uses.
    pub fn refusal(&self) -> Option<&GrantFinding> {
        self.tier.as_ref().ok()?;
        self.findings
            .iter()
            .find(|f| f.refuses && f.backend == self.backend)
    }

    /// `{"tier", "backend", "passed_over", "refused_at_launch", "grant_findings"}`;
    /// `tier` is null and `tier_rejected` holds the rejection when no tier can run the
    /// plan here.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "tier": self.tier.as_ref().ok().map(ToString::to_string),
            "tier_rejected": self.tier.as_ref().err().map(Rejection::to_json),
            "backend": self.backend,
            "passed_over": self.passed_over,
            "refused_at_launch": self.refusal().is_some(),
            "grant_findings": self.findings,
        })
    }
}
