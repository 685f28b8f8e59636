//! `tierbox run`: one run, through the local daemon when one with this runner's identity
//! answers, else in process; its output printed as it arrives and its exit status the
//! program's.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use tierbox_policy::Policy;
use tierbox_runner::{RunError, RunRequest, Runner};

use super::build_runner;
use crate::cli::{PolicyArgs, RequestArgs};
use crate::print::{
    Via, finish, interrupted, print_daemon_reply, print_outcome, print_rejection, print_run_failure,
};
use crate::request::{StdinFlags, build_request};
use crate::term_io::DetachSeq;
use crate::{daemon, exec_full, harden_supervisor, live, progress, termination_signal};

/// `tierbox run -t`'s own flags.
#[derive(Debug, Clone, Default)]
pub struct Tty {
    /// `--detach-keys`.
    pub detach_keys: Option<String>,
}

pub fn cmd_run(
    policy: &PolicyArgs,
    request: RequestArgs,
    json: bool,
    pass_stdin: StdinFlags,
    state_dir: Option<PathBuf>,
    tty: Option<Tty>,
) -> Result<ExitCode> {
    // A detach sequence that cannot be used is refused before anything starts.
    let detach = match tty
        .as_ref()
        .map(|t| DetachSeq::chosen(t.detach_keys.as_deref()))
    {
        Some(Err(e)) => return Ok(bad_detach_keys(&e)),
        Some(Ok(seq)) => Some(seq),
        None => None,
    };
    start_run_supervisor();
    // One run, then exit: network namespaces made ahead of time would only cost CPU.
    tierbox_runner::host::set_network_namespace_pool(false);
    let done = match detach {
        Some(detach) => in_terminal(policy, request, json, state_dir, detach),
        None => run_once(policy, request, json, pass_stdin, state_dir),
    };
    // The runner and its run are gone: when they left nothing, the watchdog need not
    // sweep after this process.
    tierbox_runner::host::release_watchdog();
    done
}

/// The usage error for detach keys that cannot be parsed (exit 125, as every usage
/// error).
pub fn bad_detach_keys(why: &crate::term_io::DetachKeysError) -> ExitCode {
    crate::report::fail(
        crate::report::Failure::Usage,
        "cli.detach_keys",
        &why.to_string(),
        "`--detach-keys ctrl-p,ctrl-q` is the default; `--detach-keys none` never detaches",
        crate::report::settings().json,
    )
}

/// Hardens this process and starts its watchdog: if the process
/// is killed outright (SIGKILL), it kills what the run left in its cgroups and
/// containers, as `serve` has. A second call is a no-op.
pub fn start_run_supervisor() {
    harden_supervisor();
    if let Err(e) = tierbox_runner::host::start_watchdog() {
        eprintln!("tierbox: warning: no watchdog: {e}");
    }
}

/// [`cmd_run`] with `-t`: the program on a terminal of its own, held by the daemon when
/// one with this runner's identity answers (the rule plain runs follow, `TIERBOX_DAEMON=off`
/// included), else in this process.
fn in_terminal(
    policy: &PolicyArgs,
    request: RequestArgs,
    json: bool,
    state_dir: Option<PathBuf>,
    detach: DetachSeq,
) -> Result<ExitCode> {
    let runner = build_runner(policy, state_dir)?;
    let req = match build_request(request) {
        Ok(req) => req,
        Err(rej) => return Ok(print_rejection(&rej, json)),
    };
    if daemon::enabled() {
        match super::attach::run_in_daemon(&runner, &req, detach) {
            super::attach::DaemonTerm::Ran(code) => return Ok(code),
            super::attach::DaemonTerm::NotUsed(why) => {
                if crate::report::settings().verbose {
                    eprintln!("tierbox: the term runs in process: {why}");
                }
            }
        }
    }
    super::term::run_in_terminal(&runner, req, json)
}

/// [`cmd_run`]'s one run, the runner dropped on return.
fn run_once(
    policy: &PolicyArgs,
    request: RequestArgs,
    json: bool,
    pass_stdin: StdinFlags,
    state_dir: Option<PathBuf>,
) -> Result<ExitCode> {
    let runner = build_runner(policy, state_dir)?;
    let mut req = match build_request(request) {
        Ok(r) => r,
        Err(rej) => return Ok(print_rejection(&rej, json)),
    };
    // A Tier A run is the full program's, handed over before stdin is read.
    if !runner.has_tier_a() && runner.is_tier_a(&req) {
        return exec_full();
    }
    let stdin = pass_stdin.source(&mut req.stdin_stream, &mut req.stdin_limit_bytes)?;
    run_request(&runner, RunRequest::Process(&req), json, stdin)
}

