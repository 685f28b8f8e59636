//! Tier C on Windows: a Job Object with limits, created before the program runs.
//!
//! What a Job Object enforces ([`job_limits`], pure, tested on every host):
//! - the whole process tree's lifetime: the job is closed (or terminated) and every
//!   process in it dies (`KILL_ON_JOB_CLOSE`); no process may leave the job (neither
//!   `BREAKAWAY_OK` nor `SILENT_BREAKAWAY_OK` is set); a crash ends the process instead
//!   of opening an error dialog (`DIE_ON_UNHANDLED_EXCEPTION`);
//! - limits: active processes, committed memory of the whole job, per-process user CPU
//!   time, and a hard cap on the job's CPU rate;
//! - UI restrictions: no desktop switching or creation, no display-setting changes, no
//!   logoff/shutdown, no global atoms, no handles to user objects outside the job, no
//!   clipboard, no system-parameter changes.
//!
//! What it does **not** enforce: a Job Object is not a filesystem boundary (the program
//! reads and writes whatever the supervisor's user can) and not a network boundary
//! (nothing is filtered). So [`check_layers`] refuses a run unless the policy lists
//! `filesystem_isolation` (always) and `network_isolation` (unless `egress.mode =
//! "allow_all"`) in `tier.optional_layers`, and `protected_paths` as for Tier B. See
//! SECURITY.md.
//!
//! Launch (`launch`, Windows only, unsafe code in `sys.rs`): `CreateProcessW` with
//! `CREATE_SUSPENDED | CREATE_NEW_PROCESS_GROUP | CREATE_UNICODE_ENVIRONMENT` (plus
//! `EXTENDED_STARTUPINFO_PRESENT`, to pass only the three stdio handles), the command
//! line of [`command_line`] and the environment block of [`environment_block`]; the
//! process is assigned to the job before its first instruction runs, then resumed.
//! Accounting comes back from `QueryInformationJobObject` ([`JobAccounting`]); the run is
//! killed with `TerminateJobObject`.

#[cfg(windows)]
#[allow(unsafe_code)]
mod sys;
#[cfg(windows)]
pub use sys::{JobObject, KILLED_EXIT_CODE, WindowsLaunchError, WindowsLaunched, launch};

use tierbox_policy::plan::Plan;
use tierbox_policy::{EgressMode, Layer, Rejection, Tier, TierCBackend};

/// Name of this backend in outcomes and attestations.
pub const BACKEND_NAME: &str = "tier_c_windows_job_object";

/// CPUs a Windows run may use when the policy sets no `limits.cpus`.
pub const DEFAULT_CPUS: u32 = 2;

/// The CPU rate Windows calls 100 %: rates are given in hundredths of a percent of the
/// whole machine (`CpuRate` of `JOBOBJECT_CPU_RATE_CONTROL_INFORMATION`).
pub const CPU_RATE_FULL: u32 = 10_000;

/// Windows counts CPU time in 100-nanosecond units.
pub const TICKS_PER_SECOND: u64 = 10_000_000;

