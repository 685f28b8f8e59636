//! The WebSocket routes of terms ([`crate::term_ws`]): `POST /v1/terms/{id}/ws_ticket`
//! (bearer token, owner-scoped) and `GET /v1/terms/{id}/ws?ticket=…[&offset=N]` (the
//! handshake, which takes the ticket instead of the token), and the connection itself:
//! one task reading the client's frames into the term, one writing the term's output to
//! the client, either ending the connection.
//!
//! The handshake's checks, in order, each a typed refusal before `101`: the term id's
//! shape; the `Origin` (a refused page spends no ticket); the ticket, spent from here on
//! whatever follows; the rest of the query; the term (still the ticket owner's); the
//! upgrade headers; a place among the open sockets; the term's control, for a
//! controlling attach (`term.controlled` while another client has it, after
//! [`CONTROL_HANDOVER_WAIT`], unless `takeover=true`); the `term.attached` record — and only once that is written is a
//! client taken over told.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::rejection::PathRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Extension, Path, RawQuery, State};
use axum::http::{HeaderMap, header};
use axum::routing::{get, post};
use futures_util::{SinkExt, StreamExt};
use tierbox_runner::audit::now_unix_ms;
use tokio::sync::mpsc;

use super::term_output::{Attach, Attachment, WsFrames, give_output};
use super::{ApiError, ApiResult, AppState, Auth, err, ok, path_id};
use crate::results::{TermWsTicket, to_json};
use crate::term_ws::control::{AttachMode, ControlSlot, Controlled};
use crate::term_ws::origins::OriginCheck;
use crate::term_ws::protocol::{self, ServerMessage};
use crate::term_ws::{Detach, MAX_WS_MESSAGE_BYTES, SocketSlot, WS_REPLY_FRAMES, WS_SEND_TIMEOUT};

/// Longest a controlling attach waits for the term's controller to go away before it is
/// refused with `term.controlled` (1 s): long enough for a connection its client just
/// closed to be wound up, short enough that a refusal comes at once to a person.
pub const CONTROL_HANDOVER_WAIT: Duration = Duration::from_secs(1);

/// How often that wait looks again.
const CONTROL_RETRY_INTERVAL: Duration = Duration::from_millis(20);

/// The code of a view's input, resize or signal.
pub const VIEW_ONLY: &str = "term.view_only";

/// The option of `tierbox serve` that allows a browser origin.
pub const WS_ORIGIN_OPTION: &str = "--ws-origin";

/// Longest the server waits for its close frame to go out once it ends a connection.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// Longest reason a close frame carries, in bytes (RFC 6455: a control frame's payload
/// is at most 125 bytes, two of them the code).
const MAX_CLOSE_REASON_BYTES: usize = 123;

/// Adds the WebSocket routes to `router`.
pub(super) fn routes(router: Router<Arc<AppState>>) -> Router<Arc<AppState>> {
    router
        .route("/v1/terms/{id}/ws_ticket", post(ws_ticket))
        .route("/v1/terms/{id}/ws", get(ws_attach))
}

/// Whether `path` is a term's WebSocket handshake (`/v1/terms/{id}/ws`, one segment for
/// the id), which is authenticated by its ticket, not the bearer token.
pub(super) fn is_handshake(path: &str) -> bool {
    let mut segments = path.split('/');
    matches!(
        (
            segments.next(),
            segments.next(),
            segments.next(),
            segments.next(),
            segments.next(),
            segments.next()
        ),
        (Some(""), Some("v1"), Some("terms"), Some(id), Some("ws"), None) if !id.is_empty()
    )
}

