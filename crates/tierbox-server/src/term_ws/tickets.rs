//! Tickets for a term's WebSocket: a browser cannot send `Authorization` on a WebSocket
//! handshake, so the page asks for a ticket with its bearer token (`POST
//! /v1/terms/{id}/ws_ticket`) and puts it in the WebSocket's URL.
//!
//! Invariants:
//!
//! - a ticket is 256 random bits (`tierbox_attest::new_id`, the kernel's randomness),
//!   compared in constant time with every outstanding ticket, as session tokens are;
//! - it is bound to the owner that asked and to one term: presented for another term it
//!   is refused, and spent;
//! - it opens at most one WebSocket: the first presentation spends it, whatever follows
//!   (a refused term, a failed upgrade);
//! - it lives [`WS_TICKET_TTL`] at most (a server may shorten it); an expired ticket is
//!   purged at the next issue or presentation;
//! - at most [`MAX_WS_TICKETS`] are outstanding, [`MAX_WS_TICKETS_PER_OWNER`] of one
//!   owner; past that a new one is refused (`ws.ticket_limit`) until some are spent or
//!   expire;
//! - an owner's end (its session revoked) spends its outstanding tickets.
//!
//! What a ticket became (used, expired, revoked) is remembered for the last
//! [`SPENT_TICKETS_KEPT`] of them, only to say so when one is presented again; a ticket
//! forgotten there is refused as unknown, never accepted.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Longest a ticket is valid after it is issued (30 s): long enough for a page to open
/// its WebSocket, short enough that a ticket leaked through a log or a browser's history
/// is worthless by the time someone reads it.
pub const WS_TICKET_TTL: Duration = Duration::from_secs(30);

/// Most tickets outstanding (issued, neither spent nor expired) in one server: bounds the
/// memory they take and the constant-time scan of a presentation.
pub const MAX_WS_TICKETS: usize = 256;

/// Most tickets outstanding for one owner, so one session cannot take every ticket.
pub const MAX_WS_TICKETS_PER_OWNER: usize = 16;

/// Spent tickets remembered to say why one presented again is refused (used, expired,
/// revoked): the oldest is forgotten first.
pub const SPENT_TICKETS_KEPT: usize = 256;

/// What every ticket starts with, so it is not taken for a bearer token.
pub const WS_TICKET_PREFIX: &str = "tbw_";

/// Why a ticket was not issued or not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TicketError {
    /// The upgrade named no ticket.
    #[error(
        "no ticket: a WebSocket of a term opens with ?ticket= from POST /v1/terms/{{id}}/ws_ticket \
         (made with the bearer token)"
    )]
    Missing,
    /// Not a ticket this server has issued (or one spent so long ago it is forgotten).
    #[error(
        "the ticket is not one this server issued: ask POST /v1/terms/{{id}}/ws_ticket for one"
    )]
    Unknown,
    /// Presented before: a ticket opens one WebSocket.
    #[error(
        "the ticket was already used: a ticket opens one WebSocket; ask POST \
         /v1/terms/{{id}}/ws_ticket for another"
    )]
    Used,
    /// Presented after its lifetime.
    #[error(
        "the ticket expired: it was valid for {ttl_ms} ms after it was issued; ask for a new \
         one just before connecting"
    )]
    Expired {
        /// The lifetime, in milliseconds.
        ttl_ms: u64,
    },
    /// Its owner's session ended before it was used.
    #[error("the ticket's session ended before it was used")]
    Revoked,
    /// Issued for another term than the one in the URL (and spent now).
    #[error("the ticket was issued for another term than {term}; it is spent")]
    OtherTerm {
        /// The term the URL named.
        term: String,
    },
    /// Too many outstanding.
    #[error(
        "{outstanding} WebSocket tickets are outstanding{whose}, the most allowed ({max}); use \
         or let expire one first"
    )]
    Limit {
        /// Outstanding now.
        outstanding: usize,
        /// [`MAX_WS_TICKETS_PER_OWNER`] or [`MAX_WS_TICKETS`].
        max: usize,
        /// `" for this owner"` or `""`.
        whose: &'static str,
    },
    /// The kernel gave no randomness.
    #[error("no randomness for a WebSocket ticket: {0}")]
    Random(String),
}

impl TicketError {
    /// Stable machine code: `ws.ticket_refused` for every refused presentation,
    /// `ws.ticket_limit`, or `run.failed` (no randomness).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Limit { .. } => "ws.ticket_limit",
            Self::Random(_) => "run.failed",
            _ => "ws.ticket_refused",
        }
    }
}

/// A ticket, issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    /// The ticket (shown once).
    pub ticket: String,
    /// How long it is valid.
    pub expires_in: Duration,
}

#[derive(Debug)]
struct Outstanding {
    ticket: String,
    owner: String,
    term: String,
    expires: Instant,
}

#[derive(Debug, Clone, Copy)]
enum Spent {
    Used,
    Expired,
    Revoked,
}

