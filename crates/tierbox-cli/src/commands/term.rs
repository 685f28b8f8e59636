//! `tierbox run -t`: the program on a terminal of its own, like `docker run -it`: this
//! terminal in raw mode (when stdin is one) passes every key through, a resize of it is
//! the program's (`SIGWINCH`), and the exit status mirrors the program's. Without a
//! daemon the term lives in this process: it ends with the command and cannot be
//! detached, which is said on stderr at the start.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, Result};
use tierbox_runner::background::{BackgroundError, BackgroundState, BackgroundStatus};
use tierbox_runner::term::{TermError, TermManager};
use tierbox_runner::{RunError, Runner};

use crate::print::{print_rejection, print_run_failure};
use crate::term_io::{Ended, RawMode, exit_status, own_size, stdin_chunks, window_changes};

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
                let bytes: &[u8] = &bytes;
                let _ = out.write_all(bytes).and_then(|()| out.flush());
                Ok(handle.status)
            }
            Err(e) => Err(e),
        };
        runner.terms().end_owner(&owner).await;
        result
    });
    drop(raw);
    match ended {
        Ok(status) => Ok(exit_status(&Ended::from(&status))),
        Err(TermError::Background(BackgroundError::Run(RunError::Rejected(r)))) => {
            Ok(print_rejection(&r, json))
        }
        Err(e) => Ok(print_run_failure(e.code(), &e.to_string(), json)),
    }
}

/// Copies stdin to the term and the term's output to stdout, follows this terminal's
/// size, until the term ends; its final status.
async fn drive(terms: &TermManager, owner: &str, id: &str) -> Result<BackgroundStatus, TermError> {
    let mut input = stdin_chunks();
    let mut winch = window_changes();
    let mut offset = 0;
    let mut out = std::io::stdout();
    let mut input_open = true;
    loop {
        tokio::select! {
            chunk = terms.output(owner, id, offset, 64 * 1024, OUTPUT_WAIT_MS) => {
                let chunk = chunk?;
                offset = chunk.next_offset;
                let bytes = chunk.bytes().unwrap_or_default();
                let _ = out.write_all(&bytes).and_then(|()| out.flush());
                if bytes.is_empty() {
                    let status = terms.status(owner, id).await?;
                    if status.state != BackgroundState::Running {
                        return Ok(status);
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