/// `JOB_OBJECT_LIMIT_*` flags, as in `winnt.h` (checked against `windows-sys` when
/// compiled for Windows).
pub mod flags {
    /// `JOB_OBJECT_LIMIT_PROCESS_TIME`: per-process user-mode CPU time.
    pub const LIMIT_PROCESS_TIME: u32 = 0x0000_0002;
    /// `JOB_OBJECT_LIMIT_ACTIVE_PROCESS`: processes alive at once.
    pub const LIMIT_ACTIVE_PROCESS: u32 = 0x0000_0008;
    /// `JOB_OBJECT_LIMIT_JOB_MEMORY`: committed memory of the whole job.
    pub const LIMIT_JOB_MEMORY: u32 = 0x0000_0200;
    /// `JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION`.
    pub const LIMIT_DIE_ON_UNHANDLED_EXCEPTION: u32 = 0x0000_0400;
    /// `JOB_OBJECT_LIMIT_BREAKAWAY_OK` — never set by Tierbox.
    pub const LIMIT_BREAKAWAY_OK: u32 = 0x0000_0800;
    /// `JOB_OBJECT_LIMIT_SILENT_BREAKAWAY_OK` — never set by Tierbox.
    pub const LIMIT_SILENT_BREAKAWAY_OK: u32 = 0x0000_1000;
    /// `JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`.
    pub const LIMIT_KILL_ON_JOB_CLOSE: u32 = 0x0000_2000;
    /// `JOB_OBJECT_UILIMIT_HANDLES`.
    pub const UILIMIT_HANDLES: u32 = 0x0000_0001;
    /// `JOB_OBJECT_UILIMIT_READCLIPBOARD`.
    pub const UILIMIT_READCLIPBOARD: u32 = 0x0000_0002;
    /// `JOB_OBJECT_UILIMIT_WRITECLIPBOARD`.
    pub const UILIMIT_WRITECLIPBOARD: u32 = 0x0000_0004;
    /// `JOB_OBJECT_UILIMIT_SYSTEMPARAMETERS`.
    pub const UILIMIT_SYSTEMPARAMETERS: u32 = 0x0000_0008;
    /// `JOB_OBJECT_UILIMIT_DISPLAYSETTINGS`.
    pub const UILIMIT_DISPLAYSETTINGS: u32 = 0x0000_0010;
    /// `JOB_OBJECT_UILIMIT_GLOBALATOMS`.
    pub const UILIMIT_GLOBALATOMS: u32 = 0x0000_0020;
    /// `JOB_OBJECT_UILIMIT_DESKTOP`.
    pub const UILIMIT_DESKTOP: u32 = 0x0000_0040;
    /// `JOB_OBJECT_UILIMIT_EXITWINDOWS`.
    pub const UILIMIT_EXITWINDOWS: u32 = 0x0000_0080;
    /// `JOB_OBJECT_CPU_RATE_CONTROL_ENABLE`.
    pub const CPU_RATE_CONTROL_ENABLE: u32 = 0x1;
    /// `JOB_OBJECT_CPU_RATE_CONTROL_HARD_CAP`.
    pub const CPU_RATE_CONTROL_HARD_CAP: u32 = 0x4;
}

/// The UI restrictions of a job (`JOBOBJECT_BASIC_UI_RESTRICTIONS`), one field per flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UiRestrictions {
    /// No switching or creating desktops.
    pub desktop: bool,
    /// No `ChangeDisplaySettings`.
    pub display_settings: bool,
    /// No `ExitWindows(Ex)` (logoff, shutdown).
    pub exit_windows: bool,
    /// Only the job's own global atom table.
    pub global_atoms: bool,
    /// No handles to USER objects (windows, hooks) of processes outside the job.
    pub handles: bool,
    /// No reading the clipboard.
    pub read_clipboard: bool,
    /// No writing the clipboard.
    pub write_clipboard: bool,
    /// No `SystemParametersInfo` changes.
    pub system_parameters: bool,
}

impl UiRestrictions {
    /// Every restriction on.
    pub const ALL: Self = Self {
        desktop: true,
        display_settings: true,
        exit_windows: true,
        global_atoms: true,
        handles: true,
        read_clipboard: true,
        write_clipboard: true,
        system_parameters: true,
    };

    /// The `UIRestrictionsClass` bit set.
    pub fn class(&self) -> u32 {
        use flags::*;
        [
            (self.desktop, UILIMIT_DESKTOP),
            (self.display_settings, UILIMIT_DISPLAYSETTINGS),
            (self.exit_windows, UILIMIT_EXITWINDOWS),
            (self.global_atoms, UILIMIT_GLOBALATOMS),
            (self.handles, UILIMIT_HANDLES),
            (self.read_clipboard, UILIMIT_READCLIPBOARD),
            (self.write_clipboard, UILIMIT_WRITECLIPBOARD),
            (self.system_parameters, UILIMIT_SYSTEMPARAMETERS),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .fold(0, |acc, (_, bit)| acc | bit)
    }
}

/// A job's limits as plain values: the fields of `JOBOBJECT_EXTENDED_LIMIT_INFORMATION`,
/// `JOBOBJECT_CPU_RATE_CONTROL_INFORMATION` and `JOBOBJECT_BASIC_UI_RESTRICTIONS` that
/// Tierbox sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobLimits {
    /// Every process dies when the last handle to the job closes.
    pub kill_on_job_close: bool,
    /// A crash ends the process without an error dialog.
    pub die_on_unhandled_exception: bool,
    /// `ActiveProcessLimit`: processes alive at once (the Plan's `max_processes`; Windows
    /// counts processes, not threads).
    pub active_process_limit: u32,
    /// `JobMemoryLimit`: committed memory of all processes together, bytes.
    pub job_memory_limit_bytes: u64,
    /// `PerProcessUserTimeLimit`: user-mode CPU time per process, in 100 ns units.
    pub per_process_user_time_100ns: u64,
    /// `CpuRate` with `HARD_CAP`: hundredths of a percent of the whole machine
    /// (1..=[`CPU_RATE_FULL`]).
    pub cpu_rate_hard_cap: u32,
    /// UI restrictions.
    pub ui: UiRestrictions,
    /// `BREAKAWAY_OK`: always false.
    pub breakaway_ok: bool,
    /// `SILENT_BREAKAWAY_OK`: always false.
    pub silent_breakaway_ok: bool,
}

