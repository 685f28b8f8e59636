//! The file face through `tierbox serve`: `/v1/files` over HTTP and the `file_*` tools over
//! MCP. A write lands in the workspace with its content, the workspace's owner and the
//! mode asked or kept, and is audited; a read gives the bytes exactly (`bytes_base64` when
//! they are not UTF-8) and says when the file goes on. `..`, an absolute path, a symlink on
//! the way or at the end, a FIFO (at once, no hang), a device, `.git/config` and
//! `.git/hooks/*`, a setuid mode, a read past the size limit and a write past the write
//! limit are each refused with their typed code and status; review mode refuses writes.
//! No sandbox runs: these need no tier.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;
use crate::{carried, initialize, response, send};

/// `s` percent-encoded for a query string.
fn q(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn read(s: &Server, path: &str, extra: &str) -> (u16, Value) {
    s.call("GET", &format!("/v1/files?path={}{extra}", q(path)), None)
}

fn write(s: &Server, body: Value) -> (u16, Value) {
    s.call("PUT", "/v1/files", Some(&body.to_string()))
}

#[track_caller]
fn refused(got: (u16, Value), status: u16, code: &str, says: &str) {
    let (got_status, v) = got;
    assert_eq!(
        (got_status, v["error"]["code"].as_str()),
        (status, Some(code)),
        "{v}"
    );
    let message = v["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains(says), "{says:?} not in {message:?}");
}

#[test]
fn files_over_http_land_in_the_workspace_and_every_escape_is_refused_by_rule() {
    let s = Server::start(&[], None);
    let ws = std::fs::canonicalize(s.ws.path()).unwrap();
    let root = rustix::process::geteuid().is_root();
    if root {
        std::os::unix::fs::chown(&ws, Some(4321), Some(4321)).unwrap();
    }
    let owner = std::fs::metadata(&ws).unwrap();
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();

    // A text write, then read back; on disk with the workspace's owner and 0644.
    let (status, w) = write(
        &s,
        json!({ "path": "notes/todo.md", "data": "- ship it\n", "mkdir_parents": true }),
    );
    assert_eq!(status, 200, "{w}");
    assert_eq!(
        (w["bytes_written"].as_u64(), w["created"].as_bool()),
        (Some(10), Some(true))
    );
    let on_disk = ws.join("notes/todo.md");
    assert_eq!(std::fs::read(&on_disk).unwrap(), b"- ship it\n");
    let meta = std::fs::metadata(&on_disk).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o7777),
        (owner.uid(), owner.gid(), 0o644)
    );
    assert_eq!(w["uid"].as_u64(), Some(u64::from(owner.uid())));
    let (status, r) = read(&s, "notes/todo.md", "");
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        (
            r["text"].as_str(),
            r["truncated"].as_bool(),
            r["size"].as_u64()
        ),
        (Some("- ship it\n"), Some(false), Some(10))
    );
    assert!(r.get("bytes_base64").is_none(), "{r}");

    // Bytes that are not UTF-8: in as base64, out as bytes_base64, exactly; an existing
    // file's mode is kept.
    let bytes = [0xffu8, 0, 1, b'\n', 0xc3];
    std::fs::write(ws.join("blob"), b"old").unwrap();
    std::fs::set_permissions(
        ws.join("blob"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let (status, w) = write(&s, json!({ "path": "blob", "data_base64": "/wABCsM=" }));
    assert_eq!(
        (status, w["mode"].as_u64(), w["created"].as_bool()),
        (200, Some(0o600), Some(false)),
        "{w}"
    );
    assert_eq!(std::fs::read(ws.join("blob")).unwrap(), bytes);
    let (_, r) = read(&s, "blob", "");
    assert!(r["bytes_base64"].is_string(), "{r}");
    assert_eq!(carried(&r), bytes);
    let (status, w) = write(&s, json!({ "path": "blob", "data": "!", "append": true }));
    assert_eq!(
        (status, w["size"].as_u64(), w["appended"].as_bool()),
        (200, Some(6), Some(true)),
        "{w}"
    );

    // List and stat.
    let (status, l) = s.call("GET", "/v1/files/list", None);
    assert_eq!(status, 200, "{l}");
    let names: Vec<&str> = l["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, [".git", "blob", "notes"]);
    let (status, st) = s.call("GET", "/v1/files/stat?path=notes", None);
    assert_eq!(
        (status, st["kind"].as_str()),
        (200, Some("directory")),
        "{st}"
    );

    // A read past the size limit is cut and says so; a size past the limit is refused.
    let big = vec![b'a'; 300 * 1024];
    std::fs::write(ws.join("big.txt"), &big).unwrap();
    let (status, r) = read(&s, "big.txt", "&max_bytes=262144");
    assert_eq!(
        (
            status,
            r["truncated"].as_bool(),
            r["next_offset"].as_u64(),
            r["size"].as_u64()
        ),
        (200, Some(true), Some(262144), Some(300 * 1024)),
        "{}",
        r["error"]
    );
    let (status, r) = read(&s, "big.txt", "&offset=262144&max_bytes=262144");
    assert_eq!(
        (status, r["truncated"].as_bool(), r["next_offset"].as_u64()),
        (200, Some(false), Some(300 * 1024))
    );
    refused(
        read(&s, "big.txt", "&max_bytes=262145"),
        400,
        "input.read_size_invalid",
        "262144",
    );
    // A write past the write limit is refused whole.
    let data = "x".repeat(70 * 1024);
    refused(
        write(&s, json!({ "path": "big.out", "data": data })),
        413,
        "file.too_large",
        "MAX_FILE_WRITE_BYTES",
    );
    assert!(!ws.join("big.out").exists());

    // Paths that leave the workspace, by rule.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"outside").unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.join("out")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), ws.join("link")).unwrap();
    for (path, rule) in [
        ("../escape", "dot_dot"),
        ("notes/../../escape", "dot_dot"),
        ("/etc/cron.d/evil", "absolute"),
        ("out/x", "symlink"),
        ("out/new/x", "symlink"),
        ("link", "symlink"),
    ] {
        refused(
            write(
                &s,
                json!({ "path": path, "data": "pwned", "mkdir_parents": true }),
            ),
            422,
            "file.refused",
            &format!("rule {rule}"),
        );
    }
    for (path, rule) in [
        ("out/secret", "symlink"),
        ("link", "symlink"),
        ("../etc/passwd", "dot_dot"),
        ("/etc/passwd", "absolute"),
    ] {
        refused(
            read(&s, path, ""),
            422,
            "file.refused",
            &format!("rule {rule}"),
        );
    }
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
    assert_eq!(
        std::fs::read(outside.path().join("secret")).unwrap(),
        b"outside"
    );
    assert!(!ws.parent().unwrap().join("escape").exists());

    // A FIFO is refused at once (a read would block for ever), a device too.
    let status = std::process::Command::new("mkfifo")
        .arg(ws.join("fifo"))
        .status()
        .unwrap();
    assert!(status.success());
    let started = Instant::now();
    refused(read(&s, "fifo", ""), 422, "file.not_regular", "FIFO");
    refused(
        write(&s, json!({ "path": "fifo", "data": "x" })),
        422,
        "file.not_regular",
        "FIFO",
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let dev = std::process::Command::new("mknod")
        .arg(ws.join("null"))
        .args(["c", "1", "3"])
        .status();
    if dev.is_ok_and(|s| s.success()) {
        refused(
            read(&s, "null", ""),
            422,
            "file.not_regular",
            "character device",
        );
        refused(
            write(&s, json!({ "path": "null", "data": "x" })),
            422,
            "file.not_regular",
            "character device",
        );
    } else {
        let _ = skip(
            "files_over_http (device part)",
            "mknod of a character device is refused here",
        );
    }

    // The git redirect surface: the fsmonitor and hook attack without a sandbox.
    for path in [
        ".git/config",
        ".git/hooks/pre-commit",
        "vendor/.git/hooks/post-checkout",
    ] {
        refused(
            write(
                &s,
                json!({ "path": path, "data": "[core]\n\tfsmonitor = touch /tmp/pwned\n", "mkdir_parents": true }),
            ),
            422,
            "file.protected",
            "a run may not write there",
        );
    }
    assert_eq!(std::fs::read(ws.join(".git/config")).unwrap(), b"[core]\n");
    assert_eq!(std::fs::read_dir(ws.join(".git/hooks")).unwrap().count(), 0);
    assert!(!ws.join("vendor").exists());

    // No setuid, setgid or sticky bit, ever.
    refused(
        write(&s, json!({ "path": "suid", "data": "x", "mode": 0o4755 })),
        422,
        "file.mode_refused",
        "setuid",
    );
    assert!(!ws.join("suid").exists());
    let (status, w) = write(
        &s,
        json!({ "path": "run.sh", "data": "#!/bin/sh\n", "mode": 0o755 }),
    );
    assert_eq!((status, w["mode"].as_u64()), (200, Some(0o755)), "{w}");

    // Missing things, bad bodies and no token.
    refused(
        read(&s, "missing", ""),
        404,
        "file.not_found",
        "does not exist",
    );
    refused(
        s.call("GET", "/v1/files/list?path=blob", None),
        422,
        "file.not_directory",
        "not a directory",
    );
    refused(
        write(
            &s,
            json!({ "path": "a", "data": "x", "data_base64": "eA==" }),
        ),
        400,
        "input.data_conflict",
        "not both",
    );
    refused(
        write(&s, json!({ "path": "a", "data": "x", "owner": 0 })),
        400,
        "input.malformed",
        "owner",
    );
    refused(
        s.call("GET", "/v1/files?path=a&bogus=1", None),
        400,
        "input.malformed",
        "bogus",
    );
    refused(
        write(
            &s,
            json!({ "path": "a", "data": "x", "workspace": "../.." }),
        ),
        422,
        "scope.workspace_subdir_invalid",
        "..",
    );
    let (status, v) = s.call_with("GET", "/v1/files?path=blob", None, &[]);
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (401, Some("auth.missing"))
    );
    let (status, v) = s.call_with("PUT", "/v1/files", Some(r#"{"path":"a","data":"x"}"#), &[]);
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (401, Some("auth.missing"))
    );
    assert!(!ws.join("a").exists());
    let names: Vec<String> = std::fs::read_dir(&ws)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| !n.starts_with(".tierbox-write-")),
        "{names:?}"
    );
}

#[test]
fn file_writes_over_http_are_audited_and_kept_as_change_sets_in_review_mode() {
    let state = tempfile::tempdir().unwrap();
    let log = state.path().join("audit.jsonl");
    let policy = format!("version = 1\n[audit]\nlog = \"{}\"\n", log.display());
    let s = Server::start_in(state, &[], &[], Some(&policy));
    let (status, w) = s.call_in(
        "agent-1",
        "PUT",
        "/v1/files",
        Some(r#"{"path":"report.txt","data":"all green\n"}"#),
    );
    assert_eq!(status, 200, "{w}");
    assert!(w.get("audit_error").is_none(), "{w}");
    let text = std::fs::read_to_string(&log).unwrap();
    let record = text
        .lines()
        .find(|l| l.contains("file.written"))
        .unwrap_or_else(|| panic!("no file.written record: {text}"));
    let sha = w["sha256"].as_str().unwrap();
    for want in [
        "\"path\":\"report.txt\"",
        "\"owner\":\"http:agent-1\"",
        "\"bytes_written\":10",
        sha,
    ] {
        assert!(record.contains(want), "{want} not in {record}");
    }
    // Reads are not audited; a refused write is not recorded as written.
    let lines = text.lines().count();
    assert_eq!(read(&s, "report.txt", "").0, 200);
    refused(
        write(&s, json!({ "path": ".git/config", "data": "x" })),
        422,
        "file.protected",
        ".git",
    );
    let after = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        after.lines().filter(|l| l.contains("file.written")).count(),
        1
    );
    assert_eq!(after.lines().count(), lines);
    // A request may put the workspace under review: then the write is a change set of
    // the caller's, recorded with it, and the workspace is as it was.
    let (status, w) = write(
        &s,
        json!({ "path": "report.txt", "data": "all red\n", "workspace_mode": "overlay" }),
    );
    assert_eq!(status, 200, "{w}");
    assert!(w["kept_as"].as_str().is_some(), "{w}");
    assert_eq!(
        std::fs::read_to_string(s.ws.path().join("report.txt")).unwrap(),
        "all green\n"
    );
    let after = std::fs::read_to_string(&log).unwrap();
    let record = after.lines().rfind(|l| l.contains("file.written")).unwrap();
    assert!(
        record.contains(&format!("\"kept_as\":{}", w["kept_as"])),
        "{record}"
    );
    drop(s);

    let s = Server::start(&[], Some("version = 1\n[workspace]\nmode = \"overlay\"\n"));
    std::fs::write(s.ws.path().join("seen.txt"), b"kept").unwrap();
    let (status, w) = write(&s, json!({ "path": "new.txt", "data": "x" }));
    assert_eq!(status, 200, "{w}");
    let id = w["kept_as"].as_str().unwrap().to_owned();
    assert_eq!(
        (w["created"].as_bool(), w["size"].as_u64()),
        (Some(true), Some(1)),
        "{w}"
    );
    refused(
        write(
            &s,
            json!({ "path": "seen.txt", "data": "x", "workspace_mode": "direct" }),
        ),
        422,
        "workspace.mode_widened",
        "overlay",
    );
    refused(
        write(&s, json!({ "path": ".git/config", "data": "x" })),
        422,
        "file.protected",
        ".git",
    );
    assert!(!s.ws.path().join("new.txt").exists());
    let (status, r) = read(&s, "seen.txt", "");
    assert_eq!((status, r["text"].as_str()), (200, Some("kept")), "{r}");
    // The set is shown and applied as a run's is.
    let (status, shown) = s.call("GET", &format!("/v1/changes/{id}?diff=true"), None);
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["changes"]["changes"][0]["path"], "new.txt", "{shown}");
    let (status, applied) = s.call("POST", &format!("/v1/changes/{id}/apply"), None);
    assert_eq!(status, 200, "{applied}");
    assert_eq!(applied["applied"], json!(["new.txt"]));
    assert_eq!(std::fs::read(s.ws.path().join("new.txt")).unwrap(), b"x");
}

