//! One table case per `Rejection` variant: each stable code is produced by a concrete
//! request, and a coverage check proves no code in `Rejection::ALL_CODES` lacks a case.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use tierbox_policy::request::*;
use tierbox_policy::wasm::WasmRunRequest;
use tierbox_policy::{EgressMode, ProcessRunRequest, Rejection, TierRequest};

use super::validate_exec::fixture::Fixture;

/// Codes produced outside `validate()`, by tier selection in the sandbox crate and by
/// the runner reading a credential's secret; they are exercised end to end in
/// tierbox-runner's, tierbox-cli's and tierbox-probe's tests.
const PRODUCED_BY_TIER_SELECTION: &[&str] = &[
    "tier.unavailable",
    "tier.unsupported",
    "scope.path_needs_private_tmp",
    "egress.termination_unavailable",
    "egress.port_unavailable",
];

fn req(command: &str, args: &[&str]) -> ProcessRunRequest {
    let mut r = ProcessRunRequest::new(command);
    r.args = args.iter().map(|s| (*s).to_owned()).collect();
    r
}

fn code_of(fx: &Fixture, r: &ProcessRunRequest) -> &'static str {
    match fx.request(r) {
        Ok(plan) => panic!("{:?} was accepted: {:?}", r, plan.argv),
        Err(e) => {
            // Every rejection has a non-empty, lowercase message naming the problem.
            let msg = e.to_string();
            assert!(!msg.is_empty() && !msg.ends_with('.'), "{msg}");
            e.code()
        }
    }
}

