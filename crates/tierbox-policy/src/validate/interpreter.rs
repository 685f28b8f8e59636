//! Interpreter guardrails: the interpreter denylist, wrappers that run another program,
//! and inline-code (eval) flags.
//!
//! This is an advisory layer. It reads argv, so it cannot see what a script file does,
//! what `make`, `npm`, `git` (hooks, aliases) or `awk` run, or code assembled at run time;
//! the kernel layers of tiers B and C (landlock, namespaces, seccomp) are the boundary,
//! and SECURITY.md says so. What it guarantees, for what argv does show:
//!
//! - a program is an interpreter if its requested name *or* the file name of its
//!   canonical target is in [`INTERPRETERS`], after stripping directories, `.exe`, and
//!   version suffixes (`python3.11`, `perl5.36`, `lua5.4`, `node20`), case-insensitively;
//!   so an allowlisted symlink to bash is caught. Multi-call binaries (busybox, toybox)
//!   act on the name they are run as, so their canonical name is not used;
//! - every program a wrapper ([`WRAPPERS`]) would run is checked like the command
//!   itself: allowlist, interpreter denylist, eval flags, recursively; variables a wrapper
//!   sets for it (`env LD_PRELOAD=…`) go through the environment deny list;
//! - when argv does not say for certain what a wrapper runs, the request is rejected
//!   (`exec.wrapper_unresolvable`), never allowed;
//! - with interpreters allowed but not eval, inline code is refused: flags per
//!   interpreter family (see `eval.rs`), and program text on the request's stdin;
//! - programs that are not interpreters but run code from their arguments (`git -c
//!   core.fsmonitor=…`, `tar --to-command`, `make --eval`, see `routes.rs`) are refused
//!   unless the policy allows both interpreters and inline code, and programs they run
//!   directly (`rg --pre`, `tar -I`) are checked like the command;
//! - argv is only read, never changed.

mod eval;
mod getopt;
mod routes;
mod wrappers;

pub use routes::{GIT_CODE_KEYS, git_key_runs_code};

use std::path::{Path, PathBuf};

use self::eval::{Family, Scan};
use self::wrappers::{Outcome, WrapperKind};
use super::env::is_denied_env_name;
use super::exec;
use crate::policy::ExecPolicy;
use crate::rejection::Rejection;

/// Shells and language runtimes, denied unless the policy sets `allow_interpreters`.
///
/// Matched after stripping directories, a `.exe` suffix and a version suffix
/// (`python3.11`, `python2.7`, `pypy3.10`, `perl5.36`, `lua5.4`, `ruby3.1`, `node20`,
/// `php8.2`, `ksh93`, `luajit-2.1.0-beta3`), case-insensitively.
pub const INTERPRETERS: &[&str] = &[
    "bash",
    "sh",
    "dash",
    "ash",
    "zsh",
    "fish",
    "ksh",
    "mksh",
    "pdksh",
    "oksh",
    "yash",
    "posh",
    "hush",
    "msh",
    "rbash",
    "csh",
    "tcsh",
    "busybox",
    "python",
    "python2",
    "python3",
    "pypy",
    "pypy3",
    "node",
    "nodejs",
    "deno",
    "bun",
    "ruby",
    "perl",
    "php",
    "lua",
    "luajit",
    "Rscript",
    "pwsh",
    "powershell",
    "cmd",
    "osascript",
    "tclsh",
    "wish",
    "expect",
    "nu",
    "elvish",
    "xonsh",
];

/// Programs that run another program named in their arguments; what they run is
/// checked too.
pub const WRAPPERS: &[&str] = &[
    "env",
    "nice",
    "nohup",
    "timeout",
    "stdbuf",
    "setsid",
    "time",
    "xargs",
    "find",
    "sudo",
    "doas",
    "su",
    "runuser",
    "sg",
    "chroot",
    "strace",
    "ltrace",
    "flock",
    "ionice",
    "taskset",
    "chrt",
    "watch",
    "unbuffer",
    "toybox",
    "coreutils",
];

/// Multi-call binaries: they act on the name they are run as (`sh -> busybox` is a shell,
/// `ls -> busybox` is `ls`), so their own file name says nothing.
const MULTI_CALL: &[&str] = &["busybox", "toybox", "coreutils"];

/// How deep wrappers may nest (`env nice timeout 5 xargs …`) before the request is
/// refused as unresolvable. Protects against pathological argv; real use needs two or
/// three.
pub const MAX_WRAPPER_DEPTH: usize = 8;

