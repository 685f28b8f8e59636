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
mod wasm;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::OnceLock;

use anyhow::{Context, Result};
use tierbox_policy::{Policy, Rejection};
use tierbox_runner::{Prepared, RunError, RunOptions, RunRequest, Runner};

use cli::{Cli, Command, DaemonAction, PolicyAction, PolicyArgs, RequestArgs, WasmAction};
use print::{
    Via, finish, interrupted, print_check, print_daemon_reply, print_outcome, print_refusal,
    print_rejection, print_run_failure, print_wasm_plan,
};
use request::{StdinFlags, build_request};

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
    if !matches!(cli.command, Command::Serve { .. } | Command::Proxy { .. }) {
        tierbox_runner::host::default_sigpipe();
    }
    exit_with(dispatch(cli))
}

/// `tierbox`: `run` and `check` here, everything else by `tierbox-full` (crate docs).
pub fn main() -> ExitCode {
    // `run` forks its watchdog first thing, before the arguments are parsed: every page
    // the process has written when it forks is copied again on its next write (measured:
    // forked after parsing, ~100 page copies and 0.5 ms of CPU per cold run). `cmd_run`'s
    // own call is then a no-op.
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
    let result = match cli.command {
        Command::Run {
            policy,
            request,
            json,
            stdin,
            stdin_limit,
            state_dir,
            ..
        } => {
            tierbox_runner::host::default_sigpipe();
            let stdin = StdinFlags {
                pass: stdin,
                limit: stdin_limit,
            };
            cmd_run(&policy, request, json, stdin, state_dir)
        }
        Command::Check {
            policy,
            request,
            json,
        } => {
            tierbox_runner::host::default_sigpipe();
            cmd_check(&policy, request, json)
        }
        _ => exec_full(),
    };
    exit_with(result)
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
        } => (*json, false),
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

fn dispatch(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Run {
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
            cmd_run(&policy, request, json, stdin, state_dir)
        }
        Command::Daemon { action } => cmd_daemon(action),
        Command::Check {
            policy,
            request,
            json,
        } => cmd_check(&policy, request, json),
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
        Command::Wasm { action } => match action {
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
        },
        Command::Proxy { policy, listen } => cmd_proxy(policy.as_deref(), listen),
        Command::Serve {
            policy,
            mcp,
            http,
            unix,
            token_file,
            dangerously_allow_remote,
            max_concurrent,
            queue,
            state_dir,
        } => {
            let runner = build_runner(&policy, state_dir)?;
            let transport = match (mcp, http, unix) {
                (true, _, _) => Transport::Mcp,
                (_, Some(addr), _) => Transport::Http(tierbox_server::serve::Bind::Tcp {
                    addr,
                    allow_remote: dangerously_allow_remote,
                }),
                (_, _, Some(path)) => Transport::Http(tierbox_server::serve::Bind::Unix(path)),
                _ => anyhow::bail!("give one of --mcp, --http ADDR, --unix PATH"),
            };
            cmd_serve(runner, transport, token_file, max_concurrent, queue)
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
        } => {
            let runner = build_runner(&policy, None)?;
            match (run_id, outcome, path, host) {
                (Some(id), ..) => match explain::log_path(log, runner.policy()) {
                    Some(log) => explain::run_id(&log, &id),
                    None => {
                        anyhow::bail!("the policy has no audit.log: give the log with --log FILE")
                    }
                },
                (_, Some(file), ..) => explain::outcome(&file),
                (_, _, Some(path), _) => {
                    explain::path(&runner, &path, op.unwrap_or(explain::Op::Read))
                }
                (_, _, _, Some(host)) => explain::host(runner.policy(), &host),
                _ => anyhow::bail!("give a RUN_ID, --outcome, --path or --host"),
            }
        }
        Command::Policy {
            action: PolicyAction::Init,
        } => {
            print!("{}", tierbox_policy::policy::BUILTIN_DEFAULT_POLICY_TOML);
            Ok(ExitCode::SUCCESS)
        }
        Command::Policy {
            action: PolicyAction::Check { file, workspace },
        } => match load_policy(Some(&file)) {
            Ok(p) => Ok(check_policy_grants(&file, p, workspace)),
            Err(e) => {
                eprintln!("tierbox: {e:#}");
                eprintln!(
                    "hint: docs/policy.md describes every field; `tierbox policy init` prints the built-in policy to start from"
                );
                Ok(ExitCode::from(1))
            }
        },
    }
}

