//! Code routes of programs that are not interpreters: options and configuration with
//! which `git`, `tar`, `make`, `rg` or `sort` run code the request supplies, or another
//! program the request names.
//!
//! Two kinds, both read from argv alone:
//!
//! - **code** the program hands to a shell or evaluates itself: a git `-c` value for a
//!   key git runs (`core.fsmonitor`, `core.sshCommand`, `alias.x=!…`, …), git's `ext::`
//!   transport, `git rebase --exec`, tar's `--checkpoint-action=exec=` and
//!   `--to-command`, make's `--eval` and `$(shell …)` in a command-line assignment. These
//!   are inline code by another name: refused unless the policy allows interpreters *and*
//!   inline code (`exec.code_route`);
//! - **programs** it runs directly: `rg --pre PROG`, `sort --compress-program=PROG`,
//!   `tar -I PROG`, `git bisect run PROG`. Each is checked like the command itself
//!   (allowlist, interpreter denylist, eval flags), as a wrapper's program is.
//!
//! Words only known at run time (from `xargs` input) could hold a route: the program is
//! then treated as having one. What argv cannot show stays out of reach here and is listed
//! in SECURITY.md: configuration already in a repository (`.git/config` aliases, hooks),
//! a Makefile's recipes, a package's build scripts.

use super::{Invocation, Lookup};

/// A program with code routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RouteProgram {
    Git,
    Tar,
    Make,
    Ripgrep,
    Sort,
}

/// The route program a (normalised, lowercase) name is, if any.
pub(super) fn route_program(name: &str) -> Option<RouteProgram> {
    Some(match name {
        "git" => RouteProgram::Git,
        "tar" | "gtar" => RouteProgram::Tar,
        "make" | "gmake" => RouteProgram::Make,
        "rg" => RouteProgram::Ripgrep,
        "sort" => RouteProgram::Sort,
        _ => return None,
    })
}

/// One code route: the argument it is at and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CodeRoute {
    pub(super) index: usize,
    pub(super) route: String,
}

/// What a route program would do beyond its own work.
#[derive(Debug, Default)]
pub(super) struct Routes {
    /// Code it would run from its arguments.
    pub(super) code: Vec<CodeRoute>,
    /// Programs it would run directly.
    pub(super) programs: Vec<Invocation>,
}

impl Routes {
    fn code(&mut self, index: usize, route: impl Into<String>) {
        self.code.push(CodeRoute {
            index,
            route: route.into(),
        });
    }

    /// `text` (the first word of a command line) as a program `inv` runs, found in the
    /// sandbox PATH, with no arguments we know of.
    fn program(&mut self, inv: &Invocation, index: usize, text: &str, what: &str) {
        let name = text.split_whitespace().next().unwrap_or(text);
        self.programs.push(Invocation {
            name: name.to_owned(),
            args: Vec::new(),
            trailing_unknown: false,
            unknown_from: inv.unknown_from,
            stdin: false,
            lookup: Lookup::SandboxPath,
            via: format!(" (run by {} {what} at args[{index}])", inv.name),
        });
    }
}

/// Reads `inv` (a `kind` program) for code routes and the programs it would run.
pub(super) fn scan(kind: RouteProgram, inv: &Invocation) -> Routes {
    let mut out = Routes::default();
    if let Some(w) = inv.args.iter().find(|w| w.text().is_none()) {
        out.code(
            w.index,
            format!(
                "arguments from {}'s input (they could hold any option)",
                inv.unknown_from
            ),
        );
        return out;
    }
    if inv.trailing_unknown {
        let at = inv.args.last().map_or(0, |w| w.index + 1);
        out.code(
            at,
            format!(
                "arguments from {}'s input (they could hold any option)",
                inv.unknown_from
            ),
        );
        return out;
    }
    let words: Vec<(usize, &str)> = inv
        .args
        .iter()
        .map(|w| (w.index, w.text().unwrap_or_default()))
        .collect();
    match kind {
        RouteProgram::Git => git(inv, &words, &mut out),
        RouteProgram::Tar => tar(inv, &words, &mut out),
        RouteProgram::Make => make(&words, inv.stdin, &mut out),
        RouteProgram::Ripgrep => {
            for (index, value) in long_values(&words, &["--pre"]) {
                out.program(inv, index, value, "--pre");
            }
        }
        RouteProgram::Sort => {
            for (index, value) in long_values(&words, &["--compress-program"]) {
                out.program(inv, index, value, "--compress-program");
            }
        }
    }
    out
}

