//! A term's full-duplex WebSocket channel (`GET /v1/terms/{id}/ws`), for a browser
//! terminal (xterm.js) or any WebSocket client: keys and resizes in, the terminal's
//! output out, on one connection. The routes are in `http/term_ws.rs`; the messages in
//! [`protocol`]; the tickets in [`tickets`]; the browser origins in [`origins`].
//!
//! Invariants:
//!
//! - **A ticket, not the bearer token, opens it.** A browser cannot put `Authorization`
//!   on a WebSocket handshake, so the page asks `POST /v1/terms/{id}/ws_ticket` with its
//!   token (owner-scoped like every term route) and opens the WebSocket with
//!   `?ticket=`: single use, [`tickets::WS_TICKET_TTL`] at most, bound to the owner and
//!   the term. The handshake route takes no bearer token.
//! - **Web pages are refused unless allowed.** Any page a browser shows can open a
//!   WebSocket to loopback; the handshake's `Origin` must be on the server's allowlist
//!   ([`origins`], `tierbox serve --ws-origin`, empty by default) or absent (a client
//!   that is not a browser page). The origin is checked before the ticket is looked at,
//!   so a refused page spends no ticket.
//! - **Ownership is the ticket's.** The connection acts for the owner the ticket was
//!   issued to, on the term it was issued for, through the same service operations as
//!   the HTTP routes (the same checks and codes). Ending that owner (`DELETE
//!   /v1/session`, `DELETE /v1/sessions/{id}`) closes its WebSockets (1008) and spends
//!   its tickets.
//! - **The term is never blocked by a client.** Output is read from the term's ring at
//!   the connection's own pace: a client that reads slowly only loses output, which the
//!   next `lost` frame counts, and the server holds at most one read
//!   ([`WS_OUTPUT_FRAME_BYTES`]) and one frame in flight per connection. A client that
//!   takes no frame for [`WS_SEND_TIMEOUT`] is disconnected (the term goes on).
//! - **Bounded.** At most [`MAX_TERM_SOCKETS`] WebSockets are open
//!   ([`MAX_TERM_SOCKETS_PER_OWNER`] of one owner); a message is at most
//!   [`MAX_WS_MESSAGE_BYTES`], and input in one message at most
//!   [`crate::terms::MAX_TERM_INPUT_BYTES`] (more is refused with an `error` frame). An
//!   open WebSocket holds no admission slot (it is not a request being served) but does
//!   hold its connection's place in the connection budget (`crate::conns`) until it
//!   closes.
//! - **One controller.** At most one WebSocket of a term types, resizes and signals
//!   ([`control`]); others attach with `mode=view` and only watch, and a second
//!   controlling attach is refused (`term.controlled`, 409) unless it takes over
//!   (`takeover=true`), which detaches the first with a `taken_over` frame.
//! - **Audited.** Each attach and detach is an `event` record of the audit log
//!   (`term.attached`, `term.detached`: term, owner, origin, time, byte counts), never
//!   what was typed. With an audit log that cannot be written, nothing attaches
//!   (`audit.unavailable`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

pub mod control;
pub mod origins;
pub mod protocol;
pub mod tickets;

use control::Controllers;
use origins::{OriginAllowlist, OriginError};
use tickets::{Tickets, WS_TICKET_TTL};

/// Most WebSockets of terms open in one server: each holds a connection, a read of
/// output and a frame in flight.
pub const MAX_TERM_SOCKETS: usize = 64;

/// Most WebSockets of terms one owner has open.
pub const MAX_TERM_SOCKETS_PER_OWNER: usize = 16;

/// Largest message a client may send (128 KiB: twice a write's input, room for a text
/// frame's JSON escapes); a larger one closes the connection (1009, message too big).
/// Input above [`crate::terms::MAX_TERM_INPUT_BYTES`] within it is refused with an
/// `error` frame instead.
pub const MAX_WS_MESSAGE_BYTES: usize = 2 * crate::terms::MAX_TERM_INPUT_BYTES;

/// Most bytes of output one binary frame carries (64 KiB): one read of the ring.
pub const WS_OUTPUT_FRAME_BYTES: usize = crate::terms::DEFAULT_TERM_READ_BYTES;

/// Longest a client may take to accept one frame (60 s) before it is disconnected: a
/// client that stopped reading without closing would otherwise hold its connection for
/// ever. Output that arrives meanwhile stays in the ring (or is `lost`).
pub const WS_SEND_TIMEOUT: Duration = Duration::from_secs(60);

