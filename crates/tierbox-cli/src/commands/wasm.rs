//! `tierbox wasm`: run or check a `wasm_run` request (Tier A); fetch the runtimes.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use tierbox_runner::RunRequest;

use super::build_runner;
use super::run::run_request;
use crate::cli::{PolicyArgs, WasmAction};
use crate::print::{print_rejection, print_wasm_plan};
use crate::request::StdinFlags;
use crate::wasm;

pub fn cmd_wasm(action: WasmAction) -> Result<ExitCode> {
    match action {
        WasmAction::Run {
            policy,
            request,
            json,
            stdin,
            stdin_limit,
            state_dir,
            ..
        } => {
            let stdin = StdinFlags {
                pass: stdin,
                limit: stdin_limit,
            };
            cmd_wasm_run(&policy, request, json, stdin, state_dir)
        }
        WasmAction::Check {
            policy,
            request,
            json,
        } => {
            let runner = build_runner(&policy, None)?;
            match wasm::build_request(request).and_then(|r| runner.check_wasm(&r)) {
                Ok(plan) => print_wasm_plan(&plan, json),
                Err(rej) => Ok(print_rejection(&rej, json)),
            }
        }
        WasmAction::FetchRuntimes { dir, python } => wasm::fetch_runtimes(dir, &python),
    }
}

fn cmd_wasm_run(
    policy: &PolicyArgs,
    request: wasm::WasmRequestArgs,
    json: bool,
    pass_stdin: StdinFlags,
    state_dir: Option<PathBuf>,
) -> Result<ExitCode> {
    let runner = build_runner(policy, state_dir)?;
    let mut req = match wasm::build_request(request) {
        Ok(r) => r,
        Err(rej) => return Ok(print_rejection(&rej, json)),
    };
    let stdin = pass_stdin.source(&mut req.stdin_stream, &mut req.stdin_limit_bytes)?;
    run_request(&runner, RunRequest::Wasm(&req), json, stdin)
}
