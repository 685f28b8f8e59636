//! Wrappers: programs that run another program named in their arguments.
//!
//! For each wrapper we reproduce how it reads its own command line (its real option
//! table, from the tool's source) and return every program it would run, with the
//! arguments that program receives, so the caller can check each one like the command
//! itself. Some wrappers run a shell instead (`su`, `sg`, `watch`, `flock -c`,
//! `sudo -s`); they yield a synthetic `sh` invocation, with `-c CMD` when a command
//! string is given, so the interpreter and eval rules apply to it.
//!
//! Anything we cannot read with certainty is an `Err(reason)`, which the caller reports
//! as `exec.wrapper_unresolvable`: an unknown or ambiguous option, an argument filled in
//! at run time (xargs input), `find -exec {}`, `env -S` with quoting or `${VAR}`,
//! `sudo -e`. Variables a wrapper sets for its program (`env NAME=value`, `sudo
//! NAME=value`, `strace -E NAME=value`) are returned too, for the environment deny list.

use super::getopt::{Arg, Getopt, Key, Opt, Spec, Step};
use super::{Invocation, Lookup, Word};

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

type Parsed = Result<Outcome, String>;

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
) -> Result<Option<Invocation>, String> {
    let Some((first, rest)) = words.split_first() else {
        if inv.trailing_unknown {
            return Err(format!(
                "the program it runs comes from {}'s input",
                inv.unknown_from
            ));
        }
        return Ok(None);
    };
    let Some(name) = first.text() else {
        return Err(format!(
            "the program at args[{}] comes from {}'s input",
            first.index, inv.unknown_from
        ));
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
fn split(spec: &Spec, inv: &Invocation) -> Result<(Vec<Opt>, Vec<Word>), String> {
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

// ---- coreutils -------------------------------------------------------------------------

/// GNU env: `getopt_long("+C:iS:u:v0")`, then `-`, `NAME=value`…, then the program.
const ENV: Spec = Spec {
    short: &[
        ('i', NO),
        ('0', NO),
        ('u', REQ),
        ('C', REQ),
        ('S', REQ),
        ('v', NO),
    ],
    long: &[
        ("ignore-environment", Some('i'), NO),
        ("null", Some('0'), NO),
        ("unset", Some('u'), REQ),
        ("chdir", Some('C'), REQ),
        ("default-signal", None, OPT),
        ("ignore-signal", None, OPT),
        ("block-signal", None, OPT),
        ("list-signal-handling", None, NO),
        ("debug", Some('v'), NO),
        ("split-string", Some('S'), REQ),
        ("help", None, NO),
        ("version", None, NO),
    ],
    exact_long: false,
};

fn env(inv: &Invocation) -> Parsed {
    let mut g = parser(&ENV, inv);
    let ops = loop {
        match g.next()? {
            // env re-parses the split words as if they had been given in place of -S.
            Step::Opt(o) if o.key == Key::Short('S') => g.insert(split_string(&o)?),
            Step::Opt(_) => {}
            Step::Operand(w) => break operands(w, &g),
            Step::End => break Vec::new(),
        }
    };
    let ops = match ops.split_first() {
        Some((dash, rest)) if dash.text() == Some("-") => rest,
        _ => &ops[..],
    };
    let (env, program) = assignments(ops);
    Ok(Outcome {
        programs: child(inv, program, true)?.into_iter().collect(),
        env,
    })
}

/// The words of an `env -S` string, split on whitespace. Quoting, escapes, comments and
/// `${VAR}` expansion change the words in ways we do not reproduce, so they are refused.
fn split_string(opt: &Opt) -> Result<Vec<Word>, String> {
    let Some(word) = &opt.value else {
        return Err("-S has no value".to_owned());
    };
    let Some(text) = word.text() else {
        return Err(format!(
            "the -S string at args[{}] is filled in at run time",
            word.index
        ));
    };
    if text.contains(['\\', '$', '\'', '"', '#']) {
        return Err(format!(
            "the -S string at args[{}] uses quoting, escapes, comments or ${{VAR}} expansion",
            word.index
        ));
    }
    let words = text
        .split([' ', '\t', '\n', '\x0b', '\x0c', '\r'])
        .filter(|s| !s.is_empty());
    Ok(words.map(|s| Word::known(s, word.index)).collect())
}

/// GNU nice: `getopt_long("+n:")`, plus the historical `-N`, `--N`, `-+N` adjustments.
const NICE: Spec = Spec {
    short: &[('n', REQ)],
    long: &[
        ("adjustment", Some('n'), REQ),
        ("help", None, NO),
        ("version", None, NO),
    ],
    exact_long: false,
};

fn nice(inv: &Invocation) -> Parsed {
    let mut g = parser(&NICE, inv);
    loop {
        if g.peek_option_word().is_some_and(is_legacy_adjustment) {
            g.skip();
            continue;
        }
        match g.next()? {
            Step::Opt(_) => {}
            Step::Operand(w) => return Ok(Outcome::with(child(inv, &operands(w, &g), true)?)),
            Step::End => return Ok(Outcome::default()),
        }
    }
}

/// `-5`, `--5`, `-+5`: nice.c's `s[0] == '-' && ISDIGIT (s[1 + (s[1] == '-' || s[1] == '+')])`.
fn is_legacy_adjustment(text: &str) -> bool {
    let Some(body) = text.strip_prefix('-') else {
        return false;
    };
    let body = body.strip_prefix(['-', '+']).unwrap_or(body);
    body.starts_with(|c: char| c.is_ascii_digit())
}

/// GNU nohup: only `--help` and `--version`.
const NOHUP: Spec = Spec {
    short: &[],
    long: &[("help", None, NO), ("version", None, NO)],
    exact_long: false,
};

/// GNU timeout: `getopt_long("+fk:ps:v")`, then DURATION, then the program.
const TIMEOUT: Spec = Spec {
    short: &[('f', NO), ('k', REQ), ('p', NO), ('s', REQ), ('v', NO)],
    long: &[
        ("foreground", Some('f'), NO),
        ("kill-after", Some('k'), REQ),
        ("preserve-status", Some('p'), NO),
        ("signal", Some('s'), REQ),
        ("verbose", Some('v'), NO),
        ("help", None, NO),
        ("version", None, NO),
    ],
    exact_long: false,
};

fn timeout(inv: &Invocation) -> Parsed {
    let (_, ops) = split(&TIMEOUT, inv)?;
    match ops.split_first() {
        Some((_duration, program)) => Ok(Outcome::with(child(inv, program, true)?)),
        None => Ok(Outcome::default()),
    }
}

/// GNU stdbuf: `getopt_long("+i:o:e:")`.
const STDBUF: Spec = Spec {
    short: &[('i', REQ), ('o', REQ), ('e', REQ)],
    long: &[
        ("input", Some('i'), REQ),
        ("output", Some('o'), REQ),
        ("error", Some('e'), REQ),
        ("help", None, NO),
        ("version", None, NO),
    ],
    exact_long: false,
};

/// GNU time (`/usr/bin/time`): `getopt_long("+ao:f:pqvV")`.
const TIME: Spec = Spec {
    short: &[
        ('a', NO),
        ('o', REQ),
        ('f', REQ),
        ('p', NO),
        ('q', NO),
        ('v', NO),
        ('V', NO),
    ],
    long: &[
        ("append", Some('a'), NO),
        ("output", Some('o'), REQ),
        ("format", Some('f'), REQ),
        ("portability", Some('p'), NO),
        ("quiet", Some('q'), NO),
        ("verbose", Some('v'), NO),
        ("help", None, NO),
        ("version", Some('V'), NO),
    ],
    exact_long: false,
};

/// GNU chroot: long options only, then NEWROOT, then the program (default `$SHELL -i`),
/// which is found inside NEWROOT, not in our PATH.
const CHROOT: Spec = Spec {
    short: &[],
    long: &[
        ("groups", None, REQ),
        ("userspec", None, REQ),
        ("skip-chdir", None, NO),
        ("help", None, NO),
        ("version", None, NO),
    ],
    exact_long: false,
};

fn chroot(inv: &Invocation) -> Parsed {
    let (_, ops) = split(&CHROOT, inv)?;
    let Some((root, program)) = ops.split_first() else {
        return Ok(Outcome::default());
    };
    let run = match child(inv, program, true)? {
        Some(p) => p,
        None => shell(inv, root.index, None, &[Word::known("-i", root.index)]),
    };
    Ok(Outcome::with(Some(Invocation {
        lookup: Lookup::Elsewhere,
        ..run
    })))
}

/// The coreutils multi-call binary: `coreutils --coreutils-prog=NAME ARGS`.
fn coreutils(inv: &Invocation) -> Parsed {
    let Some((first, rest)) = inv.args.split_first() else {
        return Ok(Outcome::default());
    };
    let Some(text) = first.text() else {
        return Err(format!(
            "args[{}] is filled in from {}'s input",
            first.index, inv.unknown_from
        ));
    };
    let prog = text
        .strip_prefix("--coreutils-prog=")
        .or_else(|| text.strip_prefix("--coreutils-prog-shebang="));
    match prog {
        Some(name) => {
            let mut words = vec![Word::known(name, first.index)];
            words.extend_from_slice(rest);
            let program = child(inv, &words, true)?.map(|p| Invocation {
                lookup: Lookup::Elsewhere,
                ..p
            });
            Ok(Outcome::with(program))
        }
        None if text.starts_with("--") => Ok(Outcome::default()),
        None => Err(format!(
            "args[{}] {text:?} is not --coreutils-prog=NAME",
            first.index
        )),
    }
}

// ---- findutils -------------------------------------------------------------------------

/// GNU xargs: `getopt_long("+0a:E:e::i::I:l::L:n:oprs:txP:d:")`. The program defaults to
/// `echo`. Input is appended to its arguments, or with `-I R` substituted for `R`; either
/// way those arguments are unknown here. Its stdin is `/dev/null` unless `-a FILE`.
const XARGS: Spec = Spec {
    short: &[
        ('0', NO),
        ('a', REQ),
        ('E', REQ),
        ('e', OPT),
        ('i', OPT),
        ('I', REQ),
        ('l', OPT),
        ('L', REQ),
        ('n', REQ),
        ('o', NO),
        ('p', NO),
        ('r', NO),
        ('s', REQ),
        ('t', NO),
        ('x', NO),
        ('P', REQ),
        ('d', REQ),
    ],
    long: &[
        ("null", Some('0'), NO),
        ("arg-file", Some('a'), REQ),
        ("delimiter", Some('d'), REQ),
        ("eof", Some('e'), OPT),
        ("replace", Some('I'), OPT),
        ("max-lines", Some('l'), OPT),
        ("max-args", Some('n'), REQ),
        ("open-tty", Some('o'), NO),
        ("interactive", Some('p'), NO),
        ("no-run-if-empty", Some('r'), NO),
        ("max-chars", Some('s'), REQ),
        ("verbose", Some('t'), NO),
        ("show-limits", None, NO),
        ("exit", Some('x'), NO),
        ("max-procs", Some('P'), REQ),
        ("process-slot-var", None, REQ),
        ("version", None, NO),
        ("help", None, NO),
    ],
    exact_long: false,
};

fn xargs(inv: &Invocation) -> Parsed {
    let (opts, ops) = split(&XARGS, inv)?;
    let mut replace: Option<String> = None;
    let mut ever_replaced: Vec<String> = Vec::new();
    for o in &opts {
        match o.key {
            Key::Short('I' | 'i') => {
                let r = o.value_text().unwrap_or("{}").to_owned();
                ever_replaced.push(r.clone());
                replace = Some(r);
            }
            // xargs.c: -L and -l cancel -I; -n cancels it too, except `-n1` after -I.
            Key::Short('L' | 'l') => replace = None,
            Key::Short('n') if !(o.value_text() == Some("1") && replace.is_some()) => {
                replace = None
            }
            _ => {}
        }
    }
    let arg_file = has(&opts, &[Key::Short('a')]);
    let tty = has(&opts, &[Key::Short('o')]);
    let filled = |w: &Word| match w.text() {
        Some(t)
            if ever_replaced
                .iter()
                .any(|r| !r.is_empty() && t.contains(r.as_str())) =>
        {
            Word::unknown(w.index)
        }
        _ => w.clone(),
    };
    let words: Vec<Word> = ops.iter().map(filled).collect();
    let runner = Invocation {
        trailing_unknown: replace.is_none(),
        unknown_from: "xargs",
        ..inv.clone()
    };
    let keeps_stdin = arg_file && !tty;
    if words.is_empty() {
        let echo = Invocation {
            via: format!(" (run by {} by default)", inv.name),
            ..default_echo(&runner, keeps_stdin)
        };
        return Ok(Outcome::with(Some(echo)));
    }
    Ok(Outcome::with(child(&runner, &words, keeps_stdin)?))
}

fn default_echo(runner: &Invocation, keeps_stdin: bool) -> Invocation {
    Invocation {
        name: "echo".to_owned(),
        args: Vec::new(),
        stdin: runner.stdin && keeps_stdin,
        lookup: Lookup::SandboxPath,
        ..runner.clone()
    }
}

/// GNU find: every `-exec`, `-execdir`, `-ok`, `-okdir` action runs the word after it,
/// with the words up to `;` (or `{} +`). Every such word is treated as an action, even
/// where find would read it as another test's value (`-name -exec`): that can only refuse
/// more, never less.
fn find(inv: &Invocation) -> Parsed {
    if inv.trailing_unknown {
        return Err(format!(
            "its expression continues with arguments from {}'s input",
            inv.unknown_from
        ));
    }
    if let Some(w) = inv.args.iter().find(|w| w.text().is_none()) {
        return Err(format!(
            "args[{}] is filled in from {}'s input",
            w.index, inv.unknown_from
        ));
    }
    let words = &inv.args;
    let mut out = Outcome::default();
    let mut i = 0;
    while let Some(word) = words.get(i) {
        i += 1;
        let action = word.text().unwrap_or_default();
        if !matches!(action, "-exec" | "-execdir" | "-ok" | "-okdir") {
            continue;
        }
        let end = exec_end(words, i);
        let command = words.get(i..end).unwrap_or_default();
        let Some(program) = command.first() else {
            return Err(format!("{action} at args[{}] names no program", word.index));
        };
        if program.text().is_some_and(|t| t.contains("{}")) {
            return Err(format!(
                "{action} at args[{}] runs the files find finds",
                word.index
            ));
        }
        // -ok and -okdir give the command /dev/null as stdin (find reads the answer).
        let keeps_stdin = matches!(action, "-exec" | "-execdir");
        out.programs.extend(child(inv, command, keeps_stdin)?);
        i = end + 1;
    }
    Ok(out)
}

/// The index of the `;` or `+` (right after `{}`) that ends an `-exec` command starting
/// at `start`, or the end of the words.
fn exec_end(words: &[Word], start: usize) -> usize {
    (start..words.len())
        .find(|&j| {
            let text = words.get(j).and_then(Word::text);
            let after_braces = j > start + 1 && words.get(j - 1).and_then(Word::text) == Some("{}");
            text == Some(";") || (text == Some("+") && after_braces)
        })
        .unwrap_or(words.len())
}

// ---- privilege wrappers ----------------------------------------------------------------

/// sudo 1.9: `getopt_long("+Aa:BbC:c:D:Eeg:Hh::iKklNnPp:R:r:SsT:t:U:u:Vv")`, with
/// `NAME=value` words allowed between options; `-s`/`-i` (or no command at all) run a
/// shell, with the command joined into `-c`.
const SUDO: Spec = Spec {
    short: &[
        ('A', NO),
        ('a', REQ),
        ('B', NO),
        ('b', NO),
        ('C', REQ),
        ('c', REQ),
        ('D', REQ),
        ('E', OPT),
        ('e', NO),
        ('g', REQ),
        ('H', NO),
        ('h', OPT),
        ('i', NO),
        ('K', NO),
        ('k', NO),
        ('l', NO),
        ('N', NO),
        ('n', NO),
        ('P', NO),
        ('p', REQ),
        ('R', REQ),
        ('r', REQ),
        ('S', NO),
        ('s', NO),
        ('T', REQ),
        ('t', REQ),
        ('U', REQ),
        ('u', REQ),
        ('V', NO),
        ('v', NO),
    ],
    long: &[
        ("background", Some('b'), NO),
        ("preserve-env", Some('E'), OPT),
        ("edit", Some('e'), NO),
        ("set-home", Some('H'), NO),
        ("login", Some('i'), NO),
        ("remove-timestamp", Some('K'), NO),
        ("list", Some('l'), NO),
        ("preserve-groups", Some('P'), NO),
        ("shell", Some('s'), NO),
        ("other-user", Some('U'), REQ),
        ("validate", Some('v'), NO),
        ("askpass", Some('A'), NO),
        ("auth-type", Some('a'), REQ),
        ("bell", Some('B'), NO),
        ("close-from", Some('C'), REQ),
        ("login-class", Some('c'), REQ),
        ("chdir", Some('D'), REQ),
        ("group", Some('g'), REQ),
        ("help", Some('h'), NO),
        ("host", None, REQ),
        ("reset-timestamp", Some('k'), NO),
        ("no-update", Some('N'), NO),
        ("non-interactive", Some('n'), NO),
        ("prompt", Some('p'), REQ),
        ("chroot", Some('R'), REQ),
        ("role", Some('r'), REQ),
        ("stdin", Some('S'), NO),
        ("command-timeout", Some('T'), REQ),
        ("type", Some('t'), REQ),
        ("user", Some('u'), REQ),
        ("version", Some('V'), NO),
    ],
    exact_long: false,
};

fn sudo(inv: &Invocation) -> Parsed {
    let mut g = parser(&SUDO, inv);
    let mut opts = Vec::new();
    let mut env = Vec::new();
    let command = loop {
        match g.next()? {
            Step::Opt(o) => opts.push(o),
            Step::Operand(w) if !g.after_dashdash() && is_sudo_envar(&w) => {
                env.extend(assignments(std::slice::from_ref(&w)).0);
            }
            Step::Operand(w) => break operands(w, &g),
            Step::End => break Vec::new(),
        }
    };
    if has(&opts, &[Key::Short('e')]) {
        return Err("sudo -e runs the user's editor".to_owned());
    }
    if opts
        .iter()
        .any(|o| o.key == Key::Short('h') && o.value.is_none())
        && !command.is_empty()
    {
        return Err("sudo -h followed by a word may name a remote host or a command".to_owned());
    }
    let shell_mode = has(&opts, &[Key::Short('s'), Key::Short('i')]);
    let no_run = has(
        &opts,
        &[
            Key::Short('l'),
            Key::Short('v'),
            Key::Short('V'),
            Key::Short('K'),
            Key::Short('h'),
            Key::Short('k'),
        ],
    );
    let program = match (command.first(), shell_mode) {
        (None, false) if no_run => None,
        (None, _) => Some(shell(
            inv,
            inv.args.first().map_or(0, |w| w.index),
            None,
            &[],
        )),
        (Some(first), true) => Some(shell(inv, first.index, joined(&command), &[])),
        (Some(_), false) => child(inv, &command, true)?,
    };
    Ok(Outcome {
        programs: program.into_iter().collect(),
        env,
    })
}

/// sudo.c `is_envar`: a word with `=` that does not start with `/` or `=`.
fn is_sudo_envar(w: &Word) -> bool {
    w.text()
        .is_some_and(|t| !t.starts_with(['/', '=']) && t.contains('='))
}

/// OpenBSD doas: `getopt("+C:Lnsu:")`.
const DOAS: Spec = Spec {
    short: &[('C', REQ), ('L', NO), ('n', NO), ('s', NO), ('u', REQ)],
    long: &[],
    exact_long: true,
};

fn doas(inv: &Invocation) -> Parsed {
    let (opts, ops) = split(&DOAS, inv)?;
    if has(&opts, &[Key::Short('C'), Key::Short('L')]) {
        return Ok(Outcome::default());
    }
    if has(&opts, &[Key::Short('s')]) || ops.is_empty() {
        let at = inv.args.first().map_or(0, |w| w.index);
        return Ok(Outcome::with(Some(shell(inv, at, None, &[]))));
    }
    Ok(Outcome::with(child(inv, &ops, true)?))
}

/// util-linux su (permuting `getopt_long`): always runs a shell (`-s SHELL`, else the
/// user's login shell, checked as `sh`); `-c CMD` is shell eval; words after the user go
/// to the shell too.
const SU: Spec = Spec {
    short: &[
        ('c', REQ),
        ('f', NO),
        ('g', REQ),
        ('G', REQ),
        ('l', NO),
        ('m', NO),
        ('p', NO),
        ('P', NO),
        ('s', REQ),
        ('w', REQ),
        ('h', NO),
        ('V', NO),
    ],
    long: SU_LONG,
    exact_long: false,
};

const SU_LONG: &[(&str, Option<char>, Arg)] = &[
    ("command", Some('c'), REQ),
    ("session-command", Some('C'), REQ),
    ("fast", Some('f'), NO),
    ("group", Some('g'), REQ),
    ("supp-group", Some('G'), REQ),
    ("login", Some('l'), NO),
    ("preserve-environment", Some('m'), NO),
    ("pty", Some('P'), NO),
    ("shell", Some('s'), REQ),
    ("whitelist-environment", Some('w'), REQ),
    ("help", Some('h'), NO),
    ("version", Some('V'), NO),
];

/// util-linux runuser: su's options plus `-u USER`, which runs the command directly.
const RUNUSER: Spec = Spec {
    short: &[
        ('c', REQ),
        ('f', NO),
        ('g', REQ),
        ('G', REQ),
        ('l', NO),
        ('m', NO),
        ('p', NO),
        ('P', NO),
        ('s', REQ),
        ('u', REQ),
        ('w', REQ),
        ('h', NO),
        ('V', NO),
    ],
    long: RUNUSER_LONG,
    exact_long: false,
};

const RUNUSER_LONG: &[(&str, Option<char>, Arg)] = &[
    ("command", Some('c'), REQ),
    ("session-command", Some('C'), REQ),
    ("fast", Some('f'), NO),
    ("group", Some('g'), REQ),
    ("supp-group", Some('G'), REQ),
    ("login", Some('l'), NO),
    ("preserve-environment", Some('m'), NO),
    ("pty", Some('P'), NO),
    ("shell", Some('s'), REQ),
    ("user", Some('u'), REQ),
    ("whitelist-environment", Some('w'), REQ),
    ("help", Some('h'), NO),
    ("version", Some('V'), NO),
];

fn su(inv: &Invocation, spec: &Spec) -> Parsed {
    let mut g = parser(spec, inv);
    let mut opts = Vec::new();
    let mut ops = Vec::new();
    loop {
        match g.next()? {
            Step::Opt(o) => opts.push(o),
            Step::Operand(w) => ops.push(w),
            Step::End => break,
        }
    }
    let command = opts.iter().find(|o| matches!(o.key, Key::Short('c' | 'C')));
    if has(&opts, &[Key::Short('u')]) && command.is_none() {
        // runuser -u USER COMMAND…: the command runs directly.
        return Ok(Outcome::with(child(inv, &ops, true)?));
    }
    let ops: Vec<Word> = ops
        .into_iter()
        .skip_while(|w| w.text() == Some("-"))
        .collect();
    let extra = ops.get(1..).unwrap_or_default();
    let at = command
        .and_then(|c| c.value.as_ref())
        .or(ops.first())
        .map_or(0, |w| w.index);
    let mut run = shell(inv, at, command.and_then(|c| c.value.clone()), extra);
    if let Some(custom) = opts
        .iter()
        .rev()
        .find(|o| o.key == Key::Short('s'))
        .and_then(|o| o.value.as_ref())
    {
        let Some(name) = custom.text() else {
            return Err(format!(
                "the shell at args[{}] is filled in at run time",
                custom.index
            ));
        };
        run.name = name.to_owned();
    }
    Ok(Outcome::with(Some(run)))
}

/// shadow sg: `sg [-] [GROUP [-c] COMMAND]`, COMMAND run by `/bin/sh -c`; without it, a
/// shell.
fn sg(inv: &Invocation) -> Parsed {
    if let Some(w) = inv.args.iter().find(|w| w.text().is_none()) {
        return Err(format!(
            "args[{}] is filled in from {}'s input",
            w.index, inv.unknown_from
        ));
    }
    let words = match inv.args.split_first() {
        Some((dash, rest)) if dash.text() == Some("-") => rest,
        _ => &inv.args[..],
    };
    let Some((group, rest)) = words.split_first() else {
        return Ok(Outcome::default());
    };
    let rest = match rest.split_first() {
        Some((c, tail)) if c.text() == Some("-c") => tail,
        _ => rest,
    };
    let run = match rest.split_first() {
        Some((command, extra)) => shell(inv, command.index, Some(command.clone()), extra),
        None => shell(inv, group.index, None, &[]),
    };
    Ok(Outcome::with(Some(run)))
}

// ---- util-linux and friends ------------------------------------------------------------

/// util-linux setsid: `getopt_long("+cfhVw")`.
const SETSID: Spec = Spec {
    short: &[('c', NO), ('f', NO), ('w', NO), ('h', NO), ('V', NO)],
    long: &[
        ("ctty", Some('c'), NO),
        ("fork", Some('f'), NO),
        ("wait", Some('w'), NO),
        ("help", Some('h'), NO),
        ("version", Some('V'), NO),
    ],
    exact_long: false,
};

/// util-linux flock: options, FILE, then `-c CMD` (run by a shell) or a program.
const FLOCK: Spec = Spec {
    short: &[
        ('s', NO),
        ('x', NO),
        ('e', NO),
        ('n', NO),
        ('o', NO),
        ('F', NO),
        ('u', NO),
        ('w', REQ),
        ('E', REQ),
        ('c', REQ),
        ('h', NO),
        ('V', NO),
    ],
    long: &[
        ("shared", Some('s'), NO),
        ("exclusive", Some('x'), NO),
        ("unlock", Some('u'), NO),
        ("nonblock", Some('n'), NO),
        ("nb", Some('n'), NO),
        ("close", Some('o'), NO),
        ("no-fork", Some('F'), NO),
        ("timeout", Some('w'), REQ),
        ("wait", Some('w'), REQ),
        ("conflict-exit-code", Some('E'), REQ),
        ("command", Some('c'), REQ),
        ("verbose", None, NO),
        ("fcntl", None, NO),
        ("help", Some('h'), NO),
        ("version", Some('V'), NO),
    ],
    exact_long: false,
};

fn flock(inv: &Invocation) -> Parsed {
    let (opts, ops) = split(&FLOCK, inv)?;
    if let Some(c) = opts.iter().find(|o| o.key == Key::Short('c')) {
        let at = c.value.as_ref().map_or(0, |w| w.index);
        return Ok(Outcome::with(Some(shell(inv, at, c.value.clone(), &[]))));
    }
    let Some((_file, after)) = ops.split_first() else {
        return Ok(Outcome::default());
    };
    match after.split_first() {
        Some((flag, tail)) if matches!(flag.text(), Some("-c" | "--command")) => Ok(Outcome::with(
            Some(shell(inv, flag.index, tail.first().cloned(), &[])),
        )),
        _ => Ok(Outcome::with(child(inv, after, true)?)),
    }
}

/// util-linux ionice: `getopt_long("+n:c:p:P:u:tVh")`; with `-p`/`-P`/`-u` the operands
/// are ids, not a program.
const IONICE: Spec = Spec {
    short: &[
        ('n', REQ),
        ('c', REQ),
        ('p', REQ),
        ('P', REQ),
        ('u', REQ),
        ('t', NO),
        ('V', NO),
        ('h', NO),
    ],
    long: &[
        ("classdata", Some('n'), REQ),
        ("class", Some('c'), REQ),
        ("pid", Some('p'), REQ),
        ("pgid", Some('P'), REQ),
        ("uid", Some('u'), REQ),
        ("ignore", Some('t'), NO),
        ("help", Some('h'), NO),
        ("version", Some('V'), NO),
    ],
    exact_long: false,
};

fn ionice(inv: &Invocation) -> Parsed {
    let (opts, ops) = split(&IONICE, inv)?;
    if has(&opts, &[Key::Short('p'), Key::Short('P'), Key::Short('u')]) {
        return Ok(Outcome::default());
    }
    Ok(Outcome::with(child(inv, &ops, true)?))
}

/// util-linux taskset: `getopt_long("+apchV")`, then MASK (or LIST), then the program;
/// with `-p` the operands are a mask and a pid.
const TASKSET: Spec = Spec {
    short: &[('a', NO), ('p', NO), ('c', NO), ('h', NO), ('V', NO)],
    long: &[
        ("all-tasks", Some('a'), NO),
        ("pid", Some('p'), NO),
        ("cpu-list", Some('c'), NO),
        ("help", Some('h'), NO),
        ("version", Some('V'), NO),
    ],
    exact_long: false,
};

fn taskset(inv: &Invocation) -> Parsed {
    let (opts, ops) = split(&TASKSET, inv)?;
    if has(&opts, &[Key::Short('p')]) {
        return Ok(Outcome::default());
    }
    match ops.split_first() {
        Some((_mask, program)) => Ok(Outcome::with(child(inv, program, true)?)),
        None => Ok(Outcome::default()),
    }
}

/// util-linux chrt: options, then PRIORITY (optional in newer releases), then the
/// program; with `-p` or `-m` nothing runs.
const CHRT: Spec = Spec {
    short: &[
        ('a', NO),
        ('b', NO),
        ('d', NO),
        ('e', NO),
        ('f', NO),
        ('i', NO),
        ('m', NO),
        ('o', NO),
        ('p', NO),
        ('r', NO),
        ('R', NO),
        ('v', NO),
        ('h', NO),
        ('V', NO),
        ('T', REQ),
        ('P', REQ),
        ('D', REQ),
    ],
    long: &[
        ("all-tasks", Some('a'), NO),
        ("batch", Some('b'), NO),
        ("deadline", Some('d'), NO),
        ("ext", Some('e'), NO),
        ("fifo", Some('f'), NO),
        ("idle", Some('i'), NO),
        ("max", Some('m'), NO),
        ("other", Some('o'), NO),
        ("pid", Some('p'), NO),
        ("rr", Some('r'), NO),
        ("reset-on-fork", Some('R'), NO),
        ("verbose", Some('v'), NO),
        ("help", Some('h'), NO),
        ("version", Some('V'), NO),
        ("sched-runtime", Some('T'), REQ),
        ("sched-period", Some('P'), REQ),
        ("sched-deadline", Some('D'), REQ),
    ],
    exact_long: false,
};

fn chrt(inv: &Invocation) -> Parsed {
    let (opts, ops) = split(&CHRT, inv)?;
    if has(&opts, &[Key::Short('p'), Key::Short('m')]) {
        return Ok(Outcome::default());
    }
    let numeric = |w: &Word| {
        w.text()
            .is_some_and(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
    };
    let program = match ops.split_first() {
        Some((priority, rest)) if numeric(priority) => rest,
        _ => &ops[..],
    };
    Ok(Outcome::with(child(inv, program, true)?))
}

/// strace: `getopt_long("+a:Ab:cCdDe:E:fFhiI:knN:o:O:p:P:qrs:S:tTu:U:vVwxX:yYzZ")`.
/// Its long-option table is larger than ours, so long options must be spelt in full.
const STRACE: Spec = Spec {
    short: &[
        ('a', REQ),
        ('A', NO),
        ('b', REQ),
        ('c', NO),
        ('C', NO),
        ('d', NO),
        ('D', NO),
        ('e', REQ),
        ('E', REQ),
        ('f', NO),
        ('F', NO),
        ('h', NO),
        ('i', NO),
        ('I', REQ),
        ('k', NO),
        ('n', NO),
        ('N', NO),
        ('o', REQ),
        ('O', REQ),
        ('p', REQ),
        ('P', REQ),
        ('q', NO),
        ('r', NO),
        ('s', REQ),
        ('S', REQ),
        ('t', NO),
        ('T', NO),
        ('u', REQ),
        ('U', REQ),
        ('v', NO),
        ('V', NO),
        ('w', NO),
        ('x', NO),
        ('X', REQ),
        ('y', NO),
        ('Y', NO),
        ('z', NO),
        ('Z', NO),
    ],
    long: &[
        ("columns", Some('a'), REQ),
        ("output-append-mode", Some('A'), NO),
        ("detach-on", Some('b'), REQ),
        ("summary-only", Some('c'), NO),
        ("summary", Some('C'), NO),
        ("debug", Some('d'), NO),
        ("daemonize", None, OPT),
        ("env", Some('E'), REQ),
        ("follow-forks", Some('f'), NO),
        ("output-separately", None, NO),
        ("help", Some('h'), NO),
        ("instruction-pointer", Some('i'), NO),
        ("interruptible", Some('I'), REQ),
        ("stack-trace", Some('k'), NO),
        ("output", Some('o'), REQ),
        ("summary-syscall-overhead", Some('O'), REQ),
        ("attach", Some('p'), REQ),
        ("trace-path", Some('P'), REQ),
        ("quiet", None, OPT),
        ("silent", None, OPT),
        ("relative-timestamps", None, OPT),
        ("string-limit", Some('s'), REQ),
        ("summary-sort-by", Some('S'), REQ),
        ("absolute-timestamps", None, OPT),
        ("timestamps", None, OPT),
        ("syscall-times", None, OPT),
        ("user", Some('u'), REQ),
        ("summary-columns", Some('U'), REQ),
        ("no-abbrev", Some('v'), NO),
        ("version", Some('V'), NO),
        ("summary-wall-clock", Some('w'), NO),
        ("const-print-style", Some('X'), REQ),
        ("decode-fds", None, OPT),
        ("decode-pids", None, OPT),
        ("successful-only", Some('z'), NO),
        ("failed-only", Some('Z'), NO),
        ("trace", None, REQ),
        ("signal", None, REQ),
        ("status", None, REQ),
        ("abbrev", None, REQ),
        ("verbose", None, REQ),
        ("raw", None, REQ),
        ("read", None, REQ),
        ("write", None, REQ),
        ("inject", None, REQ),
        ("fault", None, REQ),
        ("seccomp-bpf", None, NO),
        ("kill-on-exit", None, NO),
        ("syscall-limit", None, REQ),
        ("argv0", None, REQ),
        ("tips", None, OPT),
    ],
    exact_long: true,
};

fn strace(inv: &Invocation) -> Parsed {
    let (opts, ops) = split(&STRACE, inv)?;
    let env = opts
        .iter()
        .filter(|o| o.key == Key::Short('E'))
        .filter_map(|o| o.value.as_ref())
        .filter_map(|w| Some((w.text()?.split('=').next()?.to_owned(), w.index)))
        .collect();
    Ok(Outcome {
        programs: child(inv, &ops, true)?.into_iter().collect(),
        env,
    })
}

/// ltrace: `getopt_long("+a:A:bcCD:e:fF:hiLl:n:o:p:rs:StTu:Vw:x:")`; long options in full.
const LTRACE: Spec = Spec {
    short: &[
        ('a', REQ),
        ('A', REQ),
        ('b', NO),
        ('c', NO),
        ('C', NO),
        ('D', REQ),
        ('e', REQ),
        ('f', NO),
        ('F', REQ),
        ('h', NO),
        ('i', NO),
        ('L', NO),
        ('l', REQ),
        ('n', REQ),
        ('o', REQ),
        ('p', REQ),
        ('r', NO),
        ('s', REQ),
        ('S', NO),
        ('t', NO),
        ('T', NO),
        ('u', REQ),
        ('V', NO),
        ('w', REQ),
        ('x', REQ),
    ],
    long: &[
        ("align", Some('a'), REQ),
        ("config", Some('F'), REQ),
        ("demangle", Some('C'), NO),
        ("help", Some('h'), NO),
        ("indent", Some('n'), REQ),
        ("library", Some('l'), REQ),
        ("output", Some('o'), REQ),
        ("version", Some('V'), NO),
        ("no-signals", Some('b'), NO),
        ("where", Some('w'), REQ),
    ],
    exact_long: true,
};

/// procps watch: `getopt_long("+bcCd::eghn:pq:rtwvx")`. Without `-x` the command words
/// are joined and run by `sh -c`.
const WATCH: Spec = Spec {
    short: &[
        ('b', NO),
        ('c', NO),
        ('C', NO),
        ('d', OPT),
        ('e', NO),
        ('g', NO),
        ('h', NO),
        ('n', REQ),
        ('p', NO),
        ('q', REQ),
        ('r', NO),
        ('t', NO),
        ('w', NO),
        ('v', NO),
        ('x', NO),
    ],
    long: &[
        ("beep", Some('b'), NO),
        ("color", Some('c'), NO),
        ("no-color", Some('C'), NO),
        ("differences", Some('d'), OPT),
        ("errexit", Some('e'), NO),
        ("chgexit", Some('g'), NO),
        ("help", Some('h'), NO),
        ("interval", Some('n'), REQ),
        ("precise", Some('p'), NO),
        ("equexit", Some('q'), REQ),
        ("no-rerun", Some('r'), NO),
        ("no-title", Some('t'), NO),
        ("no-wrap", Some('w'), NO),
        ("version", Some('v'), NO),
        ("exec", Some('x'), NO),
    ],
    exact_long: false,
};

fn watch(inv: &Invocation) -> Parsed {
    let (opts, ops) = split(&WATCH, inv)?;
    if has(&opts, &[Key::Short('x')]) {
        return Ok(Outcome::with(child(inv, &ops, true)?));
    }
    let Some(first) = ops.first() else {
        return Ok(Outcome::default());
    };
    Ok(Outcome::with(Some(shell(
        inv,
        first.index,
        joined(&ops),
        &[],
    ))))
}

/// expect's unbuffer: `unbuffer [-p] PROGRAM ARGS`.
fn unbuffer(inv: &Invocation) -> Parsed {
    let words = match inv.args.split_first() {
        Some((p, rest)) if p.text() == Some("-p") => rest,
        _ => &inv.args[..],
    };
    Ok(Outcome::with(child(inv, words, true)?))
}

#[cfg(test)]
#[path = "wrappers_tests.rs"]
mod tests;
