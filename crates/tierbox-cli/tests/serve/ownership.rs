//! Change sets belong to whoever made them: over HTTP a session token sees, shows and
//! discards only its own session's change sets, applies none unless the policy says
//! `workspace.agent_may_apply`, and issues no tokens; the operator token sees and applies
//! every change set of the server's workspace; a set recorded for another workspace is
//! `changes.not_found` to everyone. Over MCP a connection is an agent: `changes_apply` is
//! not offered by default, and another owner's set is not found.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use tierbox_runner::review::ChangeStore;

use crate::support::*;
use crate::{initialize, response, send};

/// Keeps a change set adding `name` for `owner` in `state`, recorded for `workspace`;
/// returns its run id.
fn kept_set(state: &Path, workspace: &Path, owner: &str, run_id: &str, name: &str) -> String {
    let upper = tempfile::tempdir().unwrap();
    std::fs::write(upper.path().join(name), format!("{owner}\n")).unwrap();
    let workspace = std::fs::canonicalize(workspace).unwrap();
    ChangeStore::new(state)
        .keep(
            run_id,
            upper.path(),
            &workspace,
            SystemTime::now() + Duration::from_secs(3600),
            &tierbox_runner::review::Keeping {
                owner,
                keep_for: Duration::from_secs(3600),
                caps: tierbox_runner::review::KeepCaps::default(),
            },
        )
        .changes
        .unwrap();
    run_id.to_owned()
}

/// [`kept_set`] in the server's own workspace, run id `c` × 32, adding `<c>.txt`.
fn set_for(s: &Server, owner: &str, c: char) -> String {
    kept_set(
        s.state.path(),
        s.ws.path(),
        owner,
        &c.to_string().repeat(32),
        &format!("{c}.txt"),
    )
}

/// A session token from the operator.
fn session(s: &Server, name: &str) -> (String, String) {
    let body = json!({ "name": name }).to_string();
    let (status, v) = s.call("POST", "/v1/sessions", Some(&body));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["name"], name);
    let token = v["token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("tbs_"), "{v}");
    (token, v["owner"].as_str().unwrap().to_owned())
}

fn with_token(s: &Server, token: &str, method: &str, path: &str) -> (u16, Value) {
    s.call_with(
        method,
        path,
        None,
        &[("Authorization", &format!("Bearer {token}"))],
    )
}

fn code(v: &(u16, Value)) -> (u16, Option<&str>) {
    (v.0, v.1["error"]["code"].as_str())
}