/// `POST /v1/terms/{id}/ws_ticket`: a ticket for one WebSocket of one of the caller's
/// terms.
async fn ws_ticket(
    State(st): State<Arc<AppState>>,
    Extension(auth): Extension<Auth>,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> ApiResult {
    let (id, owner) = super::terms::id_and_owner(id, &auth, &headers)?;
    st.service.term_status(&owner, &id).await?;
    let issued = st
        .ws
        .tickets()
        .issue(&owner, &id, Instant::now())
        .map_err(|e| err(e.code(), e.to_string()))?;
    ok(to_json(&TermWsTicket {
        ticket: issued.ticket,
        expires_in_ms: u64::try_from(issued.expires_in.as_millis()).unwrap_or(u64::MAX),
    }))
}

/// The handshake's query: `ticket`, `offset` (absent: from what the ring still holds),
/// `mode` (`control`, the default, or `view`) and `takeover` (`true` or `false`, the
/// default; only with `control`).
struct WsQuery {
    ticket: Option<String>,
    offset: Option<String>,
    mode: Option<String>,
    takeover: Option<String>,
    unknown: Option<String>,
}

/// The handshake's query past its ticket, checked.
#[derive(Debug, PartialEq, Eq)]
struct AttachQuery {
    offset: Option<u64>,
    mode: AttachMode,
    takeover: bool,
}

impl WsQuery {
    fn parse(raw: Option<&str>) -> Self {
        let mut q = Self {
            ticket: None,
            offset: None,
            mode: None,
            takeover: None,
            unknown: None,
        };
        for (key, value) in url::form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
            let slot = match key.as_ref() {
                "ticket" => &mut q.ticket,
                "offset" => &mut q.offset,
                "mode" => &mut q.mode,
                "takeover" => &mut q.takeover,
                _ => {
                    q.unknown.get_or_insert_with(|| key.into_owned());
                    continue;
                }
            };
            match slot {
                // Twice: neither is taken.
                Some(_) => q.unknown = Some(format!("{key} (given twice)")),
                None => *slot = Some(value.into_owned()),
            }
        }
        q
    }

    /// The rest of the query, checked once the ticket is spent.
    fn checked(&self) -> Result<AttachQuery, ApiError> {
        let malformed = |what: String| err("input.malformed", format!("query string: {what}"));
        if let Some(key) = &self.unknown {
            return Err(malformed(format!(
                "unknown or repeated field {key:?}: give ticket, offset, mode and takeover, once each"
            )));
        }
        let offset = match &self.offset {
            None => None,
            Some(o) => Some(o.parse().map_err(|_| {
                malformed(format!("offset {o:?} is not a byte offset (0 or more)"))
            })?),
        };
        let mode = match &self.mode {
            None => AttachMode::Control,
            Some(m) => AttachMode::parse(m)
                .ok_or_else(|| malformed(format!("mode {m:?} is not control or view")))?,
        };
        let takeover = match self.takeover.as_deref() {
            None | Some("false") => false,
            Some("true") => true,
            Some(t) => return Err(malformed(format!("takeover {t:?} is not true or false"))),
        };
        if takeover && mode == AttachMode::View {
            return Err(malformed(
                "takeover=true takes a term's control; a view (mode=view) takes none".to_owned(),
            ));
        }
        Ok(AttachQuery {
            offset,
            mode,
            takeover,
        })
    }
}

/// The control of term `id` for WebSocket `slot`. While another WebSocket has it, the
/// claim is tried again for up to [`CONTROL_HANDOVER_WAIT`] before it is refused: a client
/// that closed its WebSocket and attaches again at once finds its old connection still
/// being wound up.
async fn claim_control(
    st: &AppState,
    id: &str,
    slot: &SocketSlot,
    origin: Option<&str>,
    takeover: bool,
) -> Result<ControlSlot, ApiError> {
    let give_up = Instant::now() + CONTROL_HANDOVER_WAIT;
    loop {
        let claimed = st
            .ws
            .controllers()
            .claim(id, slot.number(), origin, now_unix_ms(), takeover);
        match claimed {
            Ok(control) => return Ok(control),
            Err(e) if Instant::now() >= give_up => {
                return Err(err(Controlled::CODE, e.to_string()));
            }
            Err(_) => tokio::time::sleep(CONTROL_RETRY_INTERVAL).await,
        }
    }
}

fn ticket_refused(e: &crate::term_ws::tickets::TicketError) -> ApiError {
    err(e.code(), e.to_string())
}

