//! Executable allowlist, program resolution and interpreter guardrails, through
//! `validate()`. Programs come from a temp PATH of fake executables, never the host's.

// Test code: a failed setup step should panic with its error (STYLE.md rule 1 opt-out).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::symlink;

use tierbox_policy::Rejection;

use self::fixture::Fixture;

/// Shared by the `validate_*` suites: a workspace, a sibling secret, a fake PATH.
pub(super) mod fixture {
    use std::collections::BTreeMap;
    use std::os::unix::fs::{PermissionsExt, symlink};
    use std::path::{Path, PathBuf};

    use tierbox_policy::{Plan, Policy, ProcessRunRequest, Rejection, ValidateContext, validate};

    /// Fake programs in the sandbox PATH (each a 0755 file).
    const PROGRAMS: &[&str] = &[
        "bash",
        "dash",
        "python3.11",
        "perl",
        "node",
        "ruby",
        "php",
        "lua5.4",
        "pwsh",
        "deno",
        "busybox",
        "env",
        "find",
        "git",
        "xargs",
        "timeout",
        "nice",
        "printf",
        "head",
        "sort",
        "cat",
        "ls",
        "cp",
        "grep",
        "echo",
        "sudo",
        "su",
        "watch",
        "flock",
        "strace",
        "stdbuf",
        "chroot",
        "gcc",
        "tar",
        "make",
        "rg",
        "gzip",
        "zstd",
    ];

    /// `tmp/` (holding `secret`) with the workspace `tmp/ws/` and the PATH `tmp/bin/`;
    /// `tmp/` lies in Cargo's target directory, which no run sees unless granted.
    pub(crate) struct Fixture {
        _tmp: tempfile::TempDir,
        /// The parent of the workspace; holds `secret`.
        pub(crate) tmp: PathBuf,
        /// The canonical workspace.
        pub(crate) ws: PathBuf,
        /// The sandbox PATH directory.
        pub(crate) bin: PathBuf,
        /// The policy under test; PATH is `bin`.
        pub(crate) policy: Policy,
    }

    impl Fixture {
        /// Interpreters and eval denied; `allowed` executables.
        pub(crate) fn new(allowed: &[&str]) -> Self {
            // Not under /tmp: there a path is the run's own private /tmp, never the
            // host's, so it would not be "outside" for the argument check. A target
            // directory under /tmp (a checkout there) gives way to /var/tmp.
            let target_tmp = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
            let scratch = tierbox_policy::validate::SCRATCH_ROOTS
                .iter()
                .any(|r| std::fs::canonicalize(target_tmp).is_ok_and(|t| t.starts_with(r)));
            let base = if scratch {
                std::path::Path::new("/var/tmp")
            } else {
                target_tmp
            };
            let tmp_dir = tempfile::tempdir_in(base).unwrap();
            let tmp = std::fs::canonicalize(tmp_dir.path()).unwrap();
            let ws = tmp.join("ws");
            let bin = tmp.join("bin");
            std::fs::create_dir_all(&ws).unwrap();
            std::fs::create_dir_all(&bin).unwrap();
            std::fs::write(tmp.join("secret"), "secret\n").unwrap();
            for name in PROGRAMS {
                let p = bin.join(name);
                std::fs::write(&p, "#!/bin/true\n").unwrap();
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
            symlink("dash", bin.join("sh")).unwrap();
            symlink("python3.11", bin.join("python3")).unwrap();
            symlink("gcc", bin.join("cc")).unwrap();
            let mut policy = Policy::default();
            policy.exec.allowed_executables = allowed.iter().map(|s| (*s).to_owned()).collect();
            policy.env.path = bin.display().to_string();
            // The PATH directory is no system path: the policy grants it, as a policy
            // must for a toolchain outside the system paths.
            policy.filesystem.read_only = vec![bin.display().to_string()];
            Self {
                _tmp: tmp_dir,
                tmp,
                ws,
                bin,
                policy,
            }
        }

        /// The same with interpreters (and optionally eval) allowed.
        pub(crate) fn interpreters(mut self, eval: bool) -> Self {
            self.policy.exec.allow_interpreters = true;
            self.policy.exec.allow_eval = eval;
            self
        }

        /// Validates `command args` with the workspace as cwd.
        pub(crate) fn run(&self, command: &str, args: &[&str]) -> Result<Plan, Rejection> {
            let mut req = ProcessRunRequest::new(command);
            req.args = args.iter().map(|s| (*s).to_owned()).collect();
            self.request(&req)
        }

        /// Validates a full request.
        pub(crate) fn request(&self, req: &ProcessRunRequest) -> Result<Plan, Rejection> {
            let ctx = ValidateContext::new(&self.ws).with_env(BTreeMap::new());
            validate(&self.policy, req, &ctx)
        }

        /// The rejection code of `command args`.
        #[track_caller]
        pub(crate) fn code(&self, command: &str, args: &[&str]) -> &'static str {
            match self.run(command, args) {
                Ok(plan) => panic!("{command} {args:?} was accepted: {:?}", plan.argv),
                Err(e) => e.code(),
            }
        }

