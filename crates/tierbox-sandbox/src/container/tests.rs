#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use tierbox_policy::plan::ContainerPlan;
use tierbox_policy::{EgressMode, Plan, TierCBackend};

use super::*;
use crate::test_fixtures::{GOLDEN_WORKSPACE, assert_golden, golden_plan};

fn container_plan(policy: &str, backend: TierCBackend) -> Plan {
    let mut plan = golden_plan(policy);
    plan.tier.backend = backend;
    plan.tier.container = Some(ContainerPlan {
        image: "localhost/tierbox-tools:1".to_owned(),
        user: "65534:65534".to_owned(),
    });
    plan
}

/// Options as on a host where `.git/hooks` exists and `.git/config` does not.
/// Options with every protected path existing on the (fixed) host.
fn options(engine: Engine, plan: &Plan) -> ContainerOptions {
    let protected = super::outermost(
        plan.filesystem
            .protected
            .iter()
            .map(|p| (p.clone(), ProtectedState::Exists))
            .collect(),
    );
    ContainerOptions {
        engine,
        run_id: "0123abcd".to_owned(),
        protected,
        tmp_size_bytes: tmp_size_bytes(plan),
        init: false,
        env_file: Some("/dev/fd/3".to_owned()),
        overlay_layer: None,
        seccomp_profile: Some("/dev/fd/4".to_owned()),
        terminal: false,
    }
}

fn has_pair(argv: &[String], flag: &str, value: &str) -> bool {
    argv.windows(2).any(|w| w[0] == flag && w[1] == value)
}

#[test]
fn golden_argvs_for_the_shipped_policies() {
    for policy in ["strict", "build-with-caches"] {
        for (engine, backend) in [
            (Engine::Docker, TierCBackend::Docker),
            (Engine::Podman, TierCBackend::Podman),
        ] {
            let plan = container_plan(&format!("{policy}.toml"), backend);
            let argv = run_argv(&plan, &options(engine, &plan)).unwrap();
            let mut text = format!("{engine}\n");
            for a in &argv {
                text.push_str(a);
                text.push('\n');
            }
            assert_golden(&format!("{engine}-{policy}.argv"), &text);
        }
    }
}

/// On a terminal the CLI is interactive and the engine makes the container a terminal of
/// its own; without one, neither (a plain run's stdin is `--interactive` only with data).
#[test]
fn a_run_on_a_terminal_asks_the_engine_for_one() {
    let plan = container_plan("strict.toml", TierCBackend::Podman);
    let mut opts = options(Engine::Podman, &plan);
    let argv = run_argv(&plan, &opts).unwrap();
    assert!(
        !argv.iter().any(|a| a == "--tty" || a == "--interactive"),
        "{argv:?}"
    );
    opts.terminal = true;
    let argv = run_argv(&plan, &opts).unwrap();
    let image = argv
        .iter()
        .position(|a| a.contains("busybox") || a.starts_with("docker.io") || a.contains(':'))
        .unwrap_or(argv.len());
    for flag in ["--interactive", "--tty"] {
        let at = argv
            .iter()
            .position(|a| a == flag)
            .unwrap_or_else(|| panic!("{flag}: {argv:?}"));
        assert!(at < image, "{flag} after the image: {argv:?}");
    }
}

#[test]
fn the_argv_is_locked_down() {
    let plan = container_plan("strict.toml", TierCBackend::Docker);
    let argv = run_argv(&plan, &options(Engine::Docker, &plan)).unwrap();
    assert_eq!(&argv[..2], ["run", "--rm"]);
    for (flag, value) in [
        ("--network", "none"),
        ("--cap-drop", "ALL"),
        ("--security-opt", "no-new-privileges"),
        ("--security-opt", "seccomp=/dev/fd/4"),
        ("--user", "65534:65534"),
        ("--ipc", "private"),
        ("--pids-limit", "128"),
        ("--memory", "1073741824"),
        ("--memory-swap", "1073741824"),
        ("--cpus", "2"),
        ("--name", "tierbox-0123abcd"),
        ("--pull", "never"),
        ("--workdir", GOLDEN_WORKSPACE),
        ("--entrypoint", "/usr/bin/ls"),
        ("--tmpfs", "/tmp:rw,nosuid,nodev,mode=1777,size=1073741824"),
        ("--ulimit", "core=0:0"),
        ("--ulimit", "nofile=256:256"),
    ] {
        assert!(has_pair(&argv, flag, value), "{flag} {value} in {argv:?}");
    }
    assert!(argv.iter().any(|a| a == "--read-only"));
    for banned in [
        "--privileged",
        "--network=host",
        "host",
        "--pid",
        "--userns",
    ] {
        assert!(!argv.iter().any(|a| a == banned), "{banned}");
    }
    // The image after `--`, then the arguments verbatim.
    let dash = argv.iter().position(|a| a == "--").unwrap();
    assert_eq!(&argv[dash + 1..], ["localhost/tierbox-tools:1", "-la"]);
}