/// `GET /v1/terms/{id}/ws?ticket=…[&offset=N]`: the handshake.
async fn ws_attach(
    State(st): State<Arc<AppState>>,
    id: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    hold: Option<Extension<crate::conns::Hold>>,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> ApiResult {
    let id = path_id(id)?;
    let origins: Vec<&[u8]> = headers
        .get_all(header::ORIGIN)
        .iter()
        .map(|v| v.as_bytes())
        .collect();
    let origin = match st.ws.config().origins().check(&origins) {
        OriginCheck::Absent => None,
        OriginCheck::Allowed(origin) => Some(origin),
        OriginCheck::Refused(origin) => {
            return Err(err(
                "ws.origin_refused",
                format!(
                    "a page of origin {origin:?} may not open a term's WebSocket: the server \
                     allows {} (start it with {WS_ORIGIN_OPTION} {origin} to allow this one)",
                    match st.ws.config().origins().allowed() {
                        [] => "no browser origin".to_owned(),
                        some => some.join(", "),
                    }
                ),
            ));
        }
    };
    let query = WsQuery::parse(query.as_deref());
    let ticket = query.ticket.as_deref().unwrap_or("");
    // Spent from here on, whatever follows.
    let owner = st
        .ws
        .tickets()
        .redeem(ticket, &id, Instant::now())
        .map_err(|e| ticket_refused(&e))?;
    let AttachQuery {
        offset,
        mode,
        takeover,
    } = query.checked()?;
    st.service.term_status(&owner, &id).await?;
    let upgrade = upgrade.map_err(|e| {
        err(
            "ws.upgrade_required",
            format!("{}: this route is a WebSocket handshake", e.body_text()),
        )
    })?;
    let slot = st
        .ws
        .sockets()
        .open(&owner)
        .map_err(|e| err("ws.limit", e.to_string()))?;
    let mut control = match mode {
        AttachMode::View => None,
        AttachMode::Control => {
            Some(claim_control(&st, &id, &slot, origin.as_deref(), takeover).await?)
        }
    };
    let attachment = Attachment::new(
        &st.service,
        Attach {
            path: format!("/v1/terms/{id}/ws"),
            term: id,
            owner,
            origin,
            socket: slot.number(),
            offset,
            mode,
        },
    )?;
    attachment.record_attached().await?;
    // Certain now: a controller taken over is told.
    if let Some(c) = control.as_mut() {
        c.confirm();
    }
    // The connection stays counted, and is never given up to make room, while the
    // WebSocket lives.
    let kept = hold.and_then(|Extension(h)| h.keep());
    let failed = attachment.clone();
    Ok(upgrade
        .max_message_size(MAX_WS_MESSAGE_BYTES)
        .max_frame_size(MAX_WS_MESSAGE_BYTES)
        // Each frame is written out before the next is taken: one frame in flight, at
        // most a read's worth of output or one status.
        .write_buffer_size(0)
        .on_failed_upgrade(move |_| {
            tokio::spawn(async move { failed.record_detached(Detach::UpgradeFailed).await });
        })
        .on_upgrade(move |socket| async move {
            let why = serve_socket(socket, &attachment, slot, control).await;
            drop(kept);
            attachment.record_detached(why).await;
        }))
}

/// Serves one attached WebSocket until the client closes it, the term ends (after its
/// `exit` frame), the owner ends, another client takes its control over (after a
/// `taken_over` frame), or the connection stalls or fails; then closes it.
async fn serve_socket(
    socket: WebSocket,
    att: &Attachment,
    mut slot: SocketSlot,
    mut control: Option<ControlSlot>,
) -> Detach {
    let (mut sink, mut stream) = socket.split();
    let (replies, mut queued) = mpsc::channel(WS_REPLY_FRAMES);
    let mut frames = WsFrames(&mut sink);
    let taken_over = async {
        match control.as_mut() {
            Some(c) => c.taken_over().await,
            None => std::future::pending().await,
        }
    };
    let mut taken_by = None;
    let why = tokio::select! {
        why = take_input(&mut stream, att, replies) => why,
        why = give_output(&mut frames, att, &mut queued) => why,
        () = slot.owner_ended() => Detach::OwnerEnded,
        by = taken_over => {
            taken_by = Some(by);
            Detach::TakenOver
        }
    };
    // Its control is given up before the close goes out.
    drop(control);
    if let Some(socket) = taken_by {
        let frame = ServerMessage::TakenOver { socket };
        let _ = tokio::time::timeout(
            CLOSE_TIMEOUT,
            sink.send(Message::Text(frame.to_json().into())),
        )
        .await;
    }
    let close = |code, reason: &str| {
        let mut reason = reason.to_owned();
        while reason.len() > MAX_CLOSE_REASON_BYTES {
            reason.pop();
        }
        Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        }))
    };
    let last = match why {
        // The client's close is answered by the protocol layer; it only needs sending.
        Detach::ClientClosed | Detach::UpgradeFailed => None,
        Detach::TermEnded => Some(close(1000, "the term ended")),
        Detach::TakenOver => Some(close(1000, "another client took the term over")),
        Detach::OwnerEnded => Some(close(1008, "the session ended")),
        Detach::Stalled => Some(close(
            1008,
            &format!(
                "the client took no output for {} s",
                WS_SEND_TIMEOUT.as_secs()
            ),
        )),
        Detach::TooLarge => Some(close(
            1009,
            &format!("a message is at most {MAX_WS_MESSAGE_BYTES} bytes"),
        )),
        Detach::Broken => Some(close(1011, "the connection failed")),
    };
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, async {
        match last {
            Some(frame) => sink.send(frame).await,
            None => sink.flush().await,
        }
    })
    .await;
    why
}