#[test]
fn every_rejection_code_has_a_table_case() {
    let fx = Fixture::new(&["ls", "git", "cat", "env", "printf", "curl"]);
    let mut seen = BTreeSet::new();
    let mut check = |name: &str, code: &'static str, expected: &str| {
        assert_eq!(code, expected, "case {name}");
        seen.insert(code);
    };

    // ---- input shape and caps
    let big = vec![b' '; MAX_REQUEST_BYTES + 1];
    check(
        "too large",
        ProcessRunRequest::from_json(&big).unwrap_err().code(),
        "input.too_large",
    );
    check(
        "malformed",
        ProcessRunRequest::from_json(br#"{"command":"ls","argz":[]}"#)
            .unwrap_err()
            .code(),
        "input.malformed",
    );
    check(
        "empty command",
        code_of(&fx, &req("", &[])),
        "input.command_empty",
    );
    check(
        "long command",
        code_of(&fx, &req(&"a".repeat(MAX_COMMAND_BYTES + 1), &[])),
        "input.command_too_long",
    );
    check(
        "command line",
        code_of(&fx, &req("git status", &[])),
        "input.command_not_bare",
    );
    check("nul", code_of(&fx, &req("ls", &["a\0b"])), "input.nul_byte");
    // Stdin is bytes: a NUL in it is data, not a rejection (it never crosses `execve`).
    let mut r = req("cat", &[]);
    r.stdin = Some("a\0b".to_owned());
    assert_eq!(fx.request(&r).unwrap().stdin.as_deref(), Some(&b"a\0b"[..]));
    let many: Vec<String> = (0..=MAX_ARGS).map(|i| i.to_string()).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    check(
        "too many args",
        code_of(&fx, &req("printf", &many)),
        "input.too_many_args",
    );
    check(
        "long arg",
        code_of(&fx, &req("printf", &[&"x".repeat(MAX_ARG_BYTES + 1)])),
        "input.arg_too_long",
    );
    let mut r = req("ls", &[]);
    r.env = (0..=MAX_ENV_ENTRIES)
        .map(|i| (format!("V{i}"), "1".to_owned()))
        .collect();
    check("too many env", code_of(&fx, &r), "input.too_many_env");
    let mut r = req("ls", &[]);
    r.env.insert("A=B".to_owned(), "1".to_owned());
    check("env name", code_of(&fx, &r), "input.env_name_invalid");
    // Names a shell could not export: a blank, a leading digit, punctuation.
    for bad in ["A B", "1BAD", "X-Y", "É"] {
        let mut r = req("ls", &[]);
        r.env.insert(bad.to_owned(), "1".to_owned());
        check(bad, code_of(&fx, &r), "input.env_name_invalid");
    }
    let mut r = req("ls", &[]);
    r.env.insert("_ok_Name9".to_owned(), "1".to_owned());
    assert!(fx.request(&r).is_ok(), "a portable name is accepted");
    let mut r = req("ls", &[]);
    r.env
        .insert("V".to_owned(), "x".repeat(MAX_ENV_VALUE_BYTES + 1));
    check("env value", code_of(&fx, &r), "input.env_value_too_long");
    let mut r = req("ls", &[]);
    r.cwd = Some("d/".repeat(MAX_CWD_BYTES));
    check("long cwd", code_of(&fx, &r), "input.cwd_too_long");
    let mut r = req("cat", &[]);
    r.stdin = Some("x".repeat(11));
    r.stdin_limit_bytes = Some(10);
    check("stdin", code_of(&fx, &r), "input.stdin_too_large");
    let mut r = req("cat", &[]);
    (r.stdin, r.stdin_base64) = (Some("x".to_owned()), Some("eA==".to_owned()));
    check("two stdins", code_of(&fx, &r), "input.stdin_conflict");
    let mut r = req("cat", &[]);
    r.stdin_base64 = Some("e A==".to_owned());
    check(
        "bad base64",
        code_of(&fx, &r),
        "input.stdin_encoding_invalid",
    );
    let mut r = req("ls", &[]);
    r.timeout_ms = Some(0);
    check("timeout 0", code_of(&fx, &r), "input.timeout_zero");
    let mut r = req("ls", &[]);
    r.requested_egress_hosts = (0..=MAX_EGRESS_HOSTS)
        .map(|i| format!("h{i}.example"))
        .collect();
    check(
        "egress hosts",
        code_of(&fx, &r),
        "input.too_many_egress_hosts",
    );
    let mut r = req("ls", &[]);
    r.lifetime = Some(tierbox_policy::Lifetime::Detached);
    check(
        "lifetime",
        code_of(&fx, &r),
        "input.lifetime_without_background",
    );

    // ---- executable
    check(
        "path command",
        code_of(&fx, &req("/bin/ls", &[])),
        "exec.command_is_path",
    );
    check(
        "not allowed",
        code_of(&fx, &req("tar", &[])),
        "exec.not_allowed",
    );
    let mut paths = Fixture::new(&["ls"]);
    paths.policy.exec.allow_command_paths = true;
    check(
        "relative path command",
        code_of(&paths, &req("./ls", &[])),
        "exec.command_path_invalid",
    );
    check(
        "not found",
        code_of(&fx, &req("curl", &[])),
        "exec.not_found",
    );
    // Found in the PATH, but in a directory the policy does not grant: the exec would fail
    // in the sandbox (regression: it did, with only "Permission denied").
    let mut ungranted = Fixture::new(&["ls"]);
    ungranted.policy.filesystem.read_only.clear();
    let r = ungranted.run("ls", &[]).unwrap_err();
    assert!(
        r.to_string().contains(&*ungranted.bin.to_string_lossy())
            && r.to_string().contains("filesystem.read_only"),
        "{r}"
    );
    check("not granted", r.code(), "exec.not_granted");
    // Readable, but started by a `#!` interpreter no grant covers: refused by that name
    // (the exec would fail in the sandbox with ENOENT).
    let mut loader = Fixture::new(&["ls"]);
    let python = loader.tmp.join("venv/bin/python3");
    std::fs::write(
        loader.bin.join("ls"),
        format!("#!{} -u\n", python.display()),
    )
    .unwrap();
    // Not there at all: the exec could never work.
    let r = loader.run("ls", &[]).unwrap_err();
    check("loader missing", r.code(), "exec.loader_missing");
    assert!(r.to_string().contains("does not exist"), "{r}");
    std::fs::create_dir_all(python.parent().unwrap()).unwrap();
    std::fs::write(&python, "").unwrap();
    let r = loader.run("ls", &[]).unwrap_err();
    check("loader not granted", r.code(), "exec.not_granted");
    assert!(
        r.to_string().contains(&*python.to_string_lossy())
            && r.to_string().contains("started by")
            && r.to_string().contains("filesystem.read_only"),
        "{r}"
    );
    loader
        .policy
        .filesystem
        .read_only
        .push(loader.tmp.join("venv").display().to_string());
    if let Err(e) = loader.run("ls", &[]) {
        panic!("with the interpreter granted: {e}");
    }
    check(
        "interpreter",
        code_of(&fx, &req("bash", &["-c", "id"])),
        "exec.interpreter_denied",
    );
    let interp = Fixture::new(&["perl", "python3"]).interpreters(false);
    check(
        "eval flag",
        code_of(&interp, &req("perl", &["-e", "print 1"])),
        "exec.eval_flag",
    );
    let mut r = req("python3", &[]);
    r.stdin = Some("print(1)".to_owned());
    check("eval stdin", code_of(&interp, &r), "exec.eval_stdin");
    check(
        "wrapper",
        code_of(&fx, &req("env", &["--bogus-option", "ls"])),
        "exec.wrapper_unresolvable",
    );
    let git = Fixture::new(&["git"]);
    check(
        "code route",
        code_of(&git, &req("git", &["-c", "core.fsmonitor=./x", "status"])),
        "exec.code_route",
    );

    // ---- scope
    let mut gone = Fixture::new(&["ls"]);
    gone.policy.workspace_root = None;
    let ctx_missing = tierbox_policy::ValidateContext::new(gone.ws.join("missing"));
    let err = tierbox_policy::validate(&gone.policy, &req("ls", &[]), &ctx_missing).unwrap_err();
    check("workspace", err.code(), "scope.workspace_invalid");
    let ctx_root = tierbox_policy::ValidateContext::new("/");
    let err = tierbox_policy::validate(&gone.policy, &req("ls", &[]), &ctx_root).unwrap_err();
    check("workspace refused", err.code(), "scope.workspace_refused");
    let mut dev = Fixture::new(&["ls"]);
    dev.policy.filesystem.writable = vec!["/dev".to_owned()];
    check(
        "grant refused",
        code_of(&dev, &req("ls", &[])),
        "scope.grant_refused",
    );
    check(
        "path outside",
        code_of(&fx, &req("cat", &["../secret"])),
        "scope.path_outside_workspace",
    );
    let mut denied = Fixture::new(&["cat"]);
    denied.policy.filesystem.deny_read = vec![denied.tmp.join("secret").display().to_string()];
    check(
        "path denied",
        code_of(&denied, &req("cat", &["../secret"])),
        "scope.path_denied",
    );
    check(
        "path secret",
        code_of(&fx, &req("cat", &["/etc/shadow"])),
        "scope.path_secret",
    );
    check(
        "path not grantable",
        code_of(&fx, &req("cat", &["/dev/sda"])),
        "scope.path_not_grantable",
    );
    let mut r = req("ls", &[]);
    r.cwd = Some("..".to_owned());
    check(
        "cwd outside",
        code_of(&fx, &r),
        "scope.cwd_outside_workspace",
    );
    let mut r = req("ls", &[]);
    r.cwd = Some("no-such-dir".to_owned());
    check("cwd missing", code_of(&fx, &r), "scope.cwd_not_directory");
    // More nested repositories than the policy protects; the key the message names
    // (and the fix suggests) lets the same request through.
    let mut repos = Fixture::new(&["ls"]);
    for r in ["a/.git", "b/c/.git"] {
        std::fs::create_dir_all(repos.ws.join(r)).unwrap();
    }
    repos.policy.filesystem.max_protected_repos = 1;
    let err = repos.request(&req("ls", &[])).unwrap_err();
    check(
        "protection incomplete",
        err.code(),
        "scope.protection_incomplete",
    );
    assert!(
        err.to_string().contains("filesystem.max_protected_repos"),
        "{err}"
    );
    assert!(
        Rejection::fix_for(err.code())
            .unwrap()
            .contains("filesystem.max_protected_repos")
    );
    repos.policy.filesystem.max_protected_repos = 2;
    let plan = repos.request(&req("ls", &[])).unwrap();
    assert_eq!(plan.filesystem.git_repos.len(), 2);
    let mut r = req("ls", &[]);
    r.workspace = Some("../elsewhere".to_owned());
    check(
        "workspace subdir",
        code_of(&fx, &r),
        "scope.workspace_subdir_invalid",
    );

    // ---- environment
    let mut r = req("ls", &[]);
    r.env.insert("LD_PRELOAD".to_owned(), "/x.so".to_owned());
    check("env denied", code_of(&fx, &r), "env.denied");

    // ---- egress
    let mut egress = Fixture::new(&["git"]);
    egress.policy.egress.mode = EgressMode::Preflight;
    egress.policy.egress.allow = vec!["github.com".to_owned()];
    check(
        "host",
        code_of(&egress, &req("git", &["clone", "https://blocked.test/x"])),
        "egress.host_not_allowed",
    );
    let mut r = req("git", &[]);
    r.requested_egress_hosts = vec!["bad host!".to_owned()];
    check("host invalid", code_of(&egress, &r), "egress.host_invalid");
    let mut r = req("git", &[]);
    r.publish = vec!["0.0.0.0:8080:8000".to_owned()];
    check(
        "publish invalid",
        code_of(&egress, &r),
        "egress.publish_invalid",
    );
    r.publish = vec!["127.0.0.1:8080:8000".to_owned()];
    check(
        "publish not allowed",
        code_of(&egress, &r),
        "egress.publish_not_allowed",
    );
    let mut sockets = Fixture::new(&["git"]);
    sockets.policy.egress.unix_sockets = vec!["$TIERBOX_TEST_NEVER_SET".to_owned()];
    check(
        "unix socket unset",
        code_of(&sockets, &req("git", &[])),
        "egress.unix_socket_unusable",
    );
    let dir = tempfile::tempdir().unwrap();
    let engine = dir.path().join("docker.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&engine).unwrap();
    sockets.policy.egress.unix_sockets = vec![engine.display().to_string()];
    check(
        "unix socket privileged",
        code_of(&sockets, &req("git", &[])),
        "egress.unix_socket_privileged",
    );
    sockets.policy.egress.danger_privileged_sockets = true;
    let plan = sockets.request(&req("git", &[])).unwrap();
    assert!(plan.network.unix_sockets[0].privileged);

    // ---- limits and tier
    let mut r = req("ls", &[]);
    r.timeout_ms = Some(fx.policy.limits.max_timeout_ms + 1);
    check("limits", code_of(&fx, &r), "limits.above_policy");
    let mut strong = Fixture::new(&["ls"]);
    strong.policy.tier.minimum = tierbox_policy::Tier::C;
    let mut r = req("ls", &[]);
    r.tier = TierRequest::B;
    check("tier below", code_of(&strong, &r), "tier.below_minimum");
    let mut overlay = Fixture::new(&["ls"]);
    overlay.policy.workspace.mode = tierbox_policy::WorkspaceMode::Overlay;
    let mut r = req("ls", &[]);
    r.workspace_mode = Some(tierbox_policy::WorkspaceMode::Direct);
    check(
        "mode widened",
        code_of(&overlay, &r),
        "workspace.mode_widened",
    );

    // ---- tier a
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("m.wat"), "(module)").unwrap();
    let ctx = tierbox_policy::ValidateContext::new(ws.path())
        .with_runtimes_dir("/nonexistent/tierbox-runtimes");
    let wasm_code = |policy: &tierbox_policy::Policy, r: &WasmRunRequest| {
        tierbox_policy::validate::validate_wasm(policy, r, &ctx)
            .unwrap_err()
            .code()
    };
    let default = tierbox_policy::Policy::default();
    check(
        "module outside",
        wasm_code(&default, &WasmRunRequest::module("../m.wat")),
        "wasm.module_invalid",
    );
    let inline = WasmRunRequest {
        module_wat: Some("(module)".to_owned()),
        ..WasmRunRequest::default()
    };
    check("inline", wasm_code(&default, &inline), "wasm.inline_denied");
    let mut r = WasmRunRequest::module("m.wat");
    r.grants.env = vec!["HOME".to_owned()];
    check("grant", wasm_code(&default, &r), "wasm.grant_denied");
    let mapped = tierbox_policy::Policy::builtin_default();
    let tier_a = |command: &str| {
        tierbox_policy::validate::validate_tier_a(&mapped, &req(command, &[]), &ctx)
            .unwrap_err()
            .code()
    };
    check("not mapped", tier_a("ls"), "wasm.not_mapped");
    check("runtime missing", tier_a("python3"), "wasm.runtime_missing");

    // ---- handle requests
    check(
        "handle invalid",
        tierbox_policy::handle::ProcessHandleRequest::from_json(br#"{"id":"4242"}"#)
            .unwrap_err()
            .code(),
        "input.handle_invalid",
    );
    check(
        "read size",
        tierbox_policy::handle::ProcessOutputRequest::from_json(
            br#"{"id":"0123456789abcdef0123456789abcdef","max_bytes":0}"#,
        )
        .unwrap_err()
        .code(),
        "input.read_size_invalid",
    );

    let all: BTreeSet<&str> = Rejection::ALL_CODES.iter().copied().collect();
    let external: BTreeSet<&str> = PRODUCED_BY_TIER_SELECTION.iter().copied().collect();
    let missing: Vec<&&str> = all
        .difference(&seen)
        .filter(|c| !external.contains(**c))
        .collect();
    assert!(
        missing.is_empty(),
        "codes without a table case: {missing:?}"
    );
}

#[test]
fn codes_are_unique_and_well_formed() {
    let mut seen = BTreeSet::new();
    for code in Rejection::ALL_CODES {
        assert!(seen.insert(code), "duplicate code {code}");
        let (group, rule) = code.split_once('.').expect("group.rule");
        assert!(
            [
                "input",
                "exec",
                "scope",
                "env",
                "egress",
                "limits",
                "wasm",
                "workspace",
                "tier"
            ]
            .contains(&group),
            "{code}"
        );
        assert!(
            rule.starts_with(|c: char| c.is_ascii_lowercase())
                && rule
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "{code}"
        );
    }
}

#[test]
fn the_policy_reference_lists_every_code() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/policy.md"))
        .unwrap();
    for code in Rejection::ALL_CODES {
        assert!(doc.contains(code), "docs/policy.md does not list {code}");
    }
}