#[test]
fn files_over_mcp_are_tools_with_schemas_and_typed_refusals() {
    let (mut child, ws, _state) = mcp_server();
    std::fs::create_dir_all(ws.path().join(".git/hooks")).unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.path().join("out")).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok);
    initialize(&mut stdin, &mut lines);
    send(
        &mut stdin,
        &json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}),
    );
    let tools = response(&mut lines, 2)["result"]["tools"].clone();
    for name in ["file_read", "file_write", "file_list", "file_stat"] {
        let tool = tools.as_array().unwrap().iter().find(|t| t["name"] == name);
        let tool = tool.unwrap_or_else(|| {
            let listed: Vec<&Value> = tools
                .as_array()
                .unwrap()
                .iter()
                .map(|t| &t["name"])
                .collect();
            panic!("{name} is not listed: {listed:?}")
        });
        assert_eq!(tool["inputSchema"]["type"], "object", "{name}");
        assert_eq!(tool["inputSchema"]["additionalProperties"], false, "{name}");
        assert_eq!(tool["outputSchema"]["type"], "object", "{name}");
    }
    let write_tool = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "file_write")
        .unwrap();
    assert_eq!(write_tool["annotations"]["readOnlyHint"], false);
    let mut id = 10;
    let mut call = |name: &str, args: Value| {
        id += 1;
        send(
            &mut stdin,
            &json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":name,"arguments":args}}),
        );
        response(&mut lines, id)["result"].clone()
    };
    let w = call(
        "file_write",
        json!({ "path": "src/lib.rs", "data": "pub fn f() {}\n", "mkdir_parents": true }),
    );
    assert_eq!(w["isError"], false, "{w}");
    assert_eq!(w["structuredContent"]["bytes_written"], 14);
    assert_eq!(
        std::fs::read(ws.path().join("src/lib.rs")).unwrap(),
        b"pub fn f() {}\n"
    );
    let r = call("file_read", json!({ "path": "src/lib.rs" }));
    assert_eq!(r["structuredContent"]["text"], "pub fn f() {}\n", "{r}");
    assert!(
        r["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("pub fn f()")
    );
    let l = call("file_list", json!({ "path": "src" }));
    assert_eq!(
        l["structuredContent"]["entries"][0]["name"], "lib.rs",
        "{l}"
    );
    let st = call("file_stat", json!({ "path": "src/lib.rs" }));
    assert_eq!(
        (
            st["structuredContent"]["kind"].as_str(),
            st["structuredContent"]["size"].as_u64()
        ),
        (Some("file"), Some(14)),
        "{st}"
    );
    for (name, args, code) in [
        (
            "file_write",
            json!({ "path": ".git/hooks/pre-commit", "data": "#!/bin/sh\n" }),
            "file.protected",
        ),
        (
            "file_write",
            json!({ "path": "../x", "data": "x" }),
            "file.refused",
        ),
        (
            "file_write",
            json!({ "path": "out/x", "data": "x" }),
            "file.refused",
        ),
        (
            "file_write",
            json!({ "path": "x", "data": "x", "mode": 0o6755 }),
            "file.mode_refused",
        ),
        (
            "file_read",
            json!({ "path": "out/anything" }),
            "file.refused",
        ),
        ("file_read", json!({ "path": "missing" }), "file.not_found"),
        (
            "file_read",
            json!({ "path": "src/lib.rs", "max_bytes": 262145 }),
            "input.read_size_invalid",
        ),
        ("file_stat", json!({ "path": "/etc" }), "file.refused"),
        (
            "file_list",
            json!({ "path": "src", "extra": 1 }),
            "input.malformed",
        ),
    ] {
        let r = call(name, args.clone());
        assert_eq!(
            (
                r["isError"].as_bool(),
                r["structuredContent"]["code"].as_str()
            ),
            (Some(true), Some(code)),
            "{name} {args}: {r}"
        );
        assert!(
            r["content"][0]["text"]
                .as_str()
                .unwrap()
                .starts_with("rejected: "),
            "{r}"
        );
    }
    assert_eq!(
        std::fs::read_dir(ws.path().join(".git/hooks"))
            .unwrap()
            .count(),
        0
    );
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    drop(stdin);
    let _ = child.wait();
}
