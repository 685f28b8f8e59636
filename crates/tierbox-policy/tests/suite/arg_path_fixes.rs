//! Every fix an argument-path refusal names is true: applied to the policy, the same
//! request passes validation. And a refusal without a fix is one no policy key lifts,
//! and says so.

// Test code: a failed setup step should panic with its error (STYLE.md rule 1 opt-out).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use tierbox_policy::rejection::{GrantKey, PathFix, PolicyChange};
use tierbox_policy::{DevShm, Policy, ProcessRunRequest, Rejection};

use super::validate_exec::fixture::Fixture;

/// An outside tree next to the workspace: `data/{a.txt, sub/b.txt, hidden/c.txt}`,
/// `other/`, and in the workspace `conf/` (protected by some policies) and a symlink
/// `link` to `data`.
fn fixture() -> Fixture {
    let f = Fixture::new(&["cat", "ls", "cp"]);
    for file in ["data/a.txt", "data/sub/b.txt", "data/hidden/c.txt"] {
        let p = f.tmp.join(file);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, "x").unwrap();
    }
    std::fs::create_dir_all(f.tmp.join("other")).unwrap();
    std::fs::create_dir_all(f.ws.join("conf")).unwrap();
    f.link("link", f.tmp.join("data"));
    f
}

/// Applies one policy change as a person editing the policy would.
fn apply(policy: &mut Policy, change: &PolicyChange) {
    let fs = &mut policy.filesystem;
    match change {
        PolicyChange::Grant { key, path } => {
            let entry = path.display().to_string();
            match key {
                GrantKey::ReadOnly => fs.read_only.push(entry),
                GrantKey::Writable => fs.writable.push(entry),
            }
        }
        PolicyChange::RemoveDenial { entry } => fs.deny_read.retain(|e| e != entry),
        PolicyChange::RemoveProtected { entry } => fs.protected.retain(|e| e != entry),
        PolicyChange::MoveToWritable { entry } => {
            fs.read_only.retain(|e| e != entry);
            fs.writable.push(entry.clone());
        }
        PolicyChange::PrivateDevShm => fs.dev_shm = DevShm::Private,
        other => panic!("a change this test does not know: {other:?}"),
    }
}

fn validate(f: &Fixture, policy: &Policy, args: &[String]) -> Result<(), Rejection> {
    let mut req = ProcessRunRequest::new("cat");
    req.args = args.to_vec();
    let ctx =
        tierbox_policy::ValidateContext::new(&f.ws).with_env(std::collections::BTreeMap::new());
    tierbox_policy::validate(policy, &req, &ctx).map(|_| ())
}

/// What happened to one request: passed as it is, passed after its fix, or refused for
/// good (with the message saying no policy key lifts it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Passed,
    Fixed,
    Never,
}

/// Validates `args` under `policy`; a refusal's fix, applied, must let them through, and
/// a refusal without one must say no policy key lifts it.
#[track_caller]
fn fix_is_true(f: &Fixture, policy: &Policy, args: &[String]) -> Seen {
    let err = match validate(f, policy, args) {
        Ok(()) => return Seen::Passed,
        Err(e) => e,
    };
    let fix: &PathFix = match &err {
        Rejection::PathOutsideWorkspace { fix, .. } | Rejection::PathDenied { fix, .. } => fix,
        Rejection::PathSecret { .. } | Rejection::PathNotGrantable { .. } => {
            assert!(err.to_string().contains("no policy key"), "{args:?}: {err}");
            assert_eq!(Rejection::fix_for(err.code()), None);
            return Seen::Never;
        }
        other => panic!("{args:?}: not an argument-path refusal: {other}"),
    };
    assert!(!fix.changes().is_empty(), "{args:?}: {err}");
    assert!(
        err.to_string().contains(&format!("(to fix: {fix})")),
        "{args:?}: the message does not name the fix: {err}"
    );
    let mut fixed = policy.clone();
    for change in fix.changes() {
        apply(&mut fixed, change);
    }
    if let Err(again) = validate(f, &fixed, args) {
        panic!(
            "{args:?}: the fix ({fix}) does not let it through: {again}\nfirst refusal: {err}\npolicy: {:?}",
            fixed.filesystem
        );
    }
    Seen::Fixed
}