/// Every value of the long options `names` (`--name=value` or `--name value`), with the
/// index of the word holding it; also unambiguous abbreviations of at least 5 characters
/// (`--compress-prog`), as getopt_long accepts them. Stops at `--`.
fn long_values<'w>(words: &[(usize, &'w str)], names: &[&str]) -> Vec<(usize, &'w str)> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(&(index, word)) = words.get(i) {
        i += 1;
        if word == "--" {
            break;
        }
        let Some(body) = word.strip_prefix("--") else {
            continue;
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (body, None),
        };
        let matched = names.iter().any(|full| {
            name == full.trim_start_matches('-')
                || (name.len() >= 5 && full.trim_start_matches('-').starts_with(name))
        });
        if !matched {
            continue;
        }
        match inline {
            Some(v) => out.push((index, v)),
            None => {
                if let Some(&(vi, v)) = words.get(i) {
                    out.push((vi, v));
                    i += 1;
                }
            }
        }
    }
    out
}

// ---- git -------------------------------------------------------------------------------

/// git's global options that take a value (`--opt=value` or `--opt value`).
const GIT_GLOBAL_WITH_VALUE: &[&str] = &[
    "--git-dir",
    "--work-tree",
    "--namespace",
    "--super-prefix",
    "--list-cmds",
    "--attr-source",
    "--config-env",
];

/// Configuration keys (lowercase; `*` is one dotted component, a subsection) whose values
/// git runs as commands or programs, or which make it run code from elsewhere.
pub const GIT_CODE_KEYS: &[&str] = &[
    "core.fsmonitor",
    "core.sshcommand",
    "core.pager",
    "core.editor",
    "core.askpass",
    "core.gitproxy",
    "core.hookspath",
    "core.alternaterefscommand",
    "credential.helper",
    "credential.*.helper",
    "sequence.editor",
    "diff.external",
    "diff.*.textconv",
    "diff.*.command",
    "difftool.*.cmd",
    "mergetool.*.cmd",
    "merge.*.driver",
    "filter.*.clean",
    "filter.*.smudge",
    "filter.*.process",
    "gpg.program",
    "gpg.*.program",
    "pager.*",
    "web.browser",
    "browser.*.cmd",
    "man.*.cmd",
    "interactive.difffilter",
    "include.path",
    "includeif.*.path",
    "init.templatedir",
    "protocol.allow",
    "protocol.*.allow",
    "uploadpack.*",
    "receivepack.*",
    "remote.*.uploadpack",
    "remote.*.receivepack",
    "remote.*.vcs",
    "sendemail.sendmailcmd",
    "sendemail.smtpserver",
];

/// Whether the git configuration `key` (any case) runs code with `value` (`None`: not
/// known): one of [`GIT_CODE_KEYS`], an alias whose value starts with `!` (a shell
/// command), or a submodule update command starting with `!`.
pub fn git_key_runs_code(key: &str, value: Option<&str>) -> bool {
    let key = key.to_ascii_lowercase();
    let parts: Vec<&str> = key.split('.').collect();
    let shell_value = value.is_none_or(|v| v.trim_start().starts_with('!'));
    if parts.first() == Some(&"protocol")
        && parts.last() == Some(&"allow")
        && value.is_some_and(|v| v.eq_ignore_ascii_case("never"))
    {
        return false;
    }
    if parts.first() == Some(&"alias") && parts.len() >= 2 {
        return shell_value;
    }
    if parts.first() == Some(&"submodule") && parts.last() == Some(&"update") {
        return shell_value;
    }
    GIT_CODE_KEYS.iter().any(|pattern| {
        let pat: Vec<&str> = pattern.split('.').collect();
        if pat.last() == Some(&"*") {
            // `pager.*`, `uploadpack.*`: any key of the section.
            parts.len() >= pat.len() && parts[..pat.len() - 1] == pat[..pat.len() - 1]
        } else if pat.len() == 3 {
            parts.len() >= 3 && parts[0] == pat[0] && parts[parts.len() - 1] == pat[2]
        } else {
            parts == pat
        }
    })
}

/// Whether `url` names git's `ext::` transport (which runs a command) or `fd::` (which
/// talks over file descriptors the run inherited).
fn is_code_transport(url: &str) -> bool {
    let lower = url.trim_start().to_ascii_lowercase();
    lower.starts_with("ext::") || lower.starts_with("fd::")
}

