//! Tier C on Linux: the run's cgroup plus the native namespace sandbox
//! ([`crate::linux::ns`]), returned as the same [`Launched`] handle Tier B returns so
//! the supervisor treats both alike (deadline, output capture, tree kill, reaping).
//!
//! Differences the supervisor must know about, all carried by [`Launched`]:
//! - the pidfd is the sandbox's pid 1 (the reaper): killing it kills every process of
//!   the pid namespace, and its exit comes right after the program's;
//! - the program's own wait status arrives on [`Launched::report`]
//!   ([`program_exit`]): pid 1 exits with the program's code, or 128 + its signal;
//! - [`Launched::host_placeholders`] lists the mount points the sandbox created in the
//!   workspace, to remove after the run.
//!
//! Layer policy, as in Tier B: a layer the host lacks (landlock, seccomp, cgroup) rejects
//! the run unless the policy lists it in `tier.optional_layers`, in which case it is
//! recorded in the enforcement report. The namespaces themselves are never optional:
//! without them tier selection has already refused Tier C.

use std::os::fd::OwnedFd;

use tierbox_policy::plan::Plan;
use tierbox_policy::{Layer, Rejection, Tier};

use crate::linux::ns::{self, NativeError, NativeOptions};
use crate::probe::host_facts;
use crate::spawn::{self, LaunchError, LaunchOptions, Launched, slots};

/// Name of the native backend in outcomes and attestations.
pub const NATIVE_BACKEND: &str = ns::child::BACKEND_NAME;

/// Launches `plan` in a native Tier C sandbox inside the run's cgroup.
///
/// ```no_run
/// # fn demo(plan: &tierbox_policy::Plan) -> Result<(), tierbox_sandbox::spawn::LaunchError> {
/// let opts = tierbox_sandbox::spawn::LaunchOptions {
///     run_id: "0123abcd".to_owned(),
///     tmp_base: "/tmp/tierbox-state/tmp".into(),
///     launcher_thread: false,
/// };
/// let launched = tierbox_sandbox::tier_c::launch(plan, &opts)?;
/// assert_eq!(launched.tier, tierbox_policy::Tier::C);
/// # Ok(()) }
/// ```
pub fn launch(plan: &Plan, opts: &LaunchOptions) -> Result<Launched, LaunchError> {
    let facts = host_facts();
    let mut missing = Vec::new();
    spawn::require(
        plan,
        Layer::Seccomp,
        facts.seccomp,
        "seccomp filters are not available",
        &mut missing,
    )?;
    spawn::require(
        plan,
        Layer::Landlock,
        facts.landlock_abi.is_some(),
        "landlock is not available (kernel < 5.13 or not in the lsm= list)",
        &mut missing,
    )?;
    spawn::require(
        plan,
        Layer::Cgroup,
        facts.cgroup.is_usable(),
        &facts.cgroup.describe(),
        &mut missing,
    )?;
    let slot = spawn::cgroup_slot(plan, opts, (facts.euid, facts.egid), &mut missing)?;
    let native_opts = NativeOptions {
        seccomp: facts.seccomp,
        landlock: facts.landlock_abi.is_some(),
        cgroup_fds: slot
            .cgroup()
            .map(|cg| cg.procs_fds().to_vec())
            .unwrap_or_default(),
        ..NativeOptions::default()
    };
    match ns::launch_native(plan, &native_opts) {
        Ok(n) => {
            let mut enforcement = n.enforcement;
            enforcement.missing_layers.extend(missing);
            enforcement.missing_layers.sort();
            enforcement.missing_layers.dedup();
            Ok(Launched {
                pid: n.pid,
                pidfd: n.pidfd,
                stdin: n.stdin,
                stdout: n.stdout,
                stderr: n.stderr,
                slot: Some(slot),
                chmod_listener: None,
                child_uid: facts.euid,
                child_gid: facts.egid,
                enforcement,
                tier: Tier::C,
                report: Some(n.report),
                host_placeholders: n.host_placeholders,
            })
        }
        Err(e) => {
            slots::release(slot);
            Err(match e {
                NativeError::Unavailable { reason } => {
                    LaunchError::Rejected(Rejection::TierUnavailable {
                        tier: Tier::C.to_string(),
                        reason,
                    })
                }
                other => LaunchError::Native(other),
            })
        }
    }
}

/// The program's exit from pid 1's report, once pid 1 has exited: `(code, signal)`.
/// `None` when pid 1 was killed before the program ended (the supervisor killed the run):
/// the caller then reports pid 1's own status.
pub fn program_exit(report: &OwnedFd) -> Option<(Option<i32>, Option<i32>)> {
    match ns::sys::read_report(report) {
        Ok(Some(r)) if r.tag == ns::sys::ReportTag::Exited as u32 => {
            let status = r.value;
            Some(if libc::WIFEXITED(status) {
                (Some(libc::WEXITSTATUS(status)), None)
            } else {
                (None, Some(libc::WTERMSIG(status)))
            })
        }
        _ => None,
    }
}
