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

    fn check(&self, args: &[&str]) -> Result<(), Rejection> {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        check_args(&self.ws, &self.ws, &args)
    }
}

fn paths(arg: &str, cwd: &Path) -> Vec<Candidate> {
    candidates(arg, cwd)
}

#[test]
fn bare_words_are_not_paths() {
    let w = Ws::new();
    for arg in [
        "status",
        "hello",
        "1",
        "origin",
        "HEAD~1",
        "-n1",
        "--color=auto",
        "a:b",
        "",
        "-",
        "~1",
        "x=y",
    ] {
        assert_eq!(paths(arg, &w.ws), vec![], "{arg}");
    }
}

#[test]
fn provable_paths_are_candidates() {
    let w = Ws::new();
    let p = |s: &str| Candidate::Path(PathBuf::from(s));
    assert_eq!(paths("/etc/passwd", &w.ws), vec![p("/etc/passwd")]);
    assert_eq!(paths("..", &w.ws), vec![p("..")]);
    assert_eq!(paths("file", &w.ws), vec![p("file")]);
    assert_eq!(paths("^foo/bar$", &w.ws), vec![p("^foo/bar$")]);
    assert_eq!(paths("--x/../y", &w.ws), vec![p("--x/../y")]);
    assert_eq!(
        paths("--config=/etc/passwd", &w.ws),
        vec![p("--config=/etc/passwd"), p("/etc/passwd")]
    );
    assert_eq!(paths("-o=../x", &w.ws), vec![p("-o=../x"), p("../x")]);
    assert_eq!(
        paths("if=/dev/sda", &w.ws),
        vec![p("if=/dev/sda"), p("/dev/sda")]
    );
    assert_eq!(
        paths("--define=k=/etc", &w.ws),
        vec![p("--define=k=/etc"), p("k=/etc"), p("/etc")]
    );
    assert_eq!(paths("-C/etc", &w.ws), vec![p("-C/etc"), p("/etc")]);
    assert_eq!(paths("-I../x", &w.ws), vec![p("-I../x"), p("../x")]);
    assert_eq!(paths("file:///etc/passwd", &w.ws), vec![p("/etc/passwd")]);
    assert_eq!(paths("FILE:///a%20b", &w.ws), vec![p("/a b")]);
    assert_eq!(
        paths("--url=file:///etc/x", &w.ws),
        vec![p("--url=file:///etc/x"), p("/etc/x")]
    );
}

#[test]
fn home_and_remote_file_urls_are_outside_without_resolving() {
    let w = Ws::new();
    let out = |s: &str| Candidate::Outside(PathBuf::from(s));
    assert_eq!(paths("~", &w.ws), vec![out("~")]);
    assert_eq!(paths("~/.ssh/id_rsa", &w.ws), vec![out("~/.ssh/id_rsa")]);
    assert_eq!(paths("~root/.ssh", &w.ws), vec![out("~root/.ssh")]);
    assert_eq!(
        paths("file://example.com/etc/passwd", &w.ws),
        vec![out("file://example.com/etc/passwd")]
    );
}

#[test]
fn url_query_equals_is_not_an_assignment() {
    assert_eq!(assigned_value("https://x.test/?a=/etc"), None);
    assert_eq!(assigned_value("--opt=v"), Some("v"));
    assert_eq!(assigned_value("--opt="), None);
    assert_eq!(assigned_value("=x"), None);
}

#[test]
fn compact_values_need_a_path_start() {
    assert_eq!(compact_value("-C/etc"), Some("/etc"));
    assert_eq!(compact_value("-I../x"), Some("../x"));
    assert_eq!(compact_value("-o~/x"), Some("~/x"));
    assert_eq!(compact_value("-n1"), None);
    assert_eq!(compact_value("-ffoo"), None);
    assert_eq!(compact_value("--x/y"), None);
    assert_eq!(compact_value("-1/x"), None);
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
    assert_eq!(
        w.check(&["loop"]).unwrap_err().code(),
        "scope.path_outside_workspace"
    );
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
fn allowed_system_paths() {
    let w = Ws::new();
    assert_eq!(
        w.check(&[
            "/dev/null",
            "/dev/stdin",
            "/dev/fd/3",
            "/proc/self/fd/12",
            "/dev/urandom"
        ]),
        Ok(())
    );
    for arg in [
        "/dev/fd/../../etc/passwd",
        "/dev/fd/",
        "/dev/sda",
        "/proc/self/environ",
        "/dev/null/../../etc",
    ] {
        assert_eq!(
            w.check(&[arg]).unwrap_err().code(),
            "scope.path_outside_workspace",
            "{arg}"
        );
    }
}

#[test]
fn rejection_names_the_argument_and_where_it_lands() {
    let w = Ws::new();
    symlink(&w.outside, w.ws.join("out")).unwrap();
    let err = w.check(&["-n", "out/secret"]).unwrap_err();
    assert_eq!(
        err,
        Rejection::PathOutsideWorkspace {
            arg_index: 1,
            arg: "out/secret".into(),
            resolved: w.outside.join("secret"),
            workspace: w.ws.clone(),
        }
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
    // A path argument is then checked against the narrowed workspace: the sibling of the
    // subdirectory is outside it.
    let narrowed = narrow_workspace(&w.ws, Some("sub")).unwrap();
    let err = check_args(&narrowed, &narrowed, &["../file".to_owned()]).unwrap_err();
    assert_eq!(err.code(), "scope.path_outside_workspace");
}