/// The [`INTERPRETERS`] entry that `name` is, if any: `python3.11` → `python3`,
/// `/usr/bin/bash` → `bash`, `PWSH.EXE` → `pwsh`.
///
/// ```
/// use tierbox_policy::validate::interpreter_base_name;
/// assert_eq!(interpreter_base_name("/usr/bin/python3.11"), Some("python3"));
/// assert_eq!(interpreter_base_name("perl5.36"), Some("perl"));
/// assert_eq!(interpreter_base_name("bash.exe"), Some("bash"));
/// assert_eq!(interpreter_base_name("python3-config"), None);
/// assert_eq!(interpreter_base_name("git"), None);
/// ```
pub fn interpreter_base_name(name: &str) -> Option<&'static str> {
    let name = normalized(name);
    INTERPRETERS
        .iter()
        .copied()
        .filter(|base| matches_versioned(&name, base))
        .max_by_key(|base| base.len())
}

/// The file name, lowercased, without `.exe`.
fn normalized(name: &str) -> String {
    let file = name
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or(name)
        .to_ascii_lowercase();
    match file.strip_suffix(".exe") {
        Some(stem) => stem.to_owned(),
        None => file,
    }
}

/// Whether `name` is `base` (compared without regard to ASCII case), optionally followed
/// by a version suffix.
fn matches_versioned(name: &str, base: &str) -> bool {
    let rest = match name.get(..base.len()) {
        Some(head) if head.eq_ignore_ascii_case(base) => &name[base.len()..],
        _ => return false,
    };
    rest.is_empty() || is_version_suffix(rest)
}

/// `3`, `3.11`, `.11`, `-5.9`, `_2`, `3.13t`, `3.7m`, `-2.1.0-beta3`.
fn is_version_suffix(s: &str) -> bool {
    let s = s.strip_prefix(['-', '_', '.']).unwrap_or(s);
    if !s.starts_with(|c: char| c.is_ascii_digit()) {
        return false;
    }
    let tail = s.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.');
    let tail = tail.strip_prefix(['m', 't', 'd']).unwrap_or(tail);
    let tail = tail.strip_prefix('-').unwrap_or(tail);
    tail.is_empty()
        || ["alpha", "beta", "rc", "dev"].iter().any(|p| {
            tail.strip_prefix(p)
                .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit() || c == '.'))
        })
}

/// One argument as the checks see it: its text, or `None` when it is only known at run
/// time (filled in from xargs input), and the index in the request's `args` it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Word {
    text: Option<String>,
    index: usize,
}

impl Word {
    fn known(text: impl Into<String>, index: usize) -> Self {
        Self {
            text: Some(text.into()),
            index,
        }
    }

    fn unknown(index: usize) -> Self {
        Self { text: None, index }
    }

    fn text(&self) -> Option<&str> {
        self.text.as_deref()
    }
}

/// Where a program is found when it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lookup {
    /// In the sandbox PATH, like the command.
    SandboxPath,
    /// Somewhere we cannot look (inside a chroot, a multi-call binary's built-in
    /// applet): checked by name only.
    Elsewhere,
}

/// A program that will run, with the arguments it receives.
#[derive(Debug, Clone)]
struct Invocation {
    /// The program as written (`bash`, `/usr/bin/env`, `sh` for a shell a wrapper starts).
    name: String,
    /// Its arguments.
    args: Vec<Word>,
    /// More arguments, of unknown text, are appended at run time (xargs without `-I`).
    trailing_unknown: bool,
    /// The wrapper that fills unknown arguments in, for messages.
    unknown_from: &'static str,
    /// Its stdin is the request's stdin.
    stdin: bool,
    /// Where it is found.
    lookup: Lookup,
    /// How it is reached, for messages: empty for the command, else
    /// `" (run by env at args[0])"`.
    via: String,
}

impl Invocation {
    fn command(command: &str, args: &[String]) -> Self {
        Self {
            name: command.to_owned(),
            args: args
                .iter()
                .enumerate()
                .map(|(i, a)| Word::known(a.as_str(), i))
                .collect(),
            trailing_unknown: false,
            unknown_from: "xargs",
            stdin: true,
            lookup: Lookup::SandboxPath,
            via: String::new(),
        }
    }
}