        /// Asserts `command args` passes with argv exactly as requested.
        #[track_caller]
        pub(crate) fn passes_untouched(&self, command: &str, args: &[&str]) -> Plan {
            let plan = match self.run(command, args) {
                Ok(plan) => plan,
                Err(e) => panic!("{command} {args:?} was rejected: {e}"),
            };
            let mut expected = vec![command.to_owned()];
            expected.extend(args.iter().map(|s| (*s).to_owned()));
            assert_eq!(plan.argv, expected, "argv must never be rewritten");
            plan
        }

        /// Creates a file (and its parents) in the workspace.
        pub(crate) fn file(&self, rel: &str) -> PathBuf {
            let p = self.ws.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, "x\n").unwrap();
            p
        }

        /// Creates a symlink in the workspace.
        pub(crate) fn link(&self, rel: &str, target: impl AsRef<Path>) {
            symlink(target, self.ws.join(rel)).unwrap();
        }
    }
}

const TOOLS: &[&str] = &[
    "bash",
    "sh",
    "dash",
    "python3",
    "python3.11",
    "perl",
    "node",
    "ruby",
    "php",
    "lua5.4",
    "pwsh",
    "deno",
    "busybox",
    "env",
    "find",
    "git",
    "xargs",
    "timeout",
    "nice",
    "printf",
    "head",
    "sort",
    "cat",
    "ls",
    "cp",
    "grep",
    "echo",
    "sudo",
    "su",
    "watch",
    "flock",
    "strace",
    "stdbuf",
    "chroot",
    "cc",
    "tar",
];

fn denied() -> Fixture {
    Fixture::new(TOOLS)
}

fn no_eval() -> Fixture {
    Fixture::new(TOOLS).interpreters(false)
}

// ---- executable allowlist and resolution ------------------------------------------

#[test]
fn bare_name_resolves_in_the_sandbox_path_without_canonicalising() {
    let f = no_eval();
    let plan = f.run("python3", &["script.py"]).unwrap();
    assert_eq!(plan.program, f.bin.join("python3"));
    assert_eq!(
        f.run("cc", &["-c", "x.c"]).unwrap().program,
        f.bin.join("cc")
    );
}

#[test]
fn command_with_a_slash_is_a_path_unless_allowed() {
    let f = denied();
    let git = f.bin.join("git").display().to_string();
    assert_eq!(f.code(&git, &["status"]), "exec.command_is_path");
    assert_eq!(f.code("./git", &[]), "exec.command_is_path");
    let mut f = f;
    f.policy.exec.allow_command_paths = true;
    assert_eq!(f.run(&git, &["status"]).unwrap().program, f.bin.join("git"));
    assert_eq!(f.code("./git", &[]), "exec.command_path_invalid");
    let missing = f.bin.join("missing-git").display().to_string();
    f.policy.exec.allowed_executables.push("missing-git".into());
    assert_eq!(f.code(&missing, &[]), "exec.command_path_invalid");
    let make = f.bin.join("make").display().to_string();
    assert_eq!(
        f.code(&make, &[]),
        "exec.not_allowed",
        "the file name is still allowlisted"
    );
}

#[test]
fn executable_not_in_the_allowlist() {
    let f = denied();
    let err = f.run("make", &[]).unwrap_err();
    assert_eq!(
        err,
        Rejection::ExecutableNotAllowed {
            name: "make".into(),
            via: String::new()
        }
    );
    assert_eq!(err.code(), "exec.not_allowed");
}