impl JobLimits {
    /// The `LimitFlags` of `JOBOBJECT_BASIC_LIMIT_INFORMATION`.
    pub fn limit_flags(&self) -> u32 {
        use flags::*;
        [
            (self.kill_on_job_close, LIMIT_KILL_ON_JOB_CLOSE),
            (
                self.die_on_unhandled_exception,
                LIMIT_DIE_ON_UNHANDLED_EXCEPTION,
            ),
            (true, LIMIT_ACTIVE_PROCESS),
            (true, LIMIT_JOB_MEMORY),
            (true, LIMIT_PROCESS_TIME),
            (self.breakaway_ok, LIMIT_BREAKAWAY_OK),
            (self.silent_breakaway_ok, LIMIT_SILENT_BREAKAWAY_OK),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .fold(0, |acc, (_, bit)| acc | bit)
    }

    /// The `ControlFlags` of `JOBOBJECT_CPU_RATE_CONTROL_INFORMATION`.
    pub fn cpu_rate_control_flags(&self) -> u32 {
        flags::CPU_RATE_CONTROL_ENABLE | flags::CPU_RATE_CONTROL_HARD_CAP
    }
}

/// The job limits for `plan` on a machine with `logical_cpus` processors.
///
/// ```
/// # fn demo(plan: &tierbox_policy::Plan) {
/// let limits = tierbox_sandbox::windows::job_limits(plan, 8);
/// assert!(limits.kill_on_job_close && !limits.breakaway_ok && !limits.silent_breakaway_ok);
/// // 2 CPUs of 8 (no `limits.cpus` in the policy): 25 %, which Windows writes as 2500.
/// assert_eq!(limits.cpu_rate_hard_cap, 2500);
/// # }
/// ```
pub fn job_limits(plan: &Plan, logical_cpus: u32) -> JobLimits {
    let l = &plan.limits;
    let cpus = u64::from(l.cpus.unwrap_or(DEFAULT_CPUS));
    let machine = u64::from(logical_cpus.max(1));
    let rate = (cpus * u64::from(CPU_RATE_FULL) / machine).clamp(1, u64::from(CPU_RATE_FULL));
    JobLimits {
        kill_on_job_close: true,
        die_on_unhandled_exception: true,
        active_process_limit: u32::try_from(l.max_processes).unwrap_or(u32::MAX),
        job_memory_limit_bytes: l.memory_bytes,
        per_process_user_time_100ns: l.cpu_time_secs.saturating_mul(TICKS_PER_SECOND),
        cpu_rate_hard_cap: u32::try_from(rate).unwrap_or(CPU_RATE_FULL),
        ui: UiRestrictions::ALL,
        breakaway_ok: false,
        silent_breakaway_ok: false,
    }
}

/// What a Job Object cannot enforce for `plan`, checked against the policy (the
/// `tier.optional_layers` model): each missing layer is returned when the policy lists it
/// and rejects the run (`tier.unavailable`) otherwise.
///
/// - `filesystem_isolation`: always missing (a job has no filesystem boundary);
/// - `protected_paths`: always missing (nothing makes them read-only);
/// - `disk`: always missing (nothing bounds the run's temporary files);
/// - `network_isolation`: missing unless `egress.mode = "allow_all"` (a job filters no
///   traffic; `block_all`, `strict` and `preflight` would promise what is not enforced).
///
/// A backend other than `native` is rejected: bwrap and the container backends are not
/// available on Windows in this build.
pub fn check_layers(plan: &Plan) -> Result<Vec<Layer>, Rejection> {
    let unavailable = |reason: String| Rejection::TierUnavailable {
        tier: Tier::C,
        reason,
    };
    if plan.tier.backend != TierCBackend::Native {
        return Err(unavailable(format!(
            "tier.backend = \"{}\" is not available on Windows; \"native\" runs a Job Object",
            plan.tier.backend
        )));
    }
    let mut needed = vec![
        (
            Layer::FilesystemIsolation,
            "a Windows Job Object is not a filesystem boundary: the program can read and write whatever the supervisor's user can",
        ),
        (
            Layer::ProtectedPaths,
            "a Windows Job Object cannot keep paths in the workspace read-only",
        ),
        (
            Layer::Disk,
            "a Windows Job Object does not bound the run's temporary files (limits.disk_bytes)",
        ),
    ];
    if plan.network.mode != EgressMode::AllowAll {
        needed.push((
            Layer::NetworkIsolation,
            "a Windows Job Object filters no network traffic, so this egress mode cannot be enforced",
        ));
    }
    let mut missing = Vec::new();
    for (layer, reason) in needed {
        if !plan.tier.optional_layers.contains(&layer) {
            return Err(unavailable(format!(
                "{layer} cannot be enforced: {reason} (a policy that accepts running without it lists \"{layer}\" in tier.optional_layers)"
            )));
        }
        missing.push(layer);
    }
    missing.sort();
    Ok(missing)
}

/// Why an argv or environment cannot be passed to `CreateProcessW`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommandLineError {
    /// A NUL character (it would end the string early).
    #[error("argument {index} holds a NUL character")]
    Nul {
        /// Index in argv.
        index: usize,
    },
    /// `argv[0]` holds a double quote, which the program-name rules cannot escape.
    #[error("the program name holds a double quote")]
    QuoteInProgram,
    /// argv is empty.
    #[error("argv is empty")]
    Empty,
    /// An environment variable name is empty or holds `=` or NUL, or a value holds NUL.
    #[error("environment entry {name:?} cannot be passed")]
    BadEnv {
        /// The variable's name.
        name: String,
    },
}

