//! GNU coreutils wrappers: `env`, `nice`, `nohup`, `timeout`, `stdbuf`, `time`, `chroot`
//! and the `coreutils` multi-call binary.

use super::*;

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

pub(super) fn env(inv: &Invocation) -> Parsed {
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
fn split_string(opt: &Opt) -> Result<Vec<Word>, WrapperError> {
    let Some(word) = &opt.value else {
        return Err(WrapperError::SplitStringNoValue);
    };
    let Some(text) = word.text() else {
        return Err(WrapperError::SplitStringFromInput { index: word.index });
    };
    if text.contains(['\\', '$', '\'', '"', '#']) {
        return Err(WrapperError::SplitStringQuoted { index: word.index });
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

pub(super) fn nice(inv: &Invocation) -> Parsed {
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
pub(super) const NOHUP: Spec = Spec {
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

pub(super) fn timeout(inv: &Invocation) -> Parsed {
    let (_, ops) = split(&TIMEOUT, inv)?;
    match ops.split_first() {
        Some((_duration, program)) => Ok(Outcome::with(child(inv, program, true)?)),
        None => Ok(Outcome::default()),
    }
}

/// GNU stdbuf: `getopt_long("+i:o:e:")`.
pub(super) const STDBUF: Spec = Spec {
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
pub(super) const TIME: Spec = Spec {
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

pub(super) fn chroot(inv: &Invocation) -> Parsed {
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
pub(super) fn coreutils(inv: &Invocation) -> Parsed {
    let Some((first, rest)) = inv.args.split_first() else {
        return Ok(Outcome::default());
    };
    let Some(text) = first.text() else {
        return Err(WrapperError::Args(GetoptError::ArgFromInput {
            index: first.index,
            from: inv.unknown_from,
        }));
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
        None => Err(WrapperError::NotCoreutilsProg {
            index: first.index,
            text: text.to_owned(),
        }),
    }
}
