//! Terms through `tierbox serve`, over HTTP (`/v1/terms`) and MCP (the `session_*`
//! tools), in Tier B, native Tier C and bubblewrap: Python's REPL typed into (`print(6*7)`
//! shows `42`, bytes in as base64 and out as `bytes_base64` exactly, EOF ends it and its
//! exit status is reported), `bash -i` resized to 40x100 (`stty size` says so) and `INT`
//! interrupting `sleep 30` while the shell goes on; another owner cannot see, read, write,
//! resize, signal or kill a term (`term.not_found`, as for an id that never existed); bad
//! input is a typed 400 naming the rule; an MCP connection's terms end with it. Skipped
//! with a printed reason where the host cannot run a tier, failed under `CI=true`.

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;
use crate::{carried, initialize, response, send};

/// Where a test runs: Tier B, or Tier C with a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Where {
    TierB,
    Native,
    Bwrap,
}

/// A bound so that a broken term fails the test instead of hanging it (not a timing
/// assertion: output is awaited, and this is only how long a test may wait at all).
pub(crate) const GIVE_UP: Duration = Duration::from_secs(60);

/// Whether `at` runs here (printing why not, failing under CI); the policy for it (the
/// built-in default with bash and Python's REPL allowed, bubblewrap selected for
/// [`Where::Bwrap`]) and the request's tier.
pub(crate) fn setup(test: &str, at: Where) -> Option<(String, &'static str)> {
    let available = match at {
        Where::TierB => tier_b_available(test),
        Where::Native => tier_c_available(test),
        Where::Bwrap => tier_c_available(test) && bwrap_installed(test),
    };
    if !available {
        return None;
    }
    let mut policy = String::from(
        "version = 1\n[exec]\nallowed_executables = [\"bash\", \"python3\"]\n\
         allow_interpreters = true\nallow_eval = true\n",
    );
    if at == Where::Bwrap {
        // bwrap applies no landlock layer of its own.
        policy.push_str(
            "[tier]\nbackend = \"bwrap\"\n\
             optional_layers = [\"cgroup\", \"protected_paths\", \"disk\", \"landlock\"]\n",
        );
    }
    let tier = if at == Where::TierB { "b" } else { "c" };
    Some((policy, tier))
}

pub(crate) fn backend_of(at: Where) -> &'static str {
    match at {
        Where::TierB => "tier_b_linux",
        Where::Native => "tier_c_linux_native",
        Where::Bwrap => "tier_c_bwrap",
    }
}

/// `$check(test, where)` as one test per backend (also for the sibling modules).
macro_rules! in_every_backend {
    ($name:ident, $check:path) => {
        mod $name {
            use super::*;

            #[test]
            fn tier_b() {
                $check(concat!(stringify!($name), "::tier_b"), Where::TierB);
            }

            #[test]
            fn native_tier_c() {
                $check(concat!(stringify!($name), "::native_tier_c"), Where::Native);
            }

            #[test]
            fn bwrap() {
                $check(concat!(stringify!($name), "::bwrap"), Where::Bwrap);
            }
        }
    };
}

in_every_backend!(terms_over_http, http_terms);
in_every_backend!(terms_over_mcp, mcp_terms);

/// One session's view of the HTTP API.
pub(crate) struct Http<'a> {
    pub(crate) s: &'a Server,
    pub(crate) session: &'a str,
}

impl Http<'_> {
    pub(crate) fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let body = body.map(|b| b.to_string());
        self.s.call_in(self.session, method, path, body.as_deref())
    }

    pub(crate) fn ok(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let (status, v) = self.call(method, path, body);
        assert_eq!(status, 200, "{method} {path}: {v}");
        v
    }

    /// Types `text` into the term.
    fn type_in(&self, id: &str, text: &str) {
        let v = self.ok(
            "POST",
            &format!("/v1/terms/{id}/input"),
            Some(json!({ "data": text })),
        );
        assert_eq!(v["bytes_written"], text.len(), "{v}");
    }

    /// Reads from `*offset` until the bytes read since the call contain `needle`.
    fn read_until(&self, id: &str, offset: &mut u64, needle: &[u8]) -> Vec<u8> {
        let give_up = Instant::now() + GIVE_UP;
        let mut seen = Vec::new();
        loop {
            let path = format!("/v1/terms/{id}/output?offset={offset}&wait_ms=1000");
            let out = self.ok("GET", &path, None);
            let bytes = carried(&out);
            seen.extend_from_slice(&bytes);
            *offset = out["next_offset"].as_u64().unwrap();
            if seen.windows(needle.len()).any(|w| w == needle) {
                return seen;
            }
            assert!(
                !(out["ended"] == true && bytes.is_empty()) && Instant::now() < give_up,
                "never saw {:?}; the terminal showed {:?}",
                String::from_utf8_lossy(needle),
                String::from_utf8_lossy(&seen)
            );
        }
    }

    /// The term's status once it is no longer running.
    pub(crate) fn until_ended(&self, id: &str) -> Value {
        let path = format!("/v1/terms/{id}");
        let mut status = Value::Null;
        let ended = wait_for(GIVE_UP, || {
            status = self.ok("GET", &path, None);
            status["state"] != "running"
        });
        assert!(ended, "still running: {status}");
        status
    }
}

