//! Workspace scope through `validate()`: path-like arguments are checked against what the
//! run sees, nothing is ever rewritten. Regression cases are named after Palyra's bugs (research/palyra.md
//! §17.1–17.2: P1, P2, D1).

// Test code: a failed setup step should panic with its error (STYLE.md rule 1 opt-out).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use tierbox_policy::{ProcessRunRequest, Rejection};

use super::validate_exec::fixture::Fixture;

const TOOLS: &[&str] = &[
    "git", "printf", "head", "sort", "cat", "ls", "cp", "grep", "echo", "tar", "cc", "find",
];

fn fixture() -> Fixture {
    Fixture::new(TOOLS)
}

#[track_caller]
fn refused(f: &Fixture, code: &str, command: &str, args: &[&str]) -> Rejection {
    let err = f.run(command, args).unwrap_err();
    assert_eq!(err.code(), code, "{command} {args:?}: {err}");
    err
}

/// Refused as a path outside the workspace that no grant covers.
#[track_caller]
fn outside(f: &Fixture, command: &str, args: &[&str]) -> Rejection {
    refused(f, "scope.path_outside_workspace", command, args)
}

/// Refused as a path no policy key shows; the message says so.
#[track_caller]
fn never(f: &Fixture, code: &str, command: &str, args: &[&str]) {
    let err = refused(f, code, command, args);
    assert!(err.to_string().contains("no policy key"), "{err}");
    assert_eq!(Rejection::fix_for(code), None, "{code}");
}

/// `path` of the fixture's parent directory (outside the workspace, seen by no run).
fn out(f: &Fixture, rel: &str) -> String {
    f.tmp.join(rel).display().to_string()
}

// ---- P1 / §17.2: the rewriter broke ordinary commands ----------------------------

#[test]
fn git_status_passes_untouched() {
    fixture().passes_untouched("git", &["status"]);
}

#[test]
fn printf_hello_passes_untouched() {
    fixture().passes_untouched("printf", &["hello"]);
}

#[test]
fn head_n1_file_passes_untouched() {
    let f = fixture();
    f.file("file");
    f.passes_untouched("head", &["-n1", "file"]);
}

#[test]
fn bare_words_options_and_urls_pass_untouched() {
    let f = fixture();
    for arg in [
        "status",
        "hello",
        "1",
        "origin",
        "HEAD~1",
        "-n1",
        "--color=auto",
        "a:b",
        "https://example.com/x",
        "^foo/bar$",
        "HEAD..main",
        "origin/main",
    ] {
        f.passes_untouched("git", &[arg]);
    }
    f.passes_untouched("grep", &["-rn", "^foo/bar$", "."]);
    f.passes_untouched("git", &["log", "--format=%h %s", "-n", "5", "HEAD~1"]);
}

#[test]
fn compact_numeric_and_combined_flags_pass_untouched() {
    let f = fixture();
    f.file("a.c");
    f.passes_untouched("cc", &["-O2", "-Wall", "-Iinclude", "-o", "a.out", "a.c"]);
    f.passes_untouched("tar", &["-czf", "out.tgz", "a.c"]);
}

// ---- P2: dash-prefixed paths were never validated ---------------------------------

#[test]
fn head_dashdash_dash_x_dotdot_outside_is_rejected() {
    let f = fixture();
    std::fs::create_dir(f.ws.join("--x")).unwrap();
    let err = outside(&f, "head", &["--", "--x/../../secret"]);
    assert!(
        matches!(err, Rejection::PathOutsideWorkspace { arg_index: 1, .. }),
        "{err}"
    );
    let depth = f.ws.components().count();
    let shadow = format!("--x/{}etc/shadow", "../".repeat(depth));
    never(&f, "scope.path_secret", "head", &["--", &shadow]);
}

#[test]
fn dash_named_symlink_to_outside_is_rejected() {
    let f = fixture();
    f.link("-x", f.tmp.join("secret"));
    outside(&f, "cat", &["--", "-x"]);
}

// ---- D1: dangling symlinks let writes escape ----------------------------------------

#[test]
fn sort_o_dangling_symlink_to_outside_is_rejected() {
    let f = fixture();
    f.file("src.txt");
    f.link("dl", f.tmp.join("created-by-sort"));
    let err = outside(&f, "sort", &["-o", "dl", "src.txt"]);
    match err {
        Rejection::PathOutsideWorkspace {
            arg_index,
            arg,
            resolved,
            workspace,
            ..
        } => {
            assert_eq!((arg_index, arg.as_str()), (1, "dl"));
            assert_eq!(resolved, f.tmp.join("created-by-sort"));
            assert_eq!(workspace, f.ws);
        }
        other => panic!("{other}"),
    }
}

