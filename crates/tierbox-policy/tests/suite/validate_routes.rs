//! Code routes of programs that are not interpreters (`git -c core.fsmonitor=…`, tar's
//! `--checkpoint-action=exec=`, make's `--eval`, …), through `validate()`.
//!
//! Regression: under the built-in strict policy (no interpreters, no inline code) these
//! ran shell and Python: `git -c 'alias.x=!…' x`, `git -c core.fsmonitor=… status`,
//! `git -c core.sshCommand=… ls-remote ssh://x/y`,
//! `git -c protocol.ext.allow=always ls-remote 'ext::sh -c …'`,
//! `tar --checkpoint=1 --checkpoint-action=exec=…`, `make --eval '$(shell …)'`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::validate_exec::fixture::Fixture;

const TOOLS: &[&str] = &[
    "git", "tar", "make", "rg", "sort", "gzip", "xargs", "find", "cat", "sh", "bash", "python3",
    "perl",
];

/// Every policy that does not allow both interpreters and inline code.
fn strict_policies() -> Vec<Fixture> {
    vec![Fixture::new(TOOLS), Fixture::new(TOOLS).interpreters(false)]
}

#[track_caller]
fn refused_as_code_route(command: &str, args: &[&str]) {
    for fx in strict_policies() {
        assert_eq!(
            fx.code(command, args),
            "exec.code_route",
            "{command} {args:?} (interpreters {})",
            fx.policy.exec.allow_interpreters
        );
    }
    // With interpreters and inline code allowed the route is just a way to run code.
    Fixture::new(TOOLS)
        .interpreters(true)
        .passes_untouched(command, args);
}

#[test]
fn the_reviewed_routes_are_refused() {
    refused_as_code_route(
        "git",
        &[
            "-c",
            "alias.x=!echo 12 > /proc/sys/kernel/printk_ratelimit_burst",
            "x",
        ],
    );
    refused_as_code_route("git", &["-c", "core.fsmonitor=./helper.sh", "status"]);
    refused_as_code_route(
        "git",
        &["-c", "core.sshCommand=./x", "ls-remote", "ssh://x/y"],
    );
    refused_as_code_route(
        "git",
        &[
            "-c",
            "protocol.ext.allow=always",
            "ls-remote",
            "ext::sh -c touch% /tmp/pwned",
        ],
    );
    refused_as_code_route(
        "tar",
        &[
            "--checkpoint=1",
            "--checkpoint-action=exec=./x",
            "-cf",
            "a.tar",
            ".",
        ],
    );
    refused_as_code_route(
        "tar",
        &[
            "--checkpoint=1",
            "--checkpoint-action",
            "exec=./x",
            "-cf",
            "a.tar",
            ".",
        ],
    );
    refused_as_code_route("make", &["--eval", "$(shell ./x)"]);
    refused_as_code_route("make", &["--eval=$(shell ./x)"]);
}

#[test]
fn more_routes_of_git_tar_and_make() {
    for args in [
        &["-c", "core.pager=./x", "log"][..],
        &["-c", "core.editor=./x", "commit"],
        &["-c", "credential.helper=!./x", "fetch"],
        &["-c", "credential.https://example.org.helper=./x", "fetch"],
        &["-c", "diff.external=./x", "diff"],
        &["-c", "filter.lfs.smudge=./x", "checkout", "."],
        &["-c", "include.path=other.cfg", "status"],
        &["-c", "core.hooksPath=./hooks", "commit"],
        &[
            "-c",
            "uploadpack.packObjectsHook=./x",
            "clone",
            "src",
            "dst",
        ],
        &["-C", "sub", "-c", "pager.log=./x", "log"],
        &["--config-env=core.fsmonitor=FSMON", "status"],
        &["--exec-path=./bin", "status"],
        &["clone", "-u", "./x", "src", "dst"],
        &["clone", "--upload-pack=./x", "src", "dst"],
        &["clone", "--config", "core.fsmonitor=./x", "src", "dst"],
        &["clone", "--template=./tpl", "src", "dst"],
        &["push", "--receive-pack=./x", "origin"],
        &["ls-remote", "fd::3"],
        &["-c", "remote.origin.url=ext::./x", "fetch"],
        &["rebase", "-x", "./x", "main"],
        &["rebase", "--exec=./x", "main"],
        &["submodule", "foreach", "./x"],
        &["difftool", "--extcmd=./x"],
        &["grep", "-O./x", "pattern"],
        &["filter-branch", "--tree-filter", "./x"],
        &["config", "alias.x", "!./x"],
        &["config", "set", "core.fsmonitor", "./x"],
    ] {
        refused_as_code_route("git", args);
    }
    for args in [
        &["--to-command=./x", "-xf", "a.tar"][..],
        &["--to-command", "./x", "-xf", "a.tar"],
        &["--info-script=./x", "-cf", "a.tar", "."],
        &["-F", "./x", "-cf", "a.tar", "."],
        &["-cF./x", "-f", "a.tar", "."],
        &["--new-volume-script=./x", "-cf", "a.tar", "."],
        &["--rsh-command=./x", "-cf", "a.tar", "."],
    ] {
        refused_as_code_route("tar", args);
    }
    for args in [
        &["-E", "$(shell ./x)"][..],
        &["SHELL=./x", "all"],
        &[".SHELLFLAGS=-c ./x", "all"],
        &["X:=$(shell ./x)", "all"],
        &["X=${shell ./x}", "all"],
    ] {
        refused_as_code_route("make", args);
    }
}

