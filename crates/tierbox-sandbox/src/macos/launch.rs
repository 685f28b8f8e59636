//! Starting a macOS Tier C run: `/usr/bin/sandbox-exec -p PROFILE -- PROGRAM ARGS…` with
//! exactly the Plan's environment, its own process group, stdio pipes and the rlimits of
//! [`super::rlimits`].

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use tierbox_policy::plan::Plan;
use tierbox_policy::{Layer, Rejection};

use super::{
    SANDBOX_EXEC, SbplError, SbplOptions, check_layers, rlimits, sandbox_exec_argv, sbpl_profile,
    sys,
};

/// A started macOS run.
#[derive(Debug)]
pub struct MacLaunched {
    /// `sandbox-exec`, which becomes the program (it execs it in place): its pid is also
    /// the process group to signal.
    pub child: Child,
    /// The profile it runs under (for the enforcement report and the attestation).
    pub profile: String,
    /// Layers the policy allowed to be missing that are missing here.
    pub missing_layers: Vec<Layer>,
}

/// Why a macOS launch failed.
#[derive(Debug, thiserror::Error)]
pub enum MacLaunchError {
    /// The policy does not accept what macOS cannot enforce.
    #[error(transparent)]
    Rejected(#[from] Rejection),
    /// The Plan cannot be written as a profile.
    #[error(transparent)]
    Profile(#[from] SbplError),
    /// `sandbox-exec` could not be started.
    #[error("starting {SANDBOX_EXEC}: {0}")]
    Spawn(io::Error),
}

/// Starts `plan` under `sandbox-exec`. `tmp_dir` is the run's private, canonical
/// temporary directory (`TMPDIR`, and `HOME` when the Plan asks for a private one).
pub fn launch(plan: &Plan, opts: &SbplOptions) -> Result<MacLaunched, MacLaunchError> {
    let missing_layers = check_layers(plan)?;
    let profile = sbpl_profile(plan, opts)?;
    let argv = sandbox_exec_argv(plan, &profile);
    let mut cmd = Command::new(SANDBOX_EXEC);
    cmd.args(&argv[1..])
        .env_clear()
        .envs(plan.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&plan.cwd)
        .process_group(0)
        .stdin(if plan.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(tmp) = &opts.tmp_dir {
        cmd.env("TMPDIR", tmp);
        if plan.filesystem.private_home {
            cmd.env("HOME", tmp);
        }
    }
    sys::set_rlimits_before_exec(&mut cmd, rlimits(plan));
    let child = cmd.spawn().map_err(MacLaunchError::Spawn)?;
    Ok(MacLaunched {
        child,
        profile,
        missing_layers,
    })
}
