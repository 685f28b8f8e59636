//! What a supervisor needs of this crate, and nothing else: the one module the runner
//! (and, through it, the CLI and the servers) imports.
//!
//! A supervisor picks a tier for a plan, launches it through that tier's backend, holds
//! the [`RunningSandbox`] it gets back until the run is over, serves the run's seccomp
//! hand-off, reads the run's denials once it has ended, and sets a few process-level
//! switches. Everything below is one of those; the modules behind them (`launch`,
//! `linux`, `tier_b`, `tier_c`, `bwrap`, …) are the backends' own and crate-private, and a
//! change inside one of them that keeps this module as it is needs no change in the
//! runner. Tests that drive a backend directly enable the crate's `test-support` feature,
//! which makes them public, from their `[dev-dependencies]`. A test of the runner crate
//! (`tests/layering.rs`) fails when the runner's or the CLI's own code names this crate
//! other than through this module, and when a normal dependency enables `test-support`.
//!
//! ```no_run
//! # async fn demo(plan: &tierbox_policy::Plan) -> Result<(), Box<dyn std::error::Error>> {
//! use tierbox_sandbox::contract::{self, LaunchOptions};
//!
//! let selection = contract::select(plan, contract::host_facts())?;
//! let opts = LaunchOptions {
//!     run_id: "r1".into(),
//!     tmp_base: "/var/lib/tierbox/tmp".into(),
//!     launcher_thread: false,
//!     terminal: None,
//!     trust: None,
//! };
//! let mut sandbox = contract::for_plan(plan, selection.tier).launch(plan, &opts)?;
//! sandbox.watch_exit()?.readable().await?.retain_ready();
//! sandbox.kill_all();
//! let root = sandbox.reap(false)?.ok_or("the root has not exited")?;
//! let _program = sandbox.ending(root).exit;
//! sandbox.release(Box::new(|| {}));
//! # Ok(()) }
//! ```

/// The handle of a running sandbox, and what it hands back.
pub use crate::running::{
    Ending, RunningSandbox, Scratch, SeccompHandOff, UpperLayer, read_exit_record,
};

/// Launching: the options that are not part of the plan, the error, how a process ended,
/// and the backend for a plan and tier.
pub use crate::backend::{Backend, for_plan, reach_key};
/// What a run whose egress proxy terminates TLS gets in its sandbox (the trust bundle and
/// the credential placeholders), and where.
pub use crate::egress::{CA_BUNDLE_FILE, CA_BUNDLE_VARS, SandboxTrust};
/// A run's terminal ([`LaunchOptions::terminal`]): its size, and the primary side the
/// supervisor holds ([`RunningSandbox::take_terminal`]).
pub use crate::launch::terminal::{MAX_TERM_DIMENSION, TermSize, Terminal};
pub use crate::launch::{ExitInfo, LaunchError, LaunchOptions};
/// What crosses a Tier C sandbox's network namespace besides the proxy
/// ([`RunningSandbox::take_reach`]): the host ports' listeners inside, and the connector
/// to its published ports.
pub use crate::linux::ns::reach::{
    InsideConnector, InsideReply, SandboxReach, supervisor_can_join_namespaces,
};
/// The setup step a launched child failed at ([`LaunchError::Child`]).
pub use crate::linux::step::Step;

/// Tier selection and what this host offers.
pub use crate::preflight::{GrantFinding, grant_findings};
pub use crate::probe::{HostFacts, HostSummary, host_facts};
pub use crate::select::{Selection, select, select_tier, tier_available};

/// The supervisor process's own switches (hardening, pooling, signals), and the watchdog
/// that cleans up after a supervisor killed outright.
pub use crate::process;
pub use crate::watchdog;

/// Serving a run's seccomp hand-off: chmod performed beneath its writable roots, and the
/// refusals it hands off answered and recorded.
pub use crate::launch::mediate::{RefusalLog, SeccompMediator};

/// A run's denials, read from the kernel's audit records once it has ended: the refusals,
/// why a layer's were not recorded, and the bounds on what a run records.
pub mod denials {
    pub use crate::linux::audit::files::{
        FLUSH_TIMEOUT, MAX_FILE_FAILURES_PER_RUN, flush_rule_removals,
    };
    pub use crate::linux::audit::{
        AuditReport, BARRIER_TIMEOUT, MAX_REFUSALS_PER_RUN, NotRecorded, Refusal, RefusalLayer,
        RunAudit, RunAuditReport, availability,
    };
    pub use crate::linux::seccomp::refusal_rule;
}

/// A run's cgroup figures.
pub use crate::linux::cgroup::CgroupStats;

/// Native Tier C's pid 1 (`tierbox-init`): its exit codes, and what it is for `doctor`.
pub use crate::linux::ns::init::{reaper, reaper_description};

/// What a run did to the protected entries of its workspace, where no mount namespace of
/// its own held them read-only.
pub use crate::placeholders::observe;

/// The host probes `doctor` reports beyond the facts: user namespaces, idmapped mounts,
/// bubblewrap, the container engines.
pub use crate::bwrap::probe_bwrap_cached;
pub use crate::container::Engine;
pub use crate::container::probe::probe_engine_cached;
pub use crate::launch::user_notif_available;
pub use crate::linux::identity::{SANDBOX_UID, probe_idmapped_mounts, root_workspace_ids};
pub use crate::linux::userns::{probe_userns_cached, set_probe_state_dir};