#[test]
fn env_is_exactly_the_plans_with_a_private_home_and_tmp() {
    let plan = container_plan("build-with-caches.toml", TierCBackend::Podman);
    let mut expected: Vec<String> = plan
        .env
        .iter()
        .filter(|(k, _)| k != "HOME" && k != "TMPDIR")
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    expected.push("TMPDIR=/tmp".to_owned());
    assert!(plan.filesystem.private_home);
    expected.push("HOME=/tmp".to_owned());
    // From the inherited fd: no value in the engine CLI's command line.
    let argv = run_argv(&plan, &options(Engine::Podman, &plan)).unwrap();
    assert!(!argv.iter().any(|a| a == "--env"), "{argv:?}");
    let at = argv.iter().position(|a| a == "--env-file").unwrap();
    assert_eq!(argv[at + 1], "/dev/fd/3");
    let file = super::env_file_contents(&plan).unwrap();
    assert_eq!(file.lines().collect::<Vec<_>>(), expected);
    assert!(file.contains("CARGO_HOME=/home/agent/.cargo\n"));
    for entry in &expected {
        assert!(
            !argv.iter().any(|a| a.ends_with(entry.as_str())),
            "{entry} in argv"
        );
    }
    // Without an env file: one `--env NAME=VALUE` each.
    let mut inline = options(Engine::Podman, &plan);
    inline.env_file = None;
    let argv = run_argv(&plan, &inline).unwrap();
    let env: Vec<&str> = argv
        .windows(2)
        .filter(|w| w[0] == "--env")
        .map(|w| w[1].as_str())
        .collect();
    assert_eq!(env, expected);
    // A value the line-based env file cannot carry is refused, not split.
    let mut broken = plan.clone();
    broken
        .env
        .push(("TOKEN".to_owned(), "a\nEVIL=1".to_owned()));
    assert!(matches!(
        super::env_file_contents(&broken),
        Err(ContainerError::BadEnv { ref name, .. }) if name == "TOKEN"
    ));
}

#[test]
fn protected_paths_are_read_only_mounts_over_the_workspace() {
    let plan = container_plan("strict.toml", TierCBackend::Docker);
    let mounts = |opts: &ContainerOptions| -> Vec<String> {
        let argv = run_argv(&plan, opts).unwrap();
        argv.windows(2)
            .filter(|w| w[0] == "--mount")
            .map(|w| w[1].clone())
            .collect()
    };
    let ws = format!("type=bind,source={GOLDEN_WORKSPACE},target={GOLDEN_WORKSPACE}");
    let git =
        format!("type=bind,source={GOLDEN_WORKSPACE}/.git,target={GOLDEN_WORKSPACE}/.git,readonly");
    // The git directory exists: bound read-only over itself, after the workspace.
    let opts = options(Engine::Docker, &plan);
    assert_eq!(
        mounts(&opts),
        [ws.clone(), git],
        "only the workspace and .git"
    );
    assert!(host_mount_points(&opts).is_empty());
    // It does not: covered by an empty read-only tmpfs, whose mount point the engine
    // creates on the host.
    let cover = PathBuf::from(GOLDEN_WORKSPACE).join(".git");
    let missing = ContainerOptions {
        protected: vec![(
            cover.clone(),
            ProtectedState::Missing {
                cover: cover.clone(),
            },
        )],
        ..options(Engine::Docker, &plan)
    };
    assert_eq!(
        mounts(&missing),
        [
            ws,
            format!("type=tmpfs,target={GOLDEN_WORKSPACE}/.git,ro,tmpfs-size=4096")
        ]
    );
    assert_eq!(host_mount_points(&missing), [cover]);
}

