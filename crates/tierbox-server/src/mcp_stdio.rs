//! The MCP stdio transport's front: every line from the client is checked before the MCP
//! library sees it, and a line that is not a JSON-RPC 2.0 message gets a JSON-RPC error
//! instead of silence (the library drops such lines, so a client would wait forever):
//!
//! - longer than [`MAX_MCP_MESSAGE_BYTES`]: `-32600` (invalid request), `id` null; the
//!   line is skipped without being buffered;
//! - not JSON, or JSON with a duplicate key: `-32700` (parse error), `id` null;
//! - JSON that is not a single JSON-RPC 2.0 object (a batch, no `"jsonrpc": "2.0"`, no
//!   `method` and no `result`/`error`): `-32600`, with the request's `id` when it has a
//!   usable one.
//!
//! Lines the library writes and these errors go out through one writer, a whole line at
//! a time, so they never interleave.

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// Largest message accepted from an MCP client, in bytes (a `tools/call` carries at most
/// a 128 KiB request; the rest is envelope).
pub const MAX_MCP_MESSAGE_BYTES: usize = 1024 * 1024;

/// JSON-RPC: the text is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC: the JSON is not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;

/// Lines buffered between the producers and the writer.
const OUTPUT_LINES: usize = 64;

/// Wraps the client's `input` and `output`: returns the pair to hand to the MCP library
/// (it reads checked lines and writes into the shared writer).
pub fn guard<R, W>(input: R, output: W) -> (tokio::io::DuplexStream, tokio::io::DuplexStream)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (lib_in, mut to_lib) = tokio::io::duplex(MAX_MCP_MESSAGE_BYTES);
    let (lib_out, mut from_lib) = tokio::io::duplex(MAX_MCP_MESSAGE_BYTES);
    let (lines_tx, mut lines_rx) = mpsc::channel::<Vec<u8>>(OUTPUT_LINES);

    // The one writer: the library's output a whole line at a time, and the errors for
    // lines the library never saw, in the order they come.
    tokio::spawn(async move {
        let mut output = output;
        let mut pending = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut lib_open = true;
        loop {
            let line = tokio::select! {
                read = from_lib.read(&mut buf), if lib_open => {
                    match read {
                        Ok(0) | Err(_) => {
                            lib_open = false;
                            std::mem::take(&mut pending)
                        }
                        Ok(n) => {
                            pending.extend_from_slice(buf.get(..n).unwrap_or_default());
                            match pending.iter().rposition(|b| *b == b'\n') {
                                Some(end) => pending.drain(..=end).collect(),
                                None => continue,
                            }
                        }
                    }
                }
                Some(line) = lines_rx.recv() => line,
                else => return,
            };
            if line.is_empty() {
                continue;
            }
            if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
                return;
            }
        }
    });
    // The client's input, checked.
    tokio::spawn(async move {
        let mut input = BufReader::new(input);
        loop {
            let line = match read_bounded_line(&mut input).await {
                Ok(Line::Eof) | Err(_) => break,
                Ok(Line::TooLong(n)) => Err(error(
                    Value::Null,
                    INVALID_REQUEST,
                    &format!(
                        "message of {n}+ bytes is over the {MAX_MCP_MESSAGE_BYTES}-byte limit"
                    ),
                )),
                Ok(Line::Text(text)) => check(&text).map(|()| text),
            };
            let sent = match line {
                Ok(text) if text.iter().all(u8::is_ascii_whitespace) => Ok(()),
                Ok(mut text) => {
                    text.push(b'\n');
                    to_lib.write_all(&text).await.map_err(drop)
                }
                Err(reply) => lines_tx.send(reply).await.map_err(drop),
            };
            if sent.is_err() {
                break;
            }
        }
        // EOF reaches the library: the session ends.
        let _ = to_lib.shutdown().await;
    });
    (lib_in, lib_out)
}

enum Line {
    Text(Vec<u8>),
    TooLong(usize),
    Eof,
}

