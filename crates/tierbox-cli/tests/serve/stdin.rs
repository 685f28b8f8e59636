//! A run's stdin over HTTP: the streamed-stdin form (the request line, then raw bytes,
//! past the body cap), `stdin_base64`, and the refusals of bad stdin, with their codes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::support::*;

const POLICY: &str = "version = 1\n[exec]\nallowed_executables = [\"sha256sum\", \"wc\"]\n[limits]\nstdin_bytes = 16777216\n";

fn hex_sha256(data: &[u8]) -> String {
    tierbox_attest::jcs::hex(&Sha256::digest(data))
}

/// `POST path` in the streamed-stdin form: `line`, a line feed, then `stdin`, sent chunked
/// by a producer thread (pausing halfway) while the answer is read. Returns the status and
/// the body as JSON.
fn post_streamed(addr: &str, path: &str, line: &str, stdin: Vec<u8>) -> (u16, Value) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/vnd.tierbox.stdin-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    let mut w = s.try_clone().unwrap();
    let mut first = line.as_bytes().to_vec();
    first.push(b'\n');
    let producer = std::thread::spawn(move || {
        let chunk = |w: &mut TcpStream, data: &[u8]| {
            w.write_all(format!("{:x}\r\n", data.len()).as_bytes())?;
            w.write_all(data)?;
            w.write_all(b"\r\n")
        };
        let mut send = || -> std::io::Result<()> {
            w.write_all(head.as_bytes())?;
            chunk(&mut w, &first)?;
            let (a, b) = stdin.split_at(stdin.len() / 2);
            for c in a.chunks(70_001) {
                chunk(&mut w, c)?;
            }
            std::thread::sleep(Duration::from_millis(300));
            for c in b.chunks(70_001) {
                chunk(&mut w, c)?;
            }
            w.write_all(b"0\r\n\r\n")
        };
        // A server that answered before reading everything (a refusal) may close.
        let _ = send();
    });
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    producer.join().unwrap();
    let (status, _, body) = parse_response(&resp);
    (
        status,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

/// Regression: a run's stdin over HTTP was UTF-8 text inside the JSON body, whose cap
/// (128 KiB) bounded it. 10 MiB of random bytes in the streamed form reach the program
/// exactly (the digest `sha256sum` prints inside the sandbox is the host's), and so do
/// bytes given as `stdin_base64`; past the stdin limit the program reads the limit and
/// the outcome says so.
#[test]
fn binary_stdin_reaches_the_program_exactly_streamed_and_as_base64() {
    let s = Server::start(&[], Some(POLICY));
    let data = tierbox_test_support::binary_payload(10 << 20);
    let want = hex_sha256(&data);
    let line = r#"{"command":"sha256sum","tier":"b"}"#;
    let (status, v) = post_streamed(&s.addr, "/v1/process/run", line, data.clone());
    assert_eq!(status, 200, "{v}");
    tierbox_test_support::assert_streamed_stdin_reached(&v, 10 << 20, &want);
    // The same through `?stream=true`: JSON lines, the outcome last.
    let (status, v) = post_streamed(
        &s.addr,
        "/v1/process/run?stream=true",
        line,
        data[..100_000].to_vec(),
    );
    assert_eq!(status, 200, "{v}");
    let text = v.as_str().unwrap_or_default();
    let last: Value = serde_json::from_str(text.lines().last().unwrap_or("")).unwrap();
    assert_eq!(last["event"], "result", "{text}");
    assert_eq!(
        last["outcome"]["stdin"]["sha256"],
        hex_sha256(&data[..100_000]).as_str()
    );
    // Cut at the request's narrower limit.
    let (status, v) = post_streamed(
        &s.addr,
        "/v1/process/run",
        r#"{"command":"sha256sum","tier":"b","stdin_limit_bytes":5000}"#,
        data[..20_000].to_vec(),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["limit_hit"], "stdin", "{v}");
    assert_eq!(
        (
            v["stdin"]["bytes"].as_u64(),
            v["stdin"]["limit_hit"].as_bool()
        ),
        (Some(5000), Some(true))
    );
    let printed = v["stdout"]["text"].as_str().unwrap_or_default();
    assert!(printed.starts_with(&hex_sha256(&data[..5000])), "{v}");
    // A small binary stdin as base64.
    let small = &data[..1000];
    let mut req = tierbox_policy::ProcessRunRequest::new("sha256sum");
    req.tier = tierbox_policy::TierRequest::B;
    req.set_stdin_bytes(small.to_vec());
    let (status, v) = s.call(
        "POST",
        "/v1/process/run",
        Some(&serde_json::to_string(&req).unwrap()),
    );
    assert_eq!(status, 200, "{v}");
    let printed = v["stdout"]["text"].as_str().unwrap_or_default();
    assert!(printed.starts_with(&hex_sha256(small)), "{v}");
    assert_eq!(v["stdin"]["streamed"], false);
}

/// Bad stdin is refused with the rule's code and status, before anything runs: both
/// fields, bad base64, more than the limit, a limit above the policy's, a streamed body
/// that also carries `stdin`, one that never ends its request line, and a request line
/// over the body cap.
#[test]
fn bad_stdin_is_refused_with_its_rule() {
    let s = Server::start(&[], Some(POLICY));
    for (body, status, code) in [
        (
            json!({"command": "wc", "stdin": "a", "stdin_base64": "YQ=="}),
            400,
            "input.stdin_conflict",
        ),
        (
            json!({"command": "wc", "stdin_base64": "YQ=\n="}),
            400,
            "input.stdin_encoding_invalid",
        ),
        (
            json!({"command": "wc", "stdin_base64": "YWJj", "stdin_limit_bytes": 2}),
            400,
            "input.stdin_too_large",
        ),
        (
            json!({"command": "wc", "stdin_limit_bytes": 16_777_217}),
            422,
            "limits.above_policy",
        ),
    ] {
        let (got, v) = s.call("POST", "/v1/process/run", Some(&body.to_string()));
        assert_eq!(
            (got, v["error"]["code"].as_str()),
            (status, Some(code)),
            "{body}: {v}"
        );
    }
    let (got, v) = post_streamed(
        &s.addr,
        "/v1/process/run",
        r#"{"command":"wc","stdin":"inline too"}"#,
        b"streamed".to_vec(),
    );
    assert_eq!(
        (got, v["error"]["code"].as_str()),
        (400, Some("input.stdin_conflict")),
        "{v}"
    );
    let (got, v) = post_streamed(
        &s.addr,
        "/v1/wasm/run",
        r#"{"module":"m.wasm","stdin_base64":"YQ=="}"#,
        b"streamed".to_vec(),
    );
    assert_eq!(
        (got, v["error"]["code"].as_str()),
        (400, Some("input.stdin_conflict")),
        "{v}"
    );
    // No line feed before the body ends; a request line past the cap.
    let (got, _, text) = raw_typed(&s.addr, br#"{"command":"wc"}"#);
    assert_eq!(got, 400, "{text}");
    assert!(text.contains("input.malformed"), "{text}");
    let long = vec![b' '; tierbox_policy::request::MAX_REQUEST_BYTES + 1];
    let (got, _, text) = raw_typed(&s.addr, &long);
    assert_eq!(got, 413, "{text}");
    assert!(text.contains("input.too_large"), "{text}");
}

/// A streamed-stdin body sent whole, with a length.
fn raw_typed(addr: &str, body: &[u8]) -> (u16, String, String) {
    let auth = format!("Bearer {TOKEN}");
    raw_as(
        addr,
        "POST",
        "/v1/process/run",
        Some(body),
        &[("Authorization", &auth)],
        "application/vnd.tierbox.stdin-stream",
    )
}