/// `policy check`: the policy loaded; its grants resolved in the workspace and put to
/// every backend. Exit 1 when the grants are refused outright, or when the backend the
/// policy names for Tier C would refuse them at launch.
fn check_policy_grants(file: &Path, policy: Policy, workspace: Option<PathBuf>) -> ExitCode {
    let version = policy.version;
    let tier_c_backend = policy.tier.backend.to_string();
    let mut runner = new_runner(policy);
    if let Some(ws) = workspace {
        runner = runner.with_workspace(ws);
    }
    let plan = match runner.check_grants() {
        Ok(plan) => plan,
        Err(rej @ Rejection::GrantRefused { .. }) => {
            eprintln!(
                "tierbox: rejected [{}]: policy {}: {rej}",
                rej.code(),
                file.display()
            );
            eprintln!("hint: docs/policy.md lists what each filesystem key may name");
            return ExitCode::from(1);
        }
        Err(rej) => {
            println!("ok: {} (version {version})", file.display());
            println!(
                "note: the grants were not checked in {}: [{}] {rej}; pass --workspace",
                runner.workspace().display(),
                rej.code()
            );
            return ExitCode::SUCCESS;
        }
    };
    let findings = tierbox_runner::host::grant_findings(&plan);
    let refused = findings
        .iter()
        .any(|f| f.refuses && f.backend == tier_c_backend);
    if refused {
        println!("refused: {} (version {version})", file.display());
    } else {
        println!("ok: {} (version {version})", file.display());
    }
    println!("grants    checked in {}", plan.workspace.display());
    for f in &findings {
        preflight::print_finding(f);
    }
    ExitCode::from(u8::from(refused))
}