/// Quotes one argument (not `argv[0]`) by the rules the Microsoft C runtime uses to split
/// a command line (`CommandLineToArgvW`): left alone when it has no space, tab, newline
/// or quote and is not empty; otherwise in quotes, with each `"` preceded by a
/// backslash, and backslashes doubled where they precede a quote (including the closing
/// one).
///
/// ```
/// use tierbox_sandbox::windows::quote_arg;
/// assert_eq!(quote_arg("plain"), "plain");
/// assert_eq!(quote_arg("two words"), "\"two words\"");
/// assert_eq!(quote_arg(r#"say "hi""#), r#""say \"hi\"""#);
/// assert_eq!(quote_arg(r"C:\dir with space\"), r#""C:\dir with space\\""#);
/// assert_eq!(quote_arg(""), "\"\"");
/// ```
pub fn quote_arg(arg: &str) -> String {
    if !arg.is_empty() && !arg.contains([' ', '\t', '\n', '\x0b', '"']) {
        return arg.to_owned();
    }
    let mut out = String::with_capacity(arg.len() + 2);
    out.push('"');
    let mut backslashes = 0usize;
    for ch in arg.chars() {
        match ch {
            '\\' => backslashes += 1,
            '"' => {
                // Each backslash before a quote is doubled, and the quote escaped.
                out.extend(std::iter::repeat_n('\\', backslashes * 2 + 1));
                out.push('"');
                backslashes = 0;
            }
            _ => {
                out.extend(std::iter::repeat_n('\\', backslashes));
                out.push(ch);
                backslashes = 0;
            }
        }
    }
    // Backslashes before the closing quote are doubled so it stays a delimiter.
    out.extend(std::iter::repeat_n('\\', backslashes * 2));
    out.push('"');
    out
}