/// `key=value` of a `-c` word; a bare `key` means `true`.
fn git_assignment(text: &str) -> (&str, Option<&str>) {
    match text.split_once('=') {
        Some((k, v)) => (k, Some(v)),
        None => (text, Some("true")),
    }
}

fn git(inv: &Invocation, words: &[(usize, &str)], out: &mut Routes) {
    let Some(sub_at) = git_global_options(words, out) else {
        return;
    };
    let (_, subcommand) = words[sub_at];
    let rest = &words[sub_at + 1..];
    git_url_transports(subcommand, rest, out);
    git_subcommand(inv, subcommand, rest, out);
}

/// Reads git's global options (up to the subcommand), reporting those that run code;
/// returns where the subcommand is, if there is one.
fn git_global_options(words: &[(usize, &str)], out: &mut Routes) -> Option<usize> {
    // Global options, up to the subcommand.
    let mut i = 0;
    let mut sub: Option<usize> = None;
    while let Some(&(index, word)) = words.get(i) {
        i += 1;
        match word {
            "-c" => {
                if let Some(&(vi, v)) = words.get(i) {
                    i += 1;
                    let (key, value) = git_assignment(v);
                    if git_key_runs_code(key, value) {
                        out.code(vi, format!("-c {key}"));
                    } else if value.is_some_and(is_code_transport) {
                        out.code(
                            vi,
                            format!("-c {key} (a URL of a transport that runs code)"),
                        );
                    }
                }
            }
            "-C" => i += 1,
            w if w.starts_with("--exec-path=") => {
                out.code(index, "--exec-path (programs git runs)")
            }
            w if w.starts_with("--config-env") => {
                let spec = match w.split_once('=') {
                    Some((_, spec)) => Some(spec),
                    None => {
                        i += 1;
                        words.get(i - 1).map(|&(_, v)| v)
                    }
                };
                if let Some(spec) = spec {
                    // `key=ENVVAR`: the value comes from the environment, unseen.
                    let key = spec.split_once('=').map_or(spec, |(k, _)| k);
                    if git_key_runs_code(key, None) {
                        out.code(index, format!("--config-env {key}"));
                    }
                }
            }
            w if GIT_GLOBAL_WITH_VALUE.contains(&w) => i += 1,
            w if w.starts_with('-') => {}
            _ => {
                sub = Some(i - 1);
                break;
            }
        }
    }
    sub
}

/// A transport that runs a command (`ext::CMD`) or talks over inherited fds (`fd::`),
/// wherever a command that takes a URL could read one.
fn git_url_transports(subcommand: &str, rest: &[(usize, &str)], out: &mut Routes) {
    let takes_urls = matches!(
        subcommand,
        "clone"
            | "fetch"
            | "pull"
            | "ls-remote"
            | "push"
            | "remote"
            | "submodule"
            | "archive"
            | "fetch-pack"
            | "send-pack"
    );
    for &(index, word) in rest.iter().filter(|_| takes_urls) {
        let value = word.split_once('=').map_or(word, |(_, v)| v);
        if is_code_transport(word) || is_code_transport(value) {
            out.code(index, "a URL of the ext:: or fd:: transport");
        }
    }
}

/// The values of the short option `flag` in `rest`, given as the next word (`-u CMD`) or
/// glued to a two-character flag (`-uCMD`), up to `--`.
fn short_values<'w>(rest: &[(usize, &'w str)], flag: &str) -> Vec<(usize, &'w str)> {
    let mut v = Vec::new();
    let mut j = 0;
    while let Some(&(_, w)) = rest.get(j) {
        j += 1;
        if w == "--" {
            break;
        }
        if w == flag {
            if let Some(&(vi, val)) = rest.get(j) {
                v.push((vi, val));
                j += 1;
            }
        } else if let Some(val) = w.strip_prefix(flag).filter(|_| flag.len() == 2)
            && !val.is_empty()
            && !w.starts_with("--")
        {
            v.push((rest[j - 1].0, val));
        }
    }
    v
}