#[test]
fn relative_dangling_symlink_chain_to_outside_is_rejected() {
    let f = fixture();
    f.link("a", "b");
    f.link("b", "../later/out.txt");
    outside(&f, "cp", &["x", "a"]);
    f.link("in", "sub/new.txt");
    f.passes_untouched("cp", &["x", "in"]);
}

#[test]
fn write_through_a_symlinked_directory_to_outside_is_rejected() {
    let f = fixture();
    f.link("up", &f.tmp);
    outside(&f, "cp", &["a", "up/new-file"]);
    outside(&f, "cat", &["up/secret"]);
}

// ---- the other kinds of provable paths ---------------------------------------------

#[test]
fn absolute_paths_outside_are_rejected() {
    let f = fixture();
    never(&f, "scope.path_not_grantable", "ls", &["/"]);
    never(&f, "scope.path_secret", "cat", &["/etc/shadow"]);
    outside(&f, "cat", &[&out(&f, "secret")]);
    let inside = f.file("notes.txt").display().to_string();
    f.passes_untouched("cat", &[&inside]);
}

#[test]
fn option_values_are_checked() {
    let f = fixture();
    outside(&f, "git", &[&format!("--config={}", out(&f, "secret"))]);
    outside(&f, "git", &[&format!("-C{}", out(&f, "")), "status"]);
    outside(&f, "cc", &["-I../x", "a.c"]);
    never(&f, "scope.path_not_grantable", "cc", &["-o/abs", "a.c"]);
    outside(&f, "git", &["-o=../x"]);
    outside(&f, "tar", &["--directory=../..", "-x"]);
    outside(&f, "cat", &[&format!("if={}", out(&f, "secret"))]);
    f.passes_untouched("git", &["--git-dir=.git", "--work-tree=sub/dir", "status"]);
    // What every run sees passes: system paths, in an option's value too.
    f.passes_untouched("git", &["--config=/etc/passwd", "-C/etc", "status"]);
    f.passes_untouched("cat", &["if=/etc/passwd"]);
}

#[test]
fn file_urls_are_checked() {
    let f = fixture();
    outside(
        &f,
        "git",
        &["clone", &format!("file://{}", out(&f, "secret"))],
    );
    never(
        &f,
        "scope.path_secret",
        "git",
        &["clone", "FILE:///%65tc/shadow"],
    );
    never(
        &f,
        "scope.path_not_grantable",
        "git",
        &["clone", "file://remote.example/repo"],
    );
    outside(
        &f,
        "git",
        &["clone", &format!("--reference=file://{}", out(&f, "")), "x"],
    );
    f.passes_untouched("git", &["clone", "file:///etc/passwd"]);
    let inside = format!("file://{}", f.ws.join("repo").display());
    f.passes_untouched("git", &["clone", &inside]);
}

#[test]
fn dotdot_components_are_resolved() {
    let f = fixture();
    f.file("subdir/keep");
    f.file("file");
    f.passes_untouched("ls", &["subdir/../file"]);
    outside(&f, "cp", &["a", "../outside"]);
    outside(&f, "cat", &["../secret"]);
    outside(&f, "ls", &[".."]);
}

/// `~` is the run's home: a private, empty one when the policy grants no `HOME` (this
/// fixture passes none); another user's `~user` is never shown.
#[test]
fn home_is_the_run_s_own() {
    let f = fixture();
    f.passes_untouched("cat", &["~"]);
    f.passes_untouched("cat", &["~/.ssh/id_rsa"]);
    f.passes_untouched("git", &["--git-dir=~/.git"]);
    never(
        &f,
        "scope.path_not_grantable",
        "cat",
        &["~root/.ssh/id_rsa"],
    );
}

