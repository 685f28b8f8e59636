use super::*;

fn inv(name: &str, args: &[&str]) -> Invocation {
    Invocation::command(
        name,
        &args.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>(),
    )
}

/// The programs a wrapper runs, as `name arg arg…` strings (`?` for unknown words).
fn runs(name: &str, args: &[&str]) -> Result<Vec<String>, String> {
    let kind = wrapper_kind(name).expect("a wrapper");
    let outcome = parse(kind, &inv(name, args)).map_err(|e| e.to_string())?;
    Ok(outcome.programs.iter().map(render).collect())
}

fn render(p: &Invocation) -> String {
    let mut s = p.name.clone();
    for w in &p.args {
        s.push(' ');
        s.push_str(w.text().unwrap_or("?"));
    }
    if p.trailing_unknown {
        s.push_str(" ?...");
    }
    s
}

#[track_caller]
fn runs_one(name: &str, args: &[&str], expected: &str) {
    assert_eq!(
        runs(name, args),
        Ok(vec![expected.to_owned()]),
        "{name} {args:?}"
    );
}

#[track_caller]
fn runs_nothing(name: &str, args: &[&str]) {
    assert_eq!(runs(name, args), Ok(vec![]), "{name} {args:?}");
}

#[track_caller]
fn unresolvable(name: &str, args: &[&str]) -> String {
    runs(name, args).expect_err(&format!("{name} {args:?} should be unresolvable"))
}

#[test]
fn env_skips_options_assignments_and_dash() {
    runs_one("env", &["bash", "-c", "id"], "bash -c id");
    runs_one("env", &["-i", "PATH=/x", "bash"], "bash");
    runs_one(
        "env",
        &[
            "-u",
            "HOME",
            "--unset=X",
            "-C",
            "/tmp",
            "--",
            "A=1",
            "B=2",
            "git",
            "status",
        ],
        "git status",
    );
    // Options end at the first operand, so a `--` after the assignments is the program.
    runs_one("env", &["A=1", "--", "git"], "-- git");
    runs_one("env", &["-iuHOME", "-", "git"], "git");
    runs_one("env", &["--ignore-e", "--ch", "d", "ls"], "ls");
    assert!(
        unresolvable("env", &["--ign", "ls"]).contains("ambiguous"),
        "ignore-environment or ignore-signal"
    );
    runs_one("env", &["--", "A=1", "ls"], "ls");
    runs_nothing("env", &[]);
    runs_nothing("env", &["-i", "A=1"]);
    let outcome = parse(
        WrapperKind::Env,
        &inv("env", &["LD_PRELOAD=/x.so", "A=1", "git"]),
    )
    .unwrap();
    assert_eq!(
        outcome.env,
        vec![("LD_PRELOAD".to_owned(), 0), ("A".to_owned(), 1)]
    );
}

#[test]
fn env_split_string_is_reparsed_in_place() {
    runs_one("env", &["-S", "python3 -c x"], "python3 -c x");
    runs_one("env", &["-S-i A=1 bash -e", "script"], "bash -e script");
    runs_one("env", &["--split-string=-u X perl", "-w"], "perl -w");
    assert!(unresolvable("env", &["-S", "bash '-c' id"]).contains("quoting"));
    assert!(unresolvable("env", &["-S", "${SHELL} -c id"]).contains("expansion"));
    assert!(unresolvable("env", &["-x", "bash"]).contains("unknown option -x"));
    assert!(unresolvable("env", &["--frob", "bash"]).contains("unknown option --frob"));
}

#[test]
fn coreutils_wrappers() {
    runs_one("nice", &["-n", "5", "python3", "-Sc", "x"], "python3 -Sc x");
    runs_one("nice", &["-5", "--10", "-+3", "-n5", "git"], "git");
    runs_one("nice", &["--adjustment=1", "--", "-x"], "-x");
    runs_nothing("nice", &[]);
    runs_one("nohup", &["--", "make"], "make");
    assert!(unresolvable("nohup", &["-x", "make"]).contains("unknown option"));
    runs_one("timeout", &["5", "bash"], "bash");
    runs_one(
        "timeout",
        &[
            "-s",
            "KILL",
            "-k",
            "1s",
            "--preserve-status",
            "5",
            "sleep",
            "9",
        ],
        "sleep 9",
    );
    runs_one("timeout", &["--signal=TERM", "5", "ls"], "ls");
    runs_nothing("timeout", &["5"]);
    runs_one("stdbuf", &["-oL", "-e", "0", "grep", "x"], "grep x");
    runs_one("setsid", &["-cfw", "ls"], "ls");
    runs_one("time", &["-p", "-o", "out", "-f", "%e", "ls"], "ls");
    runs_one("unbuffer", &["-p", "ls"], "ls");
}

