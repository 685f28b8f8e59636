//! The messages of a term's WebSocket (`docs/api.md`, "A term's WebSocket").
//!
//! Client to server: a **binary** frame is bytes for the terminal, exactly; a **text**
//! frame is one JSON control message ([`ClientMessage`]). Server to client: **binary**
//! frames are the terminal's output, exactly, in order; **text** frames are JSON
//! ([`ServerMessage`]): `attached` first, `lost` before output that follows a gap,
//! `error` answering a message that was refused, and `exit` last, before the close — or
//! `taken_over` last, when another client took the term's control over.
//!
//! A refused message never ends the connection: it is answered with an `error` frame
//! naming the rule (the codes of the HTTP routes: `input.malformed`,
//! `input.data_too_large`, `term.bad_size`, `term.signal_refused`, `term.ended`, …).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tierbox_policy::Rejection;
use tierbox_runner::background::BackgroundStatus;
use tierbox_runner::term::TermSize;

use crate::terms::{MAX_TERM_INPUT_BYTES, TermRequestError, term_size};

/// A control message, a text frame from the client (`type` names it; unknown fields are
/// refused).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
#[schemars(title = "TermWsClientMessage", rename = "TermWsClientMessage")]
pub enum ClientMessage {
    /// Resize the terminal (`SIGWINCH` inside), as `POST /v1/terms/{id}/resize`.
    Resize {
        /// Rows, 1 to 4096.
        rows: u64,
        /// Columns, 1 to 4096.
        cols: u64,
        /// Redraw: when the size is the one the terminal has, send `SIGWINCH` to its
        /// foreground group anyway, so a full-screen program draws its screen again (what
        /// a client that attaches to a running term wants; the kernel signals only a
        /// change).
        #[serde(default)]
        redraw: bool,
    },
    /// Signal the foreground job, as `POST /v1/terms/{id}/signal`: `INT`, `TERM`, `HUP`,
    /// `QUIT`, `KILL`, `WINCH`, `TSTP` or `CONT`.
    Signal {
        /// The signal's name (with or without `SIG`, any case).
        signal: String,
    },
    /// Close the terminal's input (its end-of-file character, `^D`). (A variant with no
    /// fields rather than a unit one: serde refuses unknown fields only on the former.)
    Eof {},
    /// Text to type (its UTF-8 bytes), for a client that finds text frames handier than
    /// binary ones; at most 64 KiB.
    Input {
        /// The text.
        data: String,
    },
}

/// What a client's frame asks for, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Write these bytes to the terminal.
    Input(Vec<u8>),
    /// Resize the terminal; with `redraw`, signal `SIGWINCH` when the size stays.
    Resize {
        /// The new size.
        size: TermSize,
        /// Whether an unchanged size is signalled too.
        redraw: bool,
    },
    /// Send the named signal (checked against the allowlist when sent).
    Signal(String),
    /// Close the input.
    Eof,
}

/// The bytes of a binary frame, when within [`MAX_TERM_INPUT_BYTES`].
pub fn binary(bytes: &[u8]) -> Result<Command, TermRequestError> {
    check_input(bytes.len())?;
    Ok(Command::Input(bytes.to_vec()))
}

fn check_input(bytes: usize) -> Result<(), TermRequestError> {
    match bytes <= MAX_TERM_INPUT_BYTES {
        true => Ok(()),
        false => Err(TermRequestError::DataTooLarge {
            bytes,
            max: MAX_TERM_INPUT_BYTES,
        }),
    }
}

/// The command of a text frame: one [`ClientMessage`].
///
/// ```
/// use tierbox_server::term_ws::protocol::{Command, text};
///
/// assert_eq!(text(r#"{"type":"eof"}"#).unwrap(), Command::Eof);
/// assert_eq!(text(r#"{"type":"input","data":"ls\r"}"#).unwrap(), Command::Input(b"ls\r".to_vec()));
/// assert_eq!(text(r#"{"type":"resize","rows":0,"cols":80}"#).unwrap_err().code(), "term.bad_size");
/// assert_eq!(text("ls").unwrap_err().code(), "input.malformed");
/// ```
pub fn text(frame: &str) -> Result<Command, TermRequestError> {
    let message: ClientMessage =
        tierbox_policy::json::from_slice(frame.as_bytes()).map_err(|e| {
            TermRequestError::Rejected(Rejection::Malformed {
                detail: format!(
                    "a text frame is one JSON control message ({{\"type\": \"resize\" | \
                     \"signal\" | \"eof\" | \"input\", …}}; bytes go in binary frames): {e}"
                ),
            })
        })?;
    Ok(match message {
        ClientMessage::Resize { rows, cols, redraw } => Command::Resize {
            size: term_size(rows, cols)?,
            redraw,
        },
        ClientMessage::Signal { signal } => Command::Signal(signal),
        ClientMessage::Eof {} => Command::Eof,
        ClientMessage::Input { data } => {
            check_input(data.len())?;
            Command::Input(data.into_bytes())
        }
    })
}