/// The policies the requests run under: combinations of a denial, read-only and writable
/// grants (nested in each other), a protected directory and `/dev/shm`.
fn policies(f: &Fixture) -> Vec<Policy> {
    let out = |rel: &str| f.tmp.join(rel).display().to_string();
    let mut all = Vec::new();
    for bits in 0..64u32 {
        let mut p = f.policy.clone();
        let fs = &mut p.filesystem;
        if bits & 1 != 0 {
            fs.deny_read.push(out("data/hidden"));
        }
        if bits & 2 != 0 {
            fs.read_only.push(out("data"));
        }
        if bits & 4 != 0 {
            fs.read_only.push(out("data/sub"));
        }
        if bits & 8 != 0 {
            fs.writable.push(out("other"));
        }
        if bits & 16 != 0 {
            fs.protected.push("conf".to_owned());
        }
        if bits & 32 != 0 {
            fs.dev_shm = DevShm::None;
            fs.writable.push(out("data"));
        }
        all.push(p);
    }
    all
}

/// The paths the requests name, absolute and relative (through `..` and the `link`
/// symlink), existing and not.
fn paths(f: &Fixture) -> Vec<String> {
    let mut all: Vec<String> = [
        "data",
        "data/a.txt",
        "data/sub",
        "data/sub/b.txt",
        "data/sub/new.txt",
        "data/hidden",
        "data/hidden/c.txt",
        "data/hidden/new",
        "other",
        "other/x/y",
        "secret",
        "missing/deeper",
    ]
    .iter()
    .map(|rel| f.tmp.join(rel).display().to_string())
    .collect();
    all.extend(
        [
            "../data/a.txt",
            "../other/new",
            "link/sub/b.txt",
            "link/hidden/c.txt",
            "conf/x",
            "conf",
            "/dev/shm/x",
            "/dev/shm",
            "/etc/passwd",
            "/etc/shadow",
            "/dev/sda",
            "/proc/cpuinfo",
            "/",
        ]
        .iter()
        .map(|s| (*s).to_owned()),
    );
    all
}

/// How an argument carries a path: as it is, an option's value, dd's operands (`of=`
/// writes), a `file:` URL.
fn forms(path: &str) -> Vec<String> {
    let mut out = vec![
        path.to_owned(),
        format!("--file={path}"),
        format!("if={path}"),
        format!("of={path}"),
    ];
    if path.starts_with('/') {
        out.push(format!("file://{path}"));
        out.push(format!("-C{path}"));
    }
    out
}

/// Every path in every form under every policy: each refusal's fix is true. The run
/// sees some of them as they are, some after a fix, and some under no policy; all three
/// happen.
#[test]
fn every_argument_path_fix_is_true() {
    let f = fixture();
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    for policy in policies(&f) {
        for path in paths(&f) {
            for arg in forms(&path) {
                let got = fix_is_true(&f, &policy, &[arg]);
                *seen.entry(format!("{got:?}")).or_default() += 1;
            }
        }
    }
    println!("{seen:?}");
    for kind in ["Passed", "Fixed", "Never"] {
        assert!(seen.get(kind).is_some_and(|n| *n > 0), "{kind}: {seen:?}");
    }
}

