//! Nested repositories' git directories are kept read-only wherever they are, and a
//! workspace whose search would be incomplete is refused: judged on the host.
//!
//! Regression: the search for nested repositories stopped at 4 levels, 32 repositories
//! and 20 000 entries, skipped `node_modules`, `target`, `.venv`, `venv` and
//! `__pycache__`, and the enforcement report still said protection applied. A run could
//! force the cut: it made 33 decoy repositories, and the next run rewrote a real
//! `vendor/lib/.git/config` (with `core.fsmonitor`, which the host's `git status` runs).

use super::harness::{Backend, Fixture, assert_holds, describe, report};

/// The default protected paths, enforced.
fn protect_git_dirs(fx: &mut Fixture) {
    fx.protect(tierbox_policy::validate::DEFAULT_PROTECTED);
}

/// A repository at `rel` with a config the host trusts.
fn repo(fx: &Fixture, rel: &str) -> std::path::PathBuf {
    let config = fx.workspace.join(rel).join(".git/config");
    std::fs::create_dir_all(config.parent().unwrap().join("hooks")).unwrap();
    std::fs::write(&config, "[core]\n\tbare = false\n").unwrap();
    config
}

/// One run makes 40 decoy repositories; the next still cannot touch the real
/// `vendor/lib/.git/config`. With a policy that protects fewer repositories than the
/// workspace now holds, the next run is refused before anything runs, naming the key.
async fn decoys_do_not_unprotect_the_next_run(test: &str, backend: Backend) {
    let Some(mut fx) = Fixture::on(test, &[], backend) else {
        return;
    };
    protect_git_dirs(&mut fx);
    let config = repo(&fx, "vendor/lib");
    let decoys: Vec<String> = (0..40).map(|i| format!("decoy{i:02}/.git")).collect();
    let mut args = vec!["mkdirs"];
    args.extend(decoys.iter().map(String::as_str));
    let o = fx.probe(&args).await;
    assert!(report(&o).contains("made 40"), "{}", describe(&o));
    assert_eq!(o.created_git_dirs.len(), 40, "{:?}", o.created_git_dirs);

    let o = fx
        .probe(&["replace-denied", "vendor/lib/.git/config"])
        .await;
    assert_holds(&o);
    assert!(o.enforcement.protected_paths.applied, "{}", describe(&o));
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        "[core]\n\tbare = false\n",
        "the host's config changed"
    );

    fx.policy.filesystem.max_protected_repos = 16;
    let refused = fx
        .try_run(&fx.request(&["replace-denied", "vendor/lib/.git/config"]))
        .await
        .expect_err("a workspace with more repositories than the policy protects must be refused");
    assert!(
        refused.contains("filesystem.max_protected_repos"),
        "the refusal names the key that raises the limit: {refused}"
    );
    // The fix it names works.
    fx.policy.filesystem.max_protected_repos = 64;
    assert_holds(
        &fx.probe(&["replace-denied", "vendor/lib/.git/config"])
            .await,
    );
}

on_every_backend!(decoys_do_not_unprotect_the_next_run => decoys_do_not_unprotect_the_next_run_tier_b, decoys_do_not_unprotect_the_next_run_native, decoys_do_not_unprotect_the_next_run_bwrap);

/// A repository 6 levels down and one in `node_modules/` (and in `target/`) keep their
/// git directories read-only.
async fn deep_and_vendored_repositories_are_protected(test: &str, backend: Backend) {
    let Some(mut fx) = Fixture::on(test, &[], backend) else {
        return;
    };
    protect_git_dirs(&mut fx);
    let places = ["a/b/c/d/e/f", "node_modules/pkg", "target/debug/build/x"];
    let configs: Vec<_> = places.iter().map(|p| repo(&fx, p)).collect();
    for place in places {
        let target = format!("{place}/.git/config");
        assert_holds(&fx.probe(&["replace-denied", &target]).await);
        let hooks = format!("{place}/.git/hooks");
        assert_holds(&fx.probe(&["write-denied", &hooks]).await);
    }
    for config in configs {
        assert_eq!(
            std::fs::read_to_string(&config).unwrap(),
            "[core]\n\tbare = false\n",
            "{}",
            config.display()
        );
    }
}

on_every_backend!(deep_and_vendored_repositories_are_protected => deep_and_vendored_repositories_are_protected_tier_b, deep_and_vendored_repositories_are_protected_native, deep_and_vendored_repositories_are_protected_bwrap);
