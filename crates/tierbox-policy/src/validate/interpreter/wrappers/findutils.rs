//! GNU findutils: `xargs` and the actions of `find` that run a program.

use super::*;

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

pub(super) fn xargs(inv: &Invocation) -> Parsed {
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
pub(super) fn find(inv: &Invocation) -> Parsed {
    if inv.trailing_unknown {
        return Err(WrapperError::FindExpressionFromInput {
            from: inv.unknown_from,
        });
    }
    unknown_arg(inv, &inv.args)?;
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
            return Err(WrapperError::FindActionNoProgram {
                action: action.to_owned(),
                index: word.index,
            });
        };
        if program.text().is_some_and(|t| t.contains("{}")) {
            return Err(WrapperError::FindActionRunsFound {
                action: action.to_owned(),
                index: word.index,
            });
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