#[test]
fn xargs_program_default_and_unknown_arguments() {
    runs_one("xargs", &["sh", "-c"], "sh -c ?...");
    runs_one(
        "xargs",
        &["-0", "-n", "1", "-P", "4", "grep", "x"],
        "grep x ?...",
    );
    runs_one("xargs", &[], "echo ?...");
    runs_one("xargs", &["-I", "{}", "cp", "{}", "dst/"], "cp ? dst/");
    runs_one("xargs", &["-i", "mv", "{}", "{}.bak"], "mv ? ?");
    runs_one("xargs", &["-I@", "-L1", "rm", "@"], "rm ? ?...");
    assert!(unresolvable("xargs", &["-I{}", "{}"]).contains("comes from xargs's input"));
    let outcome = parse(WrapperKind::Xargs, &inv("xargs", &["cat"])).unwrap();
    assert!(
        !outcome.programs[0].stdin,
        "xargs gives its commands /dev/null as stdin"
    );
    let outcome = parse(WrapperKind::Xargs, &inv("xargs", &["-a", "list", "cat"])).unwrap();
    assert!(
        outcome.programs[0].stdin,
        "with -a the command keeps xargs's stdin"
    );
}

#[test]
fn nested_wrappers_under_xargs_cannot_see_their_program() {
    let xargs = parse(WrapperKind::Xargs, &inv("xargs", &["env"])).unwrap();
    let env = &xargs.programs[0];
    assert!(
        parse(WrapperKind::Env, env)
            .unwrap_err()
            .to_string()
            .contains("xargs's input")
    );
    let xargs = parse(WrapperKind::Xargs, &inv("xargs", &["find", "."])).unwrap();
    assert!(
        parse(WrapperKind::Find, &xargs.programs[0])
            .unwrap_err()
            .to_string()
            .contains("xargs's input")
    );
}

#[test]
fn find_actions_each_run_a_program() {
    runs_one("find", &[".", "-exec", "sh", "-c", "x", ";"], "sh -c x");
    assert_eq!(
        runs(
            "find",
            &[
                ".", "-name", "*.rs", "-exec", "grep", "-l", "x", "{}", "+", "-o", "-execdir",
                "rm", "{}", ";", "-ok", "cat", ";"
            ]
        ),
        Ok(vec![
            "grep -l x {}".to_owned(),
            "rm {}".to_owned(),
            "cat".to_owned()
        ])
    );
    runs_one("find", &[".", "-exec", "echo", "-exec", ";"], "echo -exec");
    runs_one("find", &[".", "-exec", "echo", "+", "x", ";"], "echo + x");
    runs_nothing("find", &[".", "-name", "x", "-print"]);
    assert!(unresolvable("find", &[".", "-exec", "{}", ";"]).contains("runs the files"));
    assert!(unresolvable("find", &[".", "-exec"]).contains("names no program"));
}

#[test]
fn privilege_wrappers() {
    runs_one(
        "sudo",
        &["-u", "root", "-E", "VAR=1", "--", "ls", "-l"],
        "ls -l",
    );
    runs_one("sudo", &["-s", "ls", "-l"], "sh -c ls -l");
    runs_one("sudo", &[], "sh");
    runs_nothing("sudo", &["-v"]);
    runs_nothing("sudo", &["-l"]);
    assert!(unresolvable("sudo", &["-e", "f"]).contains("editor"));
    let outcome = parse(WrapperKind::Sudo, &inv("sudo", &["LD_PRELOAD=x", "ls"])).unwrap();
    assert_eq!(outcome.env, vec![("LD_PRELOAD".to_owned(), 0)]);
    runs_one("doas", &["-u", "root", "ls"], "ls");
    runs_one("doas", &["-s"], "sh");
    runs_nothing("doas", &["-C", "/etc/doas.conf"]);
    runs_one("su", &["-c", "id"], "sh -c id");
    runs_one("su", &["root", "-c", "id"], "sh -c id");
    runs_one("su", &["-", "root"], "sh");
    runs_one(
        "su",
        &["-s", "/usr/bin/python3", "root"],
        "/usr/bin/python3",
    );
    runs_one("su", &["root", "--", "-c", "id"], "sh -c id");
    runs_one("runuser", &["-u", "nobody", "--", "ls", "-l"], "ls -l");
    runs_one("runuser", &["-l", "nobody", "-c", "id"], "sh -c id");
    runs_one("sg", &["wheel", "-c", "id"], "sh -c id");
    runs_one("sg", &["-", "wheel", "make all"], "sh -c make all");
    runs_one("sg", &["wheel"], "sh");
    let chroot = parse(
        WrapperKind::Chroot,
        &inv("chroot", &["--userspec=1:1", "/srv/root", "ls"]),
    )
    .unwrap();
    assert_eq!(render(&chroot.programs[0]), "ls");
    assert_eq!(chroot.programs[0].lookup, Lookup::Elsewhere);
    runs_one("chroot", &["/srv/root"], "sh -i");
}