#[derive(Debug, Default)]
struct Table {
    outstanding: Vec<Outstanding>,
    spent: VecDeque<(String, Spent)>,
}

impl Table {
    fn spend(&mut self, ticket: String, how: Spent) {
        if self.spent.len() >= SPENT_TICKETS_KEPT {
            self.spent.pop_front();
        }
        self.spent.push_back((ticket, how));
    }

    /// Moves the tickets expired at `now` to the spent ones.
    fn purge(&mut self, now: Instant) {
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.outstanding)
            .into_iter()
            .partition(|t| t.expires <= now);
        self.outstanding = kept;
        for t in gone {
            self.spend(t.ticket, Spent::Expired);
        }
    }
}

/// The tickets a server issued.
///
/// ```
/// use std::time::{Duration, Instant};
/// use tierbox_server::term_ws::tickets::{Tickets, WS_TICKET_TTL};
///
/// let tickets = Tickets::new(WS_TICKET_TTL);
/// let now = Instant::now();
/// let issued = tickets.issue("session:1", "term-a", now).unwrap();
/// assert_eq!(tickets.redeem(&issued.ticket, "term-a", now).unwrap(), "session:1");
/// // Single use.
/// let again = tickets.redeem(&issued.ticket, "term-a", now).unwrap_err();
/// assert_eq!(again.code(), "ws.ticket_refused");
/// ```
#[derive(Debug)]
pub struct Tickets {
    ttl: Duration,
    table: Mutex<Table>,
}