fn listed(v: &(u16, Value)) -> Vec<String> {
    assert_eq!(v.0, 200, "{}", v.1);
    v.1["change_sets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["run_id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_session_token_reaches_only_its_own_change_sets_and_applies_none_by_default() {
    let s = Server::start(&[], None);
    let (a, owner_a) = session(&s, "agent-a");
    let (b, owner_b) = session(&s, "agent-b");
    let elsewhere = tempfile::tempdir().unwrap();
    let set_a = set_for(&s, &owner_a, 'a');
    let set_b = set_for(&s, &owner_b, 'b');
    let other_ws = kept_set(
        s.state.path(),
        elsewhere.path(),
        &owner_a,
        &"c".repeat(32),
        "c.txt",
    );

    // Each session lists its own, the operator every set of this workspace.
    assert_eq!(
        listed(&with_token(&s, &a, "GET", "/v1/changes")),
        vec![set_a.clone()]
    );
    assert_eq!(
        listed(&with_token(&s, &b, "GET", "/v1/changes")),
        vec![set_b.clone()]
    );
    let mut all = listed(&s.call("GET", "/v1/changes", None));
    all.sort();
    assert_eq!(all, [set_a.clone(), set_b.clone()]);

    // Another session's set: not found, whatever the operation (an apply is refused
    // before the set is looked at); nothing changes.
    let r = with_token(&s, &a, "POST", &format!("/v1/changes/{set_b}/apply"));
    assert_eq!(code(&r), (403, Some("changes.apply_denied")), "{}", r.1);
    for (method, path) in [
        ("GET", format!("/v1/changes/{set_b}")),
        ("POST", format!("/v1/changes/{set_b}/discard")),
    ] {
        let r = with_token(&s, &a, method, &path);
        assert_eq!(
            code(&r),
            (404, Some("changes.not_found")),
            "{method} {path}: {}",
            r.1
        );
    }
    assert!(ChangeStore::new(s.state.path()).get(&set_b).is_ok());

    // Its own: shown, but applying is the operator's.
    let r = with_token(&s, &a, "GET", &format!("/v1/changes/{set_a}"));
    assert_eq!(r.0, 200, "{}", r.1);
    let r = with_token(&s, &a, "POST", &format!("/v1/changes/{set_a}/apply"));
    assert_eq!(code(&r), (403, Some("changes.apply_denied")), "{}", r.1);
    let message = r.1["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("workspace.agent_may_apply") && message.contains("tierbox changes apply"),
        "{message}"
    );
    assert!(!s.ws.path().join("a.txt").exists());

    // A session token issues no tokens and ends no other session.
    let r = s.call_with(
        "POST",
        "/v1/sessions",
        Some("{}"),
        &[("Authorization", &format!("Bearer {a}"))],
    );
    assert_eq!(code(&r), (403, Some("auth.forbidden")), "{}", r.1);
    let b_id = owner_b.strip_prefix("session:").unwrap();
    let r = with_token(&s, &a, "DELETE", &format!("/v1/sessions/{b_id}"));
    assert_eq!(code(&r), (403, Some("auth.forbidden")), "{}", r.1);

    // The set made for another workspace is nobody's here.
    for r in [
        s.call("GET", &format!("/v1/changes/{other_ws}"), None),
        s.call("POST", &format!("/v1/changes/{other_ws}/apply"), None),
        with_token(&s, &a, "GET", &format!("/v1/changes/{other_ws}")),
    ] {
        assert_eq!(code(&r), (404, Some("changes.not_found")), "{}", r.1);
    }
    assert!(!elsewhere.path().join("c.txt").exists());

    // The operator applies the agent's set.
    let r = s.call("POST", &format!("/v1/changes/{set_a}/apply"), None);
    assert_eq!(r.0, 200, "{}", r.1);
    assert_eq!(
        std::fs::read_to_string(s.ws.path().join("a.txt")).unwrap(),
        format!("{owner_a}\n")
    );

    // Ending a session ends its token.
    let r = with_token(&s, &b, "DELETE", "/v1/session");
    assert_eq!(r.0, 200, "{}", r.1);
    let r = with_token(&s, &b, "GET", "/v1/changes");
    assert_eq!(code(&r), (401, Some("auth.invalid")), "{}", r.1);
}

#[test]
fn with_agent_may_apply_a_session_applies_its_own_set_and_still_no_other() {
    let s = Server::start(
        &[],
        Some("version = 1\n[workspace]\nagent_may_apply = true\n"),
    );
    let (a, owner_a) = session(&s, "agent-a");
    let set_a = set_for(&s, &owner_a, 'a');
    let theirs = set_for(&s, "uid:0", 'd');
    let r = with_token(&s, &a, "POST", &format!("/v1/changes/{theirs}/apply"));
    assert_eq!(code(&r), (404, Some("changes.not_found")), "{}", r.1);
    let r = with_token(&s, &a, "POST", &format!("/v1/changes/{set_a}/apply"));
    assert_eq!(r.0, 200, "{}", r.1);
    assert!(s.ws.path().join("a.txt").exists());
    assert!(!s.ws.path().join("d.txt").exists());
}

/// A run made with a session token keeps its change set as that session's.
#[test]
fn an_overlay_run_with_a_session_token_keeps_the_sessions_change_set() {
    if !tier_c_available("an_overlay_run_with_a_session_token") {
        return;
    }
    let policy = "version = 1\n[exec]\nallowed_executables = [\"sh\"]\nallow_interpreters = true\nallow_eval = true\n";
    let s = Server::start(&[], Some(policy));
    let (a, owner_a) = session(&s, "agent-a");
    let (b, _) = session(&s, "agent-b");
    let run = json!({
        "command": "sh", "tier": "c", "workspace_mode": "overlay",
        "args": ["-c", "echo new > added.txt"],
    })
    .to_string();
    let (status, out) = s.call_with(
        "POST",
        "/v1/process/run",
        Some(&run),
        &[("Authorization", &format!("Bearer {a}"))],
    );
    assert_eq!(status, 200, "{out}");
    let run_id = out["run_id"].as_str().unwrap().to_owned();
    assert_eq!(
        ChangeStore::new(s.state.path()).get(&run_id).unwrap().owner,
        owner_a
    );
    assert_eq!(
        listed(&with_token(&s, &a, "GET", "/v1/changes")),
        vec![run_id.clone()]
    );
    assert!(listed(&with_token(&s, &b, "GET", "/v1/changes")).is_empty());
}

/// `tierbox serve --mcp` with `policy` (TOML) in a workspace and state directory.
fn mcp_with(policy: &str) -> (std::process::Child, tempfile::TempDir, tempfile::TempDir) {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let path = state.path().join("policy.toml");
    std::fs::write(&path, policy).unwrap();
    let child = Command::new(tierbox())
        .args(["serve", "--mcp", "--workspace"])
        .arg(ws.path())
        .arg("--state-dir")
        .arg(state.path())
        .arg("--policy")
        .arg(&path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    (child, ws, state)
}

/// The tool names an MCP server offers, and the answer to `changes_show` and
/// `changes_apply` of `run_id` (a set kept for another owner) on the same connection.
fn mcp_tools_and_calls(policy: &str) -> (Vec<String>, Value, Value) {
    let (mut child, ws, state) = mcp_with(policy);
    let run_id = kept_set(state.path(), ws.path(), "uid:0", &"e".repeat(32), "e.txt");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok);
    initialize(&mut stdin, &mut lines);
    send(
        &mut stdin,
        &json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}),
    );
    let tools = response(&mut lines, 2)["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    let mut call = |id: u64, name: &str| {
        send(
            &mut stdin,
            &json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
                "name":name,"arguments":{"run_id":run_id}}}),
        );
        response(&mut lines, id)["result"].clone()
    };
    let shown = call(3, "changes_show");
    let applied = call(4, "changes_apply");
    drop(stdin);
    let _ = child.wait();
    assert!(!ws.path().join("e.txt").exists());
    (tools, shown, applied)
}

#[test]
fn an_mcp_connection_is_not_offered_apply_and_finds_no_other_owners_set() {
    let codes = |shown: &Value, applied: &Value| {
        (
            shown["structuredContent"]["code"]
                .as_str()
                .map(str::to_owned),
            applied["structuredContent"]["code"]
                .as_str()
                .map(str::to_owned),
        )
    };
    let (tools, shown, applied) = mcp_tools_and_calls("version = 1\n");
    assert!(tools.iter().any(|t| t == "changes_show"), "{tools:?}");
    assert!(!tools.iter().any(|t| t == "changes_apply"), "{tools:?}");
    assert_eq!(
        codes(&shown, &applied),
        (
            Some("changes.not_found".into()),
            Some("changes.apply_denied".into())
        ),
        "{shown} {applied}"
    );

    let (tools, shown, applied) =
        mcp_tools_and_calls("version = 1\n[workspace]\nagent_may_apply = true\n");
    assert!(tools.iter().any(|t| t == "changes_apply"), "{tools:?}");
    assert_eq!(
        codes(&shown, &applied),
        (
            Some("changes.not_found".into()),
            Some("changes.not_found".into())
        ),
        "{shown} {applied}"
    );
}
