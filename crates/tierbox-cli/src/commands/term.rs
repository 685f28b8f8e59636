//! `tierbox run -t`: the program on a terminal of its own, like `docker run -it`: this
//! terminal in raw mode (when stdin is one) passes every key through, a resize of it is
//! the program's (`SIGWINCH`), and the exit status mirrors the program's. Without a
//! daemon the term lives in this process: it ends with the command and cannot be
//! detached, which is said on stderr at the start.

use std::process::ExitCode;

use anyhow::{Context, Result};
use tierbox_runner::background::{BackgroundError, BackgroundState, BackgroundStatus};
use tierbox_runner::term::{TermError, TermManager};
use tierbox_runner::{RunError, Runner};

use crate::print::{print_rejection, print_run_failure};
use crate::term_io::{
    Ended, OUTPUT_CLOSED_EXIT, RawMode, exit_status, own_size, report_lost, show, stdin_chunks,
    window_changes,
};

/// How [`drive`] ended.
enum Driven {
    /// The term ended: its status, and the bytes of its output that were not shown.
    Ended(Box<BackgroundStatus>, u64),
    /// This process's stdout closed; the bytes not shown until then.
    OutputClosed(u64),
}

/// Longest one read of the term's output waits, in milliseconds: how soon the end of the
/// program is noticed when it prints nothing more.
const OUTPUT_WAIT_MS: u64 = 200;

/// Runs `req` (made a term of this command's life) on a terminal and returns the exit
/// status that mirrors the program: its code, or 128 + the signal that killed it.
pub fn run_in_terminal(
    runner: &Runner,
    mut req: tierbox_policy::ProcessRunRequest,
    json: bool,
) -> Result<ExitCode> {
    req.background = true;
    req.lifetime = Some(tierbox_policy::Lifetime::RunOwned);
    eprintln!(
        "tierbox: the program runs on a terminal of its own until it ends; without a daemon it cannot be detached"
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let owner = tierbox_runner::supervisor::local_owner();
    let raw = RawMode::enter();
    let ended = rt.block_on(async {
        let started = runner.start_term(&owner, &req, own_size()).await;
        let result = match started {
            Ok(handle) => drive(runner.terms(), &owner, &handle.status.id).await,
            Err(TermError::Background(BackgroundError::ExitedDuringStartup(handle))) => {
                let mut out = std::io::stdout();
                let bytes = tierbox_runner::wire::decode(
                    &handle.startup_stdout,
                    handle.startup_stdout_base64.as_deref(),
                )
                .unwrap_or_default();
                // What the startup window kept of a program that ended in it; the rest
                // is counted as not shown.
                let lost = handle
                    .status
                    .stdout_bytes
                    .saturating_sub(bytes.len() as u64);
                match show(&mut out, &bytes) {
                    true => Ok(Driven::Ended(Box::new(handle.status), lost)),
                    false => Ok(Driven::OutputClosed(lost)),
                }
            }
            Err(e) => Err(e),
        };
        runner.terms().end_owner(&owner).await;
        result
    });
    drop(raw);
    match ended {
        Ok(Driven::Ended(status, lost)) => {
            report_lost(lost);
            Ok(exit_status(&Ended::from(&*status)))
        }
        Ok(Driven::OutputClosed(lost)) => {
            report_lost(lost);
            eprintln!("tierbox: the output's reader went away; the term was ended");
            Ok(ExitCode::from(OUTPUT_CLOSED_EXIT))
        }
        Err(TermError::Background(BackgroundError::Run(RunError::Rejected(r)))) => {
            Ok(print_rejection(&r, json))
        }
        Err(e) => Ok(print_run_failure(e.code(), &e.to_string(), json)),
    }
}

/// Copies stdin to the term and the term's output to stdout, follows this terminal's
/// size, until the term ends (its final status) or stdout closes; with the bytes of the
/// output that left the ring unshown.
async fn drive(terms: &TermManager, owner: &str, id: &str) -> Result<Driven, TermError> {
    let mut input = stdin_chunks();
    let mut winch = window_changes();
    let mut offset = 0;
    let mut lost = 0;
    let mut out = std::io::stdout();
    let mut input_open = true;
    loop {
        tokio::select! {
            chunk = terms.output(owner, id, offset, 64 * 1024, OUTPUT_WAIT_MS) => {
                let chunk = chunk?;
                offset = chunk.next_offset;
                lost += chunk.missed_bytes;
                let bytes = chunk.bytes().unwrap_or_default();
                if !show(&mut out, &bytes) {
                    return Ok(Driven::OutputClosed(lost));
                }
                if bytes.is_empty() {
                    let status = terms.status(owner, id).await?;
                    if status.state != BackgroundState::Running {
                        return Ok(Driven::Ended(Box::new(status), lost));
                    }
                }
            }
            Some(data) = input.recv(), if input_open => {
                let sent = match data {
                    Some(bytes) => terms.write(owner, id, &bytes).await.map(drop),
                    None => {
                        input_open = false;
                        terms.close_input(owner, id).await
                    }
                };
                // An ended term's status is read on the next round.
                if let Err(e) = sent
                    && e.code() != "term.ended"
                {
                    return Err(e);
                }
            }
            Some(()) = async { winch.as_mut()?.recv().await } => {
                let _ = terms.resize(owner, id, own_size());
            }
        }
    }
}