/// With the supervisor's `HOME` passed and granted, `~` is that directory, judged by the
/// grants: readable where they say so, and a write names the change that allows it.
#[test]
fn a_granted_home_is_judged_by_the_grants() {
    let mut f = fixture();
    let home = f.tmp.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("notes"), "n").unwrap();
    f.policy.env.pass = vec!["HOME".to_owned()];
    f.policy
        .filesystem
        .read_only
        .push(home.display().to_string());
    // The Tier A runtimes elsewhere: by default they are in the home, which a writable
    // grant may then not name.
    let runtimes = f.tmp.join("runtimes").display().to_string();
    let mut env: std::collections::BTreeMap<String, String> =
        [("HOME".to_owned(), home.display().to_string())].into();
    let ctx_default = tierbox_policy::ValidateContext::new(&f.ws).with_env(env.clone());
    env.insert("TIERBOX_RUNTIMES_DIR".to_owned(), runtimes);
    let ctx = tierbox_policy::ValidateContext::new(&f.ws).with_env(env);
    let run = |policy: &tierbox_policy::Policy, arg: &str| {
        let mut req = ProcessRunRequest::new("cat");
        req.args = vec![arg.to_owned()];
        tierbox_policy::validate(policy, &req, &ctx)
    };
    let mut req = ProcessRunRequest::new("cat");
    req.args = vec!["of=~/new".to_owned()];
    let err = tierbox_policy::validate(&f.policy, &req, &ctx_default).unwrap_err();
    assert_eq!(err.code(), "scope.path_secret", "{err}");
    assert!(err.to_string().contains("runtimes"), "{err}");
    let plan = run(&f.policy, "~/notes").unwrap();
    assert!(!plan.filesystem.private_home);
    let err = run(&f.policy, "of=~/new").unwrap_err();
    assert_eq!(err.code(), "scope.path_outside_workspace", "{err}");
    let entry = home.display().to_string();
    assert!(
        err.to_string().contains(&format!(
            "move {entry:?} from filesystem.read_only to filesystem.writable"
        )),
        "{err}"
    );
    f.policy.filesystem.read_only.retain(|e| *e != entry);
    f.policy.filesystem.writable.push(entry);
    assert!(run(&f.policy, "of=~/new").is_ok());
}

#[test]
fn find_exec_arguments_are_scoped_too() {
    let f = fixture();
    outside(&f, "find", &[".", "-exec", "cat", &out(&f, "secret"), ";"]);
    never(&f, "scope.path_not_grantable", "find", &["/", "-name", "x"]);
}

// ---- cwd and workspace -------------------------------------------------------------

fn in_cwd(
    f: &Fixture,
    cwd: &str,
    command: &str,
    args: &[&str],
) -> Result<tierbox_policy::Plan, Rejection> {
    let mut req = ProcessRunRequest::new(command);
    req.cwd = Some(cwd.to_owned());
    req.args = args.iter().map(|s| (*s).to_owned()).collect();
    f.request(&req)
}

#[test]
fn cwd_must_be_a_directory_inside() {
    let f = fixture();
    f.file("sub/file");
    assert_eq!(in_cwd(&f, "sub", "ls", &[]).unwrap().cwd, f.ws.join("sub"));
    let abs = f.ws.join("sub").display().to_string();
    assert_eq!(in_cwd(&f, &abs, "ls", &[]).unwrap().cwd, f.ws.join("sub"));
    assert_eq!(
        in_cwd(&f, "..", "ls", &[]).unwrap_err().code(),
        "scope.cwd_outside_workspace"
    );
    assert_eq!(
        in_cwd(&f, "/etc", "ls", &[]).unwrap_err().code(),
        "scope.cwd_outside_workspace"
    );
    assert_eq!(
        in_cwd(&f, "sub/file", "ls", &[]).unwrap_err().code(),
        "scope.cwd_not_directory"
    );
    assert_eq!(
        in_cwd(&f, "nope", "ls", &[]).unwrap_err().code(),
        "scope.cwd_not_directory"
    );
    f.link("esc", &f.tmp);
    assert_eq!(
        in_cwd(&f, "esc", "ls", &[]).unwrap_err().code(),
        "scope.cwd_outside_workspace"
    );
}

#[test]
fn arguments_resolve_relative_to_cwd() {
    let f = fixture();
    f.file("sub/deeper/x");
    assert!(in_cwd(&f, "sub/deeper", "cat", &["../../sub/deeper/x"]).is_ok());
    let err = in_cwd(&f, "sub", "cat", &["../../secret"]).unwrap_err();
    assert_eq!(err.code(), "scope.path_outside_workspace");
}

#[test]
fn workspace_must_exist() {
    let f = fixture();
    let ctx =
        tierbox_policy::ValidateContext::new(f.ws.join("missing")).with_env(Default::default());
    let err = tierbox_policy::validate(&f.policy, &ProcessRunRequest::new("ls"), &ctx).unwrap_err();
    assert_eq!(err.code(), "scope.workspace_invalid");
}

