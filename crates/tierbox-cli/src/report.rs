//! What tierbox says about itself, apart from the program's output: its reserved exit
//! statuses, the one `tierbox:` line each of its own failures prints on stderr (with
//! `--json`, also the typed error object on stdout), usage errors, and the line that
//! says which tier and backend ran.
//!
//! A program may exit with any status, these included: the `tierbox:` line on stderr is
//! what tells tierbox's own ending from the program's. README ("Exit status") lists them.

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::OnceLock;

use tierbox_policy::{Enforcement, Policy, Rejection, TierCBackend};

/// A Tier A guest stopped by a limit (fuel, memory, tables, instances), which has no
/// status of its own: `tierbox: limit hit: …`.
pub const EXIT_LIMIT: u8 = 122;
/// The sandbox itself failed during the run (its pid 1 died before reporting how the
/// program ended): `tierbox: sandbox pid 1 …`.
pub const EXIT_SANDBOX_FAILURE: u8 = 123;
/// The run's deadline passed and its processes were killed, the status `timeout(1)`
/// gives: `tierbox: timed out after …`. (The runner's outcome gives it; named here with
/// the others.)
#[cfg_attr(not(test), allow(dead_code))]
pub const EXIT_TIMEOUT: u8 = 124;
/// Tierbox refused the request or its command line, so nothing ran (as `env`, `nice` and
/// `timeout` use 125 for their own failures): `tierbox: rejected [CODE]: …` or
/// `tierbox: usage: …`.
pub const EXIT_REJECTED: u8 = 125;
/// Tierbox failed: the sandbox could not be set up or supervised, the policy or another
/// file could not be read: `tierbox: error: …`.
pub const EXIT_INTERNAL: u8 = 126;

/// Every reserved exit status with the start of the `tierbox:` line that comes with it
/// (README's table lists them).
#[cfg(test)]
pub const RESERVED: [(u8, &str); 6] = [
    (EXIT_LIMIT, "tierbox: limit hit: "),
    (EXIT_SANDBOX_FAILURE, "tierbox: sandbox "),
    (EXIT_TIMEOUT, "tierbox: timed out after "),
    (EXIT_REJECTED, "tierbox: rejected ["),
    (EXIT_REJECTED, "tierbox: usage: "),
    (EXIT_INTERNAL, "tierbox: error: "),
];

// The statuses the runner's outcome gives for the endings above.
const _: () = assert!(EXIT_LIMIT as i32 == tierbox_runner::LIMIT_EXIT_STATUS);
const _: () = assert!(EXIT_SANDBOX_FAILURE as i32 == tierbox_runner::SANDBOX_FAILURE_EXIT_STATUS);

/// The code of a usage error in `--json`'s error object.
pub const USAGE_CODE: &str = "cli.usage";

/// How this invocation reports: set once, after the command line is parsed.
#[derive(Debug, Clone, Copy, Default)]
pub struct Settings {
    /// `--json`: errors are also the typed error object on stdout.
    pub json: bool,
    /// `--verbose`: the tier line even when stderr is not a terminal.
    pub verbose: bool,
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// Records how this invocation reports (the first call wins).
pub fn set(settings: Settings) {
    let _ = SETTINGS.set(settings);
}

/// How this invocation reports ([`set`]; the defaults before it).
pub fn settings() -> Settings {
    SETTINGS.get().copied().unwrap_or_default()
}

/// Which of tierbox's own failures, for its exit status and the start of its line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// A request refused by a rule: `tierbox: rejected [CODE]: …`, 125.
    Rejected,
    /// A command line tierbox does not take: `tierbox: usage: …`, 125.
    Usage,
    /// Tierbox could not do what was asked: `tierbox: error: …`, 126.
    Error,
}

impl Failure {
    /// Its reserved exit status.
    pub fn exit_status(self) -> u8 {
        match self {
            Self::Rejected | Self::Usage => EXIT_REJECTED,
            Self::Error => EXIT_INTERNAL,
        }
    }
}

/// The error object the HTTP API returns (`{"error": {"code", "message", "fix"}}`,
/// `fix` when a policy change or a command would let it through).
pub fn error_json(code: &str, message: &str) -> serde_json::Value {
    let mut error = serde_json::json!({ "code": code, "message": message });
    if let Some(fix) = Rejection::fix_for(code) {
        error["fix"] = fix.into();
    }
    serde_json::json!({ "error": error })
}

/// Prints one of tierbox's own failures — its `tierbox:` line on stderr, always; then
/// with `json` the error object ([`error_json`]) on stdout, else a `hint:` line — and
/// returns its reserved exit status.
pub fn fail(kind: Failure, code: &str, message: &str, hint: &str, json: bool) -> ExitCode {
    match kind {
        Failure::Rejected => eprintln!("tierbox: rejected [{code}]: {message}"),
        Failure::Usage => eprintln!("tierbox: usage: {message}"),
        Failure::Error => eprintln!("tierbox: error: {message}"),
    }
    if json {
        println!("{}", error_json(code, message));
    } else {
        eprintln!("hint: {hint}");
    }
    ExitCode::from(kind.exit_status())
}