/// Programs a route program runs directly are checked like the command: an interpreter
/// is refused as one, a program outside the allowlist as one, an allowed one passes.
#[test]
fn programs_run_by_route_programs_are_checked_like_the_command() {
    let fx = Fixture::new(TOOLS);
    assert_eq!(
        fx.code("rg", &["--pre", "sh", "pattern"]),
        "exec.interpreter_denied"
    );
    assert_eq!(
        fx.code("rg", &["--pre=bash", "pattern"]),
        "exec.interpreter_denied"
    );
    fx.passes_untouched("rg", &["--pre", "cat", "pattern"]);
    assert_eq!(
        fx.code("sort", &["--compress-program=python3", "f"]),
        "exec.interpreter_denied"
    );
    fx.passes_untouched("sort", &["--compress-program=gzip", "f"]);
    assert_eq!(
        fx.code("tar", &["-I", "zstd", "-cf", "a.tar", "."]),
        "exec.not_allowed"
    );
    assert_eq!(
        fx.code("tar", &["-cIbash", "-f", "a.tar", "."]),
        "exec.interpreter_denied"
    );
    assert_eq!(
        fx.code("tar", &["cIf", "sh", "a.tar", "."]),
        "exec.interpreter_denied"
    );
    assert_eq!(
        fx.code("tar", &["--use-compress-program=perl", "-cf", "a.tar", "."]),
        "exec.interpreter_denied"
    );
    fx.passes_untouched("tar", &["-I", "gzip", "-cf", "a.tar", "."]);
    assert_eq!(
        fx.code("git", &["bisect", "run", "sh", "test.sh"]),
        "exec.interpreter_denied"
    );
}

/// Ordinary uses pass untouched.
#[test]
fn ordinary_uses_pass() {
    let fx = Fixture::new(TOOLS);
    for args in [
        &["status"][..],
        &[
            "-c",
            "user.name=Agent",
            "-c",
            "user.email=a@example.org",
            "commit",
            "-m",
            "msg",
        ],
        &["-c", "alias.st=status", "st"],
        &["-c", "protocol.ext.allow=never", "ls-remote", "origin"],
        &["log", "--grep", "-c", "--", "."],
        &["commit", "-m", "ext::a message, not a URL"],
        &["config", "user.name", "Agent"],
        &["config", "--get", "core.fsmonitor"],
        &["clone", "-c", "user.name=Agent", "src", "dst"],
        &["push", "-u", "origin", "main"],
    ] {
        fx.passes_untouched("git", args);
    }
    for args in [
        &["-xzf", "a.tar.gz"][..],
        &["xzf", "a.tar.gz"],
        &["-cf", "a.tar", "--exclude=target", "."],
        &[
            "--checkpoint=1000",
            "--checkpoint-action=dot",
            "-cf",
            "a.tar",
            ".",
        ],
    ] {
        fx.passes_untouched("tar", args);
    }
    for args in [
        &["-j2", "test"][..],
        &["CFLAGS=-O2", "all"],
        &["-f", "Makefile", "all"],
    ] {
        fx.passes_untouched("make", args);
    }
    fx.passes_untouched("rg", &["--pretty", "pattern"]);
    fx.passes_untouched("sort", &["-u", "f"]);
}

/// Arguments filled in at run time could hold a route.
#[test]
fn arguments_from_xargs_could_hold_a_route() {
    let fx = Fixture::new(TOOLS);
    assert_eq!(fx.code("xargs", &["git"]), "exec.code_route");
    assert_eq!(fx.code("xargs", &["-n1", "tar", "-xf"]), "exec.code_route");
    fx.passes_untouched("xargs", &["-n1", "cat"]);
}

/// `find -fprintf`, `-fls`, `-fprint` write where they are told: outside the workspace is
/// refused like any other path argument.
#[test]
fn find_writes_only_inside_the_workspace() {
    let fx = Fixture::new(TOOLS);
    for action in ["-fprintf", "-fls", "-fprint", "-fprint0"] {
        let target = fx.tmp.join("out");
        let target = target.to_str().unwrap();
        let mut args = vec![".", action, target];
        if action == "-fprintf" {
            args.push("%p");
        }
        assert_eq!(
            fx.code("find", &args),
            "scope.path_outside_workspace",
            "{action}"
        );
        let mut inside = vec![".", action, "out.txt"];
        if action == "-fprintf" {
            inside.push("%p");
        }
        fx.passes_untouched("find", &inside);
    }
}
