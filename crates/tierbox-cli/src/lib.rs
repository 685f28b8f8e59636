//! `tierbox`: run a command in a sandbox, check a request, print schemas, diagnose the host.
//!
//! Two programs are built from this library. `tierbox`, which starts for every call,
//! runs `run` and `check` itself and builds its runners with
//! [`Runner::without_tier_a`], so the WebAssembly engine and the servers are not linked
//! into it (its code a third of the size; its start about a fifth shorter, where page
//! faults are costly: `docs/benchmarks.md`). Every other command,
//! and a run that is Tier A, it hands to `tierbox-full` installed beside it, by `exec`
//! with the same arguments, before reading anything: the output, exit status and
//! streams are that program's own.
#![forbid(unsafe_code)]

mod attest;
mod changes;
mod cli;
mod commands;
mod daemon;
mod doctor;
mod explain;
mod live;
mod preflight;
mod print;
mod progress;
mod render;
mod report;
mod request;
mod term_io;
mod wasm;

use std::process::ExitCode;
use std::sync::OnceLock;

use anyhow::{Context, Result};
use tierbox_policy::Policy;
use tierbox_runner::Runner;

use cli::{Cli, Command, DaemonAction, WasmAction};
use commands::{dispatch, front, start_run_supervisor};

/// The program `tierbox` hands every command but `run` and `check` to, found beside it.
pub const FULL_PROGRAM: &str = "tierbox-full";

/// How this program makes its runners: [`Runner::new`] in `tierbox-full`; else
/// [`Runner::without_tier_a`] (see the crate docs).
static NEW_RUNNER: OnceLock<fn(Policy) -> Runner> = OnceLock::new();

fn new_runner(policy: Policy) -> Runner {
    NEW_RUNNER.get().copied().unwrap_or(Runner::without_tier_a)(policy)
}

/// The environment variable through which `tierbox` tells `tierbox-full` its build.
const FRONT_BUILD_ENV: &str = "TIERBOX_FRONT_BUILD";

/// This build's identity (see `build.rs`).
const BUILD_ID: &str = env!("TIERBOX_BUILD_ID");

/// `tierbox-full`: every command, Tier A included.
pub fn full_main() -> ExitCode {
    // A process the watchdog started to sweep after its supervisor died ends here.
    tierbox_runner::host::watchdog_entry();
    let _ = NEW_RUNNER.set(Runner::new);
    if let Some(front) = std::env::var_os(FRONT_BUILD_ENV)
        && front != BUILD_ID
    {
        return report::fail(
            report::Failure::Error,
            "cli.build_mismatch",
            &format!(
                "this {FULL_PROGRAM} is from another build than the tierbox that started it ({} != {BUILD_ID})",
                front.to_string_lossy()
            ),
            "build both together: `cargo build -p tierbox-cli` (or `cargo install`)",
            false,
        );
    }
    let cli = match parse_cli() {
        Ok(cli) => cli,
        Err(status) => return status,
    };
    // `attach` keeps SIGPIPE ignored, as `run -t` does (below).
    if !matches!(
        cli.command,
        Command::Serve { .. } | Command::Proxy { .. } | Command::Attach { .. }
    ) {
        tierbox_runner::host::default_sigpipe();
    }
    exit_with(dispatch(cli))
}

/// `tierbox`: `run` and `check` here, everything else by `tierbox-full` (crate docs).
pub fn main() -> ExitCode {
    // A process the watchdog started to sweep after its supervisor died ends here.
    tierbox_runner::host::watchdog_entry();
    // `run` starts its watchdog first thing, before the arguments are parsed (`cmd_run`'s
    // own call is then a no-op).
    if std::env::args_os().nth(1).is_some_and(|a| a == "run") {
        start_run_supervisor();
    }
    let cli = match parse_cli() {
        Ok(cli) => cli,
        Err(status) => {
            // Nothing ran: the watchdog has nothing to sweep.
            tierbox_runner::host::release_watchdog();
            return status;
        }
    };
    // `run -t` keeps SIGPIPE ignored: a write to a closed stdout is its EPIPE to handle,
    // so this terminal leaves raw mode before the process ends (`term_io::OUTPUT_CLOSED_EXIT`).
    if matches!(
        cli.command,
        Command::Run { tty: false, .. } | Command::Check { .. }
    ) {
        tierbox_runner::host::default_sigpipe();
    }
    exit_with(front(cli.command))
}