/// The workspace roots no run may have, each refused with the rule it breaks: the
/// filesystem root, system directories and anything below the system trees, the shared
/// top-level directories themselves, a home directory itself, and a directory holding
/// Tierbox's own state. `danger_any_workspace_root` lifts every rule but the last.
///
/// Regression: `check -w /`, `-w /root`, `-w /etc` and `-w /proc` said "ok", a Tier B run
/// started from `/` created `/etc/<file>`, and one started in the state directory read
/// the attestation signing key.
#[test]
fn workspace_roots_that_would_hand_over_the_host_are_refused() {
    let f = fixture();
    let refused = |ctx: &tierbox_policy::ValidateContext, policy: &tierbox_policy::Policy| {
        tierbox_policy::validate(policy, &ProcessRunRequest::new("ls"), ctx)
            .err()
            .map(|e| (e.code(), e.to_string()))
    };
    let at = |root: &str| tierbox_policy::ValidateContext::new(root).with_env(Default::default());
    for (root, rule) in [
        ("/", "the filesystem root"),
        ("/etc", "system directory /etc"),
        ("/usr/share", "system directory /usr"),
        ("/proc", "system directory /proc"),
        ("/proc/self/root", "the filesystem root"),
        ("/dev", "system directory /dev"),
        ("/var", "holds every user's"),
        ("/tmp", "holds every user's"),
        ("/root", "holds every user's"),
    ] {
        if !std::path::Path::new(root).is_dir() {
            continue;
        }
        let (code, message) =
            refused(&at(root), &f.policy).unwrap_or_else(|| panic!("{root} accepted"));
        assert_eq!(code, "scope.workspace_refused", "{root}: {message}");
        assert!(message.contains(rule), "{root}: {message}");
        let mut danger = f.policy.clone();
        danger.danger_any_workspace_root = true;
        match refused(&at(root), &danger) {
            None => {}
            // What the override never lifts: this root holds Tierbox's own files (the
            // default runtimes directory under /usr/local, without a HOME).
            Some((code, message)) if message.contains("Tierbox's own state") => {
                assert_eq!(code, "scope.workspace_refused", "{message}");
                assert!(
                    ["/", "/proc/self/root", "/usr/share"].contains(&root),
                    "{root}"
                );
            }
            Some(other) => panic!("{root} with the override: {other:?}"),
        }
    }
    // A home directory itself (the supervisor's HOME); a project inside it is fine.
    let home_ctx = |ws: &std::path::Path| {
        let env = [("HOME".to_owned(), f.ws.to_str().unwrap().to_owned())]
            .into_iter()
            .collect();
        tierbox_policy::ValidateContext::new(ws).with_env(env)
    };
    let (code, message) = refused(&home_ctx(&f.ws), &f.policy).unwrap();
    assert_eq!(code, "scope.workspace_refused");
    assert!(message.contains("home directory itself"), "{message}");
    std::fs::create_dir_all(f.ws.join("project")).unwrap();
    assert_eq!(refused(&home_ctx(&f.ws.join("project")), &f.policy), None);
    // A directory holding the state directory, or the audit log.
    let ctx = tierbox_policy::ValidateContext::new(&f.ws)
        .with_env(Default::default())
        .with_state_dir(f.ws.join(".tierbox"));
    let (code, message) = refused(&ctx, &f.policy).unwrap();
    assert_eq!(code, "scope.workspace_refused");
    assert!(
        message.contains("contains the state directory"),
        "{message}"
    );
    let elsewhere = tierbox_policy::ValidateContext::new(&f.ws)
        .with_env(Default::default())
        .with_state_dir("/nonexistent/state/tierbox");
    assert_eq!(refused(&elsewhere, &f.policy), None);
    let mut logged = f.policy.clone();
    logged.audit.log = Some(f.ws.join("audit.jsonl"));
    let (_, message) = refused(&elsewhere, &logged).unwrap();
    assert!(message.contains("contains the audit log"), "{message}");
}

