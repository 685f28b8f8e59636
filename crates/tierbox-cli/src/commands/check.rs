//! `tierbox check`: a request validated and its plan printed, or its rejection; runs
//! nothing. The daemon's answer when one with this runner's identity answers.

use std::process::ExitCode;

use anyhow::Result;
use tierbox_policy::Rejection;
use tierbox_runner::{Prepared, RunRequest};

use super::build_runner;
use crate::cli::{PolicyArgs, RequestArgs};
use crate::daemon;
use crate::print::{Via, print_check, print_refusal, print_rejection};
use crate::request::build_request;

pub fn cmd_check(policy: &PolicyArgs, request: RequestArgs, json: bool) -> Result<ExitCode> {
    let runner = build_runner(policy, None)?;
    let req = match build_request(request) {
        Ok(r) => r,
        Err(rej) => return Ok(print_rejection(&rej, json)),
    };
    // The daemon's answer when one with this runner's identity answers; the same JSON
    // computed here otherwise.
    let mut via = Via::InProcess(None);
    if daemon::enabled() {
        let socket = daemon::socket_path(&runner.options().state_dir);
        match daemon::check(&runner, &req, &socket) {
            daemon::Checked::Answered(Ok(answer)) => {
                return print_check(answer, &Via::Daemon, json);
            }
            daemon::Checked::Answered(Err(e))
                if Rejection::ALL_CODES.contains(&e.code.as_str()) =>
            {
                return Ok(print_refusal(&e.code, &e.message, json));
            }
            daemon::Checked::Answered(Err(e)) => {
                via = Via::InProcess(Some(format!(
                    "the daemon answered [{}] {}",
                    e.code, e.message
                )));
            }
            daemon::Checked::NotUsed(why) => via = Via::InProcess(Some(why)),
        }
    }
    let answer = match runner.prepare(RunRequest::Process(&req)) {
        Ok(Prepared::Wasm(plan)) => serde_json::json!({ "wasm_plan": plan }),
        Ok(Prepared::Native(plan)) => serde_json::json!({
            "plan": plan,
            "preflight": tierbox_runner::host::Preflight::of(&plan).to_json(),
        }),
        Err(rej) => return Ok(print_rejection(&rej, json)),
    };
    print_check(answer, &via, json)
}