#[test]
fn declared_paths_are_mounted_read_only_or_writable() {
    let plan = container_plan("build-with-caches.toml", TierCBackend::Docker);
    let argv = run_argv(&plan, &options(Engine::Docker, &plan)).unwrap();
    assert!(has_pair(
        &argv,
        "--mount",
        "type=bind,source=/home/agent/.rustup,target=/home/agent/.rustup,readonly"
    ));
    assert!(has_pair(
        &argv,
        "--mount",
        "type=bind,source=/home/agent/.cargo/registry,target=/home/agent/.cargo/registry"
    ));
}

#[test]
fn a_protected_symlink_is_refused() {
    let plan = container_plan("strict.toml", TierCBackend::Docker);
    let mut opts = options(Engine::Docker, &plan);
    let link = PathBuf::from(GOLDEN_WORKSPACE).join(".git");
    opts.protected[0].1 = ProtectedState::Symlink { link: link.clone() };
    let err = run_argv(&plan, &opts).unwrap_err();
    assert!(matches!(err, ContainerError::ProtectedSymlink { link: l, .. } if l == link));
}

#[test]
fn engine_sockets_are_never_mounted() {
    for source in [
        "/var/run/docker.sock",
        "/run/docker.sock",
        "/run/podman/podman.sock",
        "/run/user/1000/podman/podman.sock",
        "/run/user/1000",
        "/run",
        "/var/run",
        "/",
    ] {
        let mut plan = container_plan("strict.toml", TierCBackend::Docker);
        plan.filesystem.read_only.push(PathBuf::from(source));
        let err = run_argv(&plan, &options(Engine::Docker, &plan)).unwrap_err();
        assert!(
            matches!(err, ContainerError::EngineSocket { .. }),
            "{source}: {err:?}"
        );
    }
    for fine in ["/run/user/1000/other", "/var/cache", "/opt/run"] {
        assert_eq!(check_not_engine_socket(std::path::Path::new(fine)), Ok(()));
    }
}

#[test]
fn a_blocked_network_is_none_and_the_proxy_is_refused() {
    let mut plan = container_plan("strict.toml", TierCBackend::Podman);
    assert_eq!(plan.network.mode, EgressMode::BlockAll);
    let argv = run_argv(&plan, &options(Engine::Podman, &plan)).unwrap();
    assert!(has_pair(&argv, "--network", "none"));
    assert_eq!(argv.iter().filter(|a| *a == "--network").count(), 1);
    plan.network.mode = EgressMode::Strict;
    plan.network.allow = vec![tierbox_policy::hosts::HostPattern::parse("crates.io").unwrap()];
    assert_eq!(
        run_argv(&plan, &options(Engine::Podman, &plan)),
        Err(ContainerError::EgressProxyUnsupported)
    );
    plan.network.mode = EgressMode::AllowAll;
    assert!(matches!(
        run_argv(&plan, &options(Engine::Podman, &plan)),
        Err(ContainerError::HostNetwork { .. })
    ));
}

#[test]
fn awkward_paths_and_names_are_typed_rejections() {
    let mut plan = container_plan("strict.toml", TierCBackend::Docker);
    plan.filesystem.writable.push(PathBuf::from("/data/a,b"));
    assert!(matches!(
        run_argv(&plan, &options(Engine::Docker, &plan)),
        Err(ContainerError::UnsupportedPath { .. })
    ));
    let plan = container_plan("strict.toml", TierCBackend::Docker);
    let mut opts = options(Engine::Docker, &plan);
    opts.run_id = "a b".to_owned();
    assert!(matches!(
        run_argv(&plan, &opts),
        Err(ContainerError::BadRunId(_))
    ));
    let mut plan = container_plan("strict.toml", TierCBackend::Docker);
    plan.tier.container = None;
    assert_eq!(
        run_argv(&plan, &options(Engine::Docker, &plan)),
        Err(ContainerError::NoImage)
    );
}

#[test]
fn stdin_data_attaches_stdin() {
    let mut plan = container_plan("strict.toml", TierCBackend::Docker);
    let argv = run_argv(&plan, &options(Engine::Docker, &plan)).unwrap();
    assert!(!argv.iter().any(|a| a == "--interactive"));
    plan.stdin = Some(b"data".to_vec());
    let argv = run_argv(&plan, &options(Engine::Docker, &plan)).unwrap();
    assert!(argv.iter().any(|a| a == "--interactive"));
}