/// Every hint is true: each fix a `scope.workspace_refused` rejection names
/// ([`WorkspaceRule::fixes`], in its message), applied alone, lets the request through,
/// for every rule under that code; and `danger_any_workspace_root` is named only where it
/// works.
///
/// Regression: the Kubernetes recipe put its workspace inside its state directory
/// (`--state-dir /var/lib/tierbox --workspace /var/lib/tierbox/sandboxes`); the refusal
/// said "a policy may lift this with danger_any_workspace_root = true", which cannot lift
/// that rule.
#[test]
fn every_workspace_refused_hint_is_true() {
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use tierbox_policy::rejection::{OwnFile, WorkspaceFix, WorkspaceRule};
    use tierbox_policy::{Policy, ValidateContext};

    /// A refused request: what validation is given.
    #[derive(Clone)]
    struct Case {
        what: &'static str,
        ws: PathBuf,
        policy: Policy,
        env: BTreeMap<String, String>,
        state_dir: Option<PathBuf>,
    }
    impl Case {
        fn validate(&self) -> Result<(), Rejection> {
            let mut ctx = ValidateContext::new(&self.ws).with_env(self.env.clone());
            if let Some(d) = &self.state_dir {
                ctx = ctx.with_state_dir(d);
            }
            tierbox_policy::validate(&self.policy, &ProcessRunRequest::new("ls"), &ctx).map(|_| ())
        }
    }

    let f = fixture();
    let elsewhere = f.tmp.join("elsewhere");
    let project = f.tmp.join("project");
    let home = f.tmp.join("home");
    for d in [&elsewhere, &project, &home] {
        std::fs::create_dir_all(d).unwrap();
    }
    let env: BTreeMap<String, String> = [("HOME".to_owned(), home.display().to_string())].into();
    let base = Case {
        what: "",
        ws: f.ws.clone(),
        policy: f.policy.clone(),
        env: env.clone(),
        state_dir: Some(elsewhere.join("state")),
    };
    assert_eq!(base.validate(), Ok(()), "the fixture itself passes");
    let state = f.tmp.join("state");
    std::fs::create_dir_all(state.join("sandboxes")).unwrap();
    let mut cases = vec![
        Case {
            what: "the workspace inside the state directory",
            ws: state.join("sandboxes"),
            state_dir: Some(state.clone()),
            ..base.clone()
        },
        Case {
            what: "the workspace holding the state directory",
            state_dir: Some(f.ws.join(".tierbox")),
            ..base.clone()
        },
        Case {
            what: "a home directory itself",
            ws: home.clone(),
            ..base.clone()
        },
        Case {
            what: "the filesystem root",
            ws: PathBuf::from("/"),
            ..base.clone()
        },
    ];
    let mut logged = base.clone();
    logged.what = "the workspace holding the audit log";
    logged.policy.audit.log = Some(f.ws.join("audit.jsonl"));
    cases.push(logged);
    let mut keyed = base.clone();
    keyed.what = "the workspace holding the signing key";
    keyed.policy.audit.signing_key = Some(f.ws.join("attest-key"));
    cases.push(keyed);
    let mut runtimes = base.clone();
    runtimes.what = "the workspace holding the Tier A runtimes";
    runtimes.env.insert(
        "TIERBOX_RUNTIMES_DIR".to_owned(),
        f.ws.join("runtimes").display().to_string(),
    );
    cases.push(runtimes);
    // A system tree and a shared directory, where this host has small ones.
    for (what, dir) in [
        ("a system directory", "/boot"),
        ("a shared directory", "/var/tmp"),
    ] {
        let small = std::fs::read_dir(dir).is_ok_and(|d| d.count() < 64);
        if small {
            cases.push(Case {
                what,
                ws: PathBuf::from(dir),
                ..base.clone()
            });
        }
    }

    let apply = |case: &Case, fix: WorkspaceFix| {
        let mut c = case.clone();
        let moved = |name: &str| elsewhere.join(name);
        match fix {
            WorkspaceFix::OtherWorkspace => c.ws = project.clone(),
            WorkspaceFix::DangerAnyWorkspaceRoot => c.policy.danger_any_workspace_root = true,
            WorkspaceFix::MoveOwnFile(OwnFile::StateDir) => c.state_dir = Some(moved("state")),
            WorkspaceFix::MoveOwnFile(OwnFile::AuditLog) => {
                c.policy.audit.log = Some(moved("audit.jsonl"))
            }
            WorkspaceFix::MoveOwnFile(OwnFile::SigningKey) => {
                c.policy.audit.signing_key = Some(moved("attest-key"))
            }
            WorkspaceFix::MoveOwnFile(OwnFile::RuntimesDir) => {
                let dir = moved("runtimes").display().to_string();
                c.env.insert("TIERBOX_RUNTIMES_DIR".to_owned(), dir);
            }
        }
        c
    };
    // What each fix's text must name for a reader to apply it as `apply` does.
    let names = |fix: WorkspaceFix| match fix {
        WorkspaceFix::OtherWorkspace => "--workspace",
        WorkspaceFix::DangerAnyWorkspaceRoot => "danger_any_workspace_root = true",
        WorkspaceFix::MoveOwnFile(OwnFile::StateDir) => "--state-dir",
        WorkspaceFix::MoveOwnFile(OwnFile::AuditLog) => "audit.log",
        WorkspaceFix::MoveOwnFile(OwnFile::SigningKey) => "audit.signing_key",
        WorkspaceFix::MoveOwnFile(OwnFile::RuntimesDir) => "TIERBOX_RUNTIMES_DIR",
    };

    let mut seen_own = false;
    for case in &cases {
        let err = case.validate().expect_err(case.what);
        let Rejection::WorkspaceRefused { rule, .. } = &err else {
            panic!("{}: {err}", case.what);
        };
        let message = err.to_string();
        println!("{}: {message}", case.what);
        let fixes = rule.fixes();
        assert!(!fixes.is_empty(), "{}: no fix", case.what);
        for fix in &fixes {
            assert!(
                message.contains(&fix.to_string()),
                "{}: {message}",
                case.what
            );
            assert!(fix.to_string().contains(names(*fix)), "{fix:?}: {fix}");
            let fixed = apply(case, *fix);
            assert_eq!(
                fixed.validate(),
                Ok(()),
                "{}: the fix {fix:?} ({fix}) does not let it through",
                case.what
            );
        }
        // danger_any_workspace_root is offered exactly where it works.
        let danger = apply(case, WorkspaceFix::DangerAnyWorkspaceRoot).validate();
        assert_eq!(
            fixes.contains(&WorkspaceFix::DangerAnyWorkspaceRoot),
            danger.is_ok(),
            "{}: {message}; with danger_any_workspace_root: {danger:?}",
            case.what
        );
        if !fixes.contains(&WorkspaceFix::DangerAnyWorkspaceRoot) {
            assert!(
                !message.contains("may lift this rule with danger_any_workspace_root"),
                "{}: {message}",
                case.what
            );
        }
        seen_own |= matches!(rule, WorkspaceRule::Own { .. });
    }
    assert!(seen_own);
    // The recipe's case names the state directory and its option.
    let err = cases[0].validate().unwrap_err().to_string();
    assert!(err.contains("it lies inside the state directory"), "{err}");
    assert!(err.contains("--state-dir"), "{err}");
}

