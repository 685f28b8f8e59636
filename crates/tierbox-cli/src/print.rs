//! What a command prints at its end, and the exit status that goes with it: an outcome
//! (rendered, or JSON with `via`), a check's plan, a rejection (exit 125), a run that
//! could not be carried out (126), a run ended by a signal (128 + the signal).

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Result;
use tierbox_policy::{Policy, Rejection};

use crate::report::{self, EXIT_REJECTED};
use crate::{daemon, live, preflight, render};

pub fn print_wasm_plan(plan: &tierbox_policy::wasm::WasmPlan, json: bool) -> Result<ExitCode> {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "wasm_plan": plan }))?
        );
    } else {
        render::print_wasm_plan(plan);
    }
    Ok(ExitCode::SUCCESS)
}

pub fn print_rejection(r: &Rejection, json: bool) -> ExitCode {
    print_refusal(r.code(), &r.to_string(), json)
}

/// A rejection by its code and message (one from a daemon arrives as just these): the
/// `tierbox: rejected` line, and a hint or the error object; exit 125.
pub fn print_refusal(code: &str, message: &str, json: bool) -> ExitCode {
    let hint = match Rejection::fix_for(code) {
        Some(fix) => format!("nothing was run; {fix}"),
        None => "nothing was run; see `tierbox check --json` for the request and docs/policy.md for the rule".to_owned(),
    };
    report::fail(report::Failure::Rejected, code, message, &hint, json)
}

/// A run that could not be carried out (`code`: `run.failed` when the sandbox could not
/// be set up, `audit.unavailable` when the attestation could not be made, or the code a
/// daemon gave): the `tierbox: error` line, and a hint or the error object; exit 126.
pub fn print_run_failure(code: &str, message: &str, json: bool) -> ExitCode {
    report::fail(
        report::Failure::Error,
        code,
        message,
        "`tierbox doctor` shows what this host can enforce",
        json,
    )
}

/// Prints a check's answer (`{plan, preflight}` or `{wasm_plan}`, from the daemon or
/// computed here: the same JSON either way) as JSON or text; exit 125 when no tier can
/// run the plan here or the backend that would run it refuses its grants.
pub fn print_check(mut answer: serde_json::Value, via: &Via, json: bool) -> Result<ExitCode> {
    if let Some(plan) = answer.get("wasm_plan") {
        let plan: tierbox_policy::wasm::WasmPlan = serde_json::from_value(plan.clone())?;
        return print_wasm_plan(&plan, json);
    }
    let pre = &answer["preflight"];
    let refused = pre["refused_at_launch"] == true || pre["tier"].is_null();
    if refused {
        // Exit 125 is said on stderr, as every status tierbox reserves is.
        match pre["tier_rejected"]["code"].as_str() {
            Some(code) => eprintln!(
                "tierbox: rejected [{code}]: {}",
                pre["tier_rejected"]["message"].as_str().unwrap_or("")
            ),
            None => eprintln!(
                "tierbox: rejected: the {} backend would refuse the grants at launch (the findings below)",
                pre["backend"].as_str().unwrap_or("")
            ),
        }
    }
    if json {
        via.annotate(&mut answer);
        println!("{}", serde_json::to_string_pretty(&answer)?);
    } else {
        let plan: tierbox_policy::Plan = serde_json::from_value(answer["plan"].clone())?;
        render::print_plan(&plan);
        preflight::print_json(pre);
    }
    Ok(if refused {
        ExitCode::from(EXIT_REJECTED)
    } else {
        ExitCode::SUCCESS
    })
}

/// Waits until the live output printed so far is out, when there is any.
pub fn finish(live: Option<live::Live>) {
    if let Some(live) = live {
        live.finish();
    }
}

/// The exit status of a run ended by a termination signal to the CLI, after saying so
/// (with `--json`, also as the error object `run.interrupted`).
pub fn interrupted(sig: i32) -> ExitCode {
    let message = format!("received signal {sig}; the run was killed");
    eprintln!("tierbox: {message}");
    if report::settings().json {
        println!("{}", report::error_json("run.interrupted", &message));
    }
    ExitCode::from(u8::try_from(128 + sig).unwrap_or(1))
}

/// Which process ran a request, for `--json` (`via`, and why a daemon found was not used).
pub enum Via {
    Daemon,
    InProcess(Option<String>),
}

impl Via {
    fn annotate(&self, outcome: &mut serde_json::Value) {
        match self {
            Self::Daemon => outcome["via"] = "daemon".into(),
            Self::InProcess(why) => {
                outcome["via"] = "in_process".into();
                if let Some(why) = why {
                    outcome["daemon"] = why.as_str().into();
                }
            }
        }
    }
}

/// Prints what the daemon answered as a run in process would have been printed.
pub fn print_daemon_reply(
    reply: std::result::Result<Box<tierbox_runner::Outcome>, daemon::ApiError>,
    json: bool,
    policy: &Policy,
) -> Result<ExitCode> {
    match reply {
        Ok(outcome) => print_outcome(&outcome, json, &Via::Daemon, policy),
        Err(e) if Rejection::ALL_CODES.contains(&e.code.as_str()) => {
            Ok(print_refusal(&e.code, &e.message, json))
        }
        Err(e) => Ok(print_run_failure(&e.code, &e.message, json)),
    }
}

/// Prints an outcome (JSON with `via`, or rendered) and returns the exit status it mirrors.
pub fn print_outcome(
    outcome: &tierbox_runner::Outcome,
    json: bool,
    via: &Via,
    policy: &Policy,
) -> Result<ExitCode> {
    let stderr_tty = std::io::stderr().is_terminal();
    if report::show_tier_line(
        report::settings().verbose,
        stderr_tty && !json,
        policy,
        &outcome.enforcement,
    ) {
        eprintln!(
            "tierbox: {}",
            report::tier_line(outcome.tier, &outcome.enforcement)
        );
    }
    if json {
        let mut v = serde_json::to_value(outcome)?;
        via.annotate(&mut v);
        println!("{}", serde_json::to_string_pretty(&v)?);
        // How the run ended when the program did not end it, on stderr as without
        // --json: the line that tells tierbox's exit statuses from the program's.
        render::print_ending(outcome, policy, stderr_tty);
    } else {
        // The output was printed as it arrived (`live`): what is left is what the run's
        // end says about it.
        render::print_notes(outcome, stderr_tty, policy);
    }
    for warning in &outcome.warnings {
        eprintln!("tierbox: warning: {warning}");
    }
    if let Some(e) = &outcome.audit_error {
        eprintln!("tierbox: the run is not attested: {e}");
    }
    Ok(ExitCode::from(
        u8::try_from(outcome.exit_status()).unwrap_or(1),
    ))
}