/// Runs `req` through the local daemon when one with this runner's identity answers (see
/// `daemon`), else in process; prints the program's output as it arrives (unless
/// `--json`, which prints the outcome at the end) and then the outcome's notes, and
/// returns the exit status that mirrors the program.
///
/// With `stdin` (`--stdin`; the request has `stdin_stream` set), the run's stdin is this
/// process's, streamed to the program as it arrives; a daemon that does not take the run
/// has read none of it.
pub fn run_request(
    runner: &Runner,
    req: RunRequest<'_>,
    json: bool,
    mut stdin: Option<tierbox_runner::StdinSource>,
) -> Result<ExitCode> {
    progress::install();
    let mut live = (!json).then(|| {
        live::Live::new(
            std::io::stdout().is_terminal(),
            std::io::stderr().is_terminal(),
        )
    });
    let via = if daemon::enabled() {
        let socket = daemon::socket_path(&runner.options().state_dir);
        match daemon::hand_off(runner, req, &socket, live.as_mut(), &mut stdin) {
            daemon::Handoff::Ran(reply) => {
                finish(live);
                return print_daemon_reply(reply, json, runner.policy());
            }
            daemon::Handoff::Interrupted(sig) => {
                finish(live);
                return Ok(interrupted(sig));
            }
            daemon::Handoff::NotUsed(why) => Via::InProcess(Some(why)),
        }
    } else {
        Via::InProcess(None)
    };
    let (events, output) = match live {
        Some(_) => {
            let (tx, rx) = tokio::sync::mpsc::channel(live::LIVE_EVENTS);
            (Some(tx), Some(rx))
        }
        None => (None, None),
    };
    let run = async {
        match stdin {
            Some(stdin) => runner.execute_with_stdin(req, stdin, events).await,
            None => runner.execute(req, events).await,
        }
    };
    run_and_print_via(run, output, json, &via, live, runner.policy())
}

/// Drives a run to its outcome (or a termination signal), prints it, and returns the exit
/// status that mirrors the child.
fn run_and_print_via(
    run: impl std::future::Future<Output = std::result::Result<tierbox_runner::Outcome, RunError>>,
    mut output: Option<tokio::sync::mpsc::Receiver<tierbox_runner::OutputEvent>>,
    json: bool,
    via: &Via,
    mut live: Option<live::Live>,
    policy: &Policy,
) -> Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = rt.block_on(async {
        // The run's output goes to the printer as it arrives (which never blocks: it
        // prints on a thread of its own).
        let run = async {
            tokio::pin!(run);
            loop {
                tokio::select! {
                    biased;
                    r = &mut run => break r,
                    Some(event) = next_event(&mut output) => {
                        if let Some(live) = live.as_mut() {
                            live.print(event);
                        }
                    }
                }
            }
        };
        // SIGINT, SIGTERM or SIGHUP to the CLI drops the run's future, whose guard kills
        // and reaps the whole sandboxed tree (or stops the WASM guest) before we exit.
        tokio::select! {
            r = run => Ok(r),
            sig = termination_signal() => Err(sig),
        }
    });
    // The run is over (its outcome, attestation and audit record are done). A Tier A
    // compilation still going after the run's deadline is abandoned, not waited for:
    // dropping the runtime would wait for it.
    rt.shutdown_background();
    // What the run sent just before it ended is printed too.
    if let (Some(output), Some(live)) = (output.as_mut(), live.as_mut()) {
        while let Ok(event) = output.try_recv() {
            live.print(event);
        }
    }
    finish(live);
    let result = match result {
        Ok(r) => r,
        Err(sig) => return Ok(interrupted(sig)),
    };
    match result {
        Ok(outcome) => print_outcome(&outcome, json, via, policy),
        Err(RunError::Rejected(rej)) => Ok(print_rejection(&rej, json)),
        Err(e @ RunError::Audit(_)) => {
            Ok(print_run_failure("audit.unavailable", &e.to_string(), json))
        }
        Err(e) => Ok(print_run_failure("run.failed", &e.to_string(), json)),
    }
}

/// The next event of a run's output, or never when it has none.
async fn next_event(
    output: &mut Option<tokio::sync::mpsc::Receiver<tierbox_runner::OutputEvent>>,
) -> Option<tierbox_runner::OutputEvent> {
    match output {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}