/// Parses the command line. Help and the version are printed (exit 0); anything else
/// clap refuses is a usage error ([`usage_error`]), never clap's own exit 2, which a
/// program's status could be.
pub fn parse<C: clap::Parser>() -> Result<C, ExitCode> {
    use clap::error::ErrorKind;
    let error = match C::try_parse() {
        Ok(cli) => return Ok(cli),
        Err(e) => e,
    };
    match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = error.print();
            Err(ExitCode::SUCCESS)
        }
        _ => Err(usage_error(&error, json_asked(std::env::args_os()))),
    }
}

/// Whether `args` ask for `--json` among tierbox's own options (before a `--`).
fn json_asked(args: impl IntoIterator<Item = OsString>) -> bool {
    args.into_iter()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}

/// Prints clap's refusal as a usage error: the `tierbox: usage:` line naming what was
/// wrong (an unknown option by name), clap's tips and usage as the hint; exit 125.
fn usage_error(error: &clap::Error, json: bool) -> ExitCode {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let rendered = error.render().to_string();
    if error.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        // The help, which is clap's whole message here, lists what may follow.
        eprint!("{rendered}");
    }
    let message = match (error.kind(), error.get(ContextKind::InvalidArg)) {
        (ErrorKind::UnknownArgument, Some(ContextValue::String(arg))) => format!(
            "unknown option '{arg}': tierbox's own options come before the command, which starts at the first word that is not one of them (or after `--`)"
        ),
        (ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand, _) => {
            "a subcommand is missing (the help above lists them)".to_owned()
        }
        _ => rendered
            .lines()
            .next()
            .map(|l| l.trim().trim_start_matches("error: ").to_owned())
            .unwrap_or_else(|| error.kind().to_string()),
    };
    // clap's tips (`a similar argument exists: '--json'`) and its usage line.
    let mut hint: Vec<String> = rendered
        .lines()
        .map(str::trim)
        .filter_map(|l| match l.strip_prefix("tip: ") {
            Some(tip) => Some(tip.to_owned()),
            None => l.strip_prefix("Usage: ").map(|u| format!("usage: {u}")),
        })
        .collect();
    hint.push("`tierbox help COMMAND` lists its options".to_owned());
    fail(Failure::Usage, USAGE_CODE, &message, &hint.join("; "), json)
}

/// The line that says which tier and backend ran, the layers this host did not enforce,
/// and what `auto` passed over: `tier b, backend tier_b_linux; not enforced here:
/// protected_paths; passed over: tier c: tier.backend = "docker": …`.
pub fn tier_line(tier: tierbox_policy::Tier, e: &Enforcement) -> String {
    let mut line = format!("tier {tier}, backend {}", e.backend);
    if !e.missing_layers.is_empty() {
        let missing: Vec<String> = e.missing_layers.iter().map(ToString::to_string).collect();
        line.push_str(&format!("; not enforced here: {}", missing.join(", ")));
    }
    if let Some(why) = &e.passed_over {
        line.push_str(&format!("; passed over: {why}"));
    }
    line
}

/// Whether the tier line is printed: with `--verbose`, when stderr is a terminal, and
/// always when `auto` passed over the Tier C backend the policy names (a container or
/// bwrap: asked for, and not used, is never said only to a terminal).
pub fn show_tier_line(verbose: bool, stderr_tty: bool, policy: &Policy, e: &Enforcement) -> bool {
    verbose
        || stderr_tty
        || (e.passed_over.is_some() && policy.tier.backend != TierCBackend::Native)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_asked_only_among_tierbox_s_own_options() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(json_asked(args(&[
            "tierbox", "run", "--json", "--jsno", "ls"
        ])));
        assert!(!json_asked(args(&[
            "tierbox", "run", "--jsno", "--", "ls", "--json"
        ])));
        assert!(
            !json_asked(args(&["--json", "run"])),
            "argv[0] is the program"
        );
    }

    #[test]
    fn the_error_object_is_the_http_api_s() {
        for (code, message) in [
            ("exec.not_allowed", "executable \"x\" is not allowed"),
            (USAGE_CODE, "unknown option '--jsno'"),
        ] {
            let http = tierbox_server::service::ServiceError::new(code, message);
            assert_eq!(
                error_json(code, message),
                serde_json::json!({ "error": http.to_json() })
            );
        }
        assert!(error_json("exec.not_allowed", "m")["error"]["fix"].is_string());
    }

    /// README's exit-status table has a row for each reserved status, naming the line it
    /// comes with.
    #[test]
    fn the_readme_lists_every_reserved_status_with_its_line() {
        let readme = include_str!("../../../README.md");
        for (status, line) in RESERVED {
            let row = readme
                .lines()
                .map(str::trim)
                .find(|l| l.starts_with(&format!("| {status} |")))
                .unwrap_or_else(|| panic!("no README row for exit status {status}"));
            assert!(
                row.contains(&format!("`{}", line.trim_end())),
                "README's row for {status} does not name `{line}…`: {row}"
            );
        }
    }
}
