//! Wrappers: programs that run another program named in their arguments.
//!
//! For each wrapper we reproduce how it reads its own command line (its real option
//! table, from the tool's source) and return every program it would run, with the
//! arguments that program receives, so the caller can check each one like the command
//! itself. Some wrappers run a shell instead (`su`, `sg`, `watch`, `flock -c`,
//! `sudo -s`); they yield a synthetic `sh` invocation, with `-c CMD` when a command
//! string is given, so the interpreter and eval rules apply to it.
//!
//! Anything we cannot read with certainty is an `Err` ([`WrapperError`]), which the caller reports
//! as `exec.wrapper_unresolvable`: an unknown or ambiguous option, an argument filled in
//! at run time (xargs input), `find -exec {}`, `env -S` with quoting or `${VAR}`,
//! `sudo -e`. Variables a wrapper sets for its program (`env NAME=value`, `sudo
//! NAME=value`, `strace -E NAME=value`) are returned too, for the environment deny list.

use super::getopt::{Arg, Getopt, GetoptError, Key, Opt, Spec, Step};
use super::{Invocation, Lookup, Word};

mod coreutils;
mod findutils;
mod privilege;
mod util_linux;

use self::coreutils::{NOHUP, STDBUF, TIME, chroot, coreutils, env, nice, timeout};
use self::findutils::{find, xargs};
use self::privilege::{RUNUSER, SU, doas, sg, su, sudo};
use self::util_linux::{LTRACE, SETSID, chrt, flock, ionice, strace, taskset, unbuffer, watch};

/// A wrapper we can see through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WrapperKind {
    Env,
    Nice,
    Nohup,
    Timeout,
    Stdbuf,
    Setsid,
    Time,
    Xargs,
    Find,
    Sudo,
    Doas,
    Su,
    Runuser,
    Sg,
    Chroot,
    Strace,
    Ltrace,
    Flock,
    Ionice,
    Taskset,
    Chrt,
    Watch,
    Unbuffer,
    Toybox,
    Coreutils,
}

/// The wrapper a (normalised, lowercase) program name is, if any.
pub(super) fn wrapper_kind(name: &str) -> Option<WrapperKind> {
    use WrapperKind::*;
    Some(match name {
        "env" => Env,
        "nice" => Nice,
        "nohup" => Nohup,
        "timeout" => Timeout,
        "stdbuf" => Stdbuf,
        "setsid" => Setsid,
        "time" => Time,
        "xargs" => Xargs,
        "find" => Find,
        "sudo" => Sudo,
        "doas" => Doas,
        "su" => Su,
        "runuser" => Runuser,
        "sg" => Sg,
        "chroot" => Chroot,
        "strace" => Strace,
        "ltrace" => Ltrace,
        "flock" => Flock,
        "ionice" => Ionice,
        "taskset" => Taskset,
        "chrt" => Chrt,
        "watch" => Watch,
        "unbuffer" => Unbuffer,
        "toybox" => Toybox,
        "coreutils" => Coreutils,
        _ => return None,
    })
}

/// What a wrapper would do.
#[derive(Debug, Default)]
pub(super) struct Outcome {
    /// Every program it would run.
    pub(super) programs: Vec<Invocation>,
    /// Variables it would set for them: name and the index of the argument that sets it.
    pub(super) env: Vec<(String, usize)>,
}

impl Outcome {
    fn with(program: Option<Invocation>) -> Self {
        Self {
            programs: program.into_iter().collect(),
            env: Vec::new(),
        }
    }
}

