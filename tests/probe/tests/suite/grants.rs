//! The grant model (`tierbox_policy::access`) against what each backend does: random sets
//! of writable, read-only and denied paths over a small tree, and in each backend (Tier B,
//! Tier C native, Tier C bwrap) every directory listed, written into (create, delete,
//! rename) and every file read and appended to. Each result is compared with the model,
//! and every write the sandbox reports is looked for on the host: a write that "worked"
//! but is not on the host is the bug this exists for (a writable grant holding a denied
//! directory used to turn into the sandbox's own tmpfs).
//!
//! Cases: `TIERBOX_GRANT_CASES` (default 24), drawn from a fixed seed so a failure repeats.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tierbox_policy::access::{Access, AccessModel};
use tierbox_policy::{Policy, ValidateContext, validate};

use super::harness::{BACKENDS, Backend, Fixture, describe};

const DIRS: &[&str] = &["a", "a/b", "a/b/c", "a/d", "e"];
const FILES: &[&str] = &["a/f1", "a/b/f2", "a/b/c/f3", "a/d/f4", "e/f5"];

/// A small linear congruential generator: the cases must be the same on every run.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn pick(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

#[derive(Debug, Clone, Default)]
struct Grants {
    writable: Vec<&'static str>,
    read_only: Vec<&'static str>,
    deny: Vec<&'static str>,
}

fn case(seed: u64) -> Grants {
    let mut rng = Lcg(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) + 1);
    loop {
        let mut g = Grants::default();
        for dir in DIRS {
            match rng.next() % 100 {
                0..=29 => g.writable.push(dir),
                30..=44 => g.read_only.push(dir),
                45..=57 => g.deny.push(dir),
                _ => {}
            }
        }
        for file in FILES {
            if rng.pick(12) {
                g.deny.push(file);
            }
        }
        if !g.writable.is_empty() || !g.read_only.is_empty() {
            return g;
        }
    }
}