#[test]
fn allowed_but_missing_from_the_sandbox_path_is_not_found_even_if_in_the_workspace() {
    let mut f = denied();
    f.policy.exec.allowed_executables.push("tool".into());
    let planted = f.file("tool");
    std::fs::set_permissions(
        &planted,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    assert_eq!(f.code("tool", &[]), "exec.not_found");
}

#[test]
fn star_allows_any_program_in_the_path() {
    let mut f = Fixture::new(&["*"]);
    f.policy.exec.danger_allow_any_executable = true;
    f.passes_untouched("make", &["all"]);
}

// ---- interpreter denylist --------------------------------------------------------------

#[test]
fn interpreters_are_denied_by_default() {
    let f = denied();
    for (command, args) in [
        ("bash", &["x.sh"][..]),
        ("sh", &[]),
        ("python3", &["x.py"]),
        ("python3.11", &["x.py"]),
        ("perl", &["x.pl"]),
        ("node", &[]),
        ("pwsh", &[]),
        ("busybox", &["ls"]),
    ] {
        assert_eq!(
            f.code(command, args),
            "exec.interpreter_denied",
            "{command}"
        );
    }
}

#[test]
fn allowlisted_symlink_to_a_shell_is_an_interpreter() {
    let mut f = denied();
    symlink("bash", f.bin.join("build-tool")).unwrap();
    f.policy.exec.allowed_executables.push("build-tool".into());
    let err = f.run("build-tool", &["x"]).unwrap_err();
    assert_eq!(err.code(), "exec.interpreter_denied");
    assert!(err.to_string().contains("resolves to"), "{err}");
}

#[test]
fn perl_e_interpreters_denied() {
    assert_eq!(
        denied().code("perl", &["-e", "print 1"]),
        "exec.interpreter_denied"
    );
}

#[test]
fn perl_e_interpreters_allowed_eval_denied() {
    let err = no_eval().run("perl", &["-e", "print 1"]).unwrap_err();
    assert_eq!(
        err,
        Rejection::EvalFlag {
            interpreter: "perl".into(),
            flag: "-e".into(),
            arg_index: 0
        }
    );
    assert_eq!(err.code(), "exec.eval_flag");
}

#[test]
fn bash_ec_id() {
    assert_eq!(
        denied().code("bash", &["-ec", "id"]),
        "exec.interpreter_denied"
    );
    let err = no_eval().run("bash", &["-ec", "id"]).unwrap_err();
    assert_eq!(
        err,
        Rejection::EvalFlag {
            interpreter: "bash".into(),
            flag: "-ec".into(),
            arg_index: 0
        }
    );
}

#[test]
fn python3_11_c() {
    assert_eq!(
        denied().code("python3.11", &["-c", "x"]),
        "exec.interpreter_denied"
    );
    assert_eq!(no_eval().code("python3.11", &["-c", "x"]), "exec.eval_flag");
}

#[test]
fn eval_flags_per_family() {
    let f = no_eval();
    for (command, args) in [
        ("sh", &["-xc", "id"][..]),
        ("bash", &["-lc", "id"]),
        ("python3", &["-Ic", "x"]),
        ("python3", &["-Sc", "x"]),
        ("python3", &["-uc", "x"]),
        ("perl", &["-E", "say 1"]),
        ("perl", &["-lne", "print"]),
        ("ruby", &["-e", "p 1"]),
        ("node", &["-e", "x"]),
        ("node", &["-p", "x"]),
        ("node", &["-pe", "x"]),
        ("node", &["--eval=x"]),
        ("node", &["--print", "x"]),
        ("deno", &["eval", "x"]),
        ("php", &["-r", "x"]),
        ("lua5.4", &["-e", "x"]),
        ("pwsh", &["-Command", "x"]),
        ("pwsh", &["-EncodedCommand", "x"]),
        ("pwsh", &["-enc", "x"]),
        ("pwsh", &["-ec", "x"]),
        ("pwsh", &["-c", "x"]),
        ("busybox", &["sh", "-c", "id"]),
    ] {
        assert_eq!(
            f.code(command, args),
            "exec.eval_flag",
            "{command} {args:?}"
        );
    }
}

#[test]
fn scripts_run_when_interpreters_are_allowed() {
    let f = no_eval();
    f.file("x.py");
    f.file("build.sh");
    f.passes_untouched("python3", &["x.py", "-c", "config"]);
    f.passes_untouched("python3", &["-m", "pytest", "-c", "pytest.ini"]);
    f.passes_untouched("bash", &["-e", "build.sh"]);
    f.passes_untouched("perl", &["-c", "x.pl"]);
    f.passes_untouched("node", &["-c", "x.js"]);
    f.passes_untouched("ruby", &["-E", "UTF-8", "x.rb"]);
    let f = Fixture::new(TOOLS).interpreters(true);
    f.passes_untouched("bash", &["-c", "id"]);
}

#[test]
fn inline_code_on_stdin_is_eval() {
    let f = no_eval();
    let mut req = tierbox_policy::ProcessRunRequest::new("python3");
    req.stdin = Some("import os; os.system('id')".into());
    let err = f.request(&req).unwrap_err();
    assert_eq!(err.code(), "exec.eval_stdin");
    req.args = vec!["x.py".into()];
    assert!(f.request(&req).is_ok(), "stdin is data for a script");
    let mut req = tierbox_policy::ProcessRunRequest::new("env");
    req.args = vec!["bash".into()];
    req.stdin = Some("id".into());
    assert_eq!(f.request(&req).unwrap_err().code(), "exec.eval_stdin");
}

// ---- wrappers --------------------------------------------------------------------------

#[test]
fn env_bash_c_id() {
    let err = denied().run("env", &["bash", "-c", "id"]).unwrap_err();
    assert_eq!(
        err,
        Rejection::InterpreterDenied {
            name: "bash".into(),
            via: " (run by env at args[0])".into()
        }
    );
    assert_eq!(
        no_eval().code("env", &["bash", "-c", "id"]),
        "exec.eval_flag"
    );
}

#[test]
fn env_i_path_bash() {
    let err = denied().run("env", &["-i", "PATH=/x", "bash"]).unwrap_err();
    assert_eq!(
        err,
        Rejection::InterpreterDenied {
            name: "bash".into(),
            via: " (run by env at args[2])".into()
        }
    );
    // With interpreters allowed, setting PATH through env is still the env deny list's call.
    assert_eq!(
        no_eval().code("env", &["-i", "PATH=/x", "bash"]),
        "env.denied"
    );
}

#[test]
fn env_sets_a_denied_variable() {
    let err = denied()
        .run("env", &["LD_PRELOAD=/tmp/x.so", "git", "status"])
        .unwrap_err();
    assert_eq!(err.code(), "env.denied");
    assert!(err.to_string().contains("LD_PRELOAD"), "{err}");
    denied().passes_untouched("env", &["LANG=C", "git", "status"]);
}

#[test]
fn find_exec_sh_c() {
    let args = [".", "-name", "*.rs", "-exec", "sh", "-c", "x", ";"];
    let err = denied().run("find", &args).unwrap_err();
    assert_eq!(
        err,
        Rejection::InterpreterDenied {
            name: "sh".into(),
            via: " (run by find at args[4])".into()
        }
    );
    assert_eq!(no_eval().code("find", &args), "exec.eval_flag");
    let f = denied();
    f.passes_untouched(
        "find",
        &[".", "-name", "*.rs", "-exec", "grep", "-l", "x", "{}", "+"],
    );
    assert_eq!(
        f.code(
            "find",
            &[".", "-exec", "cat", "{}", ";", "-execdir", "make", ";"]
        ),
        "exec.not_allowed"
    );
}

#[test]
fn xargs_sh_c() {
    assert_eq!(
        denied().code("xargs", &["sh", "-c"]),
        "exec.interpreter_denied"
    );
    assert_eq!(no_eval().code("xargs", &["sh", "-c"]), "exec.eval_flag");
    assert_eq!(
        no_eval().code("xargs", &["python3"]),
        "exec.wrapper_unresolvable"
    );
    denied().passes_untouched("xargs", &["-0", "grep", "-l", "x"]);
    let err = Fixture::new(&["xargs"]).run("xargs", &[]).unwrap_err();
    assert_eq!(
        err,
        Rejection::ExecutableNotAllowed {
            name: "echo".into(),
            via: " (run by xargs by default)".into()
        }
    );
}

#[test]
fn timeout_5_bash() {
    assert_eq!(
        denied().code("timeout", &["5", "bash"]),
        "exec.interpreter_denied"
    );
    denied().passes_untouched("timeout", &["-s", "KILL", "5", "git", "status"]);
}

#[test]
fn nice_n_5_python3_sc() {
    assert_eq!(
        denied().code("nice", &["-n", "5", "python3", "-Sc", "x"]),
        "exec.interpreter_denied"
    );
    let err = no_eval()
        .run("nice", &["-n", "5", "python3", "-Sc", "x"])
        .unwrap_err();
    assert_eq!(
        err,
        Rejection::EvalFlag {
            interpreter: "python3".into(),
            flag: "-Sc".into(),
            arg_index: 3
        }
    );
}

#[test]
fn wrapped_program_must_be_allowlisted() {
    let f = denied();
    let err = f.run("env", &["make"]).unwrap_err();
    assert_eq!(
        err,
        Rejection::ExecutableNotAllowed {
            name: "make".into(),
            via: " (run by env at args[0])".into()
        }
    );
    assert_eq!(
        f.code("timeout", &["5", "nice", "make"]),
        "exec.not_allowed"
    );
    assert_eq!(f.code("stdbuf", &["-oL", "make"]), "exec.not_allowed");
}

#[test]
fn shells_started_by_wrappers() {
    let f = denied();
    assert_eq!(f.code("su", &["-c", "id"]), "exec.interpreter_denied");
    assert_eq!(f.code("sudo", &["-s", "ls"]), "exec.interpreter_denied");
    assert_eq!(f.code("watch", &["ls"]), "exec.interpreter_denied");
    assert_eq!(
        f.code("flock", &["lock", "-c", "id"]),
        "exec.interpreter_denied"
    );
    assert_eq!(no_eval().code("su", &["-c", "id"]), "exec.eval_flag");
    f.passes_untouched("watch", &["-x", "ls", "-l"]);
    f.passes_untouched("flock", &["lock", "git", "status"]);
}

#[test]
fn unresolvable_wrappers_are_rejected() {
    let f = denied();
    for (command, args) in [
        ("env", &["--frobnicate", "git"][..]),
        ("env", &["-S", "bash '-c' id"]),
        ("find", &[".", "-exec", "{}", ";"]),
        ("xargs", &["-I{}", "{}"]),
        ("xargs", &["env"]),
        ("sudo", &["-e", "file"]),
        ("strace", &["--fol", "ls"]),
        ("timeout", &["--bogus", "5", "ls"]),
    ] {
        let err = f.run(command, args).unwrap_err();
        assert_eq!(
            err.code(),
            "exec.wrapper_unresolvable",
            "{command} {args:?}"
        );
        assert!(
            matches!(&err, Rejection::WrapperUnresolvable { wrapper, .. } if !wrapper.is_empty()),
            "{err}"
        );
    }
}

#[test]
fn every_exec_code_is_reachable() {
    let f = denied();
    let git = f.bin.join("git").display().to_string();
    let mut with_paths = denied();
    with_paths.policy.exec.allow_command_paths = true;
    let mut stdin_req = tierbox_policy::ProcessRunRequest::new("perl");
    stdin_req.stdin = Some("print 1".into());
    let mut missing = denied();
    missing.policy.exec.allowed_executables.push("ghost".into());
    let seen = [
        f.code(&git, &[]),
        with_paths.code("bin/git", &[]),
        f.code("make", &[]),
        missing.code("ghost", &[]),
        f.code("bash", &[]),
        no_eval().code("bash", &["-c", "x"]),
        no_eval().request(&stdin_req).unwrap_err().code(),
        f.code("xargs", &["-I{}", "{}"]),
        f.code("env", &["BASH_ENV=x", "git"]),
    ];
    let expected = [
        "exec.command_is_path",
        "exec.command_path_invalid",
        "exec.not_allowed",
        "exec.not_found",
        "exec.interpreter_denied",
        "exec.eval_flag",
        "exec.eval_stdin",
        "exec.wrapper_unresolvable",
        "env.denied",
    ];
    assert_eq!(seen, expected);
    for code in expected {
        assert!(
            Rejection::ALL_CODES.contains(&code),
            "{code} is listed in ALL_CODES"
        );
    }
}

/// `tier.preferred` is the tier of a request that leaves the choice open; a request that
/// names a tier keeps it, and the preference must be a tier at least the minimum.
#[test]
fn the_policy_preference_applies_to_requests_that_leave_the_tier_open() {
    use tierbox_policy::{Policy, PolicyError, ProcessRunRequest, Tier, TierRequest};

    let mut fx = Fixture::new(&["git"]);
    let mut open = ProcessRunRequest::new("git");
    assert_eq!(fx.request(&open).unwrap().tier.requested, TierRequest::Auto);
    fx.policy.tier.preferred = TierRequest::B;
    assert_eq!(fx.request(&open).unwrap().tier.requested, TierRequest::B);
    open.tier = TierRequest::C;
    assert_eq!(fx.request(&open).unwrap().tier.requested, TierRequest::C);

    let parsed = Policy::from_toml("version = 1\n[tier]\npreferred = \"b\"\n").unwrap();
    assert_eq!(parsed.tier.preferred, TierRequest::B);
    assert_eq!(parsed.tier.minimum, Tier::B);
    for (doc, why) in [
        ("[tier]\npreferred = \"a\"\n", "is not a preference"),
        (
            "[tier]\nminimum = \"c\"\npreferred = \"b\"\n",
            "weaker than tier.minimum",
        ),
    ] {
        match Policy::from_toml(&format!("version = 1\n{doc}")) {
            Err(PolicyError::Invalid { field, reason }) => {
                assert_eq!(field, "tier.preferred");
                assert!(reason.contains(why), "{reason}");
            }
            other => panic!("{doc:?} was not refused: {other:?}"),
        }
    }
}