/// Control frames (`error` answers) queued for a client ahead of its output; a client
/// that sends faster than it reads waits for its answers.
pub const WS_REPLY_FRAMES: usize = 16;

/// How a server serves the WebSocket of terms.
///
/// The default is locked down: no browser page may attach (only clients that send no
/// `Origin`), and tickets live [`WS_TICKET_TTL`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WsConfig {
    origins: OriginAllowlist,
    ticket_ttl: Duration,
}

impl Default for WsConfig {
    fn default() -> Self {
        Self {
            origins: OriginAllowlist::default(),
            ticket_ttl: WS_TICKET_TTL,
        }
    }
}

impl WsConfig {
    /// Allows browser pages of `origin` (`scheme://host[:port]`) to attach.
    ///
    /// ```
    /// use tierbox_server::term_ws::WsConfig;
    ///
    /// let c = WsConfig::default().allow_origin("https://app.example").unwrap();
    /// assert_eq!(c.origins().allowed(), ["https://app.example"]);
    /// assert!(WsConfig::default().allow_origin("https://app.example/x").is_err());
    /// ```
    pub fn allow_origin(mut self, origin: &str) -> Result<Self, OriginError> {
        self.origins.allow(origin)?;
        Ok(self)
    }

    /// Tickets valid for `ttl` instead of [`WS_TICKET_TTL`] (never longer: a longer one
    /// is cut to it).
    pub fn ticket_ttl(mut self, ttl: Duration) -> Self {
        self.ticket_ttl = ttl.min(WS_TICKET_TTL);
        self
    }

    /// The origins allowed.
    pub fn origins(&self) -> &OriginAllowlist {
        &self.origins
    }
}

/// Why a WebSocket was closed by the server (the `reason` of its `term.detached`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detach {
    /// The client closed it, or went away (its connection closed or reset).
    ClientClosed,
    /// The term ended: `exit` was sent.
    TermEnded,
    /// The owner's session ended.
    OwnerEnded,
    /// The client took no frame for [`WS_SEND_TIMEOUT`].
    Stalled,
    /// The client sent a message past [`MAX_WS_MESSAGE_BYTES`] (closed with 1009).
    TooLarge,
    /// The connection failed (a protocol error, a failed write).
    Broken,
    /// The handshake's upgrade did not complete.
    UpgradeFailed,
    /// Another client attached with `takeover=true` ([`control`]).
    TakenOver,
}

impl Detach {
    /// Its name in the audit log.
    pub fn name(self) -> &'static str {
        match self {
            Self::ClientClosed => "client_closed",
            Self::TermEnded => "term_ended",
            Self::OwnerEnded => "owner_ended",
            Self::Stalled => "stalled",
            Self::TooLarge => "message_too_large",
            Self::Broken => "broken",
            Self::UpgradeFailed => "upgrade_failed",
            Self::TakenOver => "taken_over",
        }
    }
}

/// Too many WebSockets open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{open} WebSockets of terms are open{whose}, the most allowed ({max}); close one first")]
pub struct SocketLimit {
    /// Open now.
    pub open: usize,
    /// The cap reached.
    pub max: usize,
    /// `" for this owner"` or `""`.
    pub whose: &'static str,
}

#[derive(Debug)]
struct Open {
    number: u64,
    owner: String,
    close: watch::Sender<bool>,
}

/// The WebSockets open now, by owner, so an owner's end closes them.
#[derive(Debug, Default)]
pub struct Sockets {
    open: Mutex<Vec<Open>>,
    numbers: AtomicU64,
}

/// One open WebSocket's place among [`Sockets`], given back when dropped.
#[derive(Debug)]
pub struct SocketSlot {
    sockets: Arc<Sockets>,
    number: u64,
    closed: watch::Receiver<bool>,
}

impl SocketSlot {
    /// The server's number for the connection (in its audit records).
    pub fn number(&self) -> u64 {
        self.number
    }

    /// Resolves when the owner has ended.
    pub async fn owner_ended(&mut self) {
        let _ = self.closed.wait_for(|closed| *closed).await;
    }
}

impl Drop for SocketSlot {
    fn drop(&mut self) {
        let mut open = self.sockets.table();
        open.retain(|o| o.number != self.number);
    }
}

