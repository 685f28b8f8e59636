//! What the two ways of following a term share: an [`Attachment`] (who reads which term,
//! audited on attach and detach) and the pump that carries the term's output from its
//! ring to the client at the client's pace — into a WebSocket's frames
//! (`http/term_ws.rs`) or a stream's JSON lines (`http/term_stream.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::ws::Message;
use futures_util::SinkExt;
use serde_json::{Value, json};
use tierbox_runner::audit::{Auditor, now_unix_ms};
use tierbox_runner::background::BackgroundState;
use tierbox_runner::ring::OutputChunk;
use tierbox_runner::term::MAX_TERM_WAIT_MS;
use tokio::sync::mpsc;

use super::{ApiError, err};
use crate::service::{Service, ServiceError};
use crate::term_ws::control::AttachMode;
use crate::term_ws::protocol::{Command, ServerMessage};
use crate::term_ws::{Detach, WS_OUTPUT_FRAME_BYTES, WS_SEND_TIMEOUT};

/// Why an attach or detach could not be recorded.
#[derive(Debug, thiserror::Error)]
enum RecordError {
    /// The audit log refused it.
    #[error(transparent)]
    Audit(#[from] tierbox_runner::audit::AuditError),
    /// The blocking task that writes it failed.
    #[error("the audit task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// One attached reader of a term (a WebSocket, or a stream of its output): whose, on
/// what, and what went through it (for the audit log).
pub(super) struct Attachment {
    service: Service,
    /// The auditor, when the policy keeps an audit log.
    auditor: Option<Arc<Auditor>>,
    term: String,
    owner: String,
    origin: Option<String>,
    socket: u64,
    offset: Option<u64>,
    mode: AttachMode,
    /// The route it came in by (`/v1/terms/{id}/ws` or `/v1/terms/{id}/stream`).
    path: String,
    attached_unix_ms: u64,
    input_bytes: AtomicU64,
    output_bytes: AtomicU64,
    lost_bytes: AtomicU64,
}

/// Who attaches to what, and how: what an [`Attachment`] is made from.
pub(super) struct Attach {
    /// The term.
    pub term: String,
    /// The owner it attaches for.
    pub owner: String,
    /// The page's `Origin`, when a browser page.
    pub origin: Option<String>,
    /// Its number among the open sockets ([`crate::term_ws::SocketSlot::number`]).
    pub socket: u64,
    /// The offset asked for.
    pub offset: Option<u64>,
    /// Whether it controls the term or watches.
    pub mode: AttachMode,
    /// The route.
    pub path: String,
}

impl Attachment {
    /// An attachment of `attach` through `service`; refused when the runner's audit log
    /// cannot be opened.
    pub(super) fn new(service: &Service, attach: Attach) -> Result<Arc<Self>, ApiError> {
        let auditor = match service.runner().auditor() {
            Ok(a) if a.has_log() => Some(a),
            Ok(_) => None,
            Err(e) => return Err(ServiceError::from(e).into()),
        };
        Ok(Arc::new(Self {
            service: service.clone(),
            auditor,
            term: attach.term,
            owner: attach.owner,
            origin: attach.origin,
            socket: attach.socket,
            offset: attach.offset,
            mode: attach.mode,
            path: attach.path,
            attached_unix_ms: now_unix_ms(),
            input_bytes: AtomicU64::new(0),
            output_bytes: AtomicU64::new(0),
            lost_bytes: AtomicU64::new(0),
        }))
    }

    /// The request the audit records are about: the handshake or the read, without a
    /// ticket.
    fn request(&self) -> Value {
        json!({
            "method": "GET",
            "path": self.path,
            "offset": self.offset,
            "mode": self.mode.name(),
        })
    }

    /// Records the attach; refused (nothing attaches) when the log cannot be written.
    pub(super) async fn record_attached(self: &Arc<Self>) -> Result<(), ApiError> {
        let event = tierbox_attest::Event::TermAttached {
            term_id: self.term.clone(),
            owner: self.owner.clone(),
            origin: self.origin.clone(),
            socket: self.socket,
            mode: Some(self.mode.name().to_owned()),
        };
        self.record(event).await.map_err(|e| {
            err(
                "audit.unavailable",
                format!("the attach cannot be recorded in the audit log: {e}"),
            )
        })
    }

    /// Records the detach; a failure is reported on stderr (the connection is gone).
    pub(super) async fn record_detached(self: &Arc<Self>, why: Detach) {
        let event = tierbox_attest::Event::TermDetached {
            term_id: self.term.clone(),
            owner: self.owner.clone(),
            origin: self.origin.clone(),
            socket: self.socket,
            reason: why.name().to_owned(),
            input_bytes: self.input_bytes.load(Ordering::Relaxed),
            output_bytes: self.output_bytes.load(Ordering::Relaxed),
            lost_bytes: self.lost_bytes.load(Ordering::Relaxed),
        };
        if let Err(e) = self.record(event).await {
            eprintln!(
                "tierbox: the detach of WebSocket {} from term {} is not in the audit log: {e}",
                self.socket, self.term
            );
        }
    }

    /// Appends `event` to the audit log, off the async threads (it fsyncs).
    async fn record(self: &Arc<Self>, event: tierbox_attest::Event) -> Result<(), RecordError> {
        let Some(auditor) = self.auditor.clone() else {
            return Ok(());
        };
        let request = self.request();
        let started = self.attached_unix_ms;
        Ok(
            tokio::task::spawn_blocking(move || auditor.record_event(&request, started, event))
                .await??,
        )
    }

    /// Carries out one checked command of the client's; a view's are refused.
    pub(super) async fn execute(&self, command: Command) -> Result<(), ServiceError> {
        let (owner, id) = (&self.owner, &self.term);
        if self.mode == AttachMode::View {
            return Err(ServiceError::new(
                super::term_ws::VIEW_ONLY,
                format!(
                    "this WebSocket watches term {id} (mode=view): its input, resizes and \
                     signals are refused; attach with mode=control to type"
                ),
            ));
        }
        match command {
            Command::Input(bytes) => {
                self.service.term_write(owner, id, &bytes, false).await?;
                self.input_bytes
                    .fetch_add(bytes.len() as u64, Ordering::Relaxed);
            }
            Command::Eof => {
                self.service.term_write(owner, id, b"", true).await?;
            }
            Command::Resize {
                size,
                redraw: false,
            } => {
                self.service.term_resize(owner, id, size)?;
            }
            Command::Resize { size, redraw: true } => {
                let terms = self.service.runner().terms();
                terms.resize_and_redraw(owner, id, size)?;
            }
            Command::Signal(name) => {
                self.service.term_signal(owner, id, &name)?;
            }
        }
        Ok(())
    }

    /// Up to [`WS_OUTPUT_FRAME_BYTES`] of output from `offset`, waiting up to `wait_ms`
    /// for some.
    async fn read(&self, offset: u64, wait_ms: u64) -> Result<OutputChunk, ServiceError> {
        let terms = self.service.runner().terms();
        Ok(terms
            .output(
                &self.owner,
                &self.term,
                offset,
                WS_OUTPUT_FRAME_BYTES,
                wait_ms,
            )
            .await?)
    }
}

/// Where a term's output goes: a WebSocket's frames, or a stream's lines. Each send is
/// bounded by [`WS_SEND_TIMEOUT`] (past it: [`Detach::Stalled`]).
pub(super) trait Frames {
    /// Sends output read from the ring (some bytes).
    async fn output(&mut self, read: OutputChunk) -> Result<(), Detach>;
    /// Sends a message.
    async fn message(&mut self, message: &ServerMessage) -> Result<(), Detach>;
}

/// A WebSocket's frames: output as binary frames, messages as text frames.
pub(super) struct WsFrames<'a, S>(pub &'a mut S);

impl<S> Frames for WsFrames<'_, S>
where
    S: futures_util::Sink<Message, Error = axum::Error> + Unpin,
{
    async fn output(&mut self, read: OutputChunk) -> Result<(), Detach> {
        let bytes = read.bytes().map(|b| b.into_owned()).unwrap_or_default();
        send(self.0, Message::Binary(bytes.into())).await
    }

    async fn message(&mut self, message: &ServerMessage) -> Result<(), Detach> {
        send(self.0, Message::Text(message.to_json().into())).await
    }
}

/// Sends `frame` on a WebSocket, within [`WS_SEND_TIMEOUT`].
async fn send<S>(sink: &mut S, frame: Message) -> Result<(), Detach>
where
    S: futures_util::Sink<Message, Error = axum::Error> + Unpin,
{
    match tokio::time::timeout(WS_SEND_TIMEOUT, sink.send(frame)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(Detach::Broken),
        Err(_) => Err(Detach::Stalled),
    }
}

/// Sends an `error` message for `e` (the connection ends next: whether it goes out does
/// not matter).
async fn send_error(frames: &mut impl Frames, e: ServiceError) {
    let message = ServerMessage::Error {
        code: e.code,
        message: e.message,
    };
    let _ = frames.message(&message).await;
}

/// The term's output, to the client: `attached`, then output read from the ring at the
/// client's pace (a gap is a `lost` message first), the answers `queued` by its input
/// between them, and `exit` once the term has ended and everything it showed was sent.
pub(super) async fn give_output(
    frames: &mut impl Frames,
    att: &Attachment,
    queued: &mut mpsc::Receiver<ServerMessage>,
) -> Detach {
    match pump_output(frames, att, queued).await {
        Ok(never) => match never {},
        Err(why) => why,
    }
}

async fn pump_output(
    frames: &mut impl Frames,
    att: &Attachment,
    queued: &mut mpsc::Receiver<ServerMessage>,
) -> Result<std::convert::Infallible, Detach> {
    // An explicit offset reports what is gone from it; the default starts with what the
    // ring still holds, missing nothing the client asked for.
    let asked = att.offset;
    let first = match att.read(asked.unwrap_or(0), 0).await {
        Ok(chunk) => chunk,
        Err(e) => {
            send_error(frames, e).await;
            return Err(Detach::Broken);
        }
    };
    let lost_before = if asked.is_some() {
        first.missed_bytes
    } else {
        0
    };
    let attached = ServerMessage::Attached {
        id: att.term.clone(),
        offset: first.offset - lost_before,
    };
    frames.message(&attached).await?;
    let mut at = first.next_offset;
    let mut ended = false;
    let mut chunk = Some((first, lost_before));
    loop {
        if let Some((read, lost)) = chunk.take() {
            if lost > 0 {
                att.lost_bytes.fetch_add(lost, Ordering::Relaxed);
                frames.message(&ServerMessage::Lost { bytes: lost }).await?;
            }
            let bytes = read.bytes().map_or(0, |b| b.len());
            at = read.next_offset;
            if bytes == 0 {
                // Nothing more: the term has ended once it is seen ended after a read
                // (its output is all in the ring before its end is published).
                let status = match att.service.term_status(&att.owner, &att.term).await {
                    Ok(status) => status,
                    Err(e) => {
                        send_error(frames, e).await;
                        return Err(Detach::Broken);
                    }
                };
                if ended {
                    let exit = ServerMessage::Exit {
                        status: Box::new(status),
                    };
                    frames.message(&exit).await?;
                    return Err(Detach::TermEnded);
                }
                ended = status.state != BackgroundState::Running;
            } else {
                att.output_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
                frames.output(read).await?;
            }
        }
        // An ended term's read returns at once.
        tokio::select! {
            biased;
            Some(reply) = queued.recv() => frames.message(&reply).await?,
            read = att.read(at, MAX_TERM_WAIT_MS) => match read {
                Ok(read) => {
                    let lost = read.missed_bytes;
                    chunk = Some((read, lost));
                }
                Err(e) => {
                    send_error(frames, e).await;
                    return Err(Detach::Broken);
                }
            },
        }
    }
}