/// The options and operands of git `subcommand` (its arguments `rest`) that run code.
fn git_subcommand(inv: &Invocation, subcommand: &str, rest: &[(usize, &str)], out: &mut Routes) {
    let opt_values = |names: &[&str]| long_values(rest, names);
    let short_value = |flag: &str| short_values(rest, flag);
    match subcommand {
        "clone" | "ls-remote" | "fetch" | "pull" | "fetch-pack" => {
            for (index, _) in opt_values(&["--upload-pack"]) {
                out.code(
                    index,
                    "--upload-pack (the command git runs for the remote side)",
                );
            }
            if matches!(subcommand, "clone" | "ls-remote") {
                for (index, _) in short_value("-u") {
                    out.code(index, "-u (the command git runs for the remote side)");
                }
            }
            if subcommand == "clone" {
                for (index, v) in opt_values(&["--config"])
                    .into_iter()
                    .chain(short_value("-c"))
                {
                    let (key, value) = git_assignment(v);
                    if git_key_runs_code(key, value) {
                        out.code(index, format!("--config {key}"));
                    }
                }
                for (index, _) in opt_values(&["--template"]) {
                    out.code(index, "--template (hooks copied into the new repository)");
                }
            }
        }
        "init" => {
            for (index, _) in opt_values(&["--template"]) {
                out.code(index, "--template (hooks copied into the new repository)");
            }
        }
        "push" | "send-pack" => {
            for (index, _) in opt_values(&["--receive-pack", "--exec"]) {
                out.code(
                    index,
                    "--receive-pack (the command git runs for the remote side)",
                );
            }
        }
        "archive" => {
            for (index, _) in opt_values(&["--exec"]) {
                out.code(index, "--exec (the command git runs for the remote side)");
            }
        }
        "rebase" => {
            for (index, _) in opt_values(&["--exec"]).into_iter().chain(short_value("-x")) {
                out.code(index, "--exec (a shell command run after each commit)");
            }
        }
        "difftool" => {
            for (index, _) in opt_values(&["--extcmd"])
                .into_iter()
                .chain(short_value("-x"))
            {
                out.code(index, "--extcmd (a shell command git runs)");
            }
        }
        "grep" => {
            for &(index, w) in rest {
                if w == "-O" || w.starts_with("-O") || w.starts_with("--open-files-in-pager") {
                    out.code(index, "--open-files-in-pager (a program git runs)");
                }
            }
        }
        "submodule" => {
            if let Some(pos) = rest.iter().position(|&(_, w)| w == "foreach") {
                let at = rest.get(pos + 1).map_or(rest[pos].0, |&(i, _)| i);
                out.code(at, "submodule foreach (a shell command git runs)");
            }
        }
        "filter-branch" => {
            for &(index, w) in rest {
                if w.starts_with("--") && w.ends_with("-filter") || w == "--commit-filter" {
                    out.code(index, format!("{w} (a shell command git runs)"));
                }
            }
        }
        "bisect" => {
            if let Some(pos) = rest.iter().position(|&(_, w)| w == "run")
                && let Some(&(index, program)) = rest.get(pos + 1)
            {
                out.program(inv, index, program, "bisect run");
            }
        }
        "send-email" => {
            for (index, _) in opt_values(&["--sendmail-cmd", "--smtp-server"]) {
                out.code(index, "--sendmail-cmd (a program git runs)");
            }
        }
        "config" => git_config_write(rest, out),
        _ => {}
    }
}

/// `git config [OPTIONS] KEY VALUE` (and `git config set KEY VALUE`): writing a key that
/// runs code persists a route for the next git command.
fn git_config_write(rest: &[(usize, &str)], out: &mut Routes) {
    let operands: Vec<(usize, &str)> = rest
        .iter()
        .copied()
        .filter(|(_, w)| !w.starts_with('-'))
        .collect();
    let (key_at, key, value) = match operands.as_slice() {
        [(_, "set"), (i, k), (_, v), ..] => (*i, *k, Some(*v)),
        [(_, "set"), (i, k)] => (*i, *k, None),
        [(i, k), (_, v), ..] if k.contains('.') => (*i, *k, Some(*v)),
        _ => return,
    };
    if git_key_runs_code(key, value) {
        out.code(
            key_at,
            format!("git config {key} (configuration that runs code)"),
        );
    }
}

// ---- tar -------------------------------------------------------------------------------

/// GNU tar's short options that take an argument.
const TAR_SHORT_WITH_ARG: &str = "bCfFgHIKLNTVX";

