//! The system-path walk's cache in a state directory: used when it holds, rebuilt when
//! it is stale, foreign or incoherent — never trusted blindly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::*;

/// A small host: `etc/` with an ordinary file, a secret by name and one by mode, and a
/// `usr/` root; plus a private state directory.
struct Host {
    _dir: tempfile::TempDir,
    root: PathBuf,
    state: PathBuf,
}

impl Host {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        for d in ["etc/conf.d", "etc/ssl/private", "usr/bin", "state"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::set_permissions(root.join("state"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        std::fs::write(root.join("etc/hosts"), "127.0.0.1 localhost\n").unwrap();
        std::fs::write(root.join("etc/conf.d/app.conf"), "x=1\n").unwrap();
        std::fs::write(root.join("etc/ssl/private/key.pem"), "k").unwrap();
        let closed = root.join("etc/conf.d/token");
        std::fs::write(&closed, "t").unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o600)).unwrap();
        let state = root.join("state");
        Self {
            _dir: dir,
            root,
            state,
        }
    }

    fn spec(&self) -> Spec {
        Spec {
            secrets_root: self.root.join("etc"),
            roots: vec![self.root.join("usr"), self.root.join("etc")],
            secret_paths: vec![self.root.join("etc/ssl/private")],
        }
    }

    fn file(&self) -> PathBuf {
        self.state.join(SYSTEM_PATHS_CACHE_FILE)
    }
}

fn granted(walk: &Walk, p: &Path) -> bool {
    walk.paths.grants.iter().any(|g| p.starts_with(g))
}

#[test]
fn a_stored_walk_is_loaded_back_unchanged() {
    let host = Host::new();
    let spec = host.spec();
    let walked = walk(&spec);
    assert!(!granted(&walked, &host.root.join("etc/conf.d/token")));
    assert!(!granted(
        &walked,
        &host.root.join("etc/ssl/private/key.pem")
    ));
    assert!(granted(&walked, &host.root.join("etc/hosts")));
    store(&host.file(), &spec, &walked).unwrap();
    let mode = std::fs::metadata(host.file()).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(load(&host.file(), &spec), Some(walked));
}

#[test]
fn a_change_under_the_walked_directories_is_a_fresh_walk() {
    let host = Host::new();
    let spec = host.spec();
    store(&host.file(), &spec, &walk(&spec)).unwrap();
    // A new root-only file: its directory's modification time changes.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let new_secret = host.root.join("etc/conf.d/new-secret");
    std::fs::write(&new_secret, "s").unwrap();
    std::fs::set_permissions(&new_secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(load(&host.file(), &spec), None, "a stale walk was trusted");
    // A walked directory made unreadable: its change time changes.
    store(&host.file(), &spec, &walk(&spec)).unwrap();
    assert!(load(&host.file(), &spec).is_some());
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::set_permissions(
        host.root.join("etc/conf.d"),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    assert_eq!(load(&host.file(), &spec), None, "a stale walk was trusted");
    let fresh = walk(&spec);
    assert!(!granted(&fresh, &host.root.join("etc/conf.d/app.conf")));
}

#[test]
fn a_cache_of_another_build_or_host_layout_is_not_used() {
    let host = Host::new();
    let spec = host.spec();
    store(&host.file(), &spec, &walk(&spec)).unwrap();
    let mut other = host.spec();
    other
        .secret_paths
        .push(host.root.join("etc/conf.d/app.conf"));
    assert_eq!(load(&host.file(), &other), None, "another key was accepted");
    // A root that appeared since.
    std::fs::create_dir(host.root.join("lib")).unwrap();
    let mut more_roots = host.spec();
    more_roots.roots.push(host.root.join("lib"));
    assert_eq!(load(&host.file(), &more_roots), None);
}

#[test]
fn a_tampered_or_foreign_cache_is_not_trusted() {
    let host = Host::new();
    let spec = host.spec();
    let honest = walk(&spec);
    // The honest walk with its grants changed by `forge`, stored: not trusted.
    let refused_with_grants = |forge: &dyn Fn(&mut Vec<PathBuf>), what: &str| {
        let mut forged = honest.clone();
        let mut grants = forged.paths.grants.to_vec();
        forge(&mut grants);
        forged.paths.grants = grants.into();
        store(&host.file(), &spec, &forged).unwrap();
        assert_eq!(load(&host.file(), &spec), None, "{what} was trusted");
    };
    // Granting a secret (the whole of etc): incoherent.
    refused_with_grants(
        &|g| *g = vec![host.root.join("etc"), host.root.join("usr")],
        "a grant of a secret",
    );
    // The same grant appended out of order (a lookup in sorted grants would miss it),
    // and the honest grants unsorted: a walk stores them sorted, so neither is trusted.
    refused_with_grants(
        &|g| g.push(host.root.join("etc")),
        "an unsorted grant of a secret",
    );
    assert!(honest.paths.grants.len() > 1, "{:?}", honest.paths.grants);
    refused_with_grants(&|g| g.reverse(), "unsorted grants");
    // A grant outside every root.
    refused_with_grants(
        &|g| g.push(host.root.join("state")),
        "a grant outside the roots",
    );
    // Hiding nothing: the listed secret is not hidden.
    let mut forged = honest.clone();
    forged.paths.hidden = Vec::new().into();
    store(&host.file(), &spec, &forged).unwrap();
    assert_eq!(
        load(&host.file(), &spec),
        None,
        "an unhidden secret was trusted"
    );
    // Writable by others, a symlink, garbage, too long.
    store(&host.file(), &spec, &honest).unwrap();
    std::fs::set_permissions(host.file(), std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(load(&host.file(), &spec), None, "a world-writable cache");
    std::fs::set_permissions(host.file(), std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(load(&host.file(), &spec).is_some());
    let real = host.state.join("cache/real.json");
    std::fs::rename(host.file(), &real).unwrap();
    std::os::unix::fs::symlink(&real, host.file()).unwrap();
    assert_eq!(load(&host.file(), &spec), None, "a symlinked cache");
    std::fs::remove_file(host.file()).unwrap();
    std::fs::write(host.file(), "{ not json").unwrap();
    assert_eq!(load(&host.file(), &spec), None);
    let f = std::fs::File::create(host.file()).unwrap();
    f.set_len(MAX_CACHE_BYTES + 1).unwrap();
    assert_eq!(load(&host.file(), &spec), None);
}

#[test]
fn the_host_walk_through_a_state_directory_equals_the_walk() {
    let state = tempfile::tempdir().unwrap();
    let spec = Spec::host();
    let walked = walk(&spec);
    let file = state.path().join(SYSTEM_PATHS_CACHE_FILE);
    store(&file, &spec, &walked).unwrap();
    assert_eq!(load(&file, &spec).map(|w| w.paths), Some(walked.paths));
}
