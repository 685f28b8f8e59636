use std::os::unix::fs::{PermissionsExt, symlink};

use super::*;

#[test]
fn base_names_strip_directories_exe_case_and_versions() {
    for (name, base) in [
        ("bash", "bash"),
        ("/bin/sh", "sh"),
        ("BASH.EXE", "bash"),
        ("python3.11", "python3"),
        ("python3.13t", "python3"),
        ("python2.7", "python2"),
        ("python2", "python2"),
        ("pypy3.10", "pypy3"),
        ("perl5.36", "perl"),
        ("perl5.36.0", "perl"),
        ("lua5.4", "lua"),
        ("luajit-2.1.0-beta3", "luajit"),
        ("ruby3.1", "ruby"),
        ("node20", "node"),
        ("nodejs", "nodejs"),
        ("php82", "php"),
        ("ksh93", "ksh"),
        ("zsh-5.9", "zsh"),
        ("Rscript", "Rscript"),
        ("rscript", "Rscript"),
        ("C:\\Windows\\System32\\cmd.exe", "cmd"),
        ("powershell.exe", "powershell"),
        ("pwsh", "pwsh"),
    ] {
        assert_eq!(interpreter_base_name(name), Some(base), "{name}");
    }
    for name in [
        "git",
        "python3-config",
        "sha256sum",
        "shasum",
        "bashbug",
        "nodemon",
        "perldoc",
        "lualatex",
        "cmdx",
        "env",
    ] {
        assert_eq!(interpreter_base_name(name), None, "{name}");
    }
}

#[test]
fn every_listed_name_is_its_own_base_and_wrappers_are_known() {
    for name in INTERPRETERS {
        assert_eq!(interpreter_base_name(name), Some(*name));
    }
    for name in WRAPPERS {
        assert!(wrappers::wrapper_kind(name).is_some(), "{name}");
        assert_eq!(interpreter_base_name(name), None, "{name}");
    }
}

/// A sandbox PATH directory with fake executables, some of them symlinks.
struct FakeBin {
    dir: tempfile::TempDir,
}

