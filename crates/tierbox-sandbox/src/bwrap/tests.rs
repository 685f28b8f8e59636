//! bwrap tests: the pure argv builder against Plans validated from the shipped policies
//! (with a fixed [`HostLayout`]), then real sandboxes run with the installed bwrap.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Output;

use tierbox_policy::{Policy, ProcessRunRequest, ValidateContext, validate};

use super::*;
use crate::linux::seccomp::{SeccompProgram, SeccompSpec};

// ---------------------------------------------------------------------------------------
// Helpers.
// ---------------------------------------------------------------------------------------

const V0_8: BwrapVersion = BwrapVersion::new(0, 8, 0);

use crate::test_fixtures::{policy, scratch};

fn plan_for(policy: &Policy, ws: &Path, home: &str, command: &str, args: &[&str]) -> Plan {
    let env: BTreeMap<String, String> = [
        ("HOME", home),
        ("USER", "agent"),
        ("LANG", "C.UTF-8"),
        ("SECRET_TOKEN", "not passed"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let ctx = ValidateContext::new(ws).with_env(env);
    let mut req = ProcessRunRequest::new(command);
    req.args = args.iter().map(|a| (*a).to_owned()).collect();
    validate(policy, &req, &ctx).unwrap()
}

/// A fixed merged-/usr system view, so golden argvs do not depend on this host's `/etc`.
fn fake_system(plan: &mut Plan) -> HostLayout {
    plan.filesystem.system_read_only =
        ["/bin", "/etc/passwd", "/etc/ssl", "/lib", "/lib64", "/usr"]
            .iter()
            .map(PathBuf::from)
            .collect();
    plan.filesystem.system_roots = Default::default();
    plan.filesystem.system_hidden = Default::default();
    HostLayout::new()
        .with("/usr", PathKind::Dir)
        .with("/etc/ssl", PathKind::Dir)
        .with("/etc/passwd", PathKind::File)
        .with("/bin", symlink("usr/bin", Some("/usr/bin")))
        .with("/lib", symlink("usr/lib", Some("/usr/lib")))
        .with("/lib64", symlink("usr/lib64", Some("/usr/lib64")))
        .with(plan.workspace.clone(), PathKind::Dir)
}

fn symlink(target: &str, resolved: Option<&str>) -> PathKind {
    PathKind::Symlink {
        target: PathBuf::from(target),
        resolved: resolved.map(PathBuf::from),
    }
}

fn opts(version: BwrapVersion, host: HostLayout) -> BwrapOptions {
    let mut o = BwrapOptions::new(BwrapFeatures::for_version(version, false), host);
    o.seccomp_fd = Some(3);
    o
}

fn strings(argv: &[OsString]) -> Vec<String> {
    argv.iter()
        .map(|a| a.to_str().unwrap().to_owned())
        .collect()
}

/// The argv as one line with `dir` replaced by `$T`.
fn normalized(argv: &[OsString], dir: &Path) -> String {
    strings(argv).join(" ").replace(dir.to_str().unwrap(), "$T")
}

/// Index of the first occurrence of `window` in `argv`.
fn find(argv: &[String], window: &[&str]) -> Option<usize> {
    argv.windows(window.len())
        .position(|w| w.iter().zip(window).all(|(a, b)| a == b))
}

fn pos(argv: &[String], window: &[&str]) -> usize {
    find(argv, window).unwrap_or_else(|| panic!("{window:?} not in {argv:?}"))
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The invariants every argv keeps.
fn assert_locked_down(argv: &[String]) {
    for flag in [
        "--unshare-all",
        "--unshare-user",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
    ] {
        assert!(argv.iter().any(|a| a == flag), "{flag} missing: {argv:?}");
    }
    pos(argv, &["--cap-drop", "ALL"]);
    pos(argv, &["--remount-ro", "/"]);
    let dashdash = pos(argv, &["--"]);
    let options = &argv[..dashdash];
    for banned in ["--share-net", "--dev-bind", "--dev-bind-try", "--bind-try"] {
        assert!(!options.iter().any(|a| a == banned), "{banned}: {argv:?}");
    }
    assert!(find(options, &["--ro-bind", "/", "/"]).is_none());
    assert!(find(options, &["--bind", "/", "/"]).is_none());
    let uid = pos(options, &["--uid"]);
    assert_ne!(options[uid + 1], "0");
}

/// The `--setenv` pairs, in order.
fn setenvs(argv: &[String]) -> Vec<(String, String)> {
    let dashdash = pos(argv, &["--"]);
    let mut out = Vec::new();
    let mut i = 0;
    while i < dashdash {
        if argv[i] == "--setenv" {
            out.push((argv[i + 1].clone(), argv[i + 2].clone()));
            i += 3;
        } else {
            i += 1;
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Pure: golden argvs from the shipped policies.
// ---------------------------------------------------------------------------------------

/// `strict` egress with an allowlist: bwrap keeps the namespace it starts in (the
/// supervisor's, holding the proxy) with `--share-net` after `--unshare-all`, and the
/// proxy variables point to the port. Without the port the plan is not expressible;
/// with a port but no proxy in the plan the options are refused; and no other plan
/// ever gets `--share-net`.
/// Host ports or published ports without the proxy: bwrap keeps the supervisor's
/// namespace (`reach_netns`) with `--share-net` and gets no proxy variables; the option is
/// required for such a plan and refused for any other.
#[test]
fn reach_shares_the_supervisors_namespace_without_proxy_variables() {
    let sc = scratch();
    let mut p = policy("strict.toml");
    p.exec.allowed_executables = vec!["ls".to_owned()];
    p.egress.host_ports = vec![5432];
    let mut plan = plan_for(&p, &sc.ws, "/nonexistent-home", "ls", &[]);
    let host = fake_system(&mut plan);
    let mut o = opts(V0_8, host.clone());
    assert!(matches!(
        bwrap_argv(&plan, &o),
        Err(BwrapError::PlanNotExpressible { .. })
    ));
    o.reach_netns = true;
    let argv = strings(&bwrap_argv(&plan, &o).unwrap());
    assert!(pos(&argv, &["--share-net"]) > pos(&argv, &["--unshare-all"]));
    assert!(!setenvs(&argv).iter().any(|(k, _)| k.ends_with("_PROXY")));
    p.egress.host_ports.clear();
    let mut plan = plan_for(&p, &sc.ws, "/nonexistent-home", "ls", &[]);
    let host = fake_system(&mut plan);
    let mut o = opts(V0_8, host);
    o.reach_netns = true;
    assert!(matches!(
        bwrap_argv(&plan, &o),
        Err(BwrapError::InvalidOption {
            option: "reach_netns",
            ..
        })
    ));
}

/// A granted host socket is bound from the supervisor's fd, after the /tmp skeleton
/// that holds it, and never by path; without one fd per socket the argv is refused.
#[test]
fn host_sockets_are_bound_from_their_fds() {
    let sc = scratch();
    let mut p = policy("strict.toml");
    p.exec.allowed_executables = vec!["ls".to_owned()];
    let mut plan = plan_for(&p, &sc.ws, "/nonexistent-home", "ls", &[]);
    let host = fake_system(&mut plan);
    plan.network
        .unix_sockets
        .push(tierbox_policy::unix_sockets::UnixSocketGrant {
            entry: "$SSH_AUTH_SOCK".to_owned(),
            path: PathBuf::from("/tmp/ssh-x/agent.1"),
            variable: Some("SSH_AUTH_SOCK".to_owned()),
            uid: 1000,
            gid: 1000,
            mode: 0o600,
            dev: 1,
            ino: 2,
            privileged: false,
        });
    let mut o = opts(V0_8, host);
    assert!(matches!(
        bwrap_argv(&plan, &o),
        Err(BwrapError::InvalidOption {
            option: "unix_socket_fds",
            ..
        })
    ));
    o.unix_socket_fds = vec![12];
    let argv = strings(&bwrap_argv(&plan, &o).unwrap());
    let bind = pos(&argv, &["--ro-bind-fd", "12", "/tmp/ssh-x/agent.1"]);
    assert!(bind > pos(&argv, &["--tmpfs", "/tmp/ssh-x"]));
    assert!(
        find(
            &argv,
            &["--ro-bind", "/tmp/ssh-x/agent.1", "/tmp/ssh-x/agent.1"]
        )
        .is_none()
    );
    o.features.bind_fd = false;
    assert!(matches!(
        bwrap_argv(&plan, &o),
        Err(BwrapError::PlanNotExpressible { .. })
    ));
}

#[test]
fn strict_allowlist_shares_the_proxy_namespace_and_nothing_else_does() {
    let sc = scratch();
    let mut p = policy("strict.toml");
    p.exec.allowed_executables = vec!["ls".to_owned()];
    p.egress.mode = tierbox_policy::EgressMode::Strict;
    p.egress.allow = vec!["crates.io".to_owned()];
    let mut plan = plan_for(&p, &sc.ws, "/nonexistent-home", "ls", &[]);
    let host = fake_system(&mut plan);
    let mut o = opts(V0_8, host.clone());
    assert!(matches!(
        bwrap_argv(&plan, &o),
        Err(BwrapError::PlanNotExpressible { .. })
    ));
    o.egress_proxy_port = Some(8877);
    let argv = strings(&bwrap_argv(&plan, &o).unwrap());
    assert!(pos(&argv, &["--share-net"]) > pos(&argv, &["--unshare-all"]));
    let env = setenvs(&argv);
    for (name, value) in [
        ("HTTPS_PROXY", "http://127.0.0.1:8877"),
        ("http_proxy", "http://127.0.0.1:8877"),
        ("ALL_PROXY", "socks5h://127.0.0.1:8877"),
    ] {
        assert!(
            env.iter().any(|(k, v)| k == name && v == value),
            "{name}={value} not in {env:?}"
        );
    }

    p.egress.allow.clear();
    let mut plan = plan_for(&p, &sc.ws, "/nonexistent-home", "ls", &[]);
    let host = fake_system(&mut plan);
    let argv = strings(&bwrap_argv(&plan, &opts(V0_8, host.clone())).unwrap());
    assert_locked_down(&argv);
    let mut o = opts(V0_8, host);
    o.egress_proxy_port = Some(8877);
    assert!(matches!(
        bwrap_argv(&plan, &o),
        Err(BwrapError::InvalidOption {
            option: "egress_proxy_port",
            ..
        })
    ));
}

/// `ls -la` under the strict policy in workspace `ws`, on the fake host layout.
fn strict_ls(ws: &Path) -> (Plan, HostLayout) {
    let mut plan = plan_for(
        &policy("strict.toml"),
        ws,
        "/nonexistent-home",
        "ls",
        &["-la"],
    );
    // The resolved program depends on this host's PATH; pin it for the snapshot.
    plan.program = PathBuf::from("/usr/bin/ls");
    let host = fake_system(&mut plan);
    (plan, host)
}

#[test]
fn strict_policy_golden_argv() {
    let sc = scratch();
    let (plan, host) = strict_ls(&sc.ws);
    let argv = bwrap_argv(&plan, &opts(V0_8, host)).unwrap();
    let expected = "--unshare-all --unshare-user --disable-userns --die-with-parent --new-session \
--cap-drop ALL --uid 1000 --gid 1000 --hostname tierbox \
--clearenv --setenv HOME /tmp/home --setenv LANG C.UTF-8 \
--setenv PATH /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
--setenv TEMP /tmp --setenv TMP /tmp --setenv TMPDIR /tmp --setenv USER agent \
--proc /proc --remount-ro /proc --dev /dev --size 67108864 --tmpfs /dev/shm \
--size 268435456 --tmpfs /tmp --dir /tmp/home \
--tmpfs $T --symlink usr/bin /bin --ro-bind /etc/passwd /etc/passwd --ro-bind /etc/ssl /etc/ssl \
--symlink usr/lib /lib --symlink usr/lib64 /lib64 \
--bind $T/ws $T/ws --tmpfs $T/ws/.git --remount-ro $T/ws/.git --ro-bind /usr /usr \
--remount-ro $T --remount-ro / --chdir $T/ws --seccomp 3 -- /usr/bin/ls -la";
    assert_eq!(normalized(&argv, &sc.root), expected);
    assert_locked_down(&strings(&argv));
}

#[test]
fn build_with_caches_binds_grants_and_protects_git() {
    let sc = scratch();
    let home = sc.root.join("home");
    for d in [
        ".rustup",
        ".cargo/bin",
        ".cargo/registry",
        ".npm",
        ".cache/pip",
    ] {
        std::fs::create_dir_all(home.join(d)).unwrap();
    }
    // The policy's PATH starts with ~/.cargo/bin: cargo is found in this home's.
    {
        use std::os::unix::fs::PermissionsExt;
        let cargo = home.join(".cargo/bin/cargo");
        std::fs::write(&cargo, "").unwrap();
        std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::create_dir_all(sc.ws.join(".git/hooks")).unwrap();
    std::fs::write(sc.ws.join(".git/config"), "[core]\n").unwrap();
    let mut plan = plan_for(
        &policy("build-with-caches.toml"),
        &sc.ws,
        s(&home),
        "cargo",
        &["build", "--offline"],
    );
    let system = fake_system(&mut plan);
    let mut host = HostLayout::probe(&plan);
    for (path, kind) in system.entries {
        host = host.with(path, kind);
    }
    let mut o = opts(BwrapVersion::new(0, 9, 0), host);
    o.seccomp_fd = None;
    let argv = strings(&bwrap_argv(&plan, &o).unwrap());
    assert_locked_down(&argv);

    // Grants: every read-only path read-only, every writable path writable.
    assert!(plan.filesystem.read_only.contains(&home.join(".rustup")));
    for p in &plan.filesystem.read_only {
        pos(&argv, &["--ro-bind", s(p), s(p)]);
    }
    assert!(
        plan.filesystem
            .writable
            .contains(&home.join(".cargo/registry"))
    );
    for p in &plan.filesystem.writable {
        pos(&argv, &["--bind", s(p), s(p)]);
    }
    // The workspace, then its protected paths re-bound read-only after it.
    let ws = s(&sc.ws);
    let ws_bind = pos(&argv, &["--bind", ws, ws]);
    let hooks = sc.ws.join(".git/hooks");
    let config = sc.ws.join(".git/config");
    assert!(pos(&argv, &["--ro-bind", s(&config), s(&config)]) > ws_bind);
    assert!(pos(&argv, &["--ro-bind", s(&hooks), s(&hooks)]) > ws_bind);
    // The git directory is bound read-only as a whole, so the entries it lacks need no
    // cover (and no mount point on the host).
    let git = sc.ws.join(".git");
    assert!(pos(&argv, &["--ro-bind", s(&git), s(&git)]) > ws_bind);
    assert!(host_mount_points(&plan, &o).unwrap().is_empty());
    // 0.9.0 keeps argv[0]; no seccomp fd means no --seccomp.
    let dashdash = pos(&argv, &["--"]);
    assert_eq!(argv[dashdash - 2..dashdash], ["--argv0", "cargo"]);
    assert!(!argv.iter().any(|a| a == "--seccomp"));
    assert_eq!(argv[dashdash + 2..], ["build", "--offline"]);
    // No grant covers HOME itself, so the run gets the private one.
    let env = setenvs(&argv);
    if plan.filesystem.private_home {
        assert!(env.contains(&("HOME".into(), "/tmp/home".into())));
    }
    assert!(env.contains(&("CARGO_TERM_COLOR".into(), "never".into())));
}

#[test]
fn env_is_exactly_the_plans_plus_tmp_and_home() {
    let sc = scratch();
    let mut plan = plan_for(
        &policy("strict.toml"),
        &sc.ws,
        "/nonexistent-home",
        "ls",
        &[],
    );
    plan.env.push(("TMPDIR".into(), "/var/tmp".into()));
    let host = fake_system(&mut plan);
    let argv = strings(&bwrap_argv(&plan, &opts(V0_8, host)).unwrap());
    let clearenv = pos(&argv, &["--clearenv"]);
    let first_setenv = pos(&argv, &["--setenv"]);
    assert!(clearenv < first_setenv);
    let mut expected: BTreeMap<String, String> = plan.env.iter().cloned().collect();
    assert!(!expected.contains_key("SECRET_TOKEN"));
    expected.insert("HOME".into(), "/tmp/home".into());
    expected.insert("TMP".into(), "/tmp".into());
    expected.insert("TEMP".into(), "/tmp".into());
    let got: BTreeMap<String, String> = setenvs(&argv).into_iter().collect();
    assert_eq!(got, expected);
    assert_eq!(got["TMPDIR"], "/var/tmp", "the plan's TMPDIR is kept");
    assert_eq!(setenvs(&argv).len(), got.len(), "each variable set once");
}

// ---------------------------------------------------------------------------------------
// Pure: protected paths.
// ---------------------------------------------------------------------------------------

/// A plan for `ws` with `protected` (relative) and a fake system, for layout-only tests.
fn protected_plan(ws: &Path, protected: &[&str]) -> Plan {
    let mut plan = plan_for(&policy("strict.toml"), ws, "/nonexistent-home", "ls", &[]);
    plan.filesystem.protected = protected.iter().map(|p| ws.join(p)).collect();
    plan
}

#[test]
fn missing_protected_component_is_covered_once_at_the_first_missing_component() {
    let ws = PathBuf::from("/w/repo");
    let mut plan = protected_plan(&scratch().ws, &[".git/hooks", ".git/config"]);
    plan.workspace = ws.clone();
    plan.cwd = ws.clone();
    plan.filesystem.protected = vec![ws.join(".git/hooks"), ws.join(".git/config")];
    let host = fake_system(&mut plan);
    // Only entries of a git directory that does not exist: nothing to cover, the run may
    // make its own repository.
    let o = opts(V0_8, host.clone());
    let argv = strings(&bwrap_argv(&plan, &o).unwrap());
    assert!(
        !argv.iter().any(|a| a.starts_with("/w/repo/.git")),
        "{argv:?}"
    );
    assert!(host_mount_points(&plan, &o).unwrap().is_empty());
    // `.git` listed itself: covered once, as a whole.
    plan.filesystem.protected.insert(0, ws.join(".git"));
    let o = opts(V0_8, host);
    let argv = strings(&bwrap_argv(&plan, &o).unwrap());
    let cover = pos(
        &argv,
        &["--tmpfs", "/w/repo/.git", "--remount-ro", "/w/repo/.git"],
    );
    assert!(cover > pos(&argv, &["--bind", "/w/repo", "/w/repo"]));
    assert_eq!(argv.iter().filter(|a| *a == "/w/repo/.git").count(), 2);
    assert!(!argv.iter().any(|a| a.starts_with("/w/repo/.git/")));
    assert_eq!(host_mount_points(&plan, &o).unwrap(), [ws.join(".git")]);

    // `.git` exists, `hooks` does not: the leaf is covered, `config` re-bound.
    plan.filesystem.protected.remove(0);
    let host = o
        .host
        .clone()
        .with("/w/repo/.git", PathKind::Dir)
        .with("/w/repo/.git/config", PathKind::File);
    let o = opts(V0_8, host);
    let argv = strings(&bwrap_argv(&plan, &o).unwrap());
    pos(
        &argv,
        &["--ro-bind", "/w/repo/.git/hooks", "/w/repo/.git/hooks"],
    );
    assert!(find(&argv, &["--tmpfs", "/w/repo/.git/hooks"]).is_none());
    pos(
        &argv,
        &["--ro-bind", "/w/repo/.git/config", "/w/repo/.git/config"],
    );
    assert!(find(&argv, &["--ro-bind", "/w/repo/.git", "/w/repo/.git"]).is_none());
    assert_eq!(
        host_mount_points(&plan, &o).unwrap(),
        [ws.join(".git/hooks")]
    );
}

/// A missing `commondir` is a file placeholder the supervisor makes holding `.` and binds
/// read-only, not an empty directory (`Is a directory` is fatal to git).
#[test]
fn missing_commondir_is_a_readable_file_placeholder() {
    let ws = PathBuf::from("/w/repo");
    let mut plan = protected_plan(&scratch().ws, &[]);
    plan.workspace = ws.clone();
    plan.cwd = ws.clone();
    plan.filesystem.protected = vec![ws.join(".git/commondir"), ws.join(".git/hooks")];
    let host = fake_system(&mut plan).with("/w/repo/.git", PathKind::Dir);
    let o = opts(V0_8, host);
    let argv = strings(&bwrap_argv(&plan, &o).unwrap());
    pos(
        &argv,
        &[
            "--ro-bind",
            "/w/repo/.git/commondir",
            "/w/repo/.git/commondir",
        ],
    );
    assert!(find(&argv, &["--tmpfs", "/w/repo/.git/commondir"]).is_none());
    assert_eq!(
        host_placeholders(&plan, &o).unwrap(),
        [
            (ws.join(".git/commondir"), false),
            (ws.join(".git/hooks"), false)
        ]
    );
    assert_eq!(
        host_mount_points(&plan, &o).unwrap(),
        [ws.join(".git/commondir"), ws.join(".git/hooks")]
    );
}

#[test]
fn protected_symlink_pins_its_parent_and_a_writable_target() {
    let ws = PathBuf::from("/w/repo");
    let mut plan = protected_plan(&scratch().ws, &[]);
    plan.workspace = ws.clone();
    plan.cwd = ws.clone();
    plan.filesystem.protected = vec![ws.join(".git/hooks")];
    let host = fake_system(&mut plan)
        .with("/w/repo/.git", PathKind::Dir)
        .with(
            "/w/repo/.git/hooks",
            symlink("../tools/hooks", Some("/w/repo/tools/hooks")),
        )
        .with("/w/repo/tools/hooks", PathKind::Dir);
    let argv = strings(&bwrap_argv(&plan, &opts(V0_8, host)).unwrap());
    let ws_bind = pos(&argv, &["--bind", "/w/repo", "/w/repo"]);
    assert!(pos(&argv, &["--ro-bind", "/w/repo/.git", "/w/repo/.git"]) > ws_bind);
    assert!(
        pos(
            &argv,
            &["--ro-bind", "/w/repo/tools/hooks", "/w/repo/tools/hooks"]
        ) > ws_bind
    );
    assert!(
        !argv.iter().any(|a| a == "/w/repo/.git/hooks"),
        "never mounts on the link"
    );

    // A missing `.git/config` beside it needs no cover (and could not get one): the
    // pinned `.git` is read-only.
    plan.filesystem.protected.push(ws.join(".git/config"));
    let o = opts(V0_8, host_of_symlinked_hooks(&mut plan));
    let argv = strings(&bwrap_argv(&plan, &o).unwrap());
    assert!(!argv.iter().any(|a| a == "/w/repo/.git/config"), "{argv:?}");
    assert!(host_mount_points(&plan, &o).unwrap().is_empty());
}

fn host_of_symlinked_hooks(plan: &mut Plan) -> HostLayout {
    fake_system(plan)
        .with("/w/repo/.git", PathKind::Dir)
        .with(
            "/w/repo/.git/hooks",
            symlink("../tools/hooks", Some("/w/repo/tools/hooks")),
        )
        .with("/w/repo/tools/hooks", PathKind::Dir)
}

#[test]
fn protected_symlink_to_outside_pins_only_the_parent() {
    let ws = PathBuf::from("/w/repo");
    let mut plan = protected_plan(&scratch().ws, &[]);
    plan.workspace = ws.clone();
    plan.cwd = ws.clone();
    plan.filesystem.protected = vec![ws.join(".git/config")];
    let host = fake_system(&mut plan)
        .with("/w/repo/.git", PathKind::Dir)
        .with(
            "/w/repo/.git/config",
            symlink("/etc/gitconfig", Some("/etc/gitconfig")),
        )
        .with("/etc/gitconfig", PathKind::File);
    let argv = strings(&bwrap_argv(&plan, &opts(V0_8, host)).unwrap());
    pos(&argv, &["--ro-bind", "/w/repo/.git", "/w/repo/.git"]);
    assert!(
        !argv.iter().any(|a| a == "/etc/gitconfig"),
        "no new exposure: {argv:?}"
    );
}

#[test]
fn protected_symlink_in_the_workspace_root_is_an_error() {
    let ws = PathBuf::from("/w/repo");
    let mut plan = protected_plan(&scratch().ws, &[]);
    plan.workspace = ws.clone();
    plan.cwd = ws.clone();
    plan.filesystem.protected = vec![ws.join(".git/hooks")];
    let host = fake_system(&mut plan).with("/w/repo/.git", symlink("/elsewhere", None));
    let err = bwrap_argv(&plan, &opts(V0_8, host)).unwrap_err();
    assert!(
        matches!(&err, BwrapError::ProtectedPathNotCoverable { path, .. } if *path == ws.join(".git/hooks")),
        "{err}"
    );
    assert!(
        err.to_string().contains("/w/repo/.git is a symlink"),
        "{err}"
    );
}

#[test]
fn protected_file_component_is_rebound() {
    // A linked worktree's `.git` is a file: re-binding it stops `.git/hooks` from ever
    // being created (ENOTDIR) and the file from being replaced.
    let ws = PathBuf::from("/w/repo");
    let mut plan = protected_plan(&scratch().ws, &[]);
    plan.workspace = ws.clone();
    plan.cwd = ws.clone();
    plan.filesystem.protected = vec![ws.join(".git/hooks")];
    let host = fake_system(&mut plan).with("/w/repo/.git", PathKind::File);
    let argv = strings(&bwrap_argv(&plan, &opts(V0_8, host)).unwrap());
    pos(&argv, &["--ro-bind", "/w/repo/.git", "/w/repo/.git"]);
}

#[test]
fn protected_paths_outside_the_workspace_are_errors() {
    let sc = scratch();
    for bad in [sc.root.join("elsewhere"), sc.ws.join("../x"), sc.ws.clone()] {
        let mut plan = protected_plan(&sc.ws, &[]);
        plan.filesystem.protected = vec![bad.clone()];
        let host = fake_system(&mut plan);
        let err = bwrap_argv(&plan, &opts(V0_8, host)).unwrap_err();
        assert!(
            matches!(err, BwrapError::ProtectedPathNotCoverable { .. }),
            "{bad:?}: {err}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Pure: grants, denials, options, versions.
// ---------------------------------------------------------------------------------------

#[test]
fn narrower_grants_render_after_wider_ones_and_read_only_wins_ties() {
    let sc = scratch();
    let mut plan = protected_plan(&sc.ws, &[]);
    plan.filesystem.read_only = vec!["/opt".into(), "/srv/shared".into()];
    plan.filesystem.writable = vec!["/opt/cache".into(), "/srv/shared".into()];
    let host = fake_system(&mut plan)
        .with("/opt", PathKind::Dir)
        .with("/opt/cache", PathKind::Dir)
        .with("/srv/shared", PathKind::Dir);
    let argv = strings(&bwrap_argv(&plan, &opts(V0_8, host)).unwrap());
    assert!(
        pos(&argv, &["--ro-bind", "/opt", "/opt"])
            < pos(&argv, &["--bind", "/opt/cache", "/opt/cache"])
    );
    assert!(
        pos(&argv, &["--bind", "/srv/shared", "/srv/shared"])
            < pos(&argv, &["--ro-bind", "/srv/shared", "/srv/shared"])
    );
    // Fixed mounts precede every bind (a workspace under /tmp is bound onto the tmpfs).
    assert!(pos(&argv, &["--tmpfs", "/tmp"]) < pos(&argv, &["--bind", s(&sc.ws), s(&sc.ws)]));
}

#[test]
fn grants_of_root_or_fixed_mounts_are_refused() {
    let sc = scratch();
    for bad in ["/", "/tmp", "/dev"] {
        let mut plan = protected_plan(&sc.ws, &[]);
        plan.filesystem.read_only = vec![PathBuf::from(bad)];
        let host = fake_system(&mut plan).with(bad, PathKind::Dir);
        let err = bwrap_argv(&plan, &opts(V0_8, host)).unwrap_err();
        assert!(
            matches!(err, BwrapError::PlanNotExpressible { .. }),
            "{bad}: {err}"
        );
    }
}

#[test]
fn deny_read_covers_visible_paths_after_every_bind() {
    let sc = scratch();
    let mut plan = protected_plan(&sc.ws, &[]);
    let ws = &sc.ws;
    plan.filesystem.deny_read = vec![
        ws.join("secrets"),
        ws.join("secrets/inner.key"),
        ws.join(".env"),
        ws.join("link-to-env"),
        PathBuf::from("/root/.ssh"),
        ws.join("absent"),
    ];
    let host = fake_system(&mut plan)
        .with(ws.join("secrets"), PathKind::Dir)
        .with(ws.join("secrets/inner.key"), PathKind::File)
        .with(ws.join(".env"), PathKind::File)
        .with(
            ws.join("link-to-env"),
            symlink(".env", Some(s(&ws.join(".env")))),
        )
        .with("/root/.ssh", PathKind::Dir);
    let argv = strings(&bwrap_argv(&plan, &opts(V0_8, host)).unwrap());
    let last_bind = pos(&argv, &["--bind", s(ws), s(ws)]);
    let secrets = ws.join("secrets");
    let env = ws.join(".env");
    assert!(
        pos(
            &argv,
            &["--tmpfs", s(&secrets), "--remount-ro", s(&secrets)]
        ) > last_bind
    );
    assert!(pos(&argv, &["--ro-bind", "/dev/null", s(&env)]) > last_bind);
    assert_eq!(argv.iter().filter(|a| *a == "/dev/null").count(), 1);
    assert_eq!(
        argv.iter().filter(|a| **a == s(&env)).count(),
        1,
        "symlink deduplicated"
    );
    assert!(
        !argv
            .iter()
            .any(|a| a.contains("inner.key") || a.contains("/root/.ssh"))
    );
}

#[test]
fn version_features_gate_optional_flags() {
    let sc = scratch();
    let mut plan = protected_plan(&sc.ws, &[]);
    let host = fake_system(&mut plan);
    let old = strings(&bwrap_argv(&plan, &opts(BwrapVersion::new(0, 6, 1), host.clone())).unwrap());
    assert_locked_down(&old);
    for absent in ["--disable-userns", "--size", "--argv0"] {
        assert!(!old.iter().any(|a| a == absent), "{absent} in {old:?}");
    }
    let mut setuid = opts(V0_8, host);
    setuid.features = BwrapFeatures::for_version(V0_8, true);
    let argv = strings(&bwrap_argv(&plan, &setuid).unwrap());
    assert!(argv.iter().any(|a| a == "--disable-userns"));
    assert!(
        !argv.iter().any(|a| a == "--size"),
        "setuid bwrap refuses --size"
    );
    assert_eq!(
        BwrapFeatures::for_version(BwrapVersion::new(0, 11, 0), false),
        BwrapFeatures {
            disable_userns: true,
            tmpfs_size: true,
            argv0: true,
            bind_fd: true,
        }
    );
}

#[test]
fn invalid_options_and_inexpressible_plans_are_errors() {
    let sc = scratch();
    let mut plan = protected_plan(&sc.ws, &[]);
    let host = fake_system(&mut plan);
    let base = opts(V0_8, host);
    let cases: Vec<(&str, BwrapOptions)> = vec![
        (
            "uid",
            BwrapOptions {
                uid: 0,
                ..base.clone()
            },
        ),
        (
            "gid",
            BwrapOptions {
                gid: 0,
                ..base.clone()
            },
        ),
        (
            "hostname",
            BwrapOptions {
                hostname: String::new(),
                ..base.clone()
            },
        ),
        (
            "hostname",
            BwrapOptions {
                hostname: "h".repeat(65),
                ..base.clone()
            },
        ),
        (
            "tmp_size_bytes",
            BwrapOptions {
                tmp_size_bytes: 0,
                ..base.clone()
            },
        ),
        (
            "seccomp_fd",
            BwrapOptions {
                seccomp_fd: Some(-1),
                ..base.clone()
            },
        ),
    ];
    for (field, o) in cases {
        match bwrap_argv(&plan, &o) {
            Err(BwrapError::InvalidOption { option, .. }) => assert_eq!(option, field),
            other => panic!("{field}: {other:?}"),
        }
    }
    let mut nul = plan.clone();
    nul.argv.push("a\0b".into());
    assert!(matches!(
        bwrap_argv(&nul, &base),
        Err(BwrapError::PlanNotExpressible { .. })
    ));
    let mut bad_env = plan.clone();
    bad_env.env.push(("A=B".into(), "x".into()));
    assert!(matches!(
        bwrap_argv(&bad_env, &base),
        Err(BwrapError::PlanNotExpressible { .. })
    ));
    let mut relative = plan;
    relative.program = PathBuf::from("ls");
    assert!(matches!(
        bwrap_argv(&relative, &base),
        Err(BwrapError::PlanNotExpressible { .. })
    ));
}

#[test]
fn version_output_parses() {
    let parse = BwrapVersion::parse_version_output;
    assert_eq!(parse("bubblewrap 0.8.0\n"), Some(V0_8));
    assert_eq!(
        parse("bubblewrap 0.11.0-rc1"),
        Some(BwrapVersion::new(0, 11, 0))
    );
    assert_eq!(parse("bubblewrap 1.2"), Some(BwrapVersion::new(1, 2, 0)));
    assert_eq!(parse("bwrap 0.8.0"), None);
    assert_eq!(parse("bubblewrap"), None);
    assert!(BwrapVersion::new(0, 4, 1) < MIN_BWRAP_VERSION);
    assert!(BwrapVersion::new(0, 10, 0) > V0_8);
}

#[test]
fn error_messages_say_what_to_do() {
    let not_found = BwrapError::NotFound {
        searched: vec!["/usr/bin/bwrap".into()],
    }
    .to_string();
    for needle in [
        "/usr/bin/bwrap",
        "apt-get install bubblewrap",
        "dnf install bubblewrap",
        "pacman -S bubblewrap",
    ] {
        assert!(not_found.contains(needle), "{not_found}");
    }
    let too_old = BwrapError::TooOld {
        version: BwrapVersion::new(0, 4, 0),
        minimum: MIN_BWRAP_VERSION,
    }
    .to_string();
    assert!(
        too_old.contains("0.4.0") && too_old.contains("0.5.0"),
        "{too_old}"
    );
    assert!(
        matches!(probe_bwrap(Some(Path::new("/nonexistent/bwrap"))), Err(BwrapError::NotFound { searched }) if searched == [PathBuf::from("/nonexistent/bwrap")])
    );
}

#[test]
fn userns_diagnosis_names_the_sysctl_and_value() {
    let v = |p: &str, x: Option<&str>| (p.to_owned(), x.map(str::to_owned));
    let d = userns_diagnosis(&[
        v("/proc/sys/kernel/unprivileged_userns_clone", Some("0")),
        v("/proc/sys/user/max_user_namespaces", Some("15000")),
        v(
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            None,
        ),
    ]);
    assert!(d.contains("kernel.unprivileged_userns_clone = 0"), "{d}");
    let d = userns_diagnosis(&[v(
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
        Some("1"),
    )]);
    assert!(
        d.contains("kernel.apparmor_restrict_unprivileged_userns = 1") && d.contains("AppArmor"),
        "{d}"
    );
    let d = userns_diagnosis(&[v("/proc/sys/user/max_user_namespaces", Some("0"))]);
    assert!(d.contains("user.max_user_namespaces = 0"), "{d}");
    let d = userns_diagnosis(&[v("/proc/sys/user/max_user_namespaces", Some("96365"))]);
    assert!(
        d.contains("user.max_user_namespaces = 96365") && d.contains("container"),
        "{d}"
    );
}

#[test]
fn sandbox_check_argv_follows_the_host_layout() {
    let host = HostLayout::new()
        .with("/usr", PathKind::Dir)
        .with("/bin", symlink("usr/bin", None))
        .with("/lib64", symlink("usr/lib64", None))
        .with("/sbin", PathKind::Dir);
    let argv = strings(&sandbox_check_argv(
        &host,
        BwrapFeatures::for_version(V0_8, false),
        Path::new("/usr/bin/true"),
    ));
    assert_eq!(
        argv.join(" "),
        "--unshare-all --unshare-user --disable-userns --die-with-parent --new-session \
--cap-drop ALL --clearenv --ro-bind /usr /usr --symlink usr/bin /bin --ro-bind /sbin /sbin \
--symlink usr/lib64 /lib64 --proc /proc --dev /dev -- /usr/bin/true"
    );
}

// ---------------------------------------------------------------------------------------
// Real bwrap on this host.
// ---------------------------------------------------------------------------------------

/// The probed bwrap, or `None` after printing `SKIP <test>: <reason>`; under `CI=true` an
/// unusable bwrap fails the test instead.
fn real_bwrap(test: &str) -> Option<BwrapInfo> {
    match probe_bwrap(None) {
        Ok(info) => Some(info),
        Err(e) => {
            tierbox_test_support::skip(test, &e.to_string());
            None
        }
    }
}

/// A memfd holding the locked-down seccomp filter, positioned at 0, not close-on-exec.
fn seccomp_fd() -> OwnedFd {
    use rustix::fs::{MemfdFlags, SeekFrom, memfd_create, seek};
    use rustix::io::{FdFlags, fcntl_setfd, write};
    let bytes = SeccompProgram::build(&SeccompSpec::locked_down())
        .unwrap()
        .to_bytes();
    let fd = memfd_create("tierbox-seccomp", MemfdFlags::CLOEXEC).unwrap();
    let mut off = 0;
    while off < bytes.len() {
        off += write(&fd, &bytes[off..]).unwrap();
    }
    seek(&fd, SeekFrom::Start(0)).unwrap();
    // bwrap must inherit it.
    fcntl_setfd(&fd, FdFlags::empty()).unwrap();
    fd
}

fn run(info: &BwrapInfo, plan: &Plan, seccomp: Option<&OwnedFd>) -> Output {
    let mut o = BwrapOptions::new(info.features, HostLayout::probe(plan));
    o.seccomp_fd = seccomp.map(|fd| fd.as_raw_fd());
    let argv = bwrap_argv(plan, &o).unwrap();
    let out = std::process::Command::new(&info.path)
        .args(&argv)
        .env_clear()
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    remove_host_mount_points(&host_mount_points(plan, &o).unwrap());
    out
}

/// A refused operation must be refused inside a running sandbox, not by bwrap failing
/// to build it (which would make every "fails" assertion pass vacuously).
fn assert_refused_inside(out: &Output, what: &str) {
    assert!(!out.status.success(), "{what} succeeded: {out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("bwrap:"),
        "{what}: the sandbox did not start: {stderr}"
    );
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A strict-policy plan for `command`, with `args` set after validation: these tests
/// name paths outside the workspace on purpose, which validation's (advisory) scope check
/// would reject before the kernel layers could be tested.
fn strict_plan(ws: &Path, command: &str, args: &[&str]) -> Plan {
    let mut plan = plan_for(
        &policy("strict.toml"),
        ws,
        "/nonexistent-home",
        command,
        &[],
    );
    plan.argv.extend(args.iter().map(|a| (*a).to_owned()));
    plan
}

fn status_field<'a>(status: &'a str, name: &str) -> &'a str {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
        .unwrap_or_else(|| panic!("{name} not in {status}"))
}

#[test]
fn real_identity_capabilities_no_new_privs_and_seccomp() {
    let Some(info) = real_bwrap("real_identity_capabilities_no_new_privs_and_seccomp") else {
        return;
    };
    let sc = scratch();
    let out = run(&info, &strict_plan(&sc.ws, "id", &["-u"]), None);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout(&out).trim(), DEFAULT_SANDBOX_ID.to_string());

    let fd = seccomp_fd();
    let out = run(
        &info,
        &strict_plan(&sc.ws, "cat", &["/proc/self/status"]),
        Some(&fd),
    );
    assert!(out.status.success(), "{out:?}");
    let status = stdout(&out);
    assert!(status_field(&status, "Uid").starts_with(&DEFAULT_SANDBOX_ID.to_string()));
    assert_eq!(status_field(&status, "CapEff"), "0000000000000000");
    assert_eq!(status_field(&status, "CapPrm"), "0000000000000000");
    assert_eq!(status_field(&status, "NoNewPrivs"), "1");
    assert_eq!(status_field(&status, "Seccomp"), "2");
}

#[test]
fn real_workspace_writable_protected_and_outside_not() {
    let Some(info) = real_bwrap("real_workspace_writable_protected_and_outside_not") else {
        return;
    };
    let sc = scratch();
    std::fs::create_dir_all(sc.ws.join(".git/hooks")).unwrap();
    std::fs::write(sc.ws.join(".git/config"), "[core]\n").unwrap();

    let inside = sc.ws.join("written-inside.txt");
    let out = run(&info, &strict_plan(&sc.ws, "touch", &[s(&inside)]), None);
    assert!(out.status.success(), "{out:?}");
    assert!(inside.exists(), "workspace write is visible outside");

    let hook = sc.ws.join(".git/hooks/pre-commit");
    let out = run(&info, &strict_plan(&sc.ws, "touch", &[s(&hook)]), None);
    assert_refused_inside(&out, "protected write");
    assert!(!hook.exists());
    let config = sc.ws.join(".git/config");
    let out = run(
        &info,
        &strict_plan(&sc.ws, "cp", &[s(&inside), s(&config)]),
        None,
    );
    assert_refused_inside(&out, "protected overwrite");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "[core]\n");

    // Outside the workspace: beside it (only the sandbox's own tmpfs /tmp), and system
    // paths (read-only binds) and the root (read-only tmpfs).
    let beside = sc.root.join("beside.txt");
    for target in [s(&beside), "/usr/tierbox-probe", "/tierbox-probe"] {
        let out = run(&info, &strict_plan(&sc.ws, "touch", &[target]), None);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("bwrap:"),
            "the sandbox did not start: {stderr}"
        );
        assert!(!Path::new(target).exists(), "{target} written on the host");
    }
    let out = run(
        &info,
        &strict_plan(&sc.ws, "touch", &["/usr/tierbox-probe"]),
        None,
    );
    assert_refused_inside(&out, "write to /usr");
}

#[test]
fn real_missing_protected_git_cannot_be_created_and_leaves_nothing() {
    let Some(info) = real_bwrap("real_missing_protected_git_cannot_be_created_and_leaves_nothing")
    else {
        return;
    };
    let sc = scratch();
    let git = sc.ws.join(".git");
    let hooks = git.join("hooks");
    let out = run(
        &info,
        &strict_plan(&sc.ws, "mkdir", &["-p", s(&hooks)]),
        None,
    );
    assert_refused_inside(&out, "creating a protected path");
    let out = run(&info, &strict_plan(&sc.ws, "rmdir", &[s(&git)]), None);
    assert_refused_inside(&out, "removing the cover");
    assert!(!git.exists(), "mount point left in the host workspace");
}

#[test]
fn real_pid_namespace_and_loopback_only_network() {
    let Some(info) = real_bwrap("real_pid_namespace_and_loopback_only_network") else {
        return;
    };
    let sc = scratch();
    let out = run(
        &info,
        &strict_plan(&sc.ws, "cat", &["/proc/1/cmdline"]),
        None,
    );
    assert!(out.status.success(), "{out:?}");
    let cmdline = stdout(&out);
    let arg0 = cmdline.split('\0').next().unwrap();
    assert!(arg0.ends_with("bwrap"), "pid 1 is {cmdline:?}");

    let out = run(&info, &strict_plan(&sc.ws, "cat", &["/proc/net/dev"]), None);
    assert!(out.status.success(), "{out:?}");
    let interfaces: Vec<String> = stdout(&out)
        .lines()
        .skip(2)
        .filter_map(|l| Some(l.split(':').next()?.trim().to_owned()))
        .collect();
    assert_eq!(interfaces, ["lo"]);

    let out = run(&info, &strict_plan(&sc.ws, "uname", &["-n"]), None);
    assert_eq!(stdout(&out).trim(), DEFAULT_HOSTNAME);
}

#[test]
fn real_environment_is_the_plans() {
    let Some(info) = real_bwrap("real_environment_is_the_plans") else {
        return;
    };
    let sc = scratch();
    let plan = strict_plan(&sc.ws, "env", &[]);
    let out = run(&info, &plan, None);
    assert!(out.status.success(), "{out:?}");
    let got: BTreeMap<String, String> = stdout(&out)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let mut expected: BTreeMap<String, String> = plan.env.iter().cloned().collect();
    expected.insert("HOME".into(), "/tmp/home".into());
    for k in ["TMPDIR", "TMP", "TEMP"] {
        expected.insert(k.into(), "/tmp".into());
    }
    // bwrap sets PWD itself after --chdir.
    expected.insert("PWD".into(), s(&sc.ws).to_owned());
    assert_eq!(got, expected);
}

#[test]
fn real_symlinked_protected_path_cannot_be_swapped_or_written_through() {
    let Some(info) =
        real_bwrap("real_symlinked_protected_path_cannot_be_swapped_or_written_through")
    else {
        return;
    };
    let sc = scratch();
    std::fs::create_dir_all(sc.ws.join(".git")).unwrap();
    std::fs::create_dir_all(sc.ws.join("tools/hooks")).unwrap();
    std::os::unix::fs::symlink("../tools/hooks", sc.ws.join(".git/hooks")).unwrap();
    let link = sc.ws.join(".git/hooks");
    let through = sc.ws.join("tools/hooks/pre-commit");
    let out = run(&info, &strict_plan(&sc.ws, "rm", &[s(&link)]), None);
    assert_refused_inside(&out, "swapping the link");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let out = run(&info, &strict_plan(&sc.ws, "touch", &[s(&through)]), None);
    assert_refused_inside(&out, "writing through the link");
    assert!(!through.exists());
    let other = sc.ws.join("tools/other.txt");
    let out = run(&info, &strict_plan(&sc.ws, "touch", &[s(&other)]), None);
    assert!(out.status.success() && other.exists(), "{out:?}");
}

#[test]
fn system_roots_are_bound_whole_and_their_secrets_covered_after() {
    let sc = scratch();
    let mut plan = protected_plan(&sc.ws, &[]);
    let host = fake_system(&mut plan)
        .with("/etc", PathKind::Dir)
        .with("/etc/shadow", PathKind::File)
        .with("/etc/ssh", PathKind::Dir);
    plan.filesystem.system_roots = ["/bin", "/etc", "/usr"].map(PathBuf::from).to_vec().into();
    plan.filesystem.system_hidden = ["/etc/shadow", "/etc/ssh"]
        .map(PathBuf::from)
        .to_vec()
        .into();
    let argv = strings(&bwrap_argv(&plan, &opts(V0_8, host)).unwrap());
    let etc = pos(&argv, &["--ro-bind", "/etc", "/etc"]);
    assert!(pos(&argv, &["--ro-bind", "/usr", "/usr"]) > 0);
    assert!(pos(&argv, &["--symlink", "usr/bin", "/bin"]) > 0);
    // The expanded entries are not bound one by one.
    assert!(!argv.iter().any(|a| a == "/etc/passwd"), "{argv:?}");
    assert!(pos(&argv, &["--ro-bind", "/dev/null", "/etc/shadow"]) > etc);
    assert!(pos(&argv, &["--tmpfs", "/etc/ssh", "--remount-ro", "/etc/ssh"]) > etc);
}

/// A writable `/dev/shm` grant is the run's own tmpfs, never a bind of the host's;
/// `dev_shm = "none"` makes it an empty read-only one.
#[test]
fn dev_shm_is_the_runs_own_or_none() {
    let sc = scratch();
    let mut p = policy("strict.toml");
    p.filesystem.writable = vec!["/dev/shm".to_owned()];
    let mut plan = plan_for(&p, &sc.ws, "/nonexistent-home", "ls", &[]);
    let host = fake_system(&mut plan).with("/dev/shm", PathKind::Dir);
    let argv = strings(&bwrap_argv(&plan, &opts(V0_8, host.clone())).unwrap());
    assert!(find(&argv, &["--tmpfs", "/dev/shm"]).is_some(), "{argv:?}");
    assert!(
        find(&argv, &["--bind", "/dev/shm", "/dev/shm"]).is_none(),
        "{argv:?}"
    );
    assert!(
        find(&argv, &["--remount-ro", "/dev/shm"]).is_none(),
        "{argv:?}"
    );

    plan.filesystem.dev_shm = tierbox_policy::DevShm::None;
    plan.filesystem.writable.clear();
    plan.filesystem.writable_roots.clear();
    let argv = strings(&bwrap_argv(&plan, &opts(V0_8, host)).unwrap());
    assert!(
        pos(&argv, &["--remount-ro", "/dev/shm"]) > pos(&argv, &["--tmpfs", "/dev/shm"]),
        "{argv:?}"
    );
}

/// What bwrap runs as pid 1: the arguments after `--as-pid-1 --`.
fn pid1_command(argv: &[String]) -> &[String] {
    let at = pos(argv, &["--as-pid-1", "--"]);
    &argv[at + 2..]
}

/// With the `tierbox-init` image on an fd, pid 1 is `tierbox-init --run` (bwrap
/// `--as-pid-1`) and the program keeps the Plan's `argv[0]` without `--argv0`.
#[test]
fn init_fd_makes_tierbox_init_pid_1() {
    let sc = scratch();
    let (plan, host) = strict_ls(&sc.ws);
    let mut o = opts(V0_8, host);
    o.init_fd = Some(6);
    let argv = strings(&bwrap_argv(&plan, &o).unwrap());
    assert_eq!(
        pid1_command(&argv),
        ["/proc/self/fd/6", "--run", "/usr/bin/ls", "ls", "-la"]
    );
    assert!(find(&argv, &["--argv0"]).is_none(), "{argv:?}");
    o.init_fd = Some(-1);
    assert!(matches!(
        bwrap_argv(&plan, &o),
        Err(BwrapError::InvalidOption {
            option: "init_fd",
            ..
        })
    ));
}

/// A run on a terminal makes pid 1 `tierbox-init [--alive FD] --pty SOCK ROWS COLS --run …`:
/// the program makes its terminal in the sandbox's devpts, sends the primary out over
/// `SOCK` and takes the secondary (bwrap's `--new-session` leaves it none).
#[test]
fn a_terminal_makes_tierbox_init_take_it() {
    let sc = scratch();
    let (plan, host) = strict_ls(&sc.ws);
    let mut o = opts(V0_8, host);
    o.init_fd = Some(6);
    o.alive_fd = Some(9);
    o.terminal = Some(super::PtyHandOff {
        sock: 10,
        size: crate::launch::terminal::TermSize { rows: 24, cols: 80 },
    });
    let argv = strings(&bwrap_argv(&plan, &o).unwrap());
    assert_eq!(
        pid1_command(&argv),
        [
            "/proc/self/fd/6",
            "--alive",
            "9",
            "--pty",
            "10",
            "24",
            "80",
            "--run",
            "/usr/bin/ls",
            "ls",
            "-la"
        ]
    );
    o.terminal = None;
    let argv = strings(&bwrap_argv(&plan, &o).unwrap());
    assert!(!argv.iter().any(|a| a == "--pty"), "{argv:?}");
}

/// A stacked filter makes pid 1 `tierbox-init --run-stacked FD SOCK LOG`; it needs both
/// the init image and the filter bwrap attaches, positive fds, and a reason to be there
/// (logging or a listener).
#[test]
fn a_stacked_filter_makes_tierbox_init_stack_it() {
    let sc = scratch();
    let (plan, host) = strict_ls(&sc.ws);
    let mut o = opts(V0_8, host);
    o.init_fd = Some(6);
    o.seccomp_fd = Some(3);
    for (f, args) in [
        (
            StackedFilter {
                fd: 7,
                listener_sock: None,
                log: true,
            },
            ["7", "0", "1"],
        ),
        (
            StackedFilter {
                fd: 7,
                listener_sock: Some(8),
                log: false,
            },
            ["7", "8", "0"],
        ),
    ] {
        o.stacked_filter = Some(f);
        let argv = strings(&bwrap_argv(&plan, &o).unwrap());
        assert_eq!(
            pid1_command(&argv),
            [
                "/proc/self/fd/6",
                "--run-stacked",
                args[0],
                args[1],
                args[2],
                "/usr/bin/ls",
                "ls",
                "-la"
            ]
        );
    }
    let logged = |fd, listener_sock| StackedFilter {
        fd,
        listener_sock,
        log: true,
    };
    for (init_fd, seccomp_fd, f) in [
        (None, Some(3), logged(7, None)),
        (Some(6), None, logged(7, None)),
        (Some(6), Some(3), logged(0, None)),
        (Some(6), Some(3), logged(7, Some(0))),
        (
            Some(6),
            Some(3),
            StackedFilter {
                fd: 7,
                listener_sock: None,
                log: false,
            },
        ),
    ] {
        o.init_fd = init_fd;
        o.seccomp_fd = seccomp_fd;
        o.stacked_filter = Some(f);
        assert!(
            matches!(
                bwrap_argv(&plan, &o),
                Err(BwrapError::InvalidOption {
                    option: "stacked_filter",
                    ..
                })
            ),
            "{init_fd:?} {seccomp_fd:?} {f:?}"
        );
    }
}