fn load_policy(path: Option<&Path>) -> Result<Policy> {
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

fn build_runner(args: &PolicyArgs, state_dir: Option<PathBuf>) -> Result<Runner> {
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

fn cmd_check(policy: &PolicyArgs, request: RequestArgs, json: bool) -> Result<ExitCode> {
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

fn cmd_run(
    policy: &PolicyArgs,
    request: RequestArgs,
    json: bool,
    pass_stdin: StdinFlags,
    state_dir: Option<PathBuf>,
) -> Result<ExitCode> {
    start_run_supervisor();
    // One run, then exit: network namespaces made ahead of time would only cost CPU.
    tierbox_runner::host::set_network_namespace_pool(false);
    let done = run_once(policy, request, json, pass_stdin, state_dir);
    // The runner and its run are gone: when they left nothing, the watchdog need not
    // sweep after this process.
    tierbox_runner::host::release_watchdog();
    done
}

/// Hardens this process and, before any thread starts, forks its watchdog: if the process
/// is killed outright (SIGKILL), it kills what the run left in its cgroups and
/// containers, as `serve` has. A second call is a no-op.
fn start_run_supervisor() {
    harden_supervisor();
    if let Err(e) = tierbox_runner::host::start_watchdog() {
        eprintln!("tierbox: warning: no watchdog: {e}");
    }
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
fn run_request(
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

fn cmd_daemon(action: DaemonAction) -> Result<ExitCode> {
    let state =
        |dir: Option<PathBuf>| dir.unwrap_or_else(tierbox_runner::supervisor::default_state_dir);
    match action {
        DaemonAction::Start { policy, state_dir } => {
            let mut args: Vec<std::ffi::OsString> = Vec::new();
            if let Some(p) = &policy.policy {
                args.push("--policy".into());
                args.push(
                    std::fs::canonicalize(p)
                        .unwrap_or_else(|_| p.clone())
                        .into(),
                );
            }
            if let Some(w) = &policy.workspace {
                args.push("--workspace".into());
                args.push(
                    std::fs::canonicalize(w)
                        .unwrap_or_else(|_| w.clone())
                        .into(),
                );
            }
            if let Some(d) = &state_dir {
                args.push("--state-dir".into());
                args.push(d.into());
            }
            // The policy must load here, with the error a run would give.
            load_policy(policy.policy.as_deref())?;
            let (pid, socket) = daemon::start(&args, &state(state_dir))?;
            println!(
                "tierbox: daemon started (pid {pid}) on {}",
                socket.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        DaemonAction::Stop { state_dir } => {
            let pid = daemon::stop(&state(state_dir))?;
            println!("tierbox: daemon (pid {pid}) stopped");
            Ok(ExitCode::SUCCESS)
        }
        DaemonAction::Status { state_dir, json } => {
            let dir = state(state_dir);
            let socket = daemon::socket_path(&dir);
            match daemon::identity(&socket, &dir) {
                Ok((pid, id)) => {
                    if json {
                        println!(
                            "{}",
                            serde_json::json!({ "running": true, "pid": pid, "socket": socket, "identity": id })
                        );
                    } else {
                        println!(
                            "tierbox: daemon running (pid {pid}) on {}",
                            socket.display()
                        );
                        println!("  workspace  {}", id.workspace.display());
                        println!("  state dir  {}", id.state_dir.display());
                        println!("  policy     sha256:{}", id.policy_digest);
                        println!("  version    {}", id.version);
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    if json {
                        println!(
                            "{}",
                            serde_json::json!({ "running": false, "socket": socket, "reason": format!("{e:#}") })
                        );
                    } else {
                        println!("tierbox: no daemon on {}: {e:#}", socket.display());
                    }
                    Ok(ExitCode::from(1))
                }
            }
        }
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

enum Transport {
    Mcp,
    Http(tierbox_server::serve::Bind),
}

fn cmd_serve(
    runner: Runner,
    transport: Transport,
    token_file: Option<PathBuf>,
    max_concurrent: usize,
    queue: usize,
) -> Result<ExitCode> {
    use tierbox_server::serve;
    harden_supervisor();
    // Fail at start, not at the first call: the workspace and the policy's grants as a run
    // resolves them, then the state directory, the signing key and the audit log.
    if let Err(rej) = runner.check_grants() {
        anyhow::bail!(
            "cannot serve workspace {}: {} [{}]",
            runner.workspace().display(),
            rej,
            rej.code()
        );
    }
    runner
        .auditor()
        .map_err(|e| anyhow::anyhow!("cannot serve: {e}"))?;
    // Before any thread starts: a process that kills what this server's runs leave in
    // their cgroups if the server is killed outright (SIGKILL).
    if let Err(e) = tierbox_runner::host::start_watchdog() {
        eprintln!("tierbox: warning: no watchdog: {e}");
    }
    // A long-lived supervisor keeps per-run resources (cgroups, directories) warm between
    // runs; they are destroyed when it exits.
    tierbox_runner::host::set_pooling(true);
    let state_dir = runner.options().state_dir.clone();
    let service = tierbox_server::service::Service::new(runner);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let shutdown = async {
        let sig = termination_signal().await;
        eprintln!("tierbox: received signal {sig}; shutting down");
    };
    let result = match transport {
        Transport::Mcp => rt.block_on(serve::serve_mcp_stdio(service, shutdown)),
        Transport::Http(bind) => (|| {
            serve::check_bind(&bind)?;
            if let serve::Bind::Tcp {
                addr,
                allow_remote: true,
            } = &bind
                && !addr.ip().is_loopback()
            {
                eprintln!(
                    "tierbox: WARNING: serving on non-loopback {addr}: anyone who can reach it \
                     with the token can run commands on this host"
                );
            }
            let token = serve::load_token(token_file.as_deref(), &state_dir)?;
            if let Some(path) = &token.created {
                eprintln!(
                    "tierbox: generated the HTTP bearer token (shown once; also in {}):\n{}",
                    path.display(),
                    token.value
                );
            }
            let config = tierbox_server::http::HttpConfig {
                token: token.value,
                max_concurrent,
                queue,
            };
            rt.block_on(serve::serve_http(service, bind, config, shutdown, |at| {
                eprintln!("tierbox: serving the HTTP API on {at} (OpenAPI: /v1/openapi.json)");
            }))
        })(),
    };
    // Every sandbox has ended: destroy the idle slots (their cgroups and directories).
    tierbox_runner::host::set_pooling(false);
    result?;
    Ok(ExitCode::SUCCESS)
}

fn cmd_proxy(policy: Option<&Path>, listen: std::net::SocketAddr) -> Result<ExitCode> {
    let policy = load_policy(policy)?;
    let allow = policy
        .egress
        .allow
        .iter()
        .map(|a| tierbox_policy::hosts::HostPattern::parse(a).map_err(anyhow::Error::msg))
        .collect::<Result<Vec<_>>>()?;
    if allow.is_empty() {
        anyhow::bail!("the policy's egress.allow is empty: the proxy would deny everything");
    }
    let listener =
        std::net::TcpListener::bind(listen).with_context(|| format!("binding {listen}"))?;
    if !listen.ip().is_loopback() {
        eprintln!(
            "tierbox: WARNING: the egress proxy listens on {listen}, which is not a loopback \
             address: it has no authentication, so anyone who can reach that address can \
             use it to reach the policy's allowed hosts through this machine"
        );
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let log = rt.block_on(async {
        let config = tierbox_egress::ProxyConfig::new(allow, policy.egress.resolve.clone());
        let proxy = tierbox_egress::Proxy::start(listener, config)?;
        eprintln!(
            "tierbox: egress proxy on {} (HTTP, CONNECT and SOCKS5); stop with Ctrl-C",
            proxy.local_addr()?
        );
        termination_signal().await;
        Ok::<_, std::io::Error>(proxy.finish().await)
    })?;
    println!("{}", serde_json::to_string_pretty(&log)?);
    Ok(ExitCode::SUCCESS)
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