/// The next `\n`-terminated line (without it and a trailing `\r`), never buffering more
/// than [`MAX_MCP_MESSAGE_BYTES`]: a longer line is skipped to its end.
async fn read_bounded_line<R: AsyncRead + Unpin>(
    input: &mut BufReader<R>,
) -> std::io::Result<Line> {
    let mut line = Vec::new();
    let mut too_long = false;
    let mut seen = 0usize;
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (too_long, line.is_empty()) {
                (true, _) => Line::TooLong(seen),
                (false, true) => Line::Eof,
                (false, false) => Line::Text(line),
            });
        }
        let (chunk, done) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (available.get(..i).unwrap_or_default(), Some(i + 1)),
            None => (available, None),
        };
        seen = seen.saturating_add(chunk.len());
        if seen > MAX_MCP_MESSAGE_BYTES {
            too_long = true;
            line.clear();
        } else {
            line.extend_from_slice(chunk);
        }
        let consumed = done.unwrap_or(available.len());
        input.consume(consumed);
        if done.is_some() {
            if too_long {
                return Ok(Line::TooLong(seen));
            }
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(Line::Text(line));
        }
    }
}

/// `Ok` for a line to pass to the library; else the error reply (a whole line).
fn check(text: &[u8]) -> Result<(), Vec<u8>> {
    if text.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
    let parsed = std::str::from_utf8(text)
        .map_err(|e| e.to_string())
        .and_then(|t| tierbox_policy::json::value(t).map_err(|e| e.to_string()));
    let v = parsed.map_err(|e| error(Value::Null, PARSE_ERROR, &format!("parse error: {e}")))?;
    let id = match v.get("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) => id.clone(),
        _ => Value::Null,
    };
    let Some(obj) = v.as_object() else {
        return Err(error(
            Value::Null,
            INVALID_REQUEST,
            "not a JSON-RPC 2.0 message object (batches are not supported)",
        ));
    };
    if obj.get("jsonrpc") != Some(&json!("2.0")) {
        return Err(error(id, INVALID_REQUEST, "\"jsonrpc\" must be \"2.0\""));
    }
    let is_request = obj.get("method").is_some_and(Value::is_string);
    let is_response = obj.contains_key("result") || obj.contains_key("error");
    if !is_request && !is_response {
        return Err(error(
            id,
            INVALID_REQUEST,
            "a message needs a string \"method\", or a \"result\" or \"error\"",
        ));
    }
    Ok(())
}

/// A JSON-RPC error response, as a line.
fn error(id: Value, code: i64, message: &str) -> Vec<u8> {
    let mut line = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": code, "message": message},
    })
    .to_string()
    .into_bytes();
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn reply(text: &str) -> Value {
        let err = check(text.as_bytes()).unwrap_err();
        serde_json::from_slice(&err).unwrap()
    }

    #[test]
    fn each_bad_line_gets_its_json_rpc_error() {
        assert!(check(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).is_ok());
        assert!(check(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).is_ok());
        assert!(check(br#"{"jsonrpc":"2.0","id":3,"result":{}}"#).is_ok());
        for (text, code, id) in [
            ("this is not json", PARSE_ERROR, Value::Null),
            (
                r#"{"jsonrpc":"2.0","id":7,"method":"tools/list""#,
                PARSE_ERROR,
                Value::Null,
            ),
            (
                r#"{"jsonrpc":"2.0","id":7,"id":8,"method":"ping"}"#,
                PARSE_ERROR,
                Value::Null,
            ),
            (
                r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
                INVALID_REQUEST,
                Value::Null,
            ),
            (r#"{"id":5,"method":"ping"}"#, INVALID_REQUEST, json!(5)),
            (
                r#"{"jsonrpc":"2.0","id":"a","params":{}}"#,
                INVALID_REQUEST,
                json!("a"),
            ),
            (
                r#"{"jsonrpc":"2.0","id":{"x":1},"method":5}"#,
                INVALID_REQUEST,
                Value::Null,
            ),
        ] {
            let r = reply(text);
            assert_eq!(r["error"]["code"], code, "{text}: {r}");
            assert_eq!(r["id"], id, "{text}: {r}");
            assert_eq!(r["jsonrpc"], "2.0");
        }
    }

    #[tokio::test]
    async fn an_oversized_line_is_skipped_and_answered_and_the_next_one_passes() {
        let mut big = vec![b'x'; MAX_MCP_MESSAGE_BYTES + 10];
        big.push(b'\n');
        big.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\r\n");
        let mut input = BufReader::new(&big[..]);
        assert!(matches!(
            read_bounded_line(&mut input).await.unwrap(),
            Line::TooLong(n) if n > MAX_MCP_MESSAGE_BYTES
        ));
        match read_bounded_line(&mut input).await.unwrap() {
            Line::Text(t) => assert_eq!(t, br#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#),
            _ => panic!("the next line was lost"),
        }
        assert!(matches!(
            read_bounded_line(&mut input).await.unwrap(),
            Line::Eof
        ));
    }
}
