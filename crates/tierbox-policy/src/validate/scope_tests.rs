use std::os::unix::fs::symlink;

use super::*;

/// A canonical workspace in a temp dir, with an `outside/` sibling holding a secret.
struct Ws {
    _root: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
}

impl Ws {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(root.path()).unwrap();
        let ws = base.join("ws");
        let outside = base.join("outside");
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), "s").unwrap();
        std::fs::write(ws.join("file"), "f").unwrap();
        Self {
            _root: root,
            ws,
            outside,
        }
    }
}

#[test]
fn resolution_follows_symlinks_in_the_existing_prefix() {
    let w = Ws::new();
    symlink(&w.outside, w.ws.join("out")).unwrap();
    assert_eq!(
        resolve(&w.ws, Path::new("out/secret")),
        Ok(w.outside.join("secret"))
    );
    assert_eq!(
        resolve(&w.ws, Path::new("out/new/file")),
        Ok(w.outside.join("new/file"))
    );
    assert_eq!(
        resolve(&w.ws, Path::new("sub/../file")),
        Ok(w.ws.join("file"))
    );
    assert_eq!(
        resolve(&w.ws, Path::new("nope/../../x")),
        Ok(w.ws.parent().unwrap().join("x"))
    );
    assert_eq!(resolve(&w.ws, Path::new("/")), Ok(PathBuf::from("/")));
    assert_eq!(resolve(&w.ws, Path::new("/../..")), Ok(PathBuf::from("/")));
}

#[test]
fn dangling_symlinks_are_followed_to_their_target() {
    let w = Ws::new();
    symlink(w.outside.join("created"), w.ws.join("dl")).unwrap();
    symlink("dl", w.ws.join("dl2")).unwrap();
    symlink("../outside/later/x", w.ws.join("rel")).unwrap();
    symlink("sub/inner", w.ws.join("inside")).unwrap();
    assert_eq!(
        resolve(&w.ws, Path::new("dl")),
        Ok(w.outside.join("created"))
    );
    assert_eq!(
        resolve(&w.ws, Path::new("dl2")),
        Ok(w.outside.join("created"))
    );
    assert_eq!(
        resolve(&w.ws, Path::new("rel")),
        Ok(w.outside.join("later/x"))
    );
    assert_eq!(
        resolve(&w.ws, Path::new("inside")),
        Ok(w.ws.join("sub/inner"))
    );
}

#[test]
fn symlink_loops_and_long_chains_are_unresolvable() {
    let w = Ws::new();
    symlink("loop", w.ws.join("loop")).unwrap();
    assert!(resolve(&w.ws, Path::new("loop")).is_err());
    for i in 0..=MAX_SYMLINK_HOPS {
        symlink(format!("c{}", i + 1), w.ws.join(format!("c{i}"))).unwrap();
    }
    assert!(resolve(&w.ws, Path::new("c0")).is_err(), "41 dangling hops");
    assert_eq!(
        resolve(&w.ws, Path::new(&format!("c{}", MAX_SYMLINK_HOPS - 3))),
        Ok(w.ws.join(format!("c{}", MAX_SYMLINK_HOPS + 1)))
    );
}

#[test]
fn cwd_resolution() {
    let w = Ws::new();
    assert_eq!(resolve_cwd(&w.ws, None), Ok(w.ws.clone()));
    assert_eq!(resolve_cwd(&w.ws, Some("sub")), Ok(w.ws.join("sub")));
    assert_eq!(resolve_cwd(&w.ws, Some("")), Ok(w.ws.clone()));
    assert_eq!(
        resolve_cwd(&w.ws, Some(w.ws.join("sub").to_str().unwrap())),
        Ok(w.ws.join("sub"))
    );
    assert_eq!(
        resolve_cwd(&w.ws, Some("..")).unwrap_err().code(),
        "scope.cwd_outside_workspace"
    );
    assert_eq!(
        resolve_cwd(&w.ws, Some("/tmp")).unwrap_err().code(),
        "scope.cwd_outside_workspace"
    );
    assert_eq!(
        resolve_cwd(&w.ws, Some("../nope")).unwrap_err().code(),
        "scope.cwd_outside_workspace"
    );
    assert_eq!(
        resolve_cwd(&w.ws, Some("file")).unwrap_err().code(),
        "scope.cwd_not_directory"
    );
    assert_eq!(
        resolve_cwd(&w.ws, Some("missing")).unwrap_err().code(),
        "scope.cwd_not_directory"
    );
    symlink(&w.outside, w.ws.join("out")).unwrap();
    assert_eq!(
        resolve_cwd(&w.ws, Some("out")).unwrap_err().code(),
        "scope.cwd_outside_workspace"
    );
}

#[test]
fn workspace_must_exist_and_be_a_directory() {
    let w = Ws::new();
    assert_eq!(canonical_workspace(&w.ws), Ok(w.ws.clone()));
    let err = canonical_workspace(&w.ws.join("missing")).unwrap_err();
    assert_eq!(err.code(), "scope.workspace_invalid");
    assert!(err.to_string().contains("does not exist"), "{err}");
    assert_eq!(
        canonical_workspace(&w.ws.join("file")).unwrap_err().code(),
        "scope.workspace_invalid"
    );
}

#[test]
fn a_request_narrows_the_workspace_to_a_plain_subdirectory_only() {
    let w = Ws::new();
    std::fs::create_dir_all(w.ws.join("sub/deeper")).unwrap();
    symlink(&w.outside, w.ws.join("link")).unwrap();
    assert_eq!(narrow_workspace(&w.ws, None).unwrap(), w.ws);
    assert_eq!(
        narrow_workspace(&w.ws, Some("sub")).unwrap(),
        w.ws.join("sub")
    );
    assert_eq!(
        narrow_workspace(&w.ws, Some("sub/deeper")).unwrap(),
        w.ws.join("sub/deeper")
    );
    for (bad, why) in [
        ("", "1 to"),
        ("/etc", "plain directory names"),
        ("..", "plain directory names"),
        ("sub/../..", "plain directory names"),
        ("./sub", "plain directory names"),
        ("link", "symbolic link"),
        ("link/x", "symbolic link"),
        ("file", "not a directory"),
        ("missing", "cannot be used"),
    ] {
        let err = narrow_workspace(&w.ws, Some(bad)).unwrap_err();
        assert_eq!(err.code(), "scope.workspace_subdir_invalid", "{bad}");
        assert!(err.to_string().contains(why), "{bad}: {err}");
    }
}

/// What the sandbox mounts itself is resolved lexically: the host's symlinks there are
/// not what the run sees.
#[test]
fn sandbox_own_mounts_are_not_followed_on_the_host() {
    let w = Ws::new();
    symlink("/etc", w.outside.join("link")).unwrap();
    let own = |p: &Path| p.starts_with(&w.outside);
    assert_eq!(
        resolve_in(&w.ws, &w.outside.join("link/passwd"), &own),
        Ok(w.outside.join("link/passwd"))
    );
    assert_eq!(
        resolve(&w.ws, &w.outside.join("link/passwd")),
        Ok(PathBuf::from("/etc/passwd"))
    );
    // `..` climbs out of it, and what lies beyond is the host's again.
    symlink(&w.outside, w.ws.join("out")).unwrap();
    assert_eq!(
        resolve_in(&w.ws, Path::new("out/link/../../ws/out/secret"), &own),
        Ok(w.outside.join("secret"))
    );
}