/// A text frame from the server.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
#[schemars(rename = "TermWsServerMessage")]
pub enum ServerMessage {
    /// The first frame: the term, and the absolute offset of the first output byte that
    /// follows (reattach from `offset` plus every byte received and every byte `lost`).
    Attached {
        /// The term.
        id: String,
        /// Absolute offset of the next binary frame's first byte.
        offset: u64,
    },
    /// Output the client did not receive: it left the term's 1 MiB ring before it was
    /// sent (the client read too slowly, or asked for an offset already gone). The next
    /// binary frame starts `bytes` later than the last one ended.
    Lost {
        /// Bytes skipped.
        bytes: u64,
    },
    /// A message was refused; the connection goes on.
    Error {
        /// The rule's stable code, as the HTTP routes name it.
        code: String,
        /// What was wrong, naming the value.
        message: String,
    },
    /// Another client attached with `takeover=true` and now controls the term; this
    /// connection is closed next (1000). The term runs on.
    TakenOver {
        /// The WebSocket that took it over.
        socket: u64,
    },
    /// The term ended: its final status, as `GET /v1/terms/{id}` returns it. The server
    /// closes the connection next (1000).
    Exit {
        /// The status.
        #[serde(flatten)]
        status: Box<BackgroundStatus>,
    },
}

impl ServerMessage {
    /// The frame's JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| {
            format!(r#"{{"type":"error","code":"run.failed","message":"encoding a frame: {e}"}}"#)
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn control_messages_parse_closed_and_checked() {
        assert_eq!(
            text(r#"{"type":"resize","rows":33,"cols":101}"#).unwrap(),
            Command::Resize {
                size: TermSize {
                    rows: 33,
                    cols: 101
                },
                redraw: false
            }
        );
        assert_eq!(
            text(r#"{"type":"resize","rows":2,"cols":3,"redraw":true}"#).unwrap(),
            Command::Resize {
                size: TermSize { rows: 2, cols: 3 },
                redraw: true
            }
        );
        assert_eq!(
            text(r#"{"type":"signal","signal":"INT"}"#).unwrap(),
            Command::Signal("INT".into())
        );
        for (frame, code) in [
            ("", "input.malformed"),
            ("{", "input.malformed"),
            (r#"{"type":"bogus"}"#, "input.malformed"),
            (r#"{"rows":1,"cols":1}"#, "input.malformed"),
            (r#"{"type":"eof","extra":1}"#, "input.malformed"),
            (r#"{"type":"resize","rows":24}"#, "input.malformed"),
            (r#"{"type":"eof","type":"eof"}"#, "input.malformed"),
            (
                r#"{"type":"resize","rows":24,"cols":70000}"#,
                "term.bad_size",
            ),
        ] {
            assert_eq!(text(frame).unwrap_err().code(), code, "{frame}");
        }
    }

    #[test]
    fn input_is_bounded_by_the_write_cap() {
        let most = vec![b'x'; MAX_TERM_INPUT_BYTES];
        assert_eq!(binary(&most).unwrap(), Command::Input(most.clone()));
        let over = vec![b'x'; MAX_TERM_INPUT_BYTES + 1];
        assert_eq!(binary(&over).unwrap_err().code(), "input.data_too_large");
        let frame =
            serde_json::json!({"type": "input", "data": "y".repeat(MAX_TERM_INPUT_BYTES + 1)});
        assert_eq!(
            text(&frame.to_string()).unwrap_err().code(),
            "input.data_too_large"
        );
    }

    #[test]
    fn server_frames_are_tagged_json() {
        let lost = ServerMessage::Lost { bytes: 7 }.to_json();
        assert_eq!(lost, r#"{"type":"lost","bytes":7}"#);
        let e = ServerMessage::Error {
            code: "term.bad_size".into(),
            message: "m".into(),
        };
        assert_eq!(
            e.to_json(),
            r#"{"type":"error","code":"term.bad_size","message":"m"}"#
        );
        let a = ServerMessage::Attached {
            id: "ab".into(),
            offset: 3,
        };
        assert_eq!(a.to_json(), r#"{"type":"attached","id":"ab","offset":3}"#);
        let t = ServerMessage::TakenOver { socket: 9 };
        assert_eq!(t.to_json(), r#"{"type":"taken_over","socket":9}"#);
    }
}
