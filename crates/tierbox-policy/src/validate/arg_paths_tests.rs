use std::os::unix::fs::symlink;

use super::*;

/// A canonical workspace in a temp dir, with an `outside/` sibling holding a secret, and
/// a filesystem plan of the system roots `/usr` and `/etc` (`/etc/shadow` hidden).
struct Ws {
    _root: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
    fs: FsPlan,
    policy: FilesystemPolicy,
    scratch: bool,
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
        let fs = FsPlan {
            system_read_only: vec![PathBuf::from("/usr"), PathBuf::from("/etc")].into(),
            system_roots: vec![PathBuf::from("/usr"), PathBuf::from("/etc")].into(),
            system_hidden: vec![PathBuf::from("/etc/shadow")].into(),
            ..FsPlan::default()
        };
        Self {
            _root: root,
            ws,
            outside,
            fs,
            policy: FilesystemPolicy::default(),
            scratch: false,
        }
    }

    /// The check's verdict on `args`: the arguments accepted only as paths in the
    /// run's own `/tmp`, or the refusal.
    fn checked(&self, args: &[&str]) -> Result<Vec<ScratchArg>, Rejection> {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        let own = [];
        let mut visible = Visible::new(
            &self.ws,
            &self.fs,
            &self.policy,
            None,
            RunHome::Private,
            &own,
        );
        if self.scratch {
            visible = visible.with_scratch(&["/tmp"]);
        }
        check_args(&visible, &self.ws, &args, &[])
    }

    fn check(&self, args: &[&str]) -> Result<(), Rejection> {
        self.checked(args).map(drop)
    }

    /// The arguments accepted only as paths in the run's own `/tmp`.
    fn scratch(&self, args: &[&str]) -> Vec<(usize, String)> {
        self.checked(args)
            .unwrap()
            .into_iter()
            .map(|s| (s.arg_index, s.resolved.display().to_string()))
            .collect()
    }

    #[track_caller]
    fn code(&self, args: &[&str]) -> &'static str {
        match self.check(args) {
            Ok(()) => "ok",
            Err(e) => e.code(),
        }
    }
}

fn paths(arg: &str, cwd: &Path) -> Vec<PathBuf> {
    candidates(arg, cwd)
        .into_iter()
        .map(|c| match c {
            Candidate::Path { path, .. } => path,
            Candidate::Home { rest, .. } => PathBuf::from("~").join(rest),
            Candidate::Never { shown, .. } => shown,
        })
        .collect()
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
        "bs=1k",
    ] {
        assert_eq!(paths(arg, &w.ws), Vec::<PathBuf>::new(), "{arg}");
    }
}

#[test]
fn provable_paths_are_candidates() {
    let w = Ws::new();
    let p = |s: &str| PathBuf::from(s);
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
    assert_eq!(paths("-C/etc", &w.ws), vec![p("-C/etc"), p("/etc")]);
    assert_eq!(paths("-I../x", &w.ws), vec![p("-I../x"), p("../x")]);
    assert_eq!(paths("file:///etc/passwd", &w.ws), vec![p("/etc/passwd")]);
    assert_eq!(paths("FILE:///a%20b", &w.ws), vec![p("/a b")]);
    assert_eq!(
        paths("--url=file:///etc/x", &w.ws),
        vec![p("--url=file:///etc/x"), p("/etc/x")]
    );
    assert_eq!(paths("~/.ssh/id_rsa", &w.ws), vec![p("~/.ssh/id_rsa")]);
}

/// A bare `NAME=value` is a setting unless its key is a dd operand; the value of an
/// option's `NAME=value` value is not looked into either.
///
/// Regression: `make PREFIX=/usr/local` and `sh -c 'dd if=/dev/zero of=big …'` (the
/// script's text after `if=`) were refused as paths outside the workspace.
#[test]
fn only_dd_operands_among_bare_assignments_are_paths() {
    let w = Ws::new();
    let p = |s: &str| PathBuf::from(s);
    assert_eq!(paths("PREFIX=/opt/x", &w.ws), vec![p("PREFIX=/opt/x")]);
    assert_eq!(
        paths("--define=k=/opt", &w.ws),
        vec![p("--define=k=/opt"), p("k=/opt")]
    );
    assert_eq!(
        paths("-DCMAKE_INSTALL_PREFIX=/opt/x", &w.ws),
        vec![p("-DCMAKE_INSTALL_PREFIX=/opt/x")]
    );
    assert_eq!(
        paths("dd if=/dev/zero of=big bs=1k", &w.ws),
        vec![p("dd if=/dev/zero of=big bs=1k")]
    );
    assert_eq!(assigned_value("of=/x"), Some(("/x", ArgAccess::Write)));
    assert_eq!(assigned_value("if=/x"), Some(("/x", ArgAccess::Read)));
    assert_eq!(assigned_value("--opt=v"), Some(("v", ArgAccess::Read)));
    assert_eq!(assigned_value("-o=v"), Some(("v", ArgAccess::Read)));
    assert_eq!(assigned_value("-DX=v"), None);
    assert_eq!(assigned_value("PREFIX=/usr/local"), None);
    assert_eq!(assigned_value("https://x.test/?a=/etc"), None);
    assert_eq!(assigned_value("--opt="), None);
    assert_eq!(assigned_value("=x"), None);
    // Everything in those words resolves inside the workspace: they pass.
    assert_eq!(
        w.code(&["PREFIX=/opt/x", "-DCMAKE_INSTALL_PREFIX=/opt/x"]),
        "ok"
    );
}