/// docs/policy.md's table of variables a request may not set is exactly the code's lists,
/// row for row, with the same reasons.
#[test]
fn the_policy_reference_lists_every_denied_variable() {
    use tierbox_policy::validate::{DENIED_ENV_EXACT, DENIED_ENV_PATTERNS, DENIED_ENV_PREFIXES};
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/policy.md"))
        .unwrap();
    let table = doc
        .split("<!-- env-deny:start -->")
        .nth(1)
        .and_then(|t| t.split("<!-- env-deny:end -->").next())
        .expect("docs/policy.md has the env-deny table markers");
    let documented: Vec<(String, String)> = table
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            (cells[0].trim_matches('`').to_owned(), cells[1].to_owned())
        })
        .collect();
    let code: Vec<(String, String)> = DENIED_ENV_PREFIXES
        .iter()
        .map(|(p, r)| (format!("{p}*"), (*r).to_owned()))
        .chain(
            DENIED_ENV_PATTERNS
                .iter()
                .map(|(p, s, r)| (format!("{p}*{s}"), (*r).to_owned())),
        )
        .chain(
            DENIED_ENV_EXACT
                .iter()
                .map(|(n, r)| ((*n).to_owned(), (*r).to_owned())),
        )
        .collect();
    assert_eq!(documented, code);
}
