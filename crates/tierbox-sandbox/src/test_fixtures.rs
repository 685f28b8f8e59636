//! Fixtures shared by the crate's tests: shipped policies and scratch workspaces.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use tierbox_policy::Policy;

/// A policy shipped under `policies/`.
pub(crate) fn policy(name: &str) -> Policy {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../policies")
        .join(name);
    Policy::from_toml(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// A canonical temporary directory holding `ws/` (the workspace) and room beside it.
pub(crate) struct Scratch {
    _dir: tempfile::TempDir,
    #[cfg_attr(
        not(target_os = "linux"),
        expect(
            dead_code,
            reason = "room beside the workspace: the Linux backends' tests"
        )
    )]
    pub(crate) root: PathBuf,
    pub(crate) ws: PathBuf,
}

/// A fresh [`Scratch`].
pub(crate) fn scratch() -> Scratch {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let ws = root.join("ws");
    std::fs::create_dir(&ws).unwrap();
    Scratch {
        _dir: dir,
        root,
        ws,
    }
}

/// The home directory of [`golden_plan`]s.
pub(crate) const GOLDEN_HOME: &str = "/home/agent";

/// The workspace of [`golden_plan`]s.
pub(crate) const GOLDEN_WORKSPACE: &str = "/home/agent/project";

/// A Plan of `ls -la` under the shipped policy `name`, with every host-specific fact
/// replaced by a fixed value (workspace, home, program path, system paths, declared
/// paths as the policy writes them), so profiles and argvs built from it can be compared
/// with golden files on any host.
pub(crate) fn golden_plan(name: &str) -> tierbox_policy::Plan {
    use std::collections::BTreeMap;

    use tierbox_policy::{ProcessRunRequest, ValidateContext, validate};

    let s = scratch();
    let policy = policy(name);
    let env: BTreeMap<String, String> = [
        ("HOME", GOLDEN_HOME),
        ("USER", "agent"),
        ("LANG", "C.UTF-8"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let ctx = ValidateContext::new(&s.ws).with_env(env);
    let mut req = ProcessRunRequest::new("ls");
    req.args = vec!["-la".to_owned()];
    let mut plan = validate(&policy, &req, &ctx).unwrap();
    let ws = PathBuf::from(GOLDEN_WORKSPACE);
    plan.program = PathBuf::from("/usr/bin/ls");
    plan.cwd = ws.clone();
    plan.filesystem.protected = policy
        .filesystem
        .protected
        .iter()
        .map(|p| ws.join(p))
        .collect();
    plan.workspace = ws;
    let expand = |list: &[String]| -> Vec<PathBuf> {
        list.iter()
            .map(|p| match p.strip_prefix("~/") {
                Some(rest) => Path::new(GOLDEN_HOME).join(rest),
                None => PathBuf::from(p),
            })
            .collect()
    };
    plan.filesystem.read_only = expand(&policy.filesystem.read_only);
    plan.filesystem.writable = expand(&policy.filesystem.writable);
    plan.filesystem.deny_read = expand(&policy.filesystem.deny_read);
    let system: Vec<PathBuf> = ["/bin", "/etc", "/lib", "/lib64", "/sbin", "/usr"]
        .into_iter()
        .map(PathBuf::from)
        .collect();
    plan.filesystem.system_read_only = system.clone().into();
    plan.filesystem.system_roots = system.into();
    plan.filesystem.system_hidden = vec![PathBuf::from("/etc/shadow")].into();
    plan
}

/// Compares `actual` with `tests/golden/<name>`; with `TIERBOX_REGENERATE_GOLDEN=1` in
/// the environment, writes it there instead.
pub(crate) fn assert_golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var("TIERBOX_REGENERATE_GOLDEN").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with TIERBOX_REGENERATE_GOLDEN=1 to create it",
            path.display()
        )
    });
    assert_eq!(
        actual,
        expected,
        "{} differs (TIERBOX_REGENERATE_GOLDEN=1 rewrites it after review)",
        path.display()
    );
}