#[test]
fn every_scope_code_is_reachable() {
    let f = fixture();
    f.file("plain");
    let ctx = tierbox_policy::ValidateContext::new(f.ws.join("plain")).with_env(Default::default());
    let seen = [
        tierbox_policy::validate(&f.policy, &ProcessRunRequest::new("ls"), &ctx)
            .unwrap_err()
            .code(),
        f.code("cat", &[&out(&f, "secret")]),
        f.code("cat", &["/etc/shadow"]),
        f.code("cat", &["/dev/sda"]),
        {
            let mut g = fixture();
            g.policy.filesystem.deny_read = vec![out(&g, "secret")];
            g.code("cat", &[&out(&g, "secret")])
        },
        in_cwd(&f, "..", "ls", &[]).unwrap_err().code(),
        in_cwd(&f, "plain", "ls", &[]).unwrap_err().code(),
    ];
    let expected = [
        "scope.workspace_invalid",
        "scope.path_outside_workspace",
        "scope.path_secret",
        "scope.path_not_grantable",
        "scope.path_denied",
        "scope.cwd_outside_workspace",
        "scope.cwd_not_directory",
    ];
    assert_eq!(seen, expected);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever is accepted is passed on byte for byte.
    #[test]
    fn accepted_argv_is_never_rewritten(args in prop::collection::vec("[-a-zA-Z0-9_=:.~^$/]{0,12}", 0..6)) {
        let f = fixture();
        let mut req = ProcessRunRequest::new("printf");
        req.args = args.clone();
        if let Ok(plan) = f.request(&req) {
            let mut expected = vec!["printf".to_owned()];
            expected.extend(args);
            prop_assert_eq!(plan.argv, expected);
        }
    }

    /// Words of letters, digits and dashes name nothing in an empty workspace: they pass.
    #[test]
    fn plain_words_always_pass(args in prop::collection::vec("-{0,2}[a-zA-Z0-9][a-zA-Z0-9_-]{0,10}", 0..6)) {
        let f = fixture();
        let mut req = ProcessRunRequest::new("printf");
        req.args = args;
        prop_assert!(f.request(&req).is_ok());
    }
}