#[test]
fn util_linux_and_tracing_wrappers() {
    runs_one("flock", &["-w", "5", "lockfile", "make", "all"], "make all");
    runs_one("flock", &["lockfile", "-c", "make all"], "sh -c make all");
    runs_one("flock", &["-n", "lockfile", "--command", "id"], "sh -c id");
    runs_nothing("flock", &["9"]);
    runs_one("ionice", &["-c", "3", "ls"], "ls");
    runs_nothing("ionice", &["-p", "1", "2"]);
    runs_one("taskset", &["0x3", "ls"], "ls");
    runs_one("taskset", &["-c", "0-3", "ls"], "ls");
    runs_nothing("taskset", &["-p", "0x3", "1"]);
    runs_one("chrt", &["-f", "10", "ls"], "ls");
    runs_one("chrt", &["--other", "ls"], "ls");
    runs_nothing("chrt", &["-m"]);
    runs_one("watch", &["-n", "1", "ls", "-l"], "sh -c ls -l");
    runs_one("watch", &["-x", "ls", "-l"], "ls -l");
    runs_one(
        "strace",
        &["-f", "-o", "trace.txt", "-e", "trace=open", "ls"],
        "ls",
    );
    runs_one("strace", &["--output=t", "--follow-forks", "ls"], "ls");
    assert!(unresolvable("strace", &["--fol", "ls"]).contains("unknown option --fol"));
    let outcome = parse(
        WrapperKind::Strace,
        &inv("strace", &["-E", "LD_PRELOAD=/x.so", "ls"]),
    )
    .unwrap();
    assert_eq!(outcome.env, vec![("LD_PRELOAD".to_owned(), 1)]);
    runs_one("ltrace", &["-o", "t", "-e", "malloc", "ls"], "ls");
    runs_nothing("strace", &["-p", "1"]);
}

#[test]
fn multi_call_binaries() {
    let bb = parse(WrapperKind::Toybox, &inv("toybox", &["sh", "-c", "id"])).unwrap();
    assert_eq!(render(&bb.programs[0]), "sh -c id");
    assert_eq!(bb.programs[0].lookup, Lookup::Elsewhere);
    runs_nothing("toybox", &["--help"]);
    runs_one("coreutils", &["--coreutils-prog=env", "bash"], "env bash");
    assert!(unresolvable("coreutils", &["ls"]).contains("--coreutils-prog"));
}

#[test]
fn via_names_the_wrapper_and_the_argument() {
    let outcome = parse(WrapperKind::Env, &inv("env", &["-i", "bash"])).unwrap();
    assert_eq!(outcome.programs[0].via, " (run by env at args[1])");
    let outcome = parse(WrapperKind::Watch, &inv("watch", &["ls"])).unwrap();
    assert_eq!(
        outcome.programs[0].via,
        " (run as a shell by watch at args[0])"
    );
}

/// Each variant's text is the reason the string errors gave before the enum: it is the
/// reason of an `exec.wrapper_unresolvable` rejection, which must not change with the type.
#[test]
fn wrapper_errors_read_as_before() {
    use WrapperError::*;
    let cases = [
        (
            Args(GetoptError::ArgFromInput {
                index: 2,
                from: "xargs",
            }),
            "args[2] is filled in from xargs's input",
        ),
        (
            ProgramFromInput { from: "xargs" },
            "the program it runs comes from xargs's input",
        ),
        (
            ProgramAtFromInput {
                index: 1,
                from: "xargs",
            },
            "the program at args[1] comes from xargs's input",
        ),
        (SplitStringNoValue, "-S has no value"),
        (
            SplitStringFromInput { index: 3 },
            "the -S string at args[3] is filled in at run time",
        ),
        (
            SplitStringQuoted { index: 3 },
            "the -S string at args[3] uses quoting, escapes, comments or ${VAR} expansion",
        ),
        (
            NotCoreutilsProg {
                index: 0,
                text: "ls".to_owned(),
            },
            "args[0] \"ls\" is not --coreutils-prog=NAME",
        ),
        (
            FindExpressionFromInput { from: "xargs" },
            "its expression continues with arguments from xargs's input",
        ),
        (
            FindActionNoProgram {
                action: "-exec".to_owned(),
                index: 4,
            },
            "-exec at args[4] names no program",
        ),
        (
            FindActionRunsFound {
                action: "-execdir".to_owned(),
                index: 4,
            },
            "-execdir at args[4] runs the files find finds",
        ),
        (SudoEdit, "sudo -e runs the user's editor"),
        (
            SudoHostOrCommand,
            "sudo -h followed by a word may name a remote host or a command",
        ),
        (
            ShellFromInput { index: 2 },
            "the shell at args[2] is filled in at run time",
        ),
    ];
    for (error, text) in cases {
        assert_eq!(error.to_string(), text, "{error:?}");
    }
}