#[test]
fn other_homes_and_remote_file_urls_are_never_shown() {
    let w = Ws::new();
    for arg in ["~root/.ssh", "file://example.com/etc/passwd"] {
        let err = w.check(&[arg]).unwrap_err();
        assert_eq!(err.code(), "scope.path_not_grantable", "{arg}: {err}");
        assert!(err.to_string().contains("no policy key"), "{err}");
    }
    // The run's own private home.
    assert_eq!(w.code(&["~", "~/.ssh/id_rsa"]), "ok");
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

/// What the plan shows is accepted: system roots, `/proc`, the devices the sandbox
/// provides, a private `/dev/shm`, the run's own `/tmp`.
///
/// Regression: `cat /etc/os-release`, `grep -c ^processor /proc/cpuinfo`, `ls
/// /usr/bin/git` and `touch /tmp/x` were refused as paths outside the workspace.
#[test]
fn what_the_run_sees_is_accepted() {
    let mut w = Ws::new();
    w.scratch = true;
    for arg in [
        "/etc/os-release",
        "/etc/passwd",
        "/usr/bin/git",
        "/usr/local/no-such-file",
        "/proc/cpuinfo",
        "/proc/self/environ",
        "/dev/null",
        "/dev/stdin",
        "/dev/fd/3",
        "/proc/self/fd/12",
        "/dev/urandom",
        "/dev/pts/0",
        "/dev/shm/x",
        "/dev",
        "/tmp/x",
        "/tmp",
        "of=/dev/null",
        "of=/proc/self/fd/1",
        "of=/tmp/out.img",
        "if=/dev/zero",
    ] {
        assert_eq!(w.code(&[arg]), "ok", "{arg}");
    }
}

#[test]
fn what_no_policy_shows_says_so() {
    let w = Ws::new();
    for (arg, code) in [
        ("/etc/shadow", "scope.path_secret"),
        ("/etc/shadow-", "ok"),
        ("/dev/sda", "scope.path_not_grantable"),
        ("/dev/fd/", "scope.path_not_grantable"),
        ("of=/proc/sys/kernel/x", "scope.path_not_grantable"),
        ("of=/dev", "scope.path_not_grantable"),
        ("/", "scope.path_not_grantable"),
        ("/no-such-top-level/x", "scope.path_not_grantable"),
        ("/dev/fd/../../etc/shadow", "scope.path_secret"),
    ] {
        assert_eq!(w.code(&[arg]), code, "{arg}");
        if let Err(e) = w.check(&[arg]) {
            assert!(e.to_string().contains("no policy key"), "{arg}: {e}");
        }
    }
}

/// `/tmp` is the run's own only where the tier gives it one: without scratch roots it
/// is a host path like any other.
#[test]
fn tmp_is_the_run_s_own_only_as_a_scratch_root() {
    let mut w = Ws::new();
    let secret = w.outside.join("secret").display().to_string();
    assert_eq!(w.code(&[&secret]), "scope.path_outside_workspace");
    w.scratch = true;
    if secret.starts_with("/tmp/") {
        assert_eq!(w.code(&[&secret]), "ok", "the host's /tmp is not the run's");
    }
}

/// An argument the run sees only as a path of its own `/tmp` is recorded, so that a
/// launch without a private `/tmp` can refuse it (`scope.path_needs_private_tmp`); one a
/// grant covers, or in the workspace, is not.
#[test]
fn arguments_in_the_run_s_own_tmp_are_recorded() {
    let mut w = Ws::new();
    w.scratch = true;
    assert_eq!(
        w.scratch(&["/tmp/x", "file", "of=/tmp/y"]),
        vec![(0, "/tmp/x".to_owned()), (2, "/tmp/y".to_owned())]
    );
    w.fs.writable = vec![PathBuf::from("/tmp")];
    w.fs.writable_roots = w.fs.writable.clone();
    assert_eq!(w.scratch(&["/tmp/x"]), vec![]);
}

#[test]
fn grants_deny_read_and_dev_shm_decide() {
    let mut w = Ws::new();
    let secret = w.outside.join("secret");
    let shown = secret.display().to_string();
    let err = w.check(&[&shown]).unwrap_err();
    let Rejection::PathOutsideWorkspace { fix, access, .. } = &err else {
        panic!("{err}");
    };
    assert_eq!(*access, ArgAccess::Read);
    assert_eq!(
        fix.changes(),
        [PolicyChange::Grant {
            key: GrantKey::ReadOnly,
            path: secret.clone()
        }]
    );
    assert!(
        err.to_string()
            .contains(&format!("filesystem.read_only += {shown:?}")),
        "{err}"
    );
    // Granted, it passes; written, it needs a writable grant.
    w.fs.read_only_roots = vec![w.outside.clone()];
    assert_eq!(w.code(&[&shown]), "ok");
    let err = w.check(&[&format!("of={shown}")]).unwrap_err();
    assert_eq!(err.code(), "scope.path_outside_workspace", "{err}");
    w.policy.read_only = vec![w.outside.display().to_string()];
    let err = w
        .check(&[&format!("of={}/new", w.outside.display())])
        .unwrap_err();
    match &err {
        Rejection::PathOutsideWorkspace { fix, .. } => assert_eq!(
            fix.changes(),
            [PolicyChange::MoveToWritable {
                entry: w.outside.display().to_string()
            }]
        ),
        other => panic!("{other}"),
    }
    // Denied: the entry to remove.
    w.policy.deny_read = vec![shown.clone()];
    w.fs.deny_read = vec![secret.clone()];
    let err = w.check(&[&shown]).unwrap_err();
    assert_eq!(err.code(), "scope.path_denied", "{err}");
    assert!(err.to_string().contains("filesystem.deny_read"), "{err}");
    // /dev/shm when the policy has none.
    w.fs.dev_shm = DevShm::None;
    let err = w.check(&["/dev/shm/x"]).unwrap_err();
    assert_eq!(err.code(), "scope.path_denied");
    assert!(
        err.to_string().contains("filesystem.dev_shm = \"private\""),
        "{err}"
    );
    assert_eq!(w.code(&["/dev/shm"]), "ok");
}

#[test]
fn symlinks_are_followed_out_of_the_workspace() {
    let w = Ws::new();
    symlink(&w.outside, w.ws.join("out")).unwrap();
    let err = w.check(&["-n", "out/secret"]).unwrap_err();
    match err {
        Rejection::PathOutsideWorkspace {
            arg_index,
            arg,
            resolved,
            workspace,
            ..
        } => {
            assert_eq!((arg_index, arg.as_str()), (1, "out/secret"));
            assert_eq!(resolved, w.outside.join("secret"));
            assert_eq!(workspace, w.ws);
        }
        other => panic!("{other}"),
    }
    symlink("/etc/shadow", w.ws.join("sh")).unwrap();
    assert_eq!(w.code(&["sh"]), "scope.path_secret");
    symlink("loop", w.ws.join("loop")).unwrap();
    assert_eq!(w.code(&["loop"]), "scope.path_not_grantable");
}

/// Regression: `ln -s ../data/x sub/x` was refused: the target, resolved from the cwd,
/// lies outside the workspace, though it is only text stored in the link.
#[test]
fn symlink_targets_are_text() {
    let ln = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        link_targets("ln", Path::new("/usr/bin/ln"), &args)
    };
    assert_eq!(ln(&["-s", "../data/x", "sub/x"]), [1]);
    assert_eq!(ln(&["--symbolic", "../a", "../b", "dir"]), [1, 2]);
    assert_eq!(ln(&["-sfn", "/etc/x"]), [1]);
    assert_eq!(ln(&["-s", "-t", "dir", "../a", "../b"]), [3, 4]);
    assert_eq!(ln(&["-st", "dir", "../a"]), [2]);
    assert_eq!(ln(&["--target-directory=dir", "-s", "../a"]), [2]);
    assert_eq!(ln(&["-s", "-S", ".bak", "../a", "b"]), [3]);
    assert_eq!(ln(&["-s", "--", "-x", "y"]), [2]);
    assert_eq!(
        ln(&["../data/x", "sub/x"]),
        Vec::<usize>::new(),
        "a hard link"
    );
    let args = vec!["-s".to_owned(), "../x".to_owned(), "y".to_owned()];
    assert_eq!(
        link_targets("cp", Path::new("/usr/bin/cp"), &args),
        Vec::<usize>::new()
    );
    assert_eq!(link_targets("ln", Path::new("/bin/ln"), &args), [1]);
}