/// `filesystem.dev_shm`: `private` by default and carried into the plan; `none` together
/// with a writable `/dev/shm` grant is refused at load, naming the key.
#[test]
fn dev_shm_parses_defaults_and_refuses_a_contradiction() {
    use tierbox_policy::{DevShm, Policy, PolicyError};

    let parsed = Policy::from_toml("version = 1\n").unwrap();
    assert_eq!(parsed.filesystem.dev_shm, DevShm::Private);
    let parsed = Policy::from_toml("version = 1\n[filesystem]\ndev_shm = \"none\"\n").unwrap();
    assert_eq!(parsed.filesystem.dev_shm, DevShm::None);
    match Policy::from_toml(
        "version = 1\n[filesystem]\ndev_shm = \"none\"\nwritable = [\"/dev/shm/\"]\n",
    ) {
        Err(PolicyError::Invalid { field, reason }) => {
            assert_eq!(field, "filesystem.dev_shm");
            assert!(reason.contains("/dev/shm"), "{reason}");
        }
        other => panic!("the contradiction was not refused: {other:?}"),
    }
    assert!(Policy::from_toml("version = 1\n[filesystem]\ndev_shm = \"host\"\n").is_err());
}

/// Grants every tier answers the same way, before anything runs: the workspace itself,
/// anything in `/proc` (`/proc/self` would name the supervisor), host devices and `/dev`
/// itself, and paths inside `/dev/shm` are refused naming the key and the path; a device
/// every run has anyway is dropped from the plan; `/dev/shm` itself is kept.
///
/// Regression: `policy check` and Tier B accepted these, and Tier C failed at launch
/// ("sandbox launch failed: mount plan: … lies in /dev, which the sandbox provides
/// itself", exit 126, or `tier.unavailable` from an idmapped mount of `/dev/kvm`).
#[test]
fn grants_no_tier_can_carry_are_refused_the_same_everywhere() {
    let f = fixture();
    let ws = f.ws.display().to_string();
    for (key, entry) in [
        ("filesystem.writable", ws.as_str()),
        ("filesystem.read_only", ws.as_str()),
        ("filesystem.read_only", "/proc/self"),
        ("filesystem.writable", "/proc/sys"),
        ("filesystem.writable", "/dev"),
        ("filesystem.read_only", "/dev/kvm"),
        ("filesystem.writable", "/dev/shm/../vda"),
    ] {
        let mut g = fixture();
        let entry = entry.replace(&ws, &g.ws.display().to_string());
        if !std::path::Path::new(&entry).exists() {
            continue;
        }
        match key {
            "filesystem.writable" => g.policy.filesystem.writable = vec![entry.clone()],
            _ => g.policy.filesystem.read_only.push(entry.clone()),
        }
        let err = g.run("ls", &[]).unwrap_err();
        assert_eq!(err.code(), "scope.grant_refused", "{key} {entry}: {err}");
        let msg = err.to_string();
        assert!(msg.contains(key), "{msg}");
        match err {
            Rejection::GrantRefused { key: k, path, .. } => {
                assert_eq!(k, key);
                assert_eq!(path, std::fs::canonicalize(&entry).unwrap());
            }
            other => panic!("{other:?}"),
        }
    }
    // A denied workspace, or a denied parent of it.
    for parent in [false, true] {
        let mut g = fixture();
        let deny = if parent {
            g.ws.parent().unwrap().display().to_string()
        } else {
            g.ws.display().to_string()
        };
        g.policy.filesystem.deny_read = vec![deny];
        let err = g.run("ls", &[]).unwrap_err();
        assert_eq!(err.code(), "scope.grant_refused", "{err}");
        assert!(err.to_string().contains("filesystem.deny_read"), "{err}");
    }
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        let dir = tempfile::tempdir_in(shm).unwrap();
        let mut g = fixture();
        g.policy.filesystem.writable = vec![dir.path().display().to_string()];
        let err = g.run("ls", &[]).unwrap_err();
        assert!(err.to_string().contains("/dev/shm itself"), "{err}");
    }

    let mut g = fixture();
    g.policy.filesystem.writable = vec!["/dev/null".to_owned(), "/dev/shm".to_owned()];
    g.policy
        .filesystem
        .read_only
        .push("/dev/urandom".to_owned());
    let plan = g.run("ls", &[]).unwrap();
    assert!(
        plan.filesystem
            .read_only
            .iter()
            .all(|p| !p.starts_with("/dev"))
    );
    let writable: Vec<_> = plan
        .filesystem
        .writable
        .iter()
        .filter(|p| p.starts_with("/dev"))
        .collect();
    if shm.is_dir() {
        assert_eq!(writable, [shm], "{:?}", plan.filesystem.writable);
    }
}

