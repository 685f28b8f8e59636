//! Egress preflight through the public `validate()`: host extraction from argv and
//! `requested_egress_hosts`, the allowlist, and the four modes.
//!
//! The programs are empty files in a temporary `env.path`, so no test depends on what
//! the host has installed (and nothing runs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

use tempfile::TempDir;
use tierbox_policy::{Plan, Policy, ProcessRunRequest, Rejection, ValidateContext, validate};

const PROGRAMS: &[&str] = &["git", "ssh", "curl", "ping", "printf", "cat", "echo"];

/// A workspace and a sandbox PATH holding fake programs.
struct Fixture {
    workspace: TempDir,
    bin: TempDir,
}

impl Fixture {
    fn new() -> Self {
        let bin = tempfile::tempdir().unwrap();
        for name in PROGRAMS {
            let path = bin.path().join(name);
            std::fs::write(&path, b"").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Self {
            workspace: tempfile::tempdir().unwrap(),
            bin,
        }
    }

    fn policy(&self, mode: &str, allow: &[&str]) -> Policy {
        let toml = format!(
            "version = 1\n\
             [exec]\nallowed_executables = {programs:?}\n\
             [env]\npath = {path:?}\n\
             [filesystem]\nread_only = [{path:?}]\n\
             [egress]\nmode = {mode:?}\nallow = {allow:?}\n",
            programs = PROGRAMS,
            path = self.bin.path().to_str().unwrap(),
        );
        Policy::from_toml(&toml).unwrap_or_else(|e| panic!("policy {toml}: {e}"))
    }

    fn run(&self, policy: &Policy, req: &ProcessRunRequest) -> Result<Plan, Rejection> {
        let ctx = ValidateContext::new(self.workspace.path()).with_env(BTreeMap::new());
        validate(policy, req, &ctx)
    }
}

fn request(command: &str, args: &[&str]) -> ProcessRunRequest {
    let mut req = ProcessRunRequest::new(command);
    req.args = args.iter().map(|s| (*s).to_owned()).collect();
    req
}

fn with_hosts(command: &str, args: &[&str], hosts: &[&str]) -> ProcessRunRequest {
    let mut req = request(command, args);
    req.requested_egress_hosts = hosts.iter().map(|s| (*s).to_owned()).collect();
    req
}

/// The allowlist most tests use: exact names, a wildcard with a port, addresses.
const ALLOW: &[&str] = &[
    "allowed.test",
    "*.allowed.test",
    "*.corp.example:443",
    "10.0.0.2",
    "fd00::2",
];

/// `(command, args, denied host as reported, source)`: each blocked form of the SPEC.
const BLOCKED: &[(&str, &[&str], &str, &str)] = &[
    (
        "git",
        &["clone", "https://blocked.test/x"],
        "blocked.test:443",
        "args[1]",
    ),
    ("ssh", &["user@blocked.test"], "blocked.test", "args[0]"),
    (
        "git",
        &["clone", "git@blocked.test:org/r.git"],
        "blocked.test",
        "args[1]",
    ),
    (
        "curl",
        &["--proxy", "blocked.test:3128", "x"],
        "blocked.test:3128",
        "args[1]",
    ),
    ("ping", &["blocked.test"], "blocked.test", "args[0]"),
    (
        "ping",
        &["-c", "3", "blocked.test"],
        "blocked.test",
        "args[2]",
    ),
    ("curl", &["http://[fd00::1]/"], "[fd00::1]:80", "args[0]"),
    ("curl", &["10.0.0.1:22"], "10.0.0.1:22", "args[0]"),
    (
        "ssh",
        &["-p", "2222", "blocked.test", "ls"],
        "blocked.test:2222",
        "args[2]",
    ),
    (
        "git",
        &["-c", "http.proxy=blocked.test:3128", "fetch"],
        "blocked.test:3128",
        "args[1]",
    ),
    (
        "curl",
        &["-o", "out.txt", "blocked.test/x"],
        "blocked.test",
        "args[2]",
    ),
    (
        "git",
        &["clone", "ssh://git@Blocked.TEST:2222/r.git"],
        "blocked.test:2222",
        "args[1]",
    ),
    (
        "curl",
        &["https://bücher.test/"],
        "xn--bcher-kva.test:443",
        "args[0]",
    ),
    // Label boundaries and ports of the wildcard entries.
    (
        "curl",
        &["https://badallowed.test/"],
        "badallowed.test:443",
        "args[0]",
    ),
    (
        "curl",
        &["https://corp.example/"],
        "corp.example:443",
        "args[0]",
    ),
    (
        "curl",
        &["http://api.corp.example/"],
        "api.corp.example:80",
        "args[0]",
    ),
    // A URL host that is not a valid name is reported, not skipped.
    (
        "curl",
        &["http://bad_name.allowed.test/"],
        "bad_name.allowed.test:80",
        "args[0]",
    ),
];

/// The same forms naming allowlisted hosts.
const ACCEPTED: &[(&str, &[&str])] = &[
    ("git", &["clone", "https://allowed.test/x"]),
    ("ssh", &["user@allowed.test"]),
    ("git", &["clone", "git@allowed.test:org/r.git"]),
    ("curl", &["--proxy", "allowed.test:3128", "x"]),
    ("ping", &["allowed.test"]),
    ("ping", &["-c", "3", "a.b.allowed.test"]),
    ("curl", &["http://[fd00::2]/"]),
    ("curl", &["10.0.0.2:22"]),
    ("ssh", &["-p", "2222", "Allowed.Test.", "ls"]),
    ("git", &["-c", "http.proxy=allowed.test:3128", "fetch"]),
    ("curl", &["-o", "out.txt", "allowed.test/x"]),
    ("git", &["clone", "ssh://git@Allowed.TEST:2222/r.git"]),
    ("curl", &["https://api.corp.example/"]),
    ("curl", &["https://api.corp.example:443/"]),
];

#[test]
fn preflight_rejects_hosts_outside_the_allowlist() {
    let fx = Fixture::new();
    for mode in ["preflight", "strict"] {
        let policy = fx.policy(mode, ALLOW);
        for (command, args, host, source) in BLOCKED {
            let err = fx
                .run(&policy, &request(command, args))
                .expect_err(&format!("{mode}: {command} {args:?}"));
            assert_eq!(
                err.code(),
                "egress.host_not_allowed",
                "{mode}: {command} {args:?}: {err}"
            );
            assert_eq!(
                err,
                Rejection::EgressHostNotAllowed {
                    host: (*host).to_owned(),
                    source_desc: (*source).to_owned()
                },
                "{mode}: {command} {args:?}"
            );
            let message = err.to_string();
            assert!(
                message.contains(host) && message.contains(source),
                "{message}"
            );
        }
    }
}

#[test]
fn preflight_accepts_allowlisted_hosts() {
    let fx = Fixture::new();
    for mode in ["preflight", "strict"] {
        let policy = fx.policy(mode, ALLOW);
        for (command, args) in ACCEPTED {
            let plan = fx
                .run(&policy, &request(command, args))
                .unwrap_or_else(|e| panic!("{mode}: {command} {args:?}: {e}"));
            assert!(
                !plan.network.preflight_hosts.is_empty(),
                "{mode}: {command} {args:?} found no host"
            );
        }
    }
}

#[test]
fn cidr_entries_allow_address_literals_only() {
    let fx = Fixture::new();
    let policy = fx.policy("preflight", &["10.0.0.0/8", "fd00::/8"]);
    for (command, args) in [
        ("curl", &["10.0.0.1:22"][..]),
        ("curl", &["http://[fd00::1]/"]),
        ("ssh", &["root@10.9.9.9"]),
    ] {
        fx.run(&policy, &request(command, args))
            .unwrap_or_else(|e| panic!("{command} {args:?}: {e}"));
    }
    let err = fx
        .run(&policy, &request("ping", &["ten.example"]))
        .unwrap_err();
    assert_eq!(err.code(), "egress.host_not_allowed");
    let err = fx
        .run(&policy, &request("curl", &["11.0.0.1:22"]))
        .unwrap_err();
    assert_eq!(err.code(), "egress.host_not_allowed");
}

#[test]
fn port_entries_need_that_port() {
    let fx = Fixture::new();
    let policy = fx.policy("preflight", &["allowed.test:443"]);
    fx.run(&policy, &request("curl", &["https://allowed.test/"]))
        .unwrap();
    for args in [
        &["http://allowed.test/"][..],
        &["allowed.test:8443"],
        &["allowed.test"],
    ] {
        let err = fx.run(&policy, &request("curl", args)).unwrap_err();
        assert_eq!(err.code(), "egress.host_not_allowed", "{args:?}");
    }
}

#[test]
fn an_empty_allowlist_denies_every_host() {
    let fx = Fixture::new();
    for mode in ["preflight", "strict"] {
        let policy = fx.policy(mode, &[]);
        for (command, args) in ACCEPTED {
            let err = fx
                .run(&policy, &request(command, args))
                .expect_err(&format!("{mode}: {command} {args:?}"));
            assert_eq!(
                err.code(),
                "egress.host_not_allowed",
                "{mode}: {command} {args:?}"
            );
        }
    }
}

#[test]
fn arguments_that_are_not_hosts_pass() {
    let fx = Fixture::new();
    let policy = fx.policy("strict", &[]);
    let cases: &[(&str, &[&str])] = &[
        ("printf", &["a:b"]),
        ("git", &["log", "HEAD~1"]),
        ("cat", &["notes.txt"]),
        ("echo", &["std::io"]),
        (
            "echo",
            &[
                "12:30",
                "2024-01-01T10:00:00",
                "key=value",
                "localhost:notaport",
                "C:\\x",
                "foo.txt",
            ],
        ),
        ("git", &["show", "HEAD:src/main.rs"]),
        ("git", &["push", "origin", "main:main"]),
        ("git", &["config", "user.email", "me@example.com"]),
        (
            "git",
            &["commit", "-m", "see https://example.com for details"],
        ),
        ("cat", &["lodash@4.17.21", "node:20", "v1.2.3"]),
        ("curl", &["-o", "out.txt"]),
    ];
    for (command, args) in cases {
        let plan = fx
            .run(&policy, &request(command, args))
            .unwrap_or_else(|e| panic!("{command} {args:?}: {e}"));
        assert!(
            plan.network.preflight_hosts.is_empty(),
            "{command} {args:?}: {:?}",
            plan.network.preflight_hosts
        );
    }
}

#[test]
fn requested_egress_hosts_are_checked_too() {
    let fx = Fixture::new();
    let policy = fx.policy("preflight", ALLOW);

    let plan = fx
        .run(
            &policy,
            &with_hosts(
                "cat",
                &[],
                &["Allowed.Test", "api.corp.example:443", "[fd00::2]"],
            ),
        )
        .unwrap();
    assert_eq!(
        plan.network.preflight_hosts,
        ["allowed.test", "api.corp.example", "fd00::2"]
    );

    let err = fx
        .run(
            &policy,
            &with_hosts("cat", &[], &["allowed.test", "blocked.test"]),
        )
        .unwrap_err();
    assert_eq!(
        err,
        Rejection::EgressHostNotAllowed {
            host: "blocked.test".to_owned(),
            source_desc: "requested_egress_hosts[1]".to_owned()
        }
    );

    let err = fx
        .run(&policy, &with_hosts("cat", &[], &["api.corp.example:80"]))
        .unwrap_err();
    assert_eq!(err.code(), "egress.host_not_allowed");

    for bad in [
        "bad_name.test",
        "a..b",
        "*.allowed.test",
        "allowed.test:0",
        "",
        "[::1",
    ] {
        let err = fx
            .run(&policy, &with_hosts("cat", &[], &[bad]))
            .expect_err(bad);
        assert_eq!(err.code(), "egress.host_invalid", "{bad:?}: {err}");
        assert!(
            matches!(&err, Rejection::EgressHostInvalid { host, .. } if host == bad),
            "{err:?}"
        );
    }
}

#[test]
fn block_all_records_hosts_without_checking_them() {
    let fx = Fixture::new();
    let policy = fx.policy("block_all", &[]);
    let req = with_hosts(
        "git",
        &[
            "clone",
            "https://blocked.test/x",
            "git@Blocked.test:o/r",
            "10.0.0.1:22",
        ],
        &["zeta.test", "blocked.test", "not a host"],
    );
    let plan = fx.run(&policy, &req).unwrap();
    assert_eq!(plan.network.mode, tierbox_policy::EgressMode::BlockAll);
    assert_eq!(
        plan.network.preflight_hosts,
        ["10.0.0.1", "blocked.test", "zeta.test"],
        "canonical, deduped, sorted"
    );
}

#[test]
fn allow_all_skips_extraction_and_checks() {
    let fx = Fixture::new();
    let policy = fx.policy("allow_all", &[]);
    for (command, args, _, _) in BLOCKED {
        let plan = fx
            .run(&policy, &request(command, args))
            .unwrap_or_else(|e| panic!("{command} {args:?}: {e}"));
        assert!(plan.network.preflight_hosts.is_empty());
    }
    let plan = fx
        .run(&policy, &with_hosts("cat", &[], &["not a host"]))
        .unwrap();
    assert_eq!(plan.network.mode, tierbox_policy::EgressMode::AllowAll);
}

#[test]
fn the_plan_carries_the_parsed_allowlist() {
    let fx = Fixture::new();
    let policy = fx.policy(
        "strict",
        &[
            "Allowed.Test.",
            "*.Corp.Example:443",
            "[::1]:8080",
            "10.0.0.0/8",
        ],
    );
    let plan = fx.run(&policy, &request("cat", &[])).unwrap();
    let allow: Vec<String> = plan.network.allow.iter().map(ToString::to_string).collect();
    assert_eq!(
        allow,
        [
            "allowed.test",
            "*.corp.example:443",
            "[::1]:8080",
            "10.0.0.0/8"
        ]
    );
    assert!(plan.network.preflight_hosts.is_empty());
}

#[test]
fn the_policy_loader_refuses_broad_and_malformed_entries() {
    for entry in [
        "*.com",
        "*",
        "*.co.uk",
        "a.*.example",
        ".example.com",
        "bad_name.test",
        "example.com:0",
        "10.0.0.1/8",
    ] {
        let toml = format!("version = 1\n[egress]\nmode = \"preflight\"\nallow = [{entry:?}]\n");
        let err = Policy::from_toml(&toml).expect_err(entry).to_string();
        assert!(
            err.contains("egress.allow") && err.contains(entry),
            "{entry}: {err}"
        );
    }
    for entry in [
        "example.com",
        "*.example.com",
        "*.x.org:22",
        "[::1]:8080",
        "fd00::/8",
        "10.0.0.0/8",
        "::1",
    ] {
        let toml = format!("version = 1\n[egress]\nmode = \"preflight\"\nallow = [{entry:?}]\n");
        Policy::from_toml(&toml).unwrap_or_else(|e| panic!("{entry}: {e}"));
    }
}