/// The `CreateProcessW` command line for `argv`: `argv[0]` by the program-name rules
/// (quoted when it has a space or tab; no escapes exist there, so a `"` in it is
/// refused), every other argument by [`quote_arg`].
///
/// ```
/// use tierbox_sandbox::windows::command_line;
/// let argv = ["C:\\Program Files\\Git\\cmd\\git.exe", "commit", "-m", "a \"quoted\" msg"];
/// assert_eq!(
///     command_line(&argv).unwrap(),
///     r#""C:\Program Files\Git\cmd\git.exe" commit -m "a \"quoted\" msg""#
/// );
/// ```
pub fn command_line<S: AsRef<str>>(argv: &[S]) -> Result<String, CommandLineError> {
    let (program, args) = argv.split_first().ok_or(CommandLineError::Empty)?;
    let program = program.as_ref();
    if program.contains('\0') {
        return Err(CommandLineError::Nul { index: 0 });
    }
    if program.contains('"') {
        return Err(CommandLineError::QuoteInProgram);
    }
    let mut line = if program.is_empty() || program.contains([' ', '\t']) {
        format!("\"{program}\"")
    } else {
        program.to_owned()
    };
    for (i, arg) in args.iter().enumerate() {
        let arg = arg.as_ref();
        if arg.contains('\0') {
            return Err(CommandLineError::Nul { index: i + 1 });
        }
        line.push(' ');
        line.push_str(&quote_arg(arg));
    }
    Ok(line)
}

/// The UTF-16 environment block for `CreateProcessW` with `CREATE_UNICODE_ENVIRONMENT`:
/// `NAME=VALUE\0` entries sorted by name without regard to case (as Windows requires),
/// then a final `\0`. Exactly `env`, nothing inherited; an empty `env` is a valid empty
/// block (two NULs).
///
/// ```
/// use tierbox_sandbox::windows::environment_block;
/// let env = vec![("b".to_owned(), "2".to_owned()), ("A".to_owned(), "1".to_owned())];
/// let block = environment_block(&env).unwrap();
/// assert_eq!(String::from_utf16(&block).unwrap(), "A=1\0b=2\0\0");
/// ```
pub fn environment_block(env: &[(String, String)]) -> Result<Vec<u16>, CommandLineError> {
    let mut entries: Vec<&(String, String)> = env.iter().collect();
    for (name, value) in &entries {
        if name.is_empty() || name.contains(['=', '\0']) || value.contains('\0') {
            return Err(CommandLineError::BadEnv { name: name.clone() });
        }
    }
    entries.sort_by(|a, b| {
        a.0.to_uppercase()
            .cmp(&b.0.to_uppercase())
            .then_with(|| a.0.cmp(&b.0))
    });
    entries.dedup_by(|a, b| a.0.eq_ignore_ascii_case(&b.0));
    let mut block = Vec::new();
    for (name, value) in entries {
        block.extend(name.encode_utf16());
        block.push(u16::from(b'='));
        block.extend(value.encode_utf16());
        block.push(0);
    }
    if block.is_empty() {
        block.push(0);
    }
    block.push(0);
    Ok(block)
}

/// Accounting read back from a job when its run ends: `JobObjectBasicAndIoAccounting
/// Information` and the peak memory of `JobObjectExtendedLimitInformation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JobAccounting {
    /// User-mode CPU time of every process, 100 ns units.
    pub total_user_time_100ns: u64,
    /// Kernel-mode CPU time of every process, 100 ns units.
    pub total_kernel_time_100ns: u64,
    /// Processes ever in the job.
    pub total_processes: u32,
    /// Processes alive now.
    pub active_processes: u32,
    /// Processes ended because a limit was hit.
    pub total_terminated_processes: u32,
    /// Bytes read by all I/O operations.
    pub read_bytes: u64,
    /// Bytes written by all I/O operations.
    pub write_bytes: u64,
    /// Most committed memory of the job at once, bytes.
    pub peak_job_memory_bytes: u64,
    /// Most committed memory of any one process, bytes.
    pub peak_process_memory_bytes: u64,
}

#[cfg(test)]
mod tests;