/// Tierbox's own files — the state directory (signing key, compiled-module cache), the
/// audit log, the signing key, the Tier A runtimes — are never reachable from a run: not
/// as (or inside) the workspace, even with `danger_any_workspace_root`; not through a
/// writable grant, a read-only grant of a secret one, or a Tier A preopen.
///
/// Regression: a writable grant holding the state directory let a sandboxed process
/// patch a cached compiled module (native code the supervisor loads) and read the
/// attestation signing key.
#[test]
fn tierbox_own_files_are_never_granted() {
    use tierbox_policy::ValidateContext;
    use tierbox_policy::wasm::{FsGrant, WasmRunRequest};

    let f = fixture();
    let home = f.tmp.join("home");
    let state = home.join(".local/state/tierbox");
    let runtimes = home.join(".local/share/tierbox/runtimes");
    for d in [&state, &runtimes] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(f.ws.join("m.wat"), "(module (func (export \"_start\")))").unwrap();
    let env: std::collections::BTreeMap<String, String> =
        [("HOME".to_owned(), home.display().to_string())].into();
    let ctx = |ws: &std::path::Path| {
        ValidateContext::new(ws)
            .with_env(env.clone())
            .with_state_dir(&state)
    };
    let grant_code = |policy: &tierbox_policy::Policy| {
        tierbox_policy::validate(policy, &ProcessRunRequest::new("ls"), &ctx(&f.ws))
            .err()
            .map(|e| (e.code(), e.to_string()))
    };

    // Grants: writable of anything holding or inside an own path; read-only of a secret one.
    for (writable, entry, refused) in [
        (true, home.join(".local"), true),
        (true, state.join("wasm-cache"), false), // missing: skipped
        (true, state.clone(), true),
        (true, runtimes.clone(), true),
        (false, home.clone(), true),
        (false, state.clone(), true),
        (false, runtimes.clone(), false),
        (false, home.join(".local/share"), false),
    ] {
        let mut p = f.policy.clone();
        let list = if writable {
            &mut p.filesystem.writable
        } else {
            &mut p.filesystem.read_only
        };
        list.push(entry.display().to_string());
        let got = grant_code(&p);
        if refused {
            let (code, message) = got.unwrap_or_else(|| panic!("{entry:?} accepted"));
            assert_eq!(code, "scope.grant_refused", "{entry:?}: {message}");
            assert!(message.contains("Tierbox's own state"), "{message}");
        } else {
            assert_eq!(got, None, "{entry:?} (writable {writable})");
        }
    }

    // The workspace: holding the state directory or lying inside it, whatever the policy.
    let mut danger = f.policy.clone();
    danger.danger_any_workspace_root = true;
    std::fs::create_dir_all(state.join("project")).unwrap();
    for ws in [home.join(".local"), state.join("project"), runtimes.clone()] {
        for policy in [&f.policy, &danger] {
            let err = tierbox_policy::validate(policy, &ProcessRunRequest::new("ls"), &ctx(&ws))
                .unwrap_err();
            assert_eq!(err.code(), "scope.workspace_refused", "{ws:?}: {err}");
            assert!(err.to_string().contains("Tierbox's own state"), "{err}");
        }
    }

    // A Tier A preopen of the state directory, even where the policy lists its parent.
    let mut wasm = f.policy.clone();
    wasm.wasm.writable = vec![home.display().to_string()];
    for (path, write) in [
        (state.clone(), false),
        (runtimes.clone(), true),
        (home.join(".local"), true),
    ] {
        let req = WasmRunRequest {
            module: Some("m.wat".to_owned()),
            grants: tierbox_policy::wasm::WasmGrants {
                fs: vec![FsGrant {
                    path: path.display().to_string(),
                    write,
                }],
                ..Default::default()
            },
            ..Default::default()
        };
        let err = tierbox_policy::validate::validate_wasm(&wasm, &req, &ctx(&f.ws)).unwrap_err();
        assert_eq!(err.code(), "wasm.grant_denied", "{path:?}: {err}");
        assert!(err.to_string().contains("Tierbox's own state"), "{err}");
    }
}