impl Sockets {
    fn table(&self) -> std::sync::MutexGuard<'_, Vec<Open>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for one more WebSocket of `owner`, within [`MAX_TERM_SOCKETS`] and
    /// [`MAX_TERM_SOCKETS_PER_OWNER`].
    pub fn open(self: &Arc<Self>, owner: &str) -> Result<SocketSlot, SocketLimit> {
        let mut open = self.table();
        let mine = open.iter().filter(|o| o.owner == owner).count();
        if mine >= MAX_TERM_SOCKETS_PER_OWNER {
            return Err(SocketLimit {
                open: mine,
                max: MAX_TERM_SOCKETS_PER_OWNER,
                whose: " for this owner",
            });
        }
        if open.len() >= MAX_TERM_SOCKETS {
            return Err(SocketLimit {
                open: open.len(),
                max: MAX_TERM_SOCKETS,
                whose: "",
            });
        }
        let number = self.numbers.fetch_add(1, Ordering::Relaxed) + 1;
        let (close, closed) = watch::channel(false);
        open.push(Open {
            number,
            owner: owner.to_owned(),
            close,
        });
        Ok(SocketSlot {
            sockets: self.clone(),
            number,
            closed,
        })
    }

    /// `owner` ended: its WebSockets are told to close.
    pub fn end_owner(&self, owner: &str) {
        for o in self.table().iter().filter(|o| o.owner == owner) {
            let _ = o.close.send(true);
        }
    }

    /// WebSockets open now.
    pub fn len(&self) -> usize {
        self.table().len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A server's WebSocket state: its configuration, its tickets, its open sockets.
#[derive(Debug)]
pub struct TermWs {
    config: WsConfig,
    tickets: Tickets,
    sockets: Arc<Sockets>,
    controllers: Arc<Controllers>,
}

impl TermWs {
    /// The state of a server configured with `config`.
    pub fn new(config: WsConfig) -> Self {
        Self {
            tickets: Tickets::new(config.ticket_ttl),
            config,
            sockets: Arc::default(),
            controllers: Arc::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &WsConfig {
        &self.config
    }

    /// The tickets.
    pub fn tickets(&self) -> &Tickets {
        &self.tickets
    }

    /// The open WebSockets.
    pub fn sockets(&self) -> &Arc<Sockets> {
        &self.sockets
    }

    /// Which WebSocket controls each term.
    pub fn controllers(&self) -> &Arc<Controllers> {
        &self.controllers
    }

    /// `owner` ended: its tickets are spent and its WebSockets closed.
    pub fn end_owner(&self, owner: &str) {
        self.tickets.end_owner(owner);
        self.sockets.end_owner(owner);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn sockets_are_capped_and_an_owners_end_closes_only_its_own() {
        let sockets = Arc::new(Sockets::default());
        let mut mine: Vec<SocketSlot> = (0..MAX_TERM_SOCKETS_PER_OWNER)
            .map(|_| sockets.open("session:1").unwrap())
            .collect();
        let e = sockets.open("session:1").unwrap_err();
        assert_eq!(e.max, MAX_TERM_SOCKETS_PER_OWNER);
        let mut theirs = sockets.open("session:2").unwrap();
        assert_ne!(theirs.number(), mine[0].number());
        let mut others = Vec::new();
        let mut owner = 2;
        while sockets.len() < MAX_TERM_SOCKETS {
            owner += 1;
            others.push(sockets.open(&format!("o{owner}")).unwrap());
        }
        assert_eq!(sockets.open("newcomer").unwrap_err().max, MAX_TERM_SOCKETS);
        sockets.end_owner("session:1");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            mine[0].owner_ended().await;
            let theirs_closed =
                tokio::time::timeout(Duration::from_millis(50), theirs.owner_ended());
            assert!(
                theirs_closed.await.is_err(),
                "another owner's socket was closed"
            );
        });
        // A closed socket gives its place back.
        drop(mine.pop());
        sockets.open("newcomer").unwrap();
    }

    #[test]
    fn the_default_config_allows_no_page_and_the_longest_ticket() {
        let c = WsConfig::default();
        assert!(c.origins().allowed().is_empty());
        assert_eq!(c.ticket_ttl, WS_TICKET_TTL);
        let c = c.ticket_ttl(Duration::from_secs(600));
        assert_eq!(c.ticket_ttl, WS_TICKET_TTL);
        let c = c.ticket_ttl(Duration::from_millis(200));
        assert_eq!(c.ticket_ttl, Duration::from_millis(200));
    }
}