impl FakeBin {
    fn new(names: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for name in names {
            let p = dir.path().join(name);
            std::fs::write(&p, "#!/bin/true\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Self { dir }
    }

    fn link(self, name: &str, target: &str) -> Self {
        symlink(self.dir.path().join(target), self.dir.path().join(name)).unwrap();
        self
    }

    fn path(&self) -> String {
        self.dir.path().display().to_string()
    }

    fn run(
        &self,
        policy: &ExecPolicy,
        command: &str,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<(), Rejection> {
        let program = self.dir.path().join(command);
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        let stdin_given = stdin.is_some_and(|s| !s.is_empty());
        check(policy, command, &program, &args, &self.path(), stdin_given).map(|_| ())
    }
}

fn policy(allowed: &[&str], interpreters: bool, eval: bool) -> ExecPolicy {
    ExecPolicy {
        allowed_executables: allowed.iter().map(|s| (*s).to_owned()).collect(),
        allow_interpreters: interpreters,
        allow_eval: eval,
        ..ExecPolicy::default()
    }
}

#[test]
fn symlinked_interpreter_under_an_allowed_name_is_caught() {
    let bin = FakeBin::new(&["dash", "gcc"])
        .link("sh", "dash")
        .link("tool", "dash")
        .link("cc", "gcc");
    let p = policy(&["tool", "cc"], false, false);
    let err = bin.run(&p, "tool", &[], None).unwrap_err();
    assert_eq!(err.code(), "exec.interpreter_denied");
    assert!(err.to_string().contains("resolves to"), "{err}");
    assert_eq!(bin.run(&p, "cc", &["-c", "x.c"], None), Ok(()));
}

#[test]
fn multi_call_canonical_name_is_ignored() {
    let bin = FakeBin::new(&["busybox"])
        .link("ls", "busybox")
        .link("sh", "busybox");
    let p = policy(&["ls", "sh"], false, false);
    assert_eq!(bin.run(&p, "ls", &["-l"], None), Ok(()));
    assert_eq!(
        bin.run(&p, "sh", &[], None).unwrap_err().code(),
        "exec.interpreter_denied"
    );
}

#[test]
fn busybox_runs_its_applet_which_is_checked() {
    let bin = FakeBin::new(&["busybox"]);
    let p = policy(&["busybox", "ls", "sh"], true, false);
    assert_eq!(bin.run(&p, "busybox", &["ls", "-l"], None), Ok(()));
    assert_eq!(
        bin.run(&p, "busybox", &["sh", "-c", "id"], None)
            .unwrap_err()
            .code(),
        "exec.eval_flag"
    );
    let err = bin.run(&p, "busybox", &["wget", "x"], None).unwrap_err();
    assert_eq!(
        err,
        Rejection::ExecutableNotAllowed {
            name: "wget".into(),
            via: " (run by busybox at args[0])".into()
        }
    );
}

#[test]
fn wrapped_programs_are_checked_recursively() {
    let bin = FakeBin::new(&["env", "nice", "timeout", "bash", "git", "xargs"]);
    let p = policy(
        &["env", "nice", "timeout", "bash", "git", "xargs"],
        false,
        false,
    );
    assert_eq!(
        bin.run(&p, "env", &["nice", "timeout", "5", "git", "status"], None),
        Ok(())
    );
    let err = bin
        .run(&p, "env", &["nice", "timeout", "5", "bash"], None)
        .unwrap_err();
    assert_eq!(
        err,
        Rejection::InterpreterDenied {
            name: "bash".into(),
            via: " (run by timeout at args[3])".into()
        }
    );
    let err = bin.run(&p, "env", &["curl", "x"], None).unwrap_err();
    assert_eq!(
        err,
        Rejection::ExecutableNotAllowed {
            name: "curl".into(),
            via: " (run by env at args[0])".into()
        }
    );
}

#[test]
fn wrapped_program_missing_from_path_is_not_found() {
    let bin = FakeBin::new(&["env"]);
    let p = policy(&["env", "ghost"], false, false);
    assert_eq!(
        bin.run(&p, "env", &["ghost"], None).unwrap_err().code(),
        "exec.not_found"
    );
}

#[test]
fn wrapped_paths_follow_the_command_path_rule() {
    let bin = FakeBin::new(&["env", "git"]);
    let p = policy(&["env", "git"], false, false);
    let git = bin.dir.path().join("git").display().to_string();
    assert_eq!(
        bin.run(&p, "env", &[&git], None).unwrap_err().code(),
        "exec.command_is_path"
    );
    let mut p = p;
    p.allow_command_paths = true;
    assert_eq!(bin.run(&p, "env", &[&git, "status"], None), Ok(()));
    assert_eq!(
        bin.run(&p, "env", &["./git"], None).unwrap_err().code(),
        "exec.command_path_invalid"
    );
}

#[test]
fn nesting_is_bounded() {
    let bin = FakeBin::new(&["nice", "git"]);
    let p = policy(&["nice", "git"], false, false);
    let mut args = vec!["nice"; MAX_WRAPPER_DEPTH + 1];
    args.push("git");
    assert_eq!(
        bin.run(&p, "nice", &args, None).unwrap_err().code(),
        "exec.wrapper_unresolvable"
    );
    let ok: Vec<&str> = vec!["nice", "nice", "git"];
    assert_eq!(bin.run(&p, "nice", &ok, None), Ok(()));
}

#[test]
fn stdin_is_a_program_for_an_interpreter_without_a_script() {
    let bin = FakeBin::new(&["python3", "xargs"]);
    let p = policy(&["python3", "xargs"], true, false);
    assert_eq!(
        bin.run(&p, "python3", &[], Some("import os"))
            .unwrap_err()
            .code(),
        "exec.eval_stdin"
    );
    assert_eq!(
        bin.run(&p, "python3", &["-"], Some("x"))
            .unwrap_err()
            .code(),
        "exec.eval_stdin"
    );
    assert_eq!(bin.run(&p, "python3", &["s.py"], Some("data")), Ok(()));
    assert_eq!(bin.run(&p, "python3", &[], None), Ok(()));
    assert_eq!(bin.run(&p, "python3", &[], Some("")), Ok(()));
    let p = policy(&["python3"], true, true);
    assert_eq!(bin.run(&p, "python3", &[], Some("import os")), Ok(()));
}

#[test]
fn xargs_arguments_make_eval_unresolvable_for_interpreters() {
    let bin = FakeBin::new(&["python3", "xargs"]);
    let p = policy(&["python3", "xargs"], true, false);
    let err = bin.run(&p, "xargs", &["python3"], None).unwrap_err();
    assert_eq!(err.code(), "exec.wrapper_unresolvable");
    assert!(err.to_string().contains("\"xargs\""), "{err}");
    assert_eq!(bin.run(&p, "xargs", &["python3", "run.py"], None), Ok(()));
    assert_eq!(
        bin.run(&p, "xargs", &["-I{}", "python3", "{}"], None)
            .unwrap_err()
            .code(),
        "exec.wrapper_unresolvable"
    );
}

#[test]
fn env_assignments_go_through_the_env_deny_list_after_the_program() {
    let bin = FakeBin::new(&["env", "git", "bash"]);
    let p = policy(&["env", "git", "bash"], false, false);
    let err = bin
        .run(&p, "env", &["LD_PRELOAD=/w/x.so", "git"], None)
        .unwrap_err();
    assert_eq!(err.code(), "env.denied");
    assert!(err.to_string().contains("set by env at args[0]"), "{err}");
    assert_eq!(bin.run(&p, "env", &["RUST_LOG=debug", "git"], None), Ok(()));
    assert_eq!(
        bin.run(&p, "env", &["-i", "PATH=/x", "bash"], None)
            .unwrap_err()
            .code(),
        "exec.interpreter_denied"
    );
}