/// Checks the command (already allowlisted and resolved to `program`) and every program
/// it would run through wrappers: interpreter denylist, wrapped programs' allowlist,
/// eval flags, eval through stdin (`stdin_given`: the run's stdin may carry
/// anything, inline or streamed). Returns the indices in `args` of inline program
/// text an allowed eval flag carries (the flag and its code: `-c`, `'dd if=…'`), which
/// is text, not paths, for the argument check.
pub(crate) fn check(
    policy: &ExecPolicy,
    command: &str,
    program: &Path,
    args: &[String],
    path_var: &str,
    stdin_given: bool,
) -> Result<Vec<usize>, Rejection> {
    let checker = Checker {
        policy,
        path_var,
        stdin_given,
        inline_code: std::cell::RefCell::new(Vec::new()),
    };
    let canonical = exec::canonical_program(program);
    checker.check_resolved(&Invocation::command(command, args), Some(&canonical), 0)?;
    Ok(checker.inline_code.into_inner())
}

struct Checker<'a> {
    policy: &'a ExecPolicy,
    path_var: &'a str,
    stdin_given: bool,
    /// Indices of inline program text found so far (see [`check`]).
    inline_code: std::cell::RefCell<Vec<usize>>,
}

impl Checker<'_> {
    /// Checks a program whose allowlist entry and location are settled.
    fn check_resolved(
        &self,
        inv: &Invocation,
        canonical: Option<&Path>,
        depth: usize,
    ) -> Result<(), Rejection> {
        let names = Names::new(&inv.name, canonical);
        if let Some((family, through)) = names.interpreter() {
            return self.check_interpreter(inv, family, through, depth);
        }
        if let Some(kind) = names.route_program() {
            self.check_routes(inv, kind, depth)?;
        }
        match names.wrapper() {
            Some(kind) => self.check_wrapper(inv, kind, depth),
            None => Ok(()),
        }
    }

    /// Checks a program a wrapper runs: allowlist and location first, as for the command.
    fn check_wrapped(&self, inv: &Invocation, depth: usize) -> Result<(), Rejection> {
        if depth > MAX_WRAPPER_DEPTH {
            return Err(Rejection::WrapperUnresolvable {
                wrapper: inv.name.clone(),
                reason: format!("programs are nested more than {MAX_WRAPPER_DEPTH} wrappers deep"),
            });
        }
        exec::allowed_name(self.policy, &inv.name).map_err(|e| with_via(e, &inv.via))?;
        let canonical = match inv.lookup {
            Lookup::SandboxPath => Some(exec::canonical_program(&self.locate(&inv.name)?)),
            Lookup::Elsewhere => None,
        };
        self.check_resolved(inv, canonical.as_deref(), depth)
    }

    fn locate(&self, word: &str) -> Result<PathBuf, Rejection> {
        if word.contains('/') {
            return exec::checked_command_path(word);
        }
        exec::find_in_path(word, self.path_var).ok_or_else(|| Rejection::ExecutableNotFound {
            name: word.to_owned(),
            path: self.path_var.to_owned(),
        })
    }

    fn check_interpreter(
        &self,
        inv: &Invocation,
        family: &'static str,
        through: Option<&Path>,
        depth: usize,
    ) -> Result<(), Rejection> {
        if !self.policy.allow_interpreters {
            let via = match through {
                Some(target) => format!("{} (it resolves to {})", inv.via, target.display()),
                None => inv.via.clone(),
            };
            return Err(Rejection::InterpreterDenied {
                name: inv.name.clone(),
                via,
            });
        }
        let family = Family::of(family);
        if family == Family::BusyBox {
            let outcome = wrappers::applet(inv).map_err(|reason| unresolvable(inv, reason))?;
            return self.check_outcome(inv, outcome, depth);
        }
        if self.policy.allow_eval {
            self.note_inline_code(inv, family);
            return Ok(());
        }
        self.check_eval(inv, family)
    }

    /// Records the eval flag of an interpreter whose inline code the policy allows, and
    /// the word after it: its code, unless the code is attached (`--command=id`).
    fn note_inline_code(&self, inv: &Invocation, family: Family) {
        let Scan::Eval { flag, index } = eval::scan(family, &inv.args, inv.trailing_unknown) else {
            return;
        };
        let mut found = self.inline_code.borrow_mut();
        found.push(index);
        let Some(at) = inv.args.iter().position(|w| w.index == index) else {
            return;
        };
        let attached = inv.args.get(at).and_then(Word::text) != Some(flag.as_str());
        if let Some(next) = inv.args.get(at + 1).filter(|_| !attached) {
            found.push(next.index);
        }
    }

    fn check_eval(&self, inv: &Invocation, family: Family) -> Result<(), Rejection> {
        match eval::scan(family, &inv.args, inv.trailing_unknown) {
            Scan::Script => Ok(()),
            Scan::Stdin if !(inv.stdin && self.stdin_given) => Ok(()),
            Scan::Stdin => Err(Rejection::EvalFromStdin {
                interpreter: inv.name.clone(),
                via: inv.via.clone(),
            }),
            Scan::Eval { flag, index } => Err(Rejection::EvalFlag {
                interpreter: inv.name.clone(),
                flag,
                arg_index: index,
            }),
            Scan::Unknown { index } => Err(Rejection::WrapperUnresolvable {
                wrapper: inv.unknown_from.to_owned(),
                reason: format!(
                    "{:?} receives arguments from {}'s input (at or after args[{index}]), which \
                     could hold an inline-code flag",
                    inv.name, inv.unknown_from
                ),
            }),
        }
    }

    /// A route program: code it would run is refused unless the policy allows both
    /// interpreters and inline code; programs it would run are checked like the command.
    fn check_routes(
        &self,
        inv: &Invocation,
        kind: routes::RouteProgram,
        depth: usize,
    ) -> Result<(), Rejection> {
        let found = routes::scan(kind, inv);
        if let Some(route) = found.code.first()
            && !(self.policy.allow_interpreters && self.policy.allow_eval)
        {
            return Err(Rejection::CodeRoute {
                program: inv.name.clone(),
                via: inv.via.clone(),
                route: route.route.clone(),
                arg_index: route.index,
                allowed: if self.policy.allow_interpreters {
                    "interpreters but no inline code (allow_eval = false)".to_owned()
                } else {
                    "no interpreters (allow_interpreters = false)".to_owned()
                },
            });
        }
        for program in &found.programs {
            self.check_wrapped(program, depth + 1)?;
        }
        Ok(())
    }

    fn check_wrapper(
        &self,
        inv: &Invocation,
        kind: WrapperKind,
        depth: usize,
    ) -> Result<(), Rejection> {
        let outcome = wrappers::parse(kind, inv).map_err(|reason| unresolvable(inv, reason))?;
        self.check_outcome(inv, outcome, depth)
    }

    /// Checks every program a wrapper runs, then the variables it sets for them.
    fn check_outcome(
        &self,
        inv: &Invocation,
        outcome: Outcome,
        depth: usize,
    ) -> Result<(), Rejection> {
        for program in &outcome.programs {
            self.check_wrapped(program, depth + 1)?;
        }
        for (name, index) in &outcome.env {
            if let Some(reason) = is_denied_env_name(name) {
                return Err(Rejection::EnvDenied {
                    name: name.clone(),
                    reason: format!("{reason} (set by {} at args[{index}])", inv.name),
                });
            }
        }
        Ok(())
    }
}

