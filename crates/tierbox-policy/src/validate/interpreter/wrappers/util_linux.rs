//! util-linux and friends: `setsid`, `flock`, `ionice`, `taskset`, `chrt`, tracers
//! (`strace`, `ltrace`), `watch` and `unbuffer`.

use super::*;

/// util-linux setsid: `getopt_long("+cfhVw")`.
pub(super) const SETSID: Spec = Spec {
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

pub(super) fn flock(inv: &Invocation) -> Parsed {
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

pub(super) fn ionice(inv: &Invocation) -> Parsed {
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

pub(super) fn taskset(inv: &Invocation) -> Parsed {
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

pub(super) fn chrt(inv: &Invocation) -> Parsed {
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

pub(super) fn strace(inv: &Invocation) -> Parsed {
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
pub(super) const LTRACE: Spec = Spec {
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

pub(super) fn watch(inv: &Invocation) -> Parsed {
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
pub(super) fn unbuffer(inv: &Invocation) -> Parsed {
    let words = match inv.args.split_first() {
        Some((p, rest)) if p.text() == Some("-p") => rest,
        _ => &inv.args[..],
    };
    Ok(Outcome::with(child(inv, words, true)?))
}