/// The command line, parsed ([`report::parse`]: a usage error is exit 125 with a
/// `tierbox: usage:` line), and how this invocation reports recorded from it.
fn parse_cli() -> std::result::Result<Cli, ExitCode> {
    let cli = report::parse::<Cli>()?;
    let (json, verbose) = match &cli.command {
        Command::Run { json, verbose, .. }
        | Command::Wasm {
            action: WasmAction::Run { json, verbose, .. },
        } => (*json, *verbose),
        Command::Check { json, .. }
        | Command::Doctor { json, .. }
        | Command::Wasm {
            action: WasmAction::Check { json, .. },
        }
        | Command::Daemon {
            action: DaemonAction::Status { json, .. },
        }
        | Command::Ps { json, .. } => (*json, false),
        _ => (false, false),
    };
    report::set(report::Settings { json, verbose });
    Ok(cli)
}

/// Replaces this process with [`FULL_PROGRAM`] beside it, with the same arguments;
/// returns only when that fails.
fn exec_full() -> Result<ExitCode> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("locating the tierbox program")?;
    let full = exe.with_file_name(FULL_PROGRAM);
    let error = std::process::Command::new(&full)
        .arg0("tierbox")
        .args(std::env::args_os().skip(1))
        .env(FRONT_BUILD_ENV, BUILD_ID)
        .exec();
    Err(anyhow::Error::new(error)
        .context(FullProgramMissing)
        .context(format!(
            "running {} for this command (it is installed beside {})",
            full.display(),
            exe.display()
        )))
}

/// [`exec_full`] failed: the program is not beside this one, or cannot be run.
#[derive(Debug)]
struct FullProgramMissing;

impl std::fmt::Display for FullProgramMissing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{FULL_PROGRAM} could not be run")
    }
}

fn exit_with(result: Result<ExitCode>) -> ExitCode {
    // A Tier C run that recorded its file refusals left a kernel audit rule for a
    // thread to remove: it must be gone before this process is.
    tierbox_runner::host::flush_audit_rules();
    match result {
        Ok(code) => code,
        Err(e) => report::fail(
            report::Failure::Error,
            error_code(&e),
            &format!("{e:#}"),
            error_hint(&e),
            report::settings().json,
        ),
    }
}

/// Whether the policy is what an error that is not a rejection was about.
fn policy_at_fault(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<tierbox_policy::PolicyError>()
            .is_some()
    }) || e
        .chain()
        .any(|cause| cause.to_string().starts_with("reading policy "))
}

/// The code of an error that is not a rejection, in `--json`'s error object:
/// `policy.invalid`, `cli.full_program_missing`, or `cli.failed`.
fn error_code(e: &anyhow::Error) -> &'static str {
    if policy_at_fault(e) {
        "policy.invalid"
    } else if e.downcast_ref::<FullProgramMissing>().is_some() {
        "cli.full_program_missing"
    } else {
        "cli.failed"
    }
}

/// What to try after an error that is not a rejection: about the policy when a policy
/// was at fault, else about the host and the command line.
fn error_hint(e: &anyhow::Error) -> &'static str {
    if policy_at_fault(e) {
        "`tierbox policy check FILE` checks a policy on its own; docs/policy.md describes every field"
    } else if e.downcast_ref::<FullProgramMissing>().is_some() {
        "tierbox-full must be installed beside tierbox, from the same build: `cargo build -p tierbox-cli` or `cargo install` puts both there"
    } else {
        "`tierbox help COMMAND` shows what the command expects; `tierbox doctor` shows what this host can enforce"
    }
}

/// Resolves with the number of the first SIGINT, SIGTERM or SIGHUP received.
async fn termination_signal() -> i32 {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => 2,
        _ = term.recv() => 15,
        _ = hup.recv() => 1,
    }
}

/// See [`tierbox_runner::host::harden_supervisor`].
fn harden_supervisor() {
    tierbox_runner::host::harden_supervisor();
}