/// The client's frames, into the term: binary frames are input bytes, text frames
/// control messages. A refused one is answered with an `error` frame.
async fn take_input<S>(
    stream: &mut S,
    att: &Attachment,
    replies: mpsc::Sender<ServerMessage>,
) -> Detach
where
    S: futures_util::Stream<Item = Result<Message, axum::Error>> + Unpin,
{
    while let Some(frame) = stream.next().await {
        let command = match frame {
            Err(e) => return read_failure(e),
            Ok(Message::Close(_)) => return Detach::ClientClosed,
            Ok(Message::Binary(bytes)) => protocol::binary(&bytes),
            Ok(Message::Text(text)) => protocol::text(text.as_str()),
            Ok(Message::Ping(_) | Message::Pong(_)) => continue,
        };
        let done = match command {
            Ok(command) => att.execute(command).await,
            Err(refused) => Err(refused.into()),
        };
        if let Err(e) = done {
            let answer = ServerMessage::Error {
                code: e.code,
                message: e.message,
            };
            if replies.send(answer).await.is_err() {
                return Detach::Broken;
            }
        }
    }
    Detach::ClientClosed
}

/// Why reading the client's frames failed: it went away, sent too large a message, or
/// broke the protocol.
fn read_failure(e: axum::Error) -> Detach {
    use tungstenite::error::{CapacityError, Error, ProtocolError};
    match e.into_inner().downcast::<Error>().map(|e| *e) {
        Ok(
            Error::ConnectionClosed
            | Error::AlreadyClosed
            | Error::Io(_)
            | Error::Protocol(ProtocolError::ResetWithoutClosingHandshake),
        ) => Detach::ClientClosed,
        Ok(Error::Capacity(CapacityError::MessageTooLong { .. })) => Detach::TooLarge,
        _ => Detach::Broken,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_handshake_path_skips_the_bearer_token() {
        assert!(is_handshake(
            "/v1/terms/0123456789abcdef0123456789abcdef/ws"
        ));
        assert!(is_handshake("/v1/terms/x/ws"));
        for other in [
            "/v1/terms//ws",
            "/v1/terms/x/ws/",
            "/v1/terms/x/ws_ticket",
            "/v1/terms/x/y/ws",
            "/v1/terms/x/input",
            "/v1/terms/ws",
            "/v1/process/x/ws",
            "v1/terms/x/ws",
            "/v2/terms/x/ws",
        ] {
            assert!(!is_handshake(other), "{other}");
        }
    }

    #[test]
    fn the_query_names_a_ticket_an_offset_a_mode_and_a_takeover_once_each() {
        let q = WsQuery::parse(Some("ticket=tbw_ab&offset=12"));
        assert_eq!(q.ticket.as_deref(), Some("tbw_ab"));
        assert_eq!(
            q.checked().ok(),
            Some(AttachQuery {
                offset: Some(12),
                mode: AttachMode::Control,
                takeover: false
            })
        );
        let q = WsQuery::parse(None);
        assert_eq!(q.ticket, None);
        assert_eq!(q.checked().ok().map(|a| a.offset), Some(None));
        let q = WsQuery::parse(Some("ticket=a&mode=view"));
        assert_eq!(q.checked().ok().map(|a| a.mode), Some(AttachMode::View));
        let q = WsQuery::parse(Some("ticket=a&mode=control&takeover=true"));
        assert_eq!(q.checked().ok().map(|a| a.takeover), Some(true));
        for bad in [
            "ticket=a&ticket=b",
            "ticket=a&offset=-1",
            "ticket=a&offset=x",
            "ticket=a&token=b",
            "ticket=a&mode=watch",
            "ticket=a&takeover=yes",
            "ticket=a&mode=view&takeover=true",
            "ticket=a&mode=view&mode=view",
        ] {
            let q = WsQuery::parse(Some(bad));
            assert_eq!(
                q.checked().map_err(|e| e.0.code).unwrap_err(),
                "input.malformed",
                "{bad}"
            );
        }
    }
}