impl Tickets {
    /// Tickets valid for `ttl` (at most [`WS_TICKET_TTL`]: a longer one is cut to it).
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl: ttl.min(WS_TICKET_TTL),
            table: Mutex::default(),
        }
    }

    /// How long a ticket is valid.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A ticket for `owner` to attach to `term`, valid from `now` for [`Tickets::ttl`].
    /// The caller has checked that the term is the owner's.
    pub fn issue(&self, owner: &str, term: &str, now: Instant) -> Result<Issued, TicketError> {
        let random = || tierbox_attest::new_id().map_err(|e| TicketError::Random(e.to_string()));
        let ticket = format!("{WS_TICKET_PREFIX}{}{}", random()?, random()?);
        let mut table = self.table();
        table.purge(now);
        let mine = table
            .outstanding
            .iter()
            .filter(|t| t.owner == owner)
            .count();
        if mine >= MAX_WS_TICKETS_PER_OWNER {
            return Err(TicketError::Limit {
                outstanding: mine,
                max: MAX_WS_TICKETS_PER_OWNER,
                whose: " for this owner",
            });
        }
        if table.outstanding.len() >= MAX_WS_TICKETS {
            return Err(TicketError::Limit {
                outstanding: table.outstanding.len(),
                max: MAX_WS_TICKETS,
                whose: "",
            });
        }
        table.outstanding.push(Outstanding {
            ticket: ticket.clone(),
            owner: owner.to_owned(),
            term: term.to_owned(),
            expires: now + self.ttl,
        });
        Ok(Issued {
            ticket,
            expires_in: self.ttl,
        })
    }

    /// Spends `ticket`, presented at `now` to attach to `term`: the owner it was issued
    /// to, when it is outstanding and for that term. Spent whatever the answer.
    pub fn redeem(&self, ticket: &str, term: &str, now: Instant) -> Result<String, TicketError> {
        if ticket.is_empty() {
            return Err(TicketError::Missing);
        }
        let mut table = self.table();
        table.purge(now);
        let mut found = None;
        for (i, t) in table.outstanding.iter().enumerate() {
            if crate::http::same(t.ticket.as_bytes(), ticket.as_bytes()) {
                found = Some(i);
            }
        }
        if let Some(i) = found {
            let t = table.outstanding.swap_remove(i);
            table.spend(t.ticket, Spent::Used);
            return match t.term == term {
                true => Ok(t.owner),
                false => Err(TicketError::OtherTerm {
                    term: term.to_owned(),
                }),
            };
        }
        let mut how = None;
        for (t, spent) in &table.spent {
            if crate::http::same(t.as_bytes(), ticket.as_bytes()) {
                how = Some(*spent);
            }
        }
        Err(match how {
            None => TicketError::Unknown,
            Some(Spent::Used) => TicketError::Used,
            Some(Spent::Revoked) => TicketError::Revoked,
            Some(Spent::Expired) => TicketError::Expired {
                ttl_ms: u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX),
            },
        })
    }

    /// `owner` ended: its outstanding tickets are spent.
    pub fn end_owner(&self, owner: &str) {
        let mut table = self.table();
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut table.outstanding)
            .into_iter()
            .partition(|t| t.owner == owner);
        table.outstanding = kept;
        for t in gone {
            table.spend(t.ticket, Spent::Revoked);
        }
    }

    /// Tickets outstanding now (expired ones not yet purged included).
    pub fn outstanding(&self) -> usize {
        self.table().outstanding.len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_ticket_is_random_prefixed_single_use_and_bound_to_its_term() {
        let t = Tickets::new(WS_TICKET_TTL);
        let now = Instant::now();
        let a = t.issue("session:1", "term-a", now).unwrap();
        let b = t.issue("session:1", "term-a", now).unwrap();
        assert_ne!(a.ticket, b.ticket);
        assert!(
            a.ticket.starts_with(WS_TICKET_PREFIX) && a.ticket.len() == 4 + 64,
            "{}",
            a.ticket
        );
        assert_eq!(a.expires_in, WS_TICKET_TTL);
        // A prefix of a ticket is not the ticket.
        let cut = &b.ticket[..b.ticket.len() - 1];
        assert_eq!(t.redeem(cut, "term-a", now), Err(TicketError::Unknown));
        assert_eq!(t.redeem(&a.ticket, "term-a", now).unwrap(), "session:1");
        assert_eq!(t.redeem(&a.ticket, "term-a", now), Err(TicketError::Used));
        // For another term: refused, and spent.
        let other = t.redeem(&b.ticket, "term-b", now).unwrap_err();
        assert_eq!(
            other,
            TicketError::OtherTerm {
                term: "term-b".into()
            }
        );
        assert_eq!(t.redeem(&b.ticket, "term-a", now), Err(TicketError::Used));
        assert_eq!(t.redeem("", "term-a", now), Err(TicketError::Missing));
        assert_eq!(t.outstanding(), 0);
    }

    #[test]
    fn a_ticket_expires_after_its_lifetime_and_is_purged() {
        let ttl = Duration::from_millis(100);
        let t = Tickets::new(ttl);
        let now = Instant::now();
        let a = t.issue("o", "term", now).unwrap();
        let b = t.issue("o", "term", now).unwrap();
        assert_eq!(a.expires_in, ttl);
        // Just before the end: valid.
        let just = now + ttl - Duration::from_millis(1);
        assert_eq!(t.redeem(&a.ticket, "term", just).unwrap(), "o");
        // At the end: expired, and no longer outstanding.
        let late = t.redeem(&b.ticket, "term", now + ttl).unwrap_err();
        assert_eq!(late, TicketError::Expired { ttl_ms: 100 });
        assert!(late.to_string().contains("100 ms"), "{late}");
        assert_eq!(t.outstanding(), 0);
        // A longer lifetime than the constant is cut to it.
        assert_eq!(Tickets::new(Duration::from_secs(3600)).ttl(), WS_TICKET_TTL);
    }

    #[test]
    fn outstanding_tickets_are_capped_per_owner_and_in_all() {
        let t = Tickets::new(WS_TICKET_TTL);
        let now = Instant::now();
        for _ in 0..MAX_WS_TICKETS_PER_OWNER {
            t.issue("greedy", "term", now).unwrap();
        }
        let e = t.issue("greedy", "term", now).unwrap_err();
        assert_eq!(e.code(), "ws.ticket_limit");
        assert!(e.to_string().contains("for this owner"), "{e}");
        let mut owner = 0;
        while t.outstanding() < MAX_WS_TICKETS {
            owner += 1;
            for _ in 0..MAX_WS_TICKETS_PER_OWNER {
                if t.outstanding() < MAX_WS_TICKETS {
                    t.issue(&format!("o{owner}"), "term", now).unwrap();
                }
            }
        }
        let e = t.issue("newcomer", "term", now).unwrap_err();
        assert_eq!(
            e,
            TicketError::Limit {
                outstanding: MAX_WS_TICKETS,
                max: MAX_WS_TICKETS,
                whose: ""
            }
        );
        // Expired ones make room.
        t.issue("newcomer", "term", now + WS_TICKET_TTL).unwrap();
        assert_eq!(t.outstanding(), 1);
    }

    #[test]
    fn an_owners_end_spends_its_tickets_only() {
        let t = Tickets::new(WS_TICKET_TTL);
        let now = Instant::now();
        let mine = t.issue("session:1", "term", now).unwrap();
        let theirs = t.issue("session:2", "term", now).unwrap();
        t.end_owner("session:1");
        assert_eq!(
            t.redeem(&mine.ticket, "term", now),
            Err(TicketError::Revoked)
        );
        assert_eq!(t.redeem(&theirs.ticket, "term", now).unwrap(), "session:2");
    }

    #[test]
    fn spent_tickets_are_forgotten_oldest_first_and_then_unknown() {
        let t = Tickets::new(WS_TICKET_TTL);
        let now = Instant::now();
        let first = t.issue("o", "term", now).unwrap();
        t.redeem(&first.ticket, "term", now).unwrap();
        for _ in 0..SPENT_TICKETS_KEPT {
            let x = t.issue("o", "term", now).unwrap();
            t.redeem(&x.ticket, "term", now).unwrap();
        }
        assert_eq!(
            t.redeem(&first.ticket, "term", now),
            Err(TicketError::Unknown)
        );
    }
}