fn tar(inv: &Invocation, words: &[(usize, &str)], out: &mut Routes) {
    // Long options (and their unambiguous abbreviations).
    for (index, value) in long_values(words, &["--checkpoint-action"]) {
        if value.starts_with("exec") {
            out.code(index, "--checkpoint-action=exec (a shell command tar runs)");
        }
    }
    for (name, what) in [
        ("--to-command", "--to-command (a shell command tar runs)"),
        ("--info-script", "--info-script (a shell command tar runs)"),
        (
            "--new-volume-script",
            "--new-volume-script (a shell command tar runs)",
        ),
        ("--rsh-command", "--rsh-command (a program tar runs)"),
        ("--rmt-command", "--rmt-command (a program tar runs)"),
    ] {
        for (index, _) in long_values(words, &[name]) {
            out.code(index, what);
        }
    }
    for (index, value) in long_values(words, &["--use-compress-program"]) {
        out.program(inv, index, value, "--use-compress-program");
    }
    // Short options, in clusters (`-xIzstd`), and the traditional first word (`xIf`),
    // whose letters take their arguments from the following words in order.
    let mut i = 0;
    while let Some(&(index, word)) = words.get(i) {
        i += 1;
        if word == "--" {
            break;
        }
        let traditional = index == words[0].0 && !word.starts_with('-');
        let cluster = if traditional {
            word
        } else if let Some(c) = word.strip_prefix('-').filter(|c| !c.starts_with('-')) {
            c
        } else {
            continue;
        };
        let mut pending: Vec<char> = Vec::new();
        for (pos, c) in cluster.char_indices() {
            if !TAR_SHORT_WITH_ARG.contains(c) {
                continue;
            }
            if traditional {
                pending.push(c);
                continue;
            }
            let rest = &cluster[pos + c.len_utf8()..];
            let value = if rest.is_empty() {
                i += 1;
                words.get(i - 1).copied()
            } else {
                Some((index, rest))
            };
            tar_short(inv, c, value, index, out);
            break;
        }
        for c in pending {
            let value = words.get(i).copied();
            i += 1;
            tar_short(inv, c, value, index, out);
        }
    }
}

fn tar_short(inv: &Invocation, c: char, value: Option<(usize, &str)>, at: usize, out: &mut Routes) {
    match (c, value) {
        ('I', Some((vi, v))) => out.program(inv, vi, v, "-I"),
        ('F', _) => out.code(at, "-F (a shell command tar runs)"),
        _ => {}
    }
}

// ---- make ------------------------------------------------------------------------------

/// make functions that run code when a command-line assignment is expanded.
const MAKE_CODE_FUNCTIONS: &[&str] = &["shell", "eval", "file", "guile"];

/// Variables that name the program make runs recipes with, or its flags.
const MAKE_SHELL_VARIABLES: &[&str] = &["SHELL", ".SHELLFLAGS", "MAKESHELL", "MAKEFLAGS", "MFLAGS"];

fn make(words: &[(usize, &str)], stdin: bool, out: &mut Routes) {
    for (index, _) in long_values(words, &["--eval"]) {
        out.code(index, "--eval (make code)");
    }
    let mut i = 0;
    while let Some(&(index, word)) = words.get(i) {
        i += 1;
        match word {
            "-E" => {
                out.code(index, "-E (make code)");
                i += 1;
            }
            w if w.starts_with("-E") && !w.starts_with("--") => out.code(index, "-E (make code)"),
            w if (w.starts_with("--file=") || w.starts_with("--makefile="))
                && stdin
                && matches!(w.split_once('=').map(|(_, v)| v), Some("-" | "/dev/stdin")) =>
            {
                out.code(index, "--file=- (a makefile on stdin)");
            }
            "-f" | "--file" | "--makefile" => {
                if let Some(&(vi, v)) = words.get(i) {
                    i += 1;
                    if stdin && matches!(v, "-" | "/dev/stdin") {
                        out.code(vi, "-f - (a makefile on stdin)");
                    }
                }
            }
            w if !w.starts_with('-') && w.contains('=') => {
                let (name, value) = w.split_once('=').unwrap_or((w, ""));
                let name = name.trim_end_matches([':', '+', '?', '!']).trim();
                if MAKE_SHELL_VARIABLES.contains(&name) {
                    out.code(index, format!("{name}= (what make runs recipes with)"));
                } else if MAKE_CODE_FUNCTIONS.iter().any(|f| {
                    value.contains(&format!("$({f} ")) || value.contains(&format!("${{{f} "))
                }) {
                    out.code(
                        index,
                        format!("{name}= with a make function that runs code"),
                    );
                }
            }
            _ => {}
        }
    }
}