fn unresolvable(inv: &Invocation, reason: wrappers::WrapperError) -> Rejection {
    Rejection::WrapperUnresolvable {
        wrapper: inv.name.clone(),
        reason: reason.to_string(),
    }
}

/// Adds "how it was reached" to an allowlist rejection of a wrapped program.
fn with_via(rejection: Rejection, via: &str) -> Rejection {
    match rejection {
        Rejection::ExecutableNotAllowed { name, .. } => Rejection::ExecutableNotAllowed {
            name,
            via: via.to_owned(),
        },
        other => other,
    }
}

/// The names a program goes by: as requested, and its canonical file's name.
struct Names<'a> {
    requested: &'a str,
    canonical: Option<&'a Path>,
}

impl<'a> Names<'a> {
    fn new(requested: &'a str, canonical: Option<&'a Path>) -> Self {
        Self {
            requested,
            canonical,
        }
    }

    /// The interpreter family, and the canonical path when only it matched.
    fn interpreter(&self) -> Option<(&'static str, Option<&'a Path>)> {
        if let Some(base) = interpreter_base_name(self.requested) {
            return Some((base, None));
        }
        let base = interpreter_base_name(&self.canonical_name()?)?;
        Some((base, self.canonical))
    }

    fn route_program(&self) -> Option<routes::RouteProgram> {
        routes::route_program(&normalized(self.requested))
            .or_else(|| routes::route_program(&self.canonical_name()?))
    }

    fn wrapper(&self) -> Option<WrapperKind> {
        wrappers::wrapper_kind(&normalized(self.requested))
            .or_else(|| wrappers::wrapper_kind(&self.canonical_name()?))
    }

    /// The canonical file name, unless it is a multi-call binary.
    fn canonical_name(&self) -> Option<String> {
        let name = normalized(self.canonical?.file_name()?.to_str()?);
        (!MULTI_CALL.contains(&name.as_str())).then_some(name)
    }
}

#[cfg(test)]
#[path = "interpreter_tests.rs"]
mod tests;