/// The tree, fresh: every file holds `base`.
fn make_tree(root: &Path) {
    let _ = std::fs::remove_dir_all(root);
    for dir in DIRS {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    for file in FILES {
        std::fs::write(root.join(file), "base").unwrap();
    }
}

/// The model's answer for one reported operation, `None` when it does not say (a listing
/// of a path no grant covers: Tier C shows its own mount points there).
fn expected(
    model: &AccessModel,
    sealed: &[PathBuf],
    backend: Backend,
    op: &str,
    path: &Path,
    tag: &str,
) -> Option<bool> {
    let tier_b_sealed = backend == Backend::TierB && sealed.iter().any(|s| s == path);
    match op {
        "list" => match model.access(path) {
            Access::None => None,
            _ => Some(!tier_b_sealed),
        },
        "create" | "delete" | "rename" => {
            let new = path.join(format!("{tag}.new"));
            Some(model.access(&new) == Access::Write && !tier_b_sealed)
        }
        "read" => Some(model.access(path) >= Access::Read),
        "write" => Some(model.access(path) == Access::Write),
        other => panic!("unknown operation {other}"),
    }
}

async fn check_case(index: u64, backend: Backend) -> Option<Vec<String>> {
    let test = format!("grants_compose_as_the_model_says_case_{index}_{backend:?}");
    let mut fx = Fixture::on(&test, &[], backend)?;
    let grants = case(index);
    let root = fx.parent.join("tree");
    make_tree(&root);
    let abs = |rel: &&str| root.join(rel).display().to_string();
    fx.policy.filesystem.writable = grants.writable.iter().map(abs).collect();
    fx.policy
        .filesystem
        .read_only
        .extend(grants.read_only.iter().map(abs));
    fx.policy.filesystem.deny_read = grants.deny.iter().map(abs).collect();

    let tag = format!("tbx{index}{}", backend as u8);
    let mut args: Vec<String> = vec!["fs-ops".to_owned(), tag.clone()];
    args.extend(DIRS.iter().map(|d| format!("d:{}", root.join(d).display())));
    args.extend(
        FILES
            .iter()
            .map(|f| format!("f:{}", root.join(f).display())),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let req = fx.request(&args);
    let ctx = ValidateContext::new(&fx.workspace).with_env(fx.env.clone());
    let plan = validate(&fx.policy, &req, &ctx).unwrap_or_else(|r| panic!("{test}: {r}"));
    let model = AccessModel::of(&plan);
    let sealed = model.tier_b_sealed();
    let o = fx.run(&req).await;
    assert_eq!(o.exit_code, Some(0), "{test}: {}", describe(&o));

    let mut problems = Vec::new();
    let mut seen: BTreeMap<(String, PathBuf), String> = BTreeMap::new();
    for line in o.stdout.text.lines() {
        let line = line.trim_start_matches("DONE fs-ops: ");
        let mut parts = line.splitn(3, ' ');
        let (Some(op), Some(path), Some(result)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        seen.insert((op.to_owned(), PathBuf::from(path)), result.to_owned());
    }
    for ((op, path), result) in &seen {
        let ok = result == "ok";
        if let Some(want) = expected(&model, &sealed, backend, op, path, &tag)
            && want != ok
        {
            problems.push(format!(
                "{op} {} gave {result}, the model says {}",
                path.display(),
                if want { "allowed" } else { "refused" }
            ));
        }
        // The host: a reported write is there, a refused one is not.
        let host = match op.as_str() {
            "create" => Some(path.join(format!("{tag}.new")).exists()),
            "rename" => Some(path.join(format!("{tag}.b")).exists()),
            "write" => std::fs::read_to_string(path)
                .ok()
                .map(|c| c.ends_with(tag.as_str())),
            _ => None,
        };
        if let Some(on_host) = host
            && on_host != ok
        {
            problems.push(format!(
                "{op} {} reported {result} but the host {} it",
                path.display(),
                if on_host { "has" } else { "does not have" }
            ));
        }
    }
    let expected_ops = DIRS.len() * 4 + FILES.len() * 2;
    if seen.len() != expected_ops {
        problems.push(format!(
            "{} results, expected {expected_ops}: {}",
            seen.len(),
            o.stdout.text
        ));
    }
    if problems.is_empty() {
        None
    } else {
        Some(
            problems
                .into_iter()
                .map(|p| format!("{test} ({grants:?}): {p}"))
                .collect(),
        )
    }
}

/// Every backend carries the model out, and every write it reports is on the host.
#[tokio::test]
async fn grants_compose_as_the_model_says() {
    let cases: u64 = std::env::var("TIERBOX_GRANT_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    let mut problems = Vec::new();
    for index in 0..cases {
        for backend in BACKENDS {
            problems.extend(check_case(index, backend).await.unwrap_or_default());
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The worked example of docs/policy.md: a writable cache with a credentials directory
/// denied inside it. A new file at the top of the cache reaches the host in Tier C; Tier
/// B refuses to create it (landlock grants the cache's entries one by one) instead of
/// pretending; the credentials are unreadable in both.
///
/// Regression: Tier C reported the write as done and the file never reached the host
/// (the cache's top level was the sandbox's own tmpfs); Tier B did not start at all
/// when a file sat beside the denied directory.
#[tokio::test]
async fn a_writable_cache_with_denied_credentials_inside() {
    for backend in BACKENDS {
        let test = format!("a_writable_cache_with_denied_credentials_inside_{backend:?}");
        let Some(mut fx) = Fixture::on(&test, &[], backend) else {
            continue;
        };
        let cache = fx.parent.join("cache");
        std::fs::create_dir_all(cache.join("credentials")).unwrap();
        std::fs::write(cache.join("credentials/token"), "secret").unwrap();
        std::fs::write(cache.join("index"), "base").unwrap();
        fx.policy.filesystem.writable = vec![cache.display().to_string()];
        fx.policy.filesystem.deny_read = vec![cache.join("credentials").display().to_string()];
        let args = [
            "fs-ops".to_owned(),
            "work".to_owned(),
            format!("d:{}", cache.display()),
            format!("f:{}", cache.join("index").display()),
            format!("f:{}", cache.join("credentials/token").display()),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let req = fx.request(&args);
        let o = fx.run(&req).await;
        let out = &o.stdout.text;
        assert_eq!(o.exit_code, Some(0), "{test}: {}", describe(&o));
        let line = |op: &str, p: &Path| {
            out.lines()
                .map(|l| l.trim_start_matches("DONE fs-ops: "))
                .find(|l| l.starts_with(&format!("{op} {} ", p.display())))
                .unwrap_or_else(|| panic!("{test}: no {op} line:\n{out}"))
                .rsplit(' ')
                .next()
                .unwrap()
                .to_owned()
        };
        let created = line("create", &cache);
        let on_host = cache.join("work.new").exists();
        match backend {
            Backend::TierB => {
                assert_ne!(created, "ok", "{test}: {out}");
                assert!(!on_host, "{test}");
            }
            _ => {
                assert_eq!(created, "ok", "{test}: {out}");
                assert!(on_host, "{test}: the new file is not on the host");
            }
        }
        assert_eq!(line("write", &cache.join("index")), "ok", "{test}: {out}");
        assert_eq!(
            std::fs::read_to_string(cache.join("index")).unwrap(),
            "basework",
            "{test}"
        );
        assert_ne!(
            line("read", &cache.join("credentials/token")),
            "ok",
            "{test}: {out}"
        );
    }
}

/// A `deny_read` entry that is a symlink hides what it points at, through the link and
/// directly, in every tier, and the run starts (the same answer in B and C).
///
/// Regression: Tier B granted the link (a landlock rule on a symlink is a rule on its
/// target), so the secret was readable both ways; Tier C refused the policy at launch,
/// calling the entry a `filesystem.read_only` path.
#[tokio::test]
async fn a_denied_symlink_hides_its_target_in_every_tier() {
    for backend in BACKENDS {
        let test = format!("a_denied_symlink_hides_its_target_in_every_tier_{backend:?}");
        let Some(mut fx) = Fixture::on(&test, &[], backend) else {
            continue;
        };
        let tools = fx.parent.join("tools");
        std::fs::create_dir_all(tools.join("real")).unwrap();
        std::fs::write(tools.join("real/creds"), "secret").unwrap();
        std::fs::write(tools.join("README"), "readable").unwrap();
        std::os::unix::fs::symlink("real/creds", tools.join("credentials.toml")).unwrap();
        fx.policy
            .filesystem
            .read_only
            .push(tools.display().to_string());
        fx.policy.filesystem.deny_read = vec![tools.join("credentials.toml").display().to_string()];
        let args = [
            "fs-ops".to_owned(),
            "x".to_owned(),
            format!("f:{}", tools.join("credentials.toml").display()),
            format!("f:{}", tools.join("real/creds").display()),
            format!("f:{}", tools.join("README").display()),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let req = fx.request(&args);
        let o = fx.run(&req).await;
        assert_eq!(o.exit_code, Some(0), "{test}: {}", describe(&o));
        let out = o.stdout.text.replace("DONE fs-ops: ", "");
        for (path, readable) in [
            (tools.join("credentials.toml"), false),
            (tools.join("real/creds"), false),
            (tools.join("README"), true),
        ] {
            let line = format!("read {} ", path.display());
            let result = out
                .lines()
                .find(|l| l.starts_with(&line))
                .unwrap_or_else(|| panic!("{test}: no read of {}:\n{out}", path.display()));
            assert_eq!(result.ends_with(" ok"), readable, "{test}: {result}");
        }
    }
}

/// `chown -R` for a test tree.
fn chown_tree(path: &Path, id: u32) {
    std::os::unix::fs::lchown(path, Some(id), Some(id)).unwrap();
    if std::fs::symlink_metadata(path).unwrap().is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            chown_tree(&entry.unwrap().path(), id);
        }
    }
}

/// A workspace that belongs to another user (private directories, mode 0700) works in
/// every tier under a root supervisor, with the default `protected` list: first without a
/// `.git` (the protected entries are covered by placeholders), then with one. New files
/// reach the host and belong to the workspace's owner there; Tier C keeps `.git` read-only.
///
/// Regression: the native backend could not start (`mount op … host-placeholder …/.git …
/// mkdir failed: Permission denied`), while Tier B ran the same workspace as its owner.
#[tokio::test]
async fn a_workspace_owned_by_another_user_works_in_every_tier() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    const OWNER: u32 = 4321;
    for backend in BACKENDS {
        let test = format!("a_workspace_owned_by_another_user_works_in_every_tier_{backend:?}");
        let Some(mut fx) = Fixture::on(&test, &[super::harness::Need::Root], backend) else {
            continue;
        };
        fx.policy.filesystem.protected = Policy::default().filesystem.protected;
        let ws = fx.workspace.clone();
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::write(ws.join("src/lib.rs"), "fn main() {}\n").unwrap();
        for dir in [&ws, &ws.join("src")] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        chown_tree(&ws, OWNER);
        for with_git in [false, true] {
            if with_git {
                std::fs::create_dir_all(ws.join(".git")).unwrap();
                std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
                std::fs::set_permissions(ws.join(".git"), std::fs::Permissions::from_mode(0o700))
                    .unwrap();
                chown_tree(&ws, OWNER);
            }
            let tag = if with_git { "git" } else { "nogit" };
            let mut args = vec![
                "fs-ops".to_owned(),
                tag.to_owned(),
                format!("d:{}", ws.display()),
                format!("d:{}", ws.join("src").display()),
                format!("f:{}", ws.join("src/lib.rs").display()),
            ];
            if with_git {
                args.push(format!("f:{}", ws.join(".git/config").display()));
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let o = fx.run(&fx.request(&args)).await;
            assert_eq!(o.exit_code, Some(0), "{test} ({tag}): {}", describe(&o));
            let out = o.stdout.text.replace("DONE fs-ops: ", "");
            let result = |op: &str, p: &Path| {
                let prefix = format!("{op} {} ", p.display());
                out.lines()
                    .find_map(|l| l.strip_prefix(&prefix))
                    .unwrap_or_else(|| panic!("{test} ({tag}): no {prefix}:\n{out}"))
                    .to_owned()
            };
            for dir in [ws.clone(), ws.join("src")] {
                for op in ["list", "create", "delete", "rename"] {
                    assert_eq!(
                        result(op, &dir),
                        "ok",
                        "{test} ({tag}): {op} {dir:?}\n{out}"
                    );
                }
                // On the host, and its owner's.
                let new = dir.join(format!("{tag}.new"));
                let meta = std::fs::metadata(&new)
                    .unwrap_or_else(|e| panic!("{test} ({tag}): {new:?} not on the host: {e}"));
                // The run's group is the owner's primary group, or (an owner unknown to
                // /etc/passwd, as here) the sandbox's own: never borrowed from the
                // workspace directory.
                let gid = tierbox_sandbox::linux::identity::run_gid(OWNER);
                assert_eq!((meta.uid(), meta.gid()), (OWNER, gid), "{test}: {new:?}");
                assert_eq!(std::fs::read_to_string(&new).unwrap(), tag, "{test}");
                assert!(dir.join(format!("{tag}.b")).exists(), "{test}: rename");
            }
            assert_eq!(
                result("write", &ws.join("src/lib.rs")),
                "ok",
                "{test}: {out}"
            );
            assert!(
                std::fs::read_to_string(ws.join("src/lib.rs"))
                    .unwrap()
                    .ends_with(&format!("\n{tag}"))
                    || std::fs::read_to_string(ws.join("src/lib.rs"))
                        .unwrap()
                        .ends_with(tag),
                "{test}: the append is not on the host"
            );
            if with_git {
                let config = ws.join(".git/config");
                assert_eq!(result("read", &config), "ok", "{test}: {out}");
                let written = std::fs::read_to_string(&config).unwrap() != "[core]\n";
                assert_eq!(
                    result("write", &config) == "ok",
                    written,
                    "{test}: the sandbox's word and the host disagree\n{out}"
                );
                if backend != Backend::TierB {
                    assert_eq!(result("write", &config), "EROFS", "{test}: {out}");
                }
            } else {
                // A pooling supervisor removes it on its reaper, after pid 1 is reaped.
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
                while ws.join(".git").exists() && std::time::Instant::now() < deadline {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                assert!(
                    !ws.join(".git").exists(),
                    "{test}: a placeholder was left on the host"
                );
            }
        }
    }
}
