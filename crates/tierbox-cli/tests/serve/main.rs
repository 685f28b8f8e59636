//! `tierbox serve`: the HTTP API and the MCP stdio server as a client sees them, and the
//! lifetimes of what they start, checked from outside the sandboxes (by argv in /proc).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod files;
mod ownership;
mod reach;
mod stdin;
mod support;
#[macro_use]
mod terms;
mod term_ws;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use support::*;

fn bg(session: &str, s: &Server, argv: &[&str], extra: Value) -> Value {
    let mut body = json!({ "command": argv[0], "args": &argv[1..], "background": true });
    if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
        b.extend(e);
    }
    let (status, v) = s.call_in(session, "POST", "/v1/process/run", Some(&body.to_string()));
    assert_eq!(status, 200, "{v}");
    v
}

#[test]
fn the_http_api_answers_every_operation_and_every_error_as_documented() {
    if !tier_c_available("http_api_operations") {
        return;
    }
    let s = Server::start(&[], None);
    // Unauthenticated routes and authentication.
    assert_eq!(s.call_with("GET", "/v1/health", None, &[]).0, 200);
    let (status, doc) = s.call_with("GET", "/v1/openapi.json", None, &[]);
    assert_eq!((status, doc["openapi"].as_str()), (200, Some("3.1.0")));
    let (status, v) = s.call_with("GET", "/v1/process", None, &[]);
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (401, Some("auth.missing"))
    );
    let (status, v) = s.call_with(
        "GET",
        "/v1/process",
        None,
        &[("Authorization", "Bearer not-the-token")],
    );
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (401, Some("auth.invalid"))
    );
    // The scheme is case-insensitive (RFC 9110): `bearer` and `BEARER` are `Bearer`.
    for scheme in ["bearer", "BEARER"] {
        let (status, v) = s.call_with(
            "GET",
            "/v1/process",
            None,
            &[("Authorization", &format!("{scheme} {TOKEN}"))],
        );
        assert_eq!(status, 200, "{scheme}: {v}");
    }

    // Malformed and refused requests: 4xx with the rule's code, nothing runs.
    for (body, status, code) in [
        ("{", 400, "input.malformed"),
        (r#"{"command":"echo","bogus":1}"#, 400, "input.malformed"),
        (r#"{"command":""}"#, 400, "input.command_empty"),
        (r#"{"command":"curl"}"#, 422, "exec.not_allowed"),
        (
            r#"{"command":"cat","args":["/etc/shadow"]}"#,
            422,
            "scope.path_secret",
        ),
        (
            r#"{"command":"cat","args":["/var/lib/tierbox-no-such-dir/x"]}"#,
            422,
            "scope.path_outside_workspace",
        ),
    ] {
        let (got, v) = s.call("POST", "/v1/process/run", Some(body));
        assert_eq!(
            (got, v["error"]["code"].as_str()),
            (status, Some(code)),
            "{body}: {v}"
        );
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    let big = format!(
        r#"{{"command":"echo","args":["{}"]}}"#,
        "x".repeat(200 * 1024)
    );
    let (status, v) = s.call("POST", "/v1/process/run", Some(&big));
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (413, Some("input.too_large"))
    );
    let (status, v) = s.call("GET", "/v1/nothing", None);
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (404, Some("http.not_found"))
    );
    let (status, v) = s.call("PUT", "/v1/process", None);
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (405, Some("http.method_not_allowed"))
    );
    let (status, v) = s.call("GET", "/v1/process/4242", None);
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (400, Some("input.handle_invalid"))
    );
    let (status, v) = s.call_in("no/slashes", "GET", "/v1/process", None);
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (400, Some("http.bad_request"))
    );
    let (status, v) = s.call(
        "GET",
        "/v1/process/0123456789abcdef0123456789abcdef/output?max_bytes=0",
        None,
    );
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (400, Some("input.read_size_invalid"))
    );

    // A foreground run.
    let (status, v) = s.call(
        "POST",
        "/v1/process/run",
        Some(r#"{"command":"echo","args":["hello"]}"#),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["exit_code"].as_i64(), v["stdout"]["text"].as_str()),
        (Some(0), Some("hello\n"))
    );

    // Streamed: output events, then exactly one result.
    let (status, head, body) = raw(
        &s.addr,
        "POST",
        "/v1/process/run?stream=true",
        Some(br#"{"command":"seq","args":["1","3"]}"#),
        &[("Authorization", &format!("Bearer {TOKEN}"))],
    );
    assert_eq!(status, 200, "{head}");
    assert!(
        head.to_ascii_lowercase().contains("application/x-ndjson"),
        "{head}"
    );
    let events: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let streamed: String = events
        .iter()
        .filter(|e| e["event"] == "output")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(streamed, "1\n2\n3\n");
    let last = events.last().unwrap();
    assert_eq!(last["event"], "result");
    assert_eq!(last["outcome"]["exit_code"], 0);
    assert_eq!(events.iter().filter(|e| e["event"] == "result").count(), 1);

    // Background: start, output by offset, stdin, another session sees nothing, kill.
    let h = bg("alice", &s, &["cat"], json!({}));
    let id = h["status"]["id"].as_str().unwrap().to_owned();
    assert_eq!(h["status"]["state"], "running");
    let (status, v) = s.call_in(
        "alice",
        "POST",
        &format!("/v1/process/{id}/stdin"),
        Some(r#"{"data":"one\ntwo\n"}"#),
    );
    assert_eq!((status, v["bytes_written"].as_u64()), (200, Some(8)), "{v}");
    let mut out = Value::Null;
    assert!(
        wait_for(Duration::from_secs(5), || {
            out = s
                .call_in(
                    "alice",
                    "GET",
                    &format!("/v1/process/{id}/output?offset=0&max_bytes=4"),
                    None,
                )
                .1;
            out["text"] == "one\n"
        }),
        "{out}"
    );
    assert_eq!(out["next_offset"], 4);
    let next = s
        .call_in(
            "alice",
            "GET",
            &format!("/v1/process/{id}/output?offset=4"),
            None,
        )
        .1;
    assert_eq!(
        (next["offset"].as_u64(), next["text"].as_str()),
        (Some(4), Some("two\n"))
    );
    assert_eq!(next["state"], "running");
    for (method, path) in [
        ("GET", format!("/v1/process/{id}")),
        ("POST", format!("/v1/process/{id}/kill")),
        ("GET", format!("/v1/process/{id}/output")),
    ] {
        let (status, v) = s.call_in("mallory", method, &path, None);
        assert_eq!(
            (status, v["error"]["code"].as_str()),
            (404, Some("background.not_found")),
            "{method} {path}"
        );
    }
    assert_eq!(
        s.call_in("mallory", "GET", "/v1/process", None).1["processes"],
        json!([])
    );
    let (_, list) = s.call_in("alice", "GET", "/v1/process", None);
    assert_eq!(list["processes"][0]["id"], id.as_str());
    let (status, v) = s.call_in("alice", "POST", &format!("/v1/process/{id}/kill"), None);
    assert_eq!((status, v["state"].as_str()), (200, Some("killed")));
    let (status, v) = s.call_in(
        "alice",
        "POST",
        &format!("/v1/process/{id}/stdin"),
        Some(r#"{"data":"late"}"#),
    );
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (409, Some("background.stdin"))
    );
    // A process that exits during its startup window is a failed start, with its output.
    let (status, v) = s.call_in(
        "alice",
        "POST",
        "/v1/process/run",
        Some(r#"{"command":"echo","args":["bye"],"background":true}"#),
    );
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (422, Some("background.exited_during_startup"))
    );
    assert_eq!(v["error"]["handle"]["startup_stdout"], "bye\n");
    assert!(s.stop().success());
}

/// A run that names the runner identity it expects (`?identity=`, what `tierbox run` sends
/// a local daemon) runs only on a server whose identity that is; any other answers 409
/// and runs nothing, and a malformed one is a 400.
#[test]
fn a_run_expecting_another_runner_identity_is_refused_unrun() {
    if !tier_c_available("http_identity") {
        return;
    }
    let s = Server::start(&[], None);
    let (status, v) = s.call("GET", "/v1/daemon", None);
    assert_eq!(status, 200, "{v}");
    let theirs: tierbox_runner::RunnerIdentity =
        serde_json::from_value(v["identity"].clone()).unwrap();
    let mut other = theirs.clone();
    other.workspace.push("elsewhere");
    let touch = |name: &str| format!(r#"{{"command":"touch","args":["{name}"]}}"#);
    for (route, body) in [
        ("/v1/process/run", touch("refused")),
        ("/v1/process/run?stream=true", touch("refused")),
        ("/v1/wasm/run", r#"{"module":"absent.wasm"}"#.to_owned()),
    ] {
        let sep = if route.contains('?') { '&' } else { '?' };
        let path = format!("{route}{sep}identity={}", other.digest());
        let (status, v) = s.call("POST", &path, Some(&body));
        assert_eq!(
            (status, v["error"]["code"].as_str()),
            (409, Some("daemon.identity_mismatch")),
            "{path}: {v}"
        );
        for bad in ["ABC", "0", &"g".repeat(64), &"0".repeat(65)] {
            let (status, v) = s.call("POST", &format!("{route}{sep}identity={bad}"), Some(&body));
            assert_eq!(
                (status, v["error"]["code"].as_str()),
                (400, Some("input.malformed")),
                "{bad}: {v}"
            );
        }
    }
    assert!(!s.ws.path().join("refused").exists(), "a refused run ran");
    let path = format!("/v1/process/run?identity={}", theirs.digest());
    let (status, v) = s.call("POST", &path, Some(&touch("made")));
    assert_eq!(status, 200, "{v}");
    assert!(s.ws.path().join("made").exists(), "{v}");
}

#[test]
fn a_full_server_answers_429_at_once() {
    if !tier_c_available("http_429") {
        return;
    }
    let s = Server::start(&["--max-concurrent", "1", "--queue", "0"], None);
    let addr = s.addr.clone();
    let slow = std::thread::spawn(move || {
        raw(
            &addr,
            "POST",
            "/v1/process/run",
            Some(br#"{"command":"sleep","args":["2"]}"#),
            &[("Authorization", &format!("Bearer {TOKEN}"))],
        )
    });
    std::thread::sleep(Duration::from_millis(500));
    let (status, head, body) = raw(
        &s.addr,
        "POST",
        "/v1/process/run",
        Some(br#"{"command":"true"}"#),
        &[("Authorization", &format!("Bearer {TOKEN}"))],
    );
    assert_eq!(status, 429, "{body}");
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 1"),
        "{head}"
    );
    assert!(body.contains("server.busy"), "{body}");
    let (status, _, body) = slow.join().unwrap();
    assert_eq!(status, 200, "{body}");
    // The slot is free again.
    assert_eq!(
        s.call("POST", "/v1/process/run", Some(r#"{"command":"true"}"#))
            .0,
        200
    );
}

/// Idle and slow-header connections cannot starve the server: with 256 descriptors
/// allowed, 300 idle keep-alive connections and 20 that never finish their request head
/// are held open while `/v1/health` is still answered (the longest-idle connections are
/// closed to make room), and a slow-header connection is closed after the header-read
/// timeout.
///
/// Regression: no header or idle timeout and no connection cap; 300 idle connections
/// (no token needed) made `/v1/health` time out.
#[test]
fn idle_and_slow_connections_cannot_starve_the_server() {
    use std::io::{Read, Write};
    use std::net::TcpStream;

    if !std::path::Path::new("/usr/bin/prlimit").exists()
        && support::skip(
            "idle_and_slow_connections_cannot_starve_the_server",
            "no prlimit(1)",
        )
    {
        return;
    }
    let s = Server::start_via(&["/usr/bin/prlimit", "--nofile=256:256"], &[], None);
    let health = || {
        let (status, body) = s.call("GET", "/v1/health", None);
        (status, body)
    };
    assert_eq!(health().0, 200);
    let mut held = Vec::new();
    for i in 0..320 {
        let Ok(mut c) = TcpStream::connect(&s.addr) else {
            continue;
        };
        if i < 300 {
            // A keep-alive connection that got its answer and then says nothing.
            let req = format!("GET /v1/health HTTP/1.1\r\nHost: {}\r\n\r\n", s.addr);
            let _ = c.write_all(req.as_bytes());
        } else {
            // A request head that never ends.
            let _ = c.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: ");
        }
        held.push(c);
    }
    let started = std::time::Instant::now();
    let (status, body) = health();
    assert_eq!(status, 200, "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "/v1/health took {:?} with 320 connections held",
        started.elapsed()
    );
    // A slow header is cut off at the header-read timeout (10 s), not held for ever.
    let mut slow = TcpStream::connect(&s.addr).unwrap();
    slow.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let opened = std::time::Instant::now();
    let mut buf = Vec::new();
    let _ = slow.read_to_end(&mut buf);
    let held_for = opened.elapsed();
    assert!(
        held_for >= Duration::from_secs(9) && held_for < Duration::from_secs(25),
        "a slow header was held for {held_for:?}"
    );
    assert_eq!(health().0, 200);
    drop(held);
}

#[test]
fn detached_processes_end_at_their_lifetime_and_sessions_end_their_own() {
    if !tier_c_available("http_lifetimes") {
        return;
    }
    let s = Server::start(&[], None);
    let detached = ["sleep", "3599.25"];
    let owned = ["sleep", "3599.5"];
    let other = ["sleep", "3599.75"];
    let h = bg(
        "s1",
        &s,
        &detached,
        json!({ "lifetime": "detached", "timeout_ms": 1000 }),
    );
    assert_eq!(h["status"]["lifetime"], "detached");
    bg("s1", &s, &owned, json!({}));
    bg("s2", &s, &other, json!({}));
    assert_eq!(pids_with_argv(&detached).len(), 1);
    // Ending session s1 ends its run_owned process, not its detached one, not s2's.
    let (status, v) = s.call_in("s1", "DELETE", "/v1/session", None);
    assert_eq!((status, v["ended"].as_bool()), (200, Some(true)));
    assert!(
        pids_with_argv(&owned).is_empty(),
        "run_owned ended with its session"
    );
    assert_eq!(
        pids_with_argv(&detached).len(),
        1,
        "detached outlives its session"
    );
    assert_eq!(
        pids_with_argv(&other).len(),
        1,
        "another session is untouched"
    );
    // The detached one ends at its lifetime (1 s, plus the TERM grace).
    assert!(
        wait_for(Duration::from_secs(5), || pids_with_argv(&detached)
            .is_empty()),
        "detached process outlived its lifetime"
    );
    let id = h["status"]["id"].as_str().unwrap();
    let (_, st) = s.call_in("s1", "GET", &format!("/v1/process/{id}"), None);
    assert_eq!(st["state"], "expired", "{st}");
    // Graceful shutdown ends everything and waits for it.
    assert!(s.stop().success());
    assert!(pids_with_argv(&other).is_empty());
}

#[test]
fn http_runs_rejections_and_background_ends_are_attested_in_the_audit_log() {
    if !tier_c_available("http_audit_log") {
        return;
    }
    let logdir = tempfile::tempdir().unwrap();
    let log = logdir.path().join("audit.jsonl");
    let policy = policy_allowing(&format!("\n[audit]\nlog = \"{}\"\n", path_str(&log)));
    let s = Server::start(&[], Some(&policy));
    let (status, out) = s.call(
        "POST",
        "/v1/process/run",
        Some(r#"{"command":"echo","args":["hi"]}"#),
    );
    assert_eq!(status, 200, "{out}");
    assert_eq!(
        out["attestation"]["attestation"]["body"]["kind"], "run",
        "{out}"
    );
    let (status, _) = s.call("POST", "/v1/process/run", Some(r#"{"command":"curl"}"#));
    assert_eq!(status, 422);
    let h = bg("s1", &s, &["sleep", "3598.5"], json!({}));
    let id = h["status"]["id"].as_str().unwrap();
    let (status, st) = s.call_in("s1", "POST", &format!("/v1/process/{id}/kill"), None);
    assert_eq!(status, 200, "{st}");
    let st = if st["status"].is_object() {
        st["status"].clone()
    } else {
        st
    };
    assert_eq!(
        st["attestation"]["attestation"]["body"]["kind"], "run",
        "{st}"
    );
    // The server's key signed all three; the chain verifies.
    let text = s.stop_and_verify_log(&log);
    let kinds: Vec<&str> = text
        .lines()
        .map(|l| {
            if l.contains("\"kind\":\"rejection\"") {
                "rejection"
            } else {
                "run"
            }
        })
        .collect();
    assert_eq!(kinds, ["run", "rejection", "run"], "{text}");
}

#[test]
fn sigkill_of_the_server_leaves_no_sandbox_alive() {
    if !tier_c_available("http_sigkill") {
        return;
    }
    let mut s = Server::start(&[], None);
    let marks: Vec<[&str; 2]> = vec![["sleep", "3598.25"], ["sleep", "3598.5"]];
    bg("a", &s, &marks[0], json!({}));
    bg("b", &s, &marks[1], json!({ "lifetime": "detached" }));
    // And a foreground run in flight.
    let addr = s.addr.clone();
    let _inflight = std::thread::spawn(move || {
        raw(
            &addr,
            "POST",
            "/v1/process/run",
            Some(br#"{"command":"sleep","args":["3598.75"]}"#),
            &[("Authorization", &format!("Bearer {TOKEN}"))],
        )
    });
    let fg = ["sleep", "3598.75"];
    assert!(wait_for(Duration::from_secs(5), || pids_with_argv(&fg)
        .len()
        == 1));
    for m in &marks {
        assert_eq!(pids_with_argv(m).len(), 1);
    }
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    for m in marks.iter().map(|m| &m[..]).chain([&fg[..]]) {
        assert!(
            pids_with_argv(m).is_empty(),
            "{m:?} survived the server's SIGKILL"
        );
    }
}

/// A Tier B background process's daemon (a descendant in a session of its own) dies
/// with a SIGKILLed server too: the server's watchdog kills what its runs leave in their
/// cgroups once the server is gone.
///
/// Regression: the daemon kept running past its lifetime until a later run swept it.
#[test]
fn sigkill_of_the_server_leaves_no_tier_b_daemon_alive() {
    let test = "sigkill_of_the_server_leaves_no_tier_b_daemon_alive";
    let policy = "version = 1\n[exec]\nallowed_executables = [\"sh\", \"setsid\", \"sleep\"]\nallow_interpreters = true\nallow_eval = true\n";
    let mut s = Server::start(&[], Some(policy));
    let (status, health) = s.call("GET", "/v1/health", None);
    assert_eq!(status, 200, "{health}");
    let h = bg(
        "w",
        &s,
        &["sh", "-c", "setsid -f sleep 3597.125; exec sleep 3597.375"],
        json!({ "tier": "b" }),
    );
    let enforcement = &h["status"];
    let daemon = ["sleep", "3597.125"];
    let main = ["sleep", "3597.375"];
    if !wait_for(Duration::from_secs(5), || {
        pids_with_argv(&daemon).len() == 1 && pids_with_argv(&main).len() == 1
    }) {
        panic!("{test}: the background process did not start: {enforcement}");
    }
    let cgroup = std::fs::read_to_string(format!("/proc/{}/cgroup", pids_with_argv(&daemon)[0]))
        .unwrap_or_default();
    if !cgroup.contains("tierbox") && skip(test, "Tier B runs get no cgroup on this host") {
        return;
    }
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    assert!(
        wait_for(Duration::from_secs(5), || pids_with_argv(&daemon)
            .is_empty()
            && pids_with_argv(&main).is_empty()),
        "{test}: a process of the background run survived the server's SIGKILL"
    );
}

#[test]
fn a_unix_socket_is_private_and_remote_addresses_need_consent() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("tierbox.sock");
    let state = tempfile::tempdir().unwrap();
    let mut child = Command::new(tierbox())
        .args(["serve", "--unix"])
        .arg(&sock)
        .arg("--state-dir")
        .arg(state.path())
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_for(Duration::from_secs(20), || sock.exists()));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let mut c = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    c.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut resp = String::new();
    std::io::Read::read_to_string(&mut c, &mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    // The token was generated into the state directory, private.
    let token = state.path().join("http-token");
    assert_eq!(
        std::fs::metadata(&token).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    assert!(child.wait().unwrap().success());
    assert!(!sock.exists(), "the socket is removed on shutdown");

    let out = Command::new(tierbox())
        .args(["serve", "--http", "0.0.0.0:0", "--state-dir"])
        .arg(state.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not a loopback address") && err.contains("--dangerously-allow-remote"),
        "{err}"
    );
}

/// One JSON-RPC line to the MCP server.
fn send(stdin: &mut impl Write, v: &Value) {
    writeln!(stdin, "{v}").unwrap();
    stdin.flush().unwrap();
}

/// Reads lines until the response with `id`.
fn response(lines: &mut impl Iterator<Item = String>, id: u64) -> Value {
    for line in lines {
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["id"] == id {
            return v;
        }
    }
    panic!("no response {id}");
}

/// The MCP handshake (`initialize`, then `notifications/initialized`); returns the
/// `initialize` response.
fn initialize(stdin: &mut impl Write, lines: &mut impl Iterator<Item = String>) -> Value {
    send(
        stdin,
        &json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
            "protocolVersion":"2025-06-18","capabilities":{},
            "clientInfo":{"name":"test","version":"1"}}}),
    );
    let r = response(lines, 1);
    send(
        stdin,
        &json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
    );
    r
}

/// Every line an MCP client sends gets an answer: not JSON (or a duplicate key) is a
/// `-32700` parse error, a line over the size limit and a non-JSON-RPC object are
/// `-32600`, and the session goes on (a `ping` after them is answered).
///
/// Regression: malformed and oversized messages were dropped without a JSON-RPC error,
/// so the client waited for ever.
#[test]
fn malformed_and_oversized_mcp_messages_get_json_rpc_errors() {
    let (mut child, _ws, _state) = mcp_server();
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let big = "x".repeat(tierbox_server::mcp_stdio::MAX_MCP_MESSAGE_BYTES + 1);
    for line in [
        "this is not json",
        r#"{"jsonrpc":"2.0","id":7,"id":8,"method":"ping"}"#,
        big.as_str(),
        r#"{"id":5,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#,
    ] {
        writeln!(stdin, "{line}").unwrap();
    }
    stdin.flush().unwrap();
    let mut replies = Vec::new();
    while replies.len() < 5 {
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("only {} replies: {replies:?}", replies.len()));
        replies.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    let codes: Vec<(Value, Value)> = replies
        .iter()
        .map(|r| (r["id"].clone(), r["error"]["code"].clone()))
        .collect();
    for expected in [
        (Value::Null, json!(-32700)),
        (Value::Null, json!(-32600)),
        (json!(5), json!(-32600)),
        (json!(9), Value::Null),
    ] {
        assert!(
            codes.contains(&expected),
            "{expected:?} missing from {codes:?}"
        );
    }
    assert_eq!(
        codes
            .iter()
            .filter(|c| **c == (Value::Null, json!(-32700)))
            .count(),
        2,
        "{codes:?}"
    );
    drop(stdin);
    let _ = child.wait();
}

#[test]
fn closing_an_mcp_session_ends_its_run_owned_processes() {
    if !tier_c_available("mcp_session_end") {
        return;
    }
    let (mut child, _ws, _state) = mcp_server();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok);
    assert_eq!(
        initialize(&mut stdin, &mut lines)["result"]["serverInfo"]["name"],
        "tierbox"
    );
    let mark = ["sleep", "3597.5"];
    send(
        &mut stdin,
        &json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{
            "name":"process_run",
            "arguments":{"command":"sleep","args":["3597.5"],"background":true}}}),
    );
    let r = response(&mut lines, 2);
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert_eq!(
        r["result"]["structuredContent"]["status"]["state"],
        "running"
    );
    // A refusal is a tool error with the code, not a protocol error.
    send(
        &mut stdin,
        &json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{
            "name":"process_kill","arguments":{"id":"1234"}}}),
    );
    let r = response(&mut lines, 3);
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(
        r["result"]["structuredContent"]["code"],
        "input.handle_invalid"
    );
    assert_eq!(pids_with_argv(&mark).len(), 1);
    // The client goes away: the session ends, and with it its process.
    drop(stdin);
    assert!(wait_for(Duration::from_secs(10), || child
        .try_wait()
        .unwrap()
        .is_some()));
    assert!(
        pids_with_argv(&mark).is_empty(),
        "run_owned outlived its MCP session"
    );
}

/// bwrap's monitor exits as soon as it has the program's status, before it reaps the
/// sandbox's pid 1; that pid 1 is re-parented to the server (a child subreaper). The
/// server must reap it, or every run leaves a zombie that is still charged to the run's
/// reused cgroup under `pids.max` — with 8 processes allowed, the ninth run on a warm
/// slot could not even start its pid 1.
#[test]
fn bwrap_runs_on_warm_slots_leave_no_zombie_charged_to_the_next_run() {
    if !tier_c_available("bwrap_warm_slots") || !bwrap_installed("bwrap_warm_slots") {
        return;
    }
    let policy = policy_allowing("")
        .replace("[tier]\n", "[tier]\nbackend = \"bwrap\"\n")
        .replace(
            r#"optional_layers = ["cgroup", "protected_paths", "disk"]"#,
            r#"optional_layers = ["cgroup", "protected_paths", "disk", "landlock"]"#,
        )
        .replace("max_processes = 128", "max_processes = 8");
    assert!(policy.contains("backend = \"bwrap\"") && policy.contains("max_processes = 8"));
    let s = Server::start(&[], Some(&policy));
    for i in 0..30 {
        let (status, out) = s.call(
            "POST",
            "/v1/process/run",
            Some(r#"{"command":"true","tier":"c"}"#),
        );
        assert_eq!(status, 200, "run {i}: {out}");
        assert_eq!(out["backend"], "tier_c_bwrap", "run {i}: {out}");
        assert_eq!(out["exit_code"], 0, "run {i}: {out}");
    }
    let zombies = zombie_children(s.pid());
    assert!(
        zombies.is_empty(),
        "zombie children of the server: {zombies:?}"
    );
    assert!(s.stop().success());
}

/// Review mode over HTTP: an overlay run's change set in the result, then
/// `GET /v1/changes`, `GET /v1/changes/{id}?diff=true`, a partial apply, an apply refused
/// for a flagged change (a symlink out of the workspace) without consent, one refused
/// after the workspace changed, the flagged change applied by name, a discard.
#[test]
fn review_mode_over_http_shows_applies_and_discards_a_change_set() {
    if !tier_c_available("review_mode_over_http") {
        return;
    }
    let policy = "version = 1\n[exec]\nallowed_executables = [\"sh\"]\nallow_interpreters = true\nallow_eval = true\n";
    let s = Server::start(&[], Some(policy));
    let ws = s.ws.path();
    std::fs::write(ws.join("base.txt"), "base\n").unwrap();
    let run = json!({
        "command": "sh", "tier": "c", "workspace_mode": "overlay",
        "args": ["-c", "echo new > added.txt; echo changed > base.txt; ln -s /etc/passwd link"],
    });
    let (status, out) = s.call("POST", "/v1/process/run", Some(&run.to_string()));
    assert_eq!(status, 200, "{out}");
    let run_id = out["run_id"].as_str().unwrap().to_owned();
    assert_eq!(
        out["changes"]["changes"].as_array().map(Vec::len),
        Some(3),
        "{out}"
    );
    assert!(!ws.join("added.txt").exists());

    let (status, list) = s.call("GET", "/v1/changes", None);
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["change_sets"][0]["run_id"], run_id.as_str());
    let (status, shown) = s.call("GET", &format!("/v1/changes/{run_id}?diff=true"), None);
    assert_eq!(status, 200, "{shown}");
    assert!(
        shown["diff"].as_str().unwrap().contains("+changed"),
        "{shown}"
    );

    let body = json!({ "paths": ["added.txt"] }).to_string();
    let (status, applied) = s.call("POST", &format!("/v1/changes/{run_id}/apply"), Some(&body));
    assert_eq!(status, 200, "{applied}");
    assert_eq!(applied["applied"], json!(["added.txt"]));
    assert_eq!(
        std::fs::read_to_string(ws.join("added.txt")).unwrap(),
        "new\n"
    );

    std::fs::write(ws.join("base.txt"), "someone else's\n").unwrap();
    let (status, v) = s.call("POST", &format!("/v1/changes/{run_id}/apply"), None);
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (409, Some("changes.flagged")),
        "{v}"
    );
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("link [symlink_outside]") && message.contains("\"include_flagged\": true"),
        "{v}"
    );
    assert!(std::fs::symlink_metadata(ws.join("link")).is_err());
    let body = json!({ "include_flagged": true }).to_string();
    let (status, v) = s.call("POST", &format!("/v1/changes/{run_id}/apply"), Some(&body));
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (409, Some("changes.conflict")),
        "{v}"
    );
    assert!(
        v["error"]["message"].as_str().unwrap().contains("base.txt"),
        "{v}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("base.txt")).unwrap(),
        "someone else's\n"
    );
    // Named, the flagged change is consented to: applied as a symlink.
    let body = json!({ "paths": ["link"] }).to_string();
    let (status, applied) = s.call("POST", &format!("/v1/changes/{run_id}/apply"), Some(&body));
    assert_eq!(status, 200, "{applied}");
    assert_eq!(applied["applied"], json!(["link"]));
    assert_eq!(
        std::fs::read_link(ws.join("link")).unwrap(),
        std::path::Path::new("/etc/passwd")
    );

    let (status, v) = s.call("POST", &format!("/v1/changes/{run_id}/discard"), None);
    assert_eq!((status, v["discarded"].as_bool()), (200, Some(true)), "{v}");
    let (status, v) = s.call("GET", &format!("/v1/changes/{run_id}"), None);
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (404, Some("changes.not_found")),
        "{v}"
    );
    let (status, v) = s.call("GET", "/v1/changes/not-a-run-id", None);
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (400, Some("input.handle_invalid")),
        "{v}"
    );
}