pub(crate) fn code_of(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

/// The REPL and the shell over HTTP, ownership and the typed refusals.
fn http_terms(test: &str, at: Where) {
    let Some((policy, tier)) = setup(test, at) else {
        return;
    };
    let s = Server::start(&[], Some(&policy));
    let alice = Http {
        s: &s,
        session: "alice",
    };
    let start = json!({
        "command": "python3", "args": ["-i", "-q"], "tier": tier,
        "pty": { "rows": 24, "cols": 80 }, "wait_ms": 2000
    });
    let started = alice.ok("POST", "/v1/terms", Some(start));
    let id = started["id"].as_str().unwrap().to_owned();
    assert_eq!(started["status"]["state"], "running", "{started}");
    assert_eq!(started["status"]["backend"], backend_of(at), "{started}");
    assert_eq!(started["output"]["offset"], 0, "{started}");
    let mut offset = started["output"]["next_offset"].as_u64().unwrap();
    println!(
        "{test}: started {id}, first screen {:?}",
        started["output"]["text"]
    );
    alice.type_in(&id, "print(6*7)\r");
    alice.read_until(&id, &mut offset, b"42");
    // Bytes in exactly (base64 of `print(len('é'.encode()))\r`) and out exactly.
    let v = alice.ok(
        "POST",
        &format!("/v1/terms/{id}/input"),
        Some(json!({ "data_base64": "cHJpbnQobGVuKCfDqScuZW5jb2RlKCkpKQ0=" })),
    );
    assert_eq!(v["bytes_written"], 26, "{v}");
    alice.read_until(&id, &mut offset, b"\n2\r\n");
    alice.type_in(
        &id,
        "import sys; sys.stdout.buffer.write(b'<\\xff\\xfe>'); sys.stdout.flush()\r",
    );
    alice.read_until(&id, &mut offset, b"<\xff\xfe>");

    http_refusals(&alice, &id);
    let bob = Http {
        s: &s,
        session: "bob",
    };
    http_another_owner(&bob, &id);
    assert_eq!(alice.ok("GET", "/v1/terms", None)["terms"][0]["id"], id);
    assert_eq!(bob.ok("GET", "/v1/terms", None)["terms"], json!([]));

    // EOF at the prompt ends the REPL; its exit status is reported, attested.
    let v = alice.ok(
        "POST",
        &format!("/v1/terms/{id}/input"),
        Some(json!({ "eof": true })),
    );
    assert_eq!(
        (v["eof"].clone(), v["bytes_written"].clone()),
        (json!(true), json!(0))
    );
    let status = alice.until_ended(&id);
    println!("{test}: after EOF {}", status["state"]);
    assert_eq!(
        (status["state"].as_str(), status["exit_code"].as_i64()),
        (Some("exited"), Some(0)),
        "{status}"
    );
    assert!(status["attestation"].is_object(), "{status}");
    let (code, v) = alice.call(
        "POST",
        &format!("/v1/terms/{id}/input"),
        Some(json!({"data": "x"})),
    );
    assert_eq!((code, code_of(&v)), (409, "term.ended"), "{v}");

    http_shell(test, &alice, tier);
}

/// `bash -i` over HTTP: a resize seen by `stty size`, `INT` interrupting `sleep 30` with
/// the shell still there, then a kill.
fn http_shell(test: &str, alice: &Http<'_>, tier: &str) {
    let start = json!({ "command": "bash", "args": ["--norc", "--noprofile", "-i"], "tier": tier });
    let started = alice.ok("POST", "/v1/terms", Some(start));
    let id = started["id"].as_str().unwrap().to_owned();
    let mut offset = started["output"]["next_offset"].as_u64().unwrap();
    alice.type_in(&id, "stty size\r");
    alice.read_until(&id, &mut offset, b"24 80");
    let v = alice.ok(
        "POST",
        &format!("/v1/terms/{id}/resize"),
        Some(json!({ "rows": 40, "cols": 100 })),
    );
    assert_eq!(
        (v["rows"].as_u64(), v["cols"].as_u64()),
        (Some(40), Some(100))
    );
    alice.type_in(&id, "stty size\r");
    let seen = alice.read_until(&id, &mut offset, b"40 100");
    println!(
        "{test}: stty size after the resize: {:?}",
        String::from_utf8_lossy(&seen)
    );
    // The job says it runs (its echo is `sle""ep-started`, not the needle) before it
    // becomes `sleep 30`; that INT interrupted it shows as the shell's next line running
    // within GIVE_UP (< 30 s would do too, but nothing here measures time).
    alice.type_in(&id, "bash -c 'echo sle\"\"ep-started; exec sleep 30'\r");
    alice.read_until(&id, &mut offset, b"sleep-started");
    let v = alice.ok(
        "POST",
        &format!("/v1/terms/{id}/signal"),
        Some(json!({ "signal": "INT" })),
    );
    assert_eq!(v["signal"], "INT");
    alice.type_in(&id, "echo alive-$((1+1))\r");
    alice.read_until(&id, &mut offset, b"alive-2");
    assert_eq!(
        alice.ok("GET", &format!("/v1/terms/{id}"), None)["state"],
        "running"
    );
    let killed = alice.ok("POST", &format!("/v1/terms/{id}/kill"), None);
    assert_eq!(killed["state"], "killed", "{killed}");
    assert_eq!(
        alice.ok("GET", "/v1/terms", None)["terms"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
}

/// Typed 400s naming the rule and the value, and not-found for an id that never was.
fn http_refusals(alice: &Http<'_>, id: &str) {
    let input = format!("/v1/terms/{id}/input");
    for (body, code, names) in [
        (
            json!({"data": "a", "data_base64": "YQ=="}),
            "input.data_conflict",
            "not both",
        ),
        (json!({}), "input.no_data", "data_base64"),
        (
            json!({"data_base64": "YW*j"}),
            "input.data_encoding_invalid",
            "'*' at index 2",
        ),
        (
            json!({"data": "a", "close": true}),
            "input.malformed",
            "close",
        ),
    ] {
        let (status, v) = alice.call("POST", &input, Some(body.clone()));
        assert_eq!((status, code_of(&v)), (400, code), "{body}: {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(names), "{body}: {message}");
    }
    let resize = format!("/v1/terms/{id}/resize");
    for (rows, cols, shown) in [
        (0, 80, "0x80"),
        (24, 5000, "24x5000"),
        (70000, 1, "70000x1"),
    ] {
        let (status, v) = alice.call("POST", &resize, Some(json!({ "rows": rows, "cols": cols })));
        assert_eq!((status, code_of(&v)), (400, "term.bad_size"), "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(shown),
            "{v}"
        );
    }
    let (status, v) = alice.call(
        "POST",
        &format!("/v1/terms/{id}/signal"),
        Some(json!({"signal": "USR1"})),
    );
    assert_eq!((status, code_of(&v)), (400, "term.signal_refused"), "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("USR1"),
        "{v}"
    );
    let (status, v) = alice.call("GET", &format!("/v1/terms/{id}/output?wait_ms=30001"), None);
    assert_eq!((status, code_of(&v)), (400, "term.bad_wait"), "{v}");
    let (status, v) = alice.call("GET", &format!("/v1/terms/{id}/output?max_bytes=0"), None);
    assert_eq!(
        (status, code_of(&v)),
        (400, "input.read_size_invalid"),
        "{v}"
    );
    let start = json!({ "command": "bash", "stdin": "echo hi\n" });
    let (status, v) = alice.call("POST", "/v1/terms", Some(start));
    assert_eq!((status, code_of(&v)), (400, "input.term_field"), "{v}");
    let (status, v) = alice.call("POST", "/v1/terms", Some(json!({ "command": "curl" })));
    assert_eq!((status, code_of(&v)), (422, "exec.not_allowed"), "{v}");
    let unknown = "00112233445566778899aabbccddeeff";
    let (status, v) = alice.call("GET", &format!("/v1/terms/{unknown}"), None);
    assert_eq!((status, code_of(&v)), (404, "term.not_found"), "{v}");
    let (status, v) = alice.call("GET", "/v1/terms/1234", None);
    assert_eq!((status, code_of(&v)), (400, "input.handle_invalid"), "{v}");
}

/// Every operation on another owner's term is 404 `term.not_found`.
fn http_another_owner(bob: &Http<'_>, id: &str) {
    for (method, path, body) in [
        ("GET", format!("/v1/terms/{id}"), None),
        ("GET", format!("/v1/terms/{id}/output"), None),
        (
            "POST",
            format!("/v1/terms/{id}/input"),
            Some(json!({"data": "1/0\r"})),
        ),
        (
            "POST",
            format!("/v1/terms/{id}/resize"),
            Some(json!({"rows": 2, "cols": 2})),
        ),
        (
            "POST",
            format!("/v1/terms/{id}/signal"),
            Some(json!({"signal": "KILL"})),
        ),
        ("POST", format!("/v1/terms/{id}/kill"), None),
    ] {
        let (status, v) = bob.call(method, &path, body);
        assert_eq!(
            (status, code_of(&v)),
            (404, "term.not_found"),
            "{method} {path}: {v}"
        );
    }
}

/// An MCP client over the server's stdio.
struct Mcp {
    stdin: std::process::ChildStdin,
    lines: Box<dyn Iterator<Item = String>>,
    next_id: u64,
}

impl Mcp {
    /// Calls `tool`; its result (`isError`, `structuredContent`, `content`).
    fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        send(
            &mut self.stdin,
            &json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
                    "params":{"name":tool,"arguments":arguments}}),
        );
        response(&mut self.lines, id)["result"].clone()
    }

    /// Calls `tool` and expects success; its structured content.
    fn ok(&mut self, tool: &str, arguments: Value) -> Value {
        let r = self.call(tool, arguments.clone());
        assert_eq!(r["isError"], false, "{tool} {arguments}: {r}");
        r["structuredContent"].clone()
    }

    /// Collects output from `*offset` with `session_read` until `needle` shows.
    fn read_until(&mut self, id: &str, offset: &mut u64, first: &Value, needle: &str) {
        let give_up = Instant::now() + GIVE_UP;
        let mut seen = String::from_utf8_lossy(&carried(first)).into_owned();
        *offset = first["next_offset"].as_u64().unwrap();
        while !seen.contains(needle) {
            let out = self.ok(
                "session_read",
                json!({"id": id, "offset": *offset, "yield_ms": 500}),
            );
            seen.push_str(&String::from_utf8_lossy(&carried(&out)));
            *offset = out["next_offset"].as_u64().unwrap();
            assert!(
                !(out["ended"] == true && out["text"] == "") && Instant::now() < give_up,
                "never saw {needle:?}; the terminal showed {seen:?}"
            );
        }
    }
}

/// The REPL and the shell over MCP; the term tools listed with their schemas; refusals
/// as tool errors; a connection's terms end with it.
fn mcp_terms(test: &str, at: Where) {
    let Some((policy, tier)) = setup(test, at) else {
        return;
    };
    let (mut child, _ws, _state) = mcp_server_with(Some(&policy));
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines: Box<dyn Iterator<Item = String>> =
        Box::new(BufReader::new(stdout).lines().map_while(Result::ok));
    initialize(&mut stdin, &mut lines);
    send(
        &mut stdin,
        &json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}),
    );
    let tools = response(&mut lines, 2)["result"]["tools"].clone();
    for name in [
        "session_start",
        "session_write",
        "session_read",
        "session_resize",
        "session_signal",
        "session_close",
    ] {
        let tool = tools.as_array().unwrap().iter().find(|t| t["name"] == name);
        let tool = tool.unwrap_or_else(|| panic!("{name} is not listed: {tools}"));
        assert_eq!(tool["inputSchema"]["type"], "object", "{name}");
        assert_eq!(tool["outputSchema"]["type"], "object", "{name}");
    }
    let mut mcp = Mcp {
        stdin,
        lines,
        next_id: 10,
    };
    let started = mcp.ok(
        "session_start",
        json!({"command": "python3", "args": ["-i", "-q"], "tier": tier, "rows": 24, "cols": 80, "yield_ms": 1000}),
    );
    let id = started["id"].as_str().unwrap().to_owned();
    assert_eq!(started["status"]["backend"], backend_of(at), "{started}");
    let mut offset = started["output"]["next_offset"].as_u64().unwrap();
    // The write returns the output of its yield time; more is read on if it was slow.
    let written = mcp.ok(
        "session_write",
        json!({"id": id, "data": "print(6*7)\r", "offset": offset, "yield_ms": 1000}),
    );
    assert_eq!(written["bytes_written"], 11, "{written}");
    mcp.read_until(&id, &mut offset, &written["output"], "42");
    println!("{test}: print(6*7) -> 42 over MCP");
    mcp_refusals(&mut mcp, &id);
    let written = mcp.ok(
        "session_write",
        json!({"id": id, "eof": true, "offset": offset}),
    );
    assert_eq!(written["eof"], true, "{written}");
    let give_up = Instant::now() + GIVE_UP;
    let mut out = written["output"].clone();
    while out["ended"] != true {
        assert!(
            Instant::now() < give_up,
            "the REPL did not end at EOF: {out}"
        );
        out = mcp.ok(
            "session_read",
            json!({"id": id, "offset": out["next_offset"], "yield_ms": 500}),
        );
    }
    let status = mcp.ok("session_close", json!({"id": id}));
    assert_eq!(
        (status["state"].as_str(), status["exit_code"].as_i64()),
        (Some("exited"), Some(0)),
        "{status}"
    );
    assert!(status["attestation"].is_object(), "{status}");

    mcp_shell(test, &mut mcp, tier);
    // A running term of this connection, which ends with it.
    // One per test: the tiers' tests run side by side in this process.
    let marker = format!(
        "mcp-term-{}-{}",
        std::process::id(),
        test.replace("::", "-")
    );
    let argv = ["bash", "--norc", "--noprofile", "-i", "-s", marker.as_str()];
    mcp.ok(
        "session_start",
        json!({"command": "bash", "args": &argv[1..], "tier": tier}),
    );
    assert_eq!(pids_with_argv(&argv).len(), 1, "{argv:?}");
    drop(mcp);
    assert!(wait_for(GIVE_UP, || child.try_wait().unwrap().is_some()));
    assert!(
        pids_with_argv(&argv).is_empty(),
        "a term outlived its MCP connection"
    );
}

