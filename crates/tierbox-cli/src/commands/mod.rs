//! The commands: [`dispatch`] hands each parsed command line to the module of its
//! command, one per command group; what they share (the policy loaded, the runner built
//! from `--policy`, `--workspace` and `--state-dir`) is here.

mod attach;
mod check;
mod daemon;
mod explain;
mod policy;
mod proxy;
mod run;
mod serve;
mod term;
mod wasm;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use tierbox_policy::Policy;
use tierbox_runner::{RunOptions, Runner};

use check::cmd_check;
use run::cmd_run;
pub use run::start_run_supervisor;

use crate::cli::{Cli, Command, PolicyArgs};
use crate::request::StdinFlags;
use crate::{attest, changes, doctor, exec_full, new_runner};

/// What `tierbox` runs itself: `run` and `check`; every other command is handed to
/// `tierbox-full` ([`exec_full`]).
pub fn front(command: Command) -> Result<ExitCode> {
    match command {
        Command::Run {
            policy,
            request,
            json,
            stdin,
            stdin_limit,
            state_dir,
            tty,
            detach_keys,
            ..
        } => {
            let stdin = StdinFlags {
                pass: stdin,
                limit: stdin_limit,
            };
            let tty = tty.then_some(run::Tty { detach_keys });
            cmd_run(&policy, request, json, stdin, state_dir, tty)
        }
        Command::Check {
            policy,
            request,
            json,
        } => cmd_check(&policy, request, json),
        _ => exec_full(),
    }
}

/// Runs the parsed command: every command in `tierbox-full`.
pub fn dispatch(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        command @ (Command::Run { .. } | Command::Check { .. }) => front(command),
        Command::Daemon { action } => daemon::cmd_daemon(action),
        Command::Ps { state_dir, json } => attach::cmd_ps(state_dir, json),
        Command::Attach {
            id,
            view,
            take_over,
            state_dir,
            detach_keys,
        } => {
            let join = match (view, take_over) {
                (true, _) => attach::Join::View,
                (false, true) => attach::Join::TakeOver,
                (false, false) => attach::Join::Control,
            };
            attach::cmd_attach(&id, join, state_dir, detach_keys.as_deref())
        }
        Command::Schema => {
            println!(
                "{}",
                serde_json::to_string_pretty(&tierbox_policy::schema::tool_schemas())?
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Doctor { json, policy: None } => doctor::run(json),
        Command::Doctor {
            json,
            policy: Some(path),
        } => doctor::run_with_policy(
            json,
            &load_policy(Some(&path))?,
            &path.display().to_string(),
        ),
        Command::Wasm { action } => wasm::cmd_wasm(action),
        Command::Proxy {
            policy,
            listen,
            ca_out,
        } => proxy::cmd_proxy(policy.as_deref(), listen, ca_out.as_deref()),
        Command::Serve {
            policy,
            mcp,
            http,
            unix,
            token_file,
            dangerously_allow_remote,
            max_concurrent,
            queue,
            ws_origins,
            ws_ticket_ttl_ms,
            state_dir,
        } => {
            let runner = build_runner(&policy, state_dir)?;
            let transport = serve::transport(mcp, http, unix, dangerously_allow_remote)?;
            let ws = serve::ws_config(&ws_origins, ws_ticket_ttl_ms)?;
            serve::cmd_serve(runner, transport, token_file, max_concurrent, queue, ws)
        }
        Command::Attest { action } => attest::run_attest(action),
        Command::Audit { action } => attest::run_audit(action),
        Command::Changes { action } => changes::run(action),
        Command::Explain {
            policy,
            run_id,
            log,
            outcome,
            path,
            op,
            host,
            request,
            socket,
        } => explain::cmd_explain(
            &policy,
            run_id,
            log,
            outcome,
            path,
            op,
            (host, request, socket),
        ),
        Command::Policy { action } => policy::cmd_policy(action),
    }
}

pub fn load_policy(path: Option<&Path>) -> Result<Policy> {
    let Some(path) = path else {
        return Ok(Policy::builtin_default());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading policy {}", path.display()))?;
    let parsed = if path.extension().is_some_and(|e| e == "json") {
        Policy::from_json(&text)
    } else {
        Policy::from_toml(&text)
    };
    parsed.with_context(|| format!("policy {}", path.display()))
}

pub fn build_runner(args: &PolicyArgs, state_dir: Option<PathBuf>) -> Result<Runner> {
    let policy = load_policy(args.policy.as_deref())?;
    let mut runner = new_runner(policy);
    if let Some(ws) = &args.workspace {
        runner = runner.with_workspace(ws.clone());
    }
    let mut options = RunOptions::default();
    if let Some(dir) = state_dir {
        options.state_dir = dir;
    }
    // Refused before anything is read from it or written to it when another user could
    // have prepared it.
    tierbox_runner::host::ensure_state_dir(&options.state_dir)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    // A one-shot process reuses the last positive user-namespace probe kept there.
    tierbox_runner::host::set_probe_state_dir(&options.state_dir);
    Ok(runner.with_options(options))
}
