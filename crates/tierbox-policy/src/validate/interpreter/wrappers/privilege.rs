//! Privilege wrappers: `sudo`, `doas`, `su`, `runuser` and `sg`.

use super::*;

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

pub(super) fn sudo(inv: &Invocation) -> Parsed {
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
        return Err(WrapperError::SudoEdit);
    }
    if opts
        .iter()
        .any(|o| o.key == Key::Short('h') && o.value.is_none())
        && !command.is_empty()
    {
        return Err(WrapperError::SudoHostOrCommand);
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

pub(super) fn doas(inv: &Invocation) -> Parsed {
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
pub(super) const SU: Spec = Spec {
    short: &SU_SHORT,
    long: &SU_LONG,
    exact_long: false,
};

/// su's short options (runuser's too, with `-u`).
const SU_SHORT: [(char, Arg); 12] = [
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
];

/// su's long options (runuser's too, with `--user`).
const SU_LONG: [(&str, Option<char>, Arg); 12] = [
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
/// (The getopt tables are looked up by name, so the order of the entries is not
/// significant.)
pub(super) const RUNUSER: Spec = Spec {
    short: &RUNUSER_SHORT,
    long: &RUNUSER_LONG,
    exact_long: false,
};

const RUNUSER_SHORT: [(char, Arg); 13] = plus_one(SU_SHORT, ('u', REQ));

const RUNUSER_LONG: [(&str, Option<char>, Arg); 13] = plus_one(SU_LONG, ("user", Some('u'), REQ));

/// `table` with `extra` after its entries (`M` is `N + 1`, checked when it is compiled).
const fn plus_one<T: Copy, const N: usize, const M: usize>(table: [T; N], extra: T) -> [T; M] {
    assert!(M == N + 1, "plus_one makes a table one entry longer");
    let mut out = [extra; M];
    let mut i = 0;
    while i < N {
        out[i] = table[i];
        i += 1;
    }
    out
}

pub(super) fn su(inv: &Invocation, spec: &Spec) -> Parsed {
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
            return Err(WrapperError::ShellFromInput {
                index: custom.index,
            });
        };
        run.name = name.to_owned();
    }
    Ok(Outcome::with(Some(run)))
}

/// shadow sg: `sg [-] [GROUP [-c] COMMAND]`, COMMAND run by `/bin/sh -c`; without it, a
/// shell.
pub(super) fn sg(inv: &Invocation) -> Parsed {
    unknown_arg(inv, &inv.args)?;
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
