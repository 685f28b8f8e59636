#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

use super::*;

const ID: &str = "0123456789abcdef0123456789abcdef";

fn http_err(doc: Value) -> (String, String) {
    let e = TermStart::from_http(doc.to_string().as_bytes()).unwrap_err();
    (e.code().to_owned(), e.to_string())
}

#[test]
fn a_start_is_a_background_run_owned_request_with_a_size() {
    let s =
        TermStart::from_http(br#"{"command":"python3","args":["-i","-q"],"tier":"c"}"#).unwrap();
    assert!(s.request.background);
    assert_eq!(s.request.lifetime, Some(Lifetime::RunOwned));
    assert_eq!(s.size, DEFAULT_TERM_SIZE);
    assert_eq!(s.request.tier, tierbox_policy::TierRequest::C);
    assert_eq!((s.first.offset, s.first.wait_ms), (0, 0));
    assert_eq!(s.first.wait, Wait::FirstOutput);
    let s = TermStart::from_http(
        br#"{"command":"bash","lifetime":"detached","pty":{"rows":40,"cols":100},"wait_ms":500}"#,
    )
    .unwrap();
    assert_eq!(s.request.lifetime, Some(Lifetime::Detached));
    assert_eq!((s.size.rows, s.size.cols, s.first.wait_ms), (40, 100, 500));
    let s = TermStart::from_mcp(br#"{"command":"bash","rows":30}"#).unwrap();
    assert_eq!((s.size.rows, s.size.cols), (30, 80));
    assert_eq!(
        (s.first.wait, s.first.wait_ms),
        (Wait::Yield, DEFAULT_YIELD_MS)
    );
}

#[test]
fn a_start_refuses_what_a_term_cannot_mean_and_names_it() {
    for field in NOT_FOR_TERMS {
        let mut doc = json!({ "command": "bash" });
        doc[field] = match field {
            "background" => json!(true),
            "stdin_limit_bytes" => json!(10),
            _ => json!("x"),
        };
        let (code, message) = http_err(doc);
        assert_eq!(code, "input.term_field", "{field}");
        assert!(message.contains(field), "{message}");
    }
    let (code, message) = http_err(json!({ "command": "bash", "pty": {"rows": 0, "cols": 80} }));
    assert_eq!(code, "term.bad_size");
    assert!(message.contains("0x80"), "{message}");
    let (code, message) =
        http_err(json!({ "command": "bash", "pty": {"rows": 70000, "cols": 80} }));
    assert_eq!(code, "term.bad_size");
    assert!(message.contains("70000x80"), "{message}");
    let (code, _) = http_err(json!({ "command": "bash", "pty": {"rows": 2} }));
    assert_eq!(code, "input.malformed");
    let (code, message) = http_err(json!({ "command": "bash", "wait_ms": 30001 }));
    assert_eq!(code, "term.bad_wait");
    assert!(message.contains("wait_ms 30001"), "{message}");
    let (code, _) = http_err(json!({ "command": "bash", "max_bytes": 0 }));
    assert_eq!(code, "input.read_size_invalid");
    let (code, _) = http_err(json!({ "command": "bash", "rows": 3 }));
    assert_eq!(code, "input.malformed", "rows is MCP's, pty is HTTP's");
    let (code, _) = http_err(json!(["bash"]));
    assert_eq!(code, "input.malformed");
    let e = TermStart::from_http(br#"{"command":"a","command":"b"}"#).unwrap_err();
    assert_eq!(e.code(), "input.malformed", "duplicate keys");
    let big = json!({ "command": "x".repeat(MAX_REQUEST_BYTES) }).to_string();
    assert_eq!(
        TermStart::from_mcp(big.as_bytes()).unwrap_err().code(),
        "input.too_large"
    );
    let e = TermStart::from_mcp(br#"{"command":"bash","cols":5000}"#).unwrap_err();
    assert_eq!(e.code(), "term.bad_size");
    let e = TermStart::from_mcp(br#"{"command":"bash","pty":{"rows":1,"cols":1}}"#).unwrap_err();
    assert_eq!(e.code(), "input.malformed");
}

#[test]
fn input_is_exactly_one_of_text_and_base64() {
    let body = |v: Value| -> TermInputBody { serde_json::from_value(v).unwrap() };
    assert_eq!(body(json!({"data": "6*7\r"})).bytes().unwrap(), b"6*7\r");
    assert_eq!(
        body(json!({"data_base64": "AP8D"})).bytes().unwrap(),
        [0, 0xff, 3]
    );
    assert_eq!(
        body(json!({"data_base64": "AP8"})).bytes().unwrap(),
        [0, 0xff]
    );
    assert_eq!(body(json!({"eof": true})).bytes().unwrap(), b"");
    let code = |v: Value| body(v).bytes().unwrap_err().code();
    assert_eq!(
        code(json!({"data": "a", "data_base64": "YQ=="})),
        "input.data_conflict"
    );
    assert_eq!(
        code(json!({"data": "a", "data_base64": "YQ==", "eof": true})),
        "input.data_conflict"
    );
    assert_eq!(code(json!({})), "input.no_data");
    assert_eq!(code(json!({"eof": false})), "input.no_data");
    let bad = body(json!({"data_base64": "YW*j"})).bytes().unwrap_err();
    assert_eq!(bad.code(), "input.data_encoding_invalid");
    assert!(bad.to_string().contains("'*' at index 2"), "{bad}");
    let bad = body(json!({"data_base64": "YWJjZ"})).bytes().unwrap_err();
    assert!(bad.to_string().contains("length of 5"), "{bad}");
    let big = "x".repeat(MAX_TERM_INPUT_BYTES + 1);
    let e = body(json!({ "data": big })).bytes().unwrap_err();
    assert_eq!(e.code(), "input.data_too_large");
    assert!(
        e.to_string()
            .contains(&format!("{}", MAX_TERM_INPUT_BYTES + 1))
    );
    assert!(serde_json::from_value::<TermInputBody>(json!({"text": "a"})).is_err());
}

#[test]
fn signals_are_the_allowlist_and_long_names_are_cut() {
    assert_eq!(signal_of("int").unwrap(), TermSignal::Int);
    assert_eq!(signal_name(signal_of("SIGWINCH").unwrap()), "WINCH");
    let e = ServiceError::from(signal_of("USR1").unwrap_err());
    assert_eq!(
        (e.code.as_str(), e.http_status()),
        ("term.signal_refused", 400)
    );
    assert!(e.message.contains("USR1"), "{}", e.message);
    let long = "X".repeat(10_000);
    let e = ServiceError::from(signal_of(&long).unwrap_err());
    assert!(e.message.len() < 200, "{}", e.message);
}

#[test]
fn every_term_error_has_a_stable_code_and_status() {
    let not_found = ServiceError::from(TermError::Background(BackgroundError::NotFound {
        id: ID.to_owned(),
    }));
    assert_eq!(
        (not_found.code.as_str(), not_found.http_status()),
        ("term.not_found", 404)
    );
    assert!(
        not_found.message.contains("no term"),
        "{}",
        not_found.message
    );
    let cases = [
        (
            TermError::BadSize { rows: 0, cols: 1 },
            "term.bad_size",
            400,
        ),
        (TermError::BadWait { wait_ms: 40_000 }, "term.bad_wait", 400),
        (TermError::Ended { id: ID.to_owned() }, "term.ended", 409),
        (
            TermError::Background(BackgroundError::Limit {
                scope: "this owner".to_owned(),
                live: 16,
                max: 16,
            }),
            "term.limit",
            409,
        ),
        (
            TermError::Background(BackgroundError::Stdin {
                id: ID.to_owned(),
                reason: "input was closed".to_owned(),
            }),
            "term.input",
            409,
        ),
        (
            TermError::Terminal {
                id: ID.to_owned(),
                what: "resize (TIOCSWINSZ)",
                source: std::io::Error::from_raw_os_error(libc::EBADF),
            },
            "term.terminal",
            500,
        ),
        (
            TermError::Background(BackgroundError::Run(tierbox_runner::RunError::Rejected(
                Rejection::Malformed {
                    detail: "x".to_owned(),
                },
            ))),
            "input.malformed",
            400,
        ),
    ];
    for (err, code, status) in cases {
        let e = ServiceError::from(err);
        assert_eq!((e.code.as_str(), e.http_status()), (code, status), "{e}");
    }
    for (err, status) in [
        (TermRequestError::DataConflict, 400),
        (TermRequestError::NoData, 400),
        (TermRequestError::BadSize { rows: 0, cols: 0 }, 400),
        (
            TermRequestError::NotForTerms {
                field: "stdin".to_owned(),
            },
            400,
        ),
        (Rejection::RequestTooLarge { bytes: 1, max: 0 }.into(), 413),
    ] {
        assert_eq!(ServiceError::from(err).http_status(), status);
    }
}

#[test]
fn tool_arguments_are_closed_and_checked() {
    let (input, read) = write_args(format!(r#"{{"id":"{ID}","data":"x"}}"#).as_bytes()).unwrap();
    assert_eq!(input.bytes().unwrap(), b"x");
    assert_eq!(
        (read.yield_ms, read.max_bytes),
        (DEFAULT_YIELD_MS, DEFAULT_TERM_READ_BYTES)
    );
    let e =
        write_args(format!(r#"{{"id":"{ID}","data":"x","close":true}}"#).as_bytes()).unwrap_err();
    assert_eq!(e.code(), "input.malformed");
    let e = write_args(br#"{"id":"12","eof":true}"#).unwrap_err();
    assert_eq!(e.code(), "input.handle_invalid");
    let e =
        write_args(format!(r#"{{"id":"{ID}","eof":true,"eof":false}}"#).as_bytes()).unwrap_err();
    assert_eq!(e.code(), "input.malformed", "duplicate keys");
    let e = args_of(br#"{"id":"1234"}"#, |a: &SessionCloseArgs| &a.id).unwrap_err();
    assert_eq!(e.code(), "input.handle_invalid");
    let e = args_of(
        format!(r#"{{"id":"{ID}","pid":1}}"#).as_bytes(),
        |a: &SessionCloseArgs| &a.id,
    )
    .unwrap_err();
    assert_eq!(e.code(), "input.malformed");
}

#[test]
fn tool_schemas_are_closed_objects_bounded_by_the_constants() {
    for name in TERM_TOOL_NAMES {
        let s = tool_schema(name).unwrap();
        assert_eq!(s["type"], "object", "{name}");
        assert_eq!(s["additionalProperties"], false, "{name}");
        assert_eq!(s["title"], name, "{name}");
        assert!(
            s["description"].as_str().is_some_and(|d| d.len() > 20),
            "{name}"
        );
        if name != SESSION_START_TOOL {
            assert_eq!(s["required"][0], "id", "{name}");
            assert_eq!(s["properties"]["id"]["maxLength"], HANDLE_HEX_LEN, "{name}");
        }
    }
    assert!(tool_schema("session_attach").is_none());
    let start = tool_schema(SESSION_START_TOOL).unwrap();
    for field in NOT_FOR_TERMS {
        assert!(start["properties"].get(field).is_none(), "{field}");
    }
    assert_eq!(start["properties"]["rows"]["maximum"], MAX_TERM_DIMENSION);
    assert_eq!(start["properties"]["yield_ms"]["maximum"], MAX_TERM_WAIT_MS);
    assert_eq!(start["required"], json!(["command"]));
    let write = tool_schema(SESSION_WRITE_TOOL).unwrap();
    assert_eq!(write["properties"]["yield_ms"]["maximum"], MAX_TERM_WAIT_MS);
    assert_eq!(
        write["properties"]["max_bytes"]["maximum"],
        MAX_TERM_READ_BYTES
    );
    assert_eq!(
        write["properties"]["data"]["maxLength"],
        MAX_TERM_INPUT_BYTES
    );
    let resize = tool_schema(SESSION_RESIZE_TOOL).unwrap();
    assert_eq!(resize["properties"]["cols"]["maximum"], MAX_TERM_DIMENSION);
    assert_eq!(resize["properties"]["cols"]["minimum"], 1);
    let http = http_start_schema();
    assert_eq!(
        http["properties"]["pty"]["properties"]["rows"]["minimum"],
        1
    );
    assert!(http["properties"].get("rows").is_none());
}