/// Why a wrapper's command line cannot be read with certainty: the rule and where (the
/// text is the reason of an `exec.wrapper_unresolvable` rejection).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum WrapperError {
    /// Its options cannot be read as the wrapper reads them, or an argument is filled
    /// in at run time.
    #[error("{0}")]
    Args(#[from] GetoptError),
    /// No program is named here, and arguments of unknown text follow.
    #[error("the program it runs comes from {from}'s input")]
    ProgramFromInput { from: &'static str },
    /// The word naming the program is filled in at run time.
    #[error("the program at args[{index}] comes from {from}'s input")]
    ProgramAtFromInput { index: usize, from: &'static str },
    /// `env -S` without a value.
    #[error("-S has no value")]
    SplitStringNoValue,
    /// `env -S` whose string is filled in at run time.
    #[error("the -S string at args[{index}] is filled in at run time")]
    SplitStringFromInput { index: usize },
    /// `env -S` whose string needs a splitting we do not reproduce.
    #[error("the -S string at args[{index}] uses quoting, escapes, comments or ${{VAR}} expansion")]
    SplitStringQuoted { index: usize },
    /// The coreutils multi-call binary's first argument names no program.
    #[error("args[{index}] {text:?} is not --coreutils-prog=NAME")]
    NotCoreutilsProg { index: usize, text: String },
    /// `find` whose expression goes on at run time.
    #[error("its expression continues with arguments from {from}'s input")]
    FindExpressionFromInput { from: &'static str },
    /// A `find` action (`-exec`, …) without a program.
    #[error("{action} at args[{index}] names no program")]
    FindActionNoProgram { action: String, index: usize },
    /// A `find` action whose program is the files found (`-exec {} ;`).
    #[error("{action} at args[{index}] runs the files find finds")]
    FindActionRunsFound { action: String, index: usize },
    /// `sudo -e`: the editor is the user's choice, not in the command line.
    #[error("sudo -e runs the user's editor")]
    SudoEdit,
    /// `sudo -h WORD`: a host or a command, we cannot tell.
    #[error("sudo -h followed by a word may name a remote host or a command")]
    SudoHostOrCommand,
    /// `su -s SHELL` whose shell is filled in at run time.
    #[error("the shell at args[{index}] is filled in at run time")]
    ShellFromInput { index: usize },
}

type Parsed = Result<Outcome, WrapperError>;

/// Reads `inv` (whose program is the wrapper `kind`) and returns what it would run.
pub(super) fn parse(kind: WrapperKind, inv: &Invocation) -> Parsed {
    use WrapperKind::*;
    match kind {
        Env => env(inv),
        Nice => nice(inv),
        Nohup => plain(inv, &NOHUP),
        Timeout => timeout(inv),
        Stdbuf => plain(inv, &STDBUF),
        Setsid => plain(inv, &SETSID),
        Time => plain(inv, &TIME),
        Xargs => xargs(inv),
        Find => find(inv),
        Sudo => sudo(inv),
        Doas => doas(inv),
        Su => su(inv, &SU),
        Runuser => su(inv, &RUNUSER),
        Sg => sg(inv),
        Chroot => chroot(inv),
        Strace => strace(inv),
        Ltrace => plain(inv, &LTRACE),
        Flock => flock(inv),
        Ionice => ionice(inv),
        Taskset => taskset(inv),
        Chrt => chrt(inv),
        Watch => watch(inv),
        Unbuffer => unbuffer(inv),
        Toybox => applet(inv),
        Coreutils => coreutils(inv),
    }
}

/// A multi-call binary (`busybox APPLET ARGS`, `toybox APPLET ARGS`): the first argument
/// names the program that runs, built in, so it is not looked up in the PATH.
pub(super) fn applet(inv: &Invocation) -> Parsed {
    if inv
        .args
        .first()
        .and_then(Word::text)
        .is_some_and(|t| t.starts_with('-'))
    {
        // `--list`, `--help`, `--install`: nothing runs.
        return Ok(Outcome::default());
    }
    let program = child(inv, &inv.args, true)?.map(|p| Invocation {
        lookup: Lookup::Elsewhere,
        ..p
    });
    Ok(Outcome::with(program))
}

// ---- building blocks -------------------------------------------------------------------

const NO: Arg = Arg::No;
const REQ: Arg = Arg::Required;
const OPT: Arg = Arg::Optional;

/// The program `words[0]` with arguments `words[1..]`, run by `inv`. `keeps_stdin` says
/// the wrapper passes its stdin on. No words means no program, unless arguments of
/// unknown text follow (then they would name it).
fn child(
    inv: &Invocation,
    words: &[Word],
    keeps_stdin: bool,
) -> Result<Option<Invocation>, WrapperError> {
    let Some((first, rest)) = words.split_first() else {
        if inv.trailing_unknown {
            return Err(WrapperError::ProgramFromInput {
                from: inv.unknown_from,
            });
        }
        return Ok(None);
    };
    let Some(name) = first.text() else {
        return Err(WrapperError::ProgramAtFromInput {
            index: first.index,
            from: inv.unknown_from,
        });
    };
    Ok(Some(Invocation {
        name: name.to_owned(),
        args: rest.to_vec(),
        trailing_unknown: inv.trailing_unknown,
        unknown_from: inv.unknown_from,
        stdin: inv.stdin && keeps_stdin,
        lookup: Lookup::SandboxPath,
        via: format!(" (run by {} at args[{}])", inv.name, first.index),
    }))
}

/// The shell a wrapper starts: `sh -c COMMAND EXTRA…`, or `sh EXTRA…` without a command.
/// `at` is the argument that makes the wrapper start it.
fn shell(inv: &Invocation, at: usize, command: Option<Word>, extra: &[Word]) -> Invocation {
    let mut args = Vec::new();
    if let Some(command) = command {
        args.push(Word::known("-c", command.index));
        args.push(command);
    }
    args.extend_from_slice(extra);
    Invocation {
        name: "sh".to_owned(),
        args,
        trailing_unknown: inv.trailing_unknown,
        unknown_from: inv.unknown_from,
        stdin: inv.stdin,
        lookup: Lookup::SandboxPath,
        via: format!(" (run as a shell by {} at args[{at}])", inv.name),
    }
}

/// A command line a wrapper joins into one shell string (`watch ls -l`, `sudo -s ls`).
/// Unknown if any part is unknown.
fn joined(words: &[Word]) -> Option<Word> {
    let first = words.first()?;
    let texts: Option<Vec<&str>> = words.iter().map(Word::text).collect();
    Some(match texts {
        Some(t) => Word::known(t.join(" "), first.index),
        None => Word::unknown(first.index),
    })
}

fn parser<'s>(spec: &'s Spec, inv: &Invocation) -> Getopt<'s> {
    Getopt::new(
        spec,
        inv.args.clone(),
        inv.trailing_unknown,
        inv.unknown_from,
    )
}

/// Options up to the first operand (`+` mode), then the operands: that operand and
/// everything after it.
fn split(spec: &Spec, inv: &Invocation) -> Result<(Vec<Opt>, Vec<Word>), GetoptError> {
    let mut g = parser(spec, inv);
    let mut opts = Vec::new();
    loop {
        match g.next()? {
            Step::Opt(o) => opts.push(o),
            Step::Operand(w) => return Ok((opts, operands(w, &g))),
            Step::End => return Ok((opts, Vec::new())),
        }
    }
}

fn operands(first: Word, g: &Getopt<'_>) -> Vec<Word> {
    let mut out = vec![first];
    out.extend(g.rest());
    out
}

fn has(opts: &[Opt], keys: &[Key]) -> bool {
    opts.iter().any(|o| keys.contains(&o.key))
}

/// A wrapper whose operands are simply the program and its arguments.
fn plain(inv: &Invocation, spec: &Spec) -> Parsed {
    let (_, ops) = split(spec, inv)?;
    Ok(Outcome::with(child(inv, &ops, true)?))
}

/// `NAME=value` words a wrapper reads as variables, until the first other word.
fn assignments(words: &[Word]) -> (Vec<(String, usize)>, &[Word]) {
    let mut env = Vec::new();
    let mut rest = words;
    while let Some((w, tail)) = rest.split_first() {
        let Some((name, _)) = w.text().and_then(|t| t.split_once('=')) else {
            break;
        };
        env.push((name.to_owned(), w.index));
        rest = tail;
    }
    (env, rest)
}

/// The first of `words` filled in at run time (from `inv`'s input), as an error.
fn unknown_arg(inv: &Invocation, words: &[Word]) -> Result<(), WrapperError> {
    match words.iter().find(|w| w.text().is_none()) {
        Some(w) => Err(WrapperError::Args(GetoptError::ArgFromInput {
            index: w.index,
            from: inv.unknown_from,
        })),
        None => Ok(()),
    }
}

#[cfg(test)]
#[path = "wrappers_tests.rs"]
mod tests;
