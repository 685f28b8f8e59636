//! `tierbox explain`: why a run was refused what it was, or whether the policy allows a
//! path or a host, and which rule decides.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use super::build_runner;
use crate::cli::PolicyArgs;
use crate::explain;

pub fn cmd_explain(
    policy: &PolicyArgs,
    run_id: Option<String>,
    log: Option<PathBuf>,
    outcome: Option<PathBuf>,
    path: Option<PathBuf>,
    op: Option<explain::Op>,
    (host, request, socket): (Option<String>, Option<String>, Option<PathBuf>),
) -> Result<ExitCode> {
    let runner = build_runner(policy, None)?;
    if let Some(socket) = socket {
        return explain::socket(runner.policy(), &socket);
    }
    match (run_id, outcome, path, host) {
        (Some(id), ..) => match explain::log_path(log, runner.policy()) {
            Some(log) => explain::run_id(&log, &id),
            None => {
                anyhow::bail!("the policy has no audit.log: give the log with --log FILE")
            }
        },
        (_, Some(file), ..) => explain::outcome(&file),
        (_, _, Some(path), _) => explain::path(&runner, &path, op.unwrap_or(explain::Op::Read)),
        (_, _, _, Some(host)) => explain::host(runner.policy(), &host, request.as_deref()),
        _ => anyhow::bail!("give a RUN_ID, --outcome, --path, --host or --socket"),
    }
}