/// `bash -i` over MCP: resize, `stty size`, `INT` to `sleep 30`, the shell goes on.
fn mcp_shell(test: &str, mcp: &mut Mcp, tier: &str) {
    let started = mcp.ok(
        "session_start",
        json!({"command": "bash", "args": ["--norc", "--noprofile", "-i"], "tier": tier}),
    );
    let id = started["id"].as_str().unwrap().to_owned();
    let mut offset = started["output"]["next_offset"].as_u64().unwrap();
    let r = mcp.ok("session_resize", json!({"id": id, "rows": 40, "cols": 100}));
    assert_eq!(
        (r["rows"].as_u64(), r["cols"].as_u64()),
        (Some(40), Some(100))
    );
    let w = mcp.ok(
        "session_write",
        json!({"id": id, "data": "stty size\r", "offset": offset}),
    );
    mcp.read_until(&id, &mut offset, &w["output"], "40 100");
    println!("{test}: stty size says 40 100 over MCP");
    let w = mcp.ok(
        "session_write",
        json!({"id": id, "data": "bash -c 'echo sle\"\"ep-started; exec sleep 30'\r", "offset": offset}),
    );
    mcp.read_until(&id, &mut offset, &w["output"], "sleep-started");
    let s = mcp.ok("session_signal", json!({"id": id, "signal": "SIGINT"}));
    assert_eq!(s["signal"], "INT");
    let w = mcp.ok(
        "session_write",
        json!({"id": id, "data": "echo alive-$((1+1))\r", "offset": offset}),
    );
    mcp.read_until(&id, &mut offset, &w["output"], "alive-2");
    let status = mcp.ok("session_close", json!({"id": id}));
    assert_eq!(status["state"], "killed", "{status}");
}

