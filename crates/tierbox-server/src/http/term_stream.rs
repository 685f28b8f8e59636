//! `GET /v1/terms/{id}/stream[?offset=N]`: a term's output as it comes, over plain HTTP —
//! for a client that follows a term but cannot or need not open a WebSocket (`curl -N`, a
//! log shipper). One JSON line per event (`application/x-ndjson`), the WebSocket's server
//! messages ([`crate::term_ws::protocol::ServerMessage`]) plus `output` lines carrying the
//! bytes: `attached` first, `output` and `lost` as the terminal shows, `exit` last, then
//! the end of the body.
//!
//! It is a view of the term ([`AttachMode::View`]): it sends nothing to the term. Like a
//! WebSocket it holds no admission slot, counts among the open sockets
//! ([`crate::term_ws::MAX_TERM_SOCKETS`], per owner too), is read at the client's pace (a
//! slow client only loses output, counted by `lost`), ends with its owner's session, and
//! is a `term.attached`/`term.detached` pair of the audit log.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Extension, Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use serde::Deserialize;
use serde_json::{Value, json};
use tierbox_runner::ring::OutputChunk;
use tokio::sync::mpsc;

use super::term_output::{Attach, Attachment, Frames, give_output};
use super::{ApiError, AppState, Auth, err, ndjson_response, query_error};
use crate::results::ReadBytes;
use crate::term_ws::control::AttachMode;
use crate::term_ws::protocol::ServerMessage;
use crate::term_ws::{Detach, WS_SEND_TIMEOUT};

/// Lines queued for a stream's client ahead of what it has taken: one read of output and
/// one message. The pump reads the ring at the client's pace; this is not a buffer of
/// output.
const STREAM_LINES: usize = 2;

/// Adds the stream route to `router`.
pub(super) fn routes(router: Router<Arc<AppState>>) -> Router<Arc<AppState>> {
    router.route("/v1/terms/{id}/stream", get(term_stream))
}

/// The stream's query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StreamQuery {
    /// Absolute byte offset to start from (absent: what the ring still holds).
    #[serde(default)]
    offset: Option<u64>,
}

/// A stream's lines: each event one line of compact JSON.
struct Lines(mpsc::Sender<Bytes>);

impl Lines {
    async fn line(&mut self, v: &Value) -> Result<(), Detach> {
        let mut b = serde_json::to_vec(v).unwrap_or_default();
        b.push(b'\n');
        match tokio::time::timeout(WS_SEND_TIMEOUT, self.0.send(Bytes::from(b))).await {
            Ok(Ok(())) => Ok(()),
            // The body was dropped: the client went away.
            Ok(Err(_)) => Err(Detach::ClientClosed),
            Err(_) => Err(Detach::Stalled),
        }
    }
}

impl Frames for Lines {
    async fn output(&mut self, read: OutputChunk) -> Result<(), Detach> {
        let mut v = json!({ "type": "output" });
        if let (Some(line), Ok(Value::Object(fields))) = (
            v.as_object_mut(),
            serde_json::to_value(ReadBytes::from(read)),
        ) {
            line.extend(fields);
        }
        self.line(&v).await
    }

    async fn message(&mut self, message: &ServerMessage) -> Result<(), Detach> {
        self.line(&serde_json::to_value(message).unwrap_or(Value::Null))
            .await
    }
}

/// `GET /v1/terms/{id}/stream[?offset=N]`.
async fn term_stream(
    State(st): State<Arc<AppState>>,
    Extension(auth): Extension<Auth>,
    id: Result<Path<String>, PathRejection>,
    query: Result<Query<StreamQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (id, owner) = super::terms::id_and_owner(id, &auth, &headers)?;
    let Query(query) = query.map_err(|e| query_error(&e))?;
    st.service.term_status(&owner, &id).await?;
    let mut slot = st
        .ws
        .sockets()
        .open(&owner)
        .map_err(|e| err("ws.limit", e.to_string()))?;
    let attachment = Attachment::new(
        &st.service,
        Attach {
            path: format!("/v1/terms/{id}/stream"),
            term: id,
            owner,
            origin: None,
            socket: slot.number(),
            offset: query.offset,
            mode: AttachMode::View,
        },
    )?;
    attachment.record_attached().await?;
    let (lines_tx, lines_rx) = mpsc::channel::<Bytes>(STREAM_LINES);
    tokio::spawn(async move {
        let gone = lines_tx.clone();
        let mut lines = Lines(lines_tx);
        // A stream takes no input: nothing is ever queued.
        let (_, mut none) = mpsc::channel(1);
        let why = tokio::select! {
            why = give_output(&mut lines, &attachment, &mut none) => why,
            () = slot.owner_ended() => Detach::OwnerEnded,
            () = gone.closed() => Detach::ClientClosed,
        };
        drop((lines, gone, slot));
        attachment.record_detached(why).await;
    });
    Ok(ndjson_response(lines_rx))
}