/// Protected and denied paths are named by the entry to remove; a write into a
/// protected directory is refused, a read passes.
#[test]
fn protected_and_denied_paths_name_their_entry() {
    let f = fixture();
    let mut p = f.policy.clone();
    p.filesystem.protected.push("conf".to_owned());
    let err = validate(&f, &p, &["of=conf/x".to_owned()]).unwrap_err();
    assert_eq!(err.code(), "scope.path_denied", "{err}");
    assert!(
        err.to_string()
            .contains("remove \"conf\" from filesystem.protected"),
        "{err}"
    );
    assert!(validate(&f, &p, &["conf/x".to_owned()]).is_ok());
    let hidden = f.tmp.join("data/hidden").display().to_string();
    p.filesystem.deny_read.push(hidden.clone());
    p.filesystem
        .read_only
        .push(f.tmp.join("data").display().to_string());
    let err = validate(&f, &p, &["link/hidden/c.txt".to_owned()]).unwrap_err();
    assert_eq!(err.code(), "scope.path_denied", "{err}");
    assert!(
        err.to_string()
            .contains(&format!("remove {hidden:?} from filesystem.deny_read")),
        "{err}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Relative paths of any shape — `..`, `.`, the symlink out, names that exist and
    /// names that do not — in any form: each refusal's fix is true.
    #[test]
    fn fixes_of_generated_relative_paths_are_true(
        parts in prop::collection::vec(
            prop::sample::select(vec!["..", ".", "data", "sub", "a.txt", "hidden", "c.txt", "link", "other", "new", "conf", "ws"]),
            1..6,
        ),
        form in 0usize..4,
        bits in 0usize..64,
    ) {
        let f = fixture();
        let path = parts.join("/");
        let arg = forms(&path).swap_remove(form);
        let policy = policies(&f).swap_remove(bits);
        fix_is_true(&f, &policy, &[arg]);
    }
}

/// A shell's `-c` script is program text: its words are not paths. Regression: `sh -c
/// 'dd if=/dev/zero of=big bs=1k count=64'` was refused for the path `/dev/zero of=big
/// bs=1k count=64`.
#[test]
fn inline_program_text_is_not_a_path() {
    let mut f = Fixture::new(&["sh", "cat"]).interpreters(true);
    f.policy.exec.allowed_executables.push("dash".to_owned());
    let script = format!(
        "cat {}; dd if=/dev/zero of=big",
        f.tmp.join("secret").display()
    );
    f.passes_untouched("sh", &["-c", &script]);
    f.passes_untouched("sh", &["-ec", &script, "name"]);
    // What follows the script is the script's arguments, which are checked.
    let err = f
        .run(
            "sh",
            &[
                "-c",
                "cat \"$1\"",
                "sh",
                &f.tmp.join("secret").display().to_string(),
            ],
        )
        .unwrap_err();
    assert_eq!(err.code(), "scope.path_outside_workspace", "{err}");
    assert!(matches!(
        err,
        Rejection::PathOutsideWorkspace { arg_index: 3, .. }
    ));
}

/// One fix covers the whole request: an argument that names the same path twice
/// (`of=x/../..` is a file name and dd's output) gets the stronger access's fix, and a
/// refusal's fix includes what the arguments after it need. Regression: `of=data/../../..`
/// was refused with a read-only grant that then met a refusal to write.
#[test]
fn one_fix_covers_the_whole_request() {
    let f = fixture();
    for p in policies(&f) {
        for args in [
            vec!["of=data/../../..".to_owned()],
            vec!["of=new/../../..".to_owned()],
            vec!["--file=../../..".to_owned()],
            vec!["../data/a.txt".to_owned(), "of=../other/new".to_owned()],
            vec![
                "../data/a.txt".to_owned(),
                "../data/sub/b.txt".to_owned(),
                "of=../data/new".to_owned(),
            ],
        ] {
            fix_is_true(&f, &p, &args);
        }
    }
    let err = validate(
        &f,
        &f.policy,
        &["../data/a.txt".to_owned(), "of=../other/new".to_owned()],
    )
    .unwrap_err();
    let Rejection::PathOutsideWorkspace { fix, .. } = &err else {
        panic!("{err}");
    };
    assert_eq!(fix.changes().len(), 2, "{err}");
}