/// The bytes an HTTP or MCP output field carries: `bytes_base64` decoded, else `text`.
fn carried(s: &Value) -> Vec<u8> {
    tierbox_runner::wire::decode(s["text"].as_str().unwrap(), s["bytes_base64"].as_str())
        .unwrap()
        .into_owned()
}

#[track_caller]
fn assert_bytes(what: &str, got: &[u8], want: &[u8]) {
    if let Err(e) = tierbox_test_support::same_bytes(got, want) {
        panic!("{what}: {e}");
    }
}

/// 10 MiB of random bytes (`cat`) over HTTP, plain and streamed, and over MCP, decoded
/// from `bytes_base64`, are the program's bytes exactly: the plain outcome's stdout, the
/// streamed output events joined in order and the streamed result's stdout; MCP's
/// structured content whole for output within its bound, and its first and last halves
/// exactly (around the marker naming what the view left out) for output past it.
///
/// Regression: every output field was the lossy UTF-8 of the bytes, with no way back to
/// them; and a streamed batch the server's channel had no room for was dropped.
#[test]
fn binary_output_over_http_and_mcp_is_the_program_s_bytes() {
    if !tier_c_available("binary_output_http_mcp") {
        return;
    }
    let policy = tierbox_test_support::policy_for_output(&policy_allowing(""), 16 << 20, None);
    let big = tierbox_test_support::random_bytes(10 << 20, 5);
    let small = tierbox_test_support::random_bytes(40 << 10, 6);
    let s = Server::start(&[], Some(&policy));
    std::fs::write(s.ws.path().join("big.bin"), &big).unwrap();
    let run = br#"{"command":"cat","args":["big.bin"]}"#;
    let (status, v) = s.call(
        "POST",
        "/v1/process/run",
        Some(std::str::from_utf8(run).unwrap()),
    );
    assert_eq!(
        (status, v["exit_code"].as_i64()),
        (200, Some(0)),
        "{}",
        v["stderr"]
    );
    assert_eq!(v["stdout"]["lossy_utf8"], true);
    assert_bytes("plain HTTP stdout", &carried(&v["stdout"]), &big);

    let (status, head, body) = raw(
        &s.addr,
        "POST",
        "/v1/process/run?stream=true",
        Some(run),
        &[("Authorization", &format!("Bearer {TOKEN}"))],
    );
    assert_eq!(status, 200, "{head}");
    let events: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let streamed: Vec<u8> = events
        .iter()
        .filter(|e| e["event"] == "output" && e["stream"] == "stdout")
        .flat_map(carried)
        .collect();
    assert_bytes("streamed HTTP output events", &streamed, &big);
    let last = events.last().unwrap();
    assert_eq!(last["event"], "result", "{last}");
    assert_bytes(
        "streamed HTTP result",
        &carried(&last["outcome"]["stdout"]),
        &big,
    );
    drop(s);

    let (mut child, ws, _state) = mcp_server_with(Some(&policy));
    std::fs::write(ws.path().join("big.bin"), &big).unwrap();
    std::fs::write(ws.path().join("small.bin"), &small).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok);
    initialize(&mut stdin, &mut lines);
    let call = |stdin: &mut std::process::ChildStdin, id: u64, file: &str| {
        send(
            stdin,
            &json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
                "name":"process_run","arguments":{"command":"cat","args":[file]}}}),
        );
    };
    call(&mut stdin, 2, "small.bin");
    let r = response(&mut lines, 2);
    let out = &r["result"]["structuredContent"]["stdout"];
    assert_eq!(out["view_omitted_bytes"], Value::Null, "{r}");
    assert_bytes("MCP structured content", &carried(out), &small);
    call(&mut stdin, 3, "big.bin");
    let r = response(&mut lines, 3);
    let out = &r["result"]["structuredContent"]["stdout"];
    let left_out = out["view_omitted_bytes"].as_u64().unwrap();
    let marker =
        format!("\n[tierbox: {left_out} bytes of this stream's output left out of this view]\n");
    let view = carried(out);
    let at = view
        .windows(marker.len())
        .position(|w| w == marker.as_bytes())
        .unwrap();
    let tail = &view[at + marker.len()..];
    assert_eq!(at as u64 + left_out + tail.len() as u64, big.len() as u64);
    assert_bytes("MCP view's head", &view[..at], &big[..at]);
    assert_bytes("MCP view's tail", tail, &big[big.len() - tail.len()..]);
    drop(stdin);
    let _ = child.wait();
}

/// A server removes expired spill files without waiting for a run: at start and then
/// every `SPILL_SWEEP_INTERVAL_SECS`. A fresh one stays.
///
/// Regression: spill files were never removed by anything.
#[test]
fn a_server_sweeps_expired_spill_files() {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().join("spill");
    std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    let plant = |name: &str, age_secs: u64| {
        let f = std::fs::File::options()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(dir.join(name))
            .unwrap();
        f.set_modified(std::time::SystemTime::now() - Duration::from_secs(age_secs))
            .unwrap();
    };
    // The default policy keeps spill files a day.
    plant("old.stdout", 2 * 24 * 3600);
    plant("young.stdout", 60);
    let s = Server::start_in(state, &[], &[], None);
    assert!(
        wait_for(Duration::from_secs(30), || !dir.join("old.stdout").exists()),
        "the expired spill file is still there"
    );
    assert!(dir.join("young.stdout").exists());
    drop(s);
}