/// Refusals are tool errors with their codes.
fn mcp_refusals(mcp: &mut Mcp, id: &str) {
    let unknown = "00112233445566778899aabbccddeeff";
    for (tool, args, code) in [
        ("session_read", json!({"id": unknown}), "term.not_found"),
        ("session_close", json!({"id": unknown}), "term.not_found"),
        (
            "session_write",
            json!({"id": id, "data": "a", "data_base64": "YQ=="}),
            "input.data_conflict",
        ),
        (
            "session_write",
            json!({"id": id, "data_base64": "*"}),
            "input.data_encoding_invalid",
        ),
        (
            "session_write",
            json!({"id": id, "data": "a", "yield_ms": 30001}),
            "term.bad_wait",
        ),
        (
            "session_resize",
            json!({"id": id, "rows": 0, "cols": 1}),
            "term.bad_size",
        ),
        (
            "session_signal",
            json!({"id": id, "signal": "USR2"}),
            "term.signal_refused",
        ),
        (
            "session_start",
            json!({"command": "bash", "background": true}),
            "input.term_field",
        ),
        ("session_read", json!({"id": "42"}), "input.handle_invalid"),
    ] {
        let r = mcp.call(tool, args.clone());
        assert_eq!(r["isError"], true, "{tool} {args}: {r}");
        assert_eq!(r["structuredContent"]["code"], code, "{tool} {args}: {r}");
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with(&format!("rejected: {code}: ")), "{text}");
    }
}
