//! Which WebSocket controls a term: at most one at a time sends its keys, resizes and
//! signals; any number of others watch (`mode=view`). A second controlling attach is
//! refused with [`Controlled`] (`term.controlled`) unless it asks to take over
//! (`takeover=true`), which detaches the previous controller with a `taken_over` frame —
//! as `tmux attach -d` does. Keys of two people never interleave, and a terminal's size
//! is the one client's that types into it.
//!
//! The HTTP routes of a term (`POST /v1/terms/{id}/input`, `resize`, `signal`) are its
//! owner's API calls, not attachments: they are not held to this.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

/// How a WebSocket is attached to its term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachMode {
    /// It types, resizes and signals; one per term.
    Control,
    /// It only watches: its input, resizes and signals are refused (`term.view_only`).
    View,
}

impl AttachMode {
    /// The mode a query value names: `control` or `view`.
    ///
    /// ```
    /// use tierbox_server::term_ws::control::AttachMode;
    ///
    /// assert_eq!(AttachMode::parse("view"), Some(AttachMode::View));
    /// assert_eq!(AttachMode::parse("watch"), None);
    /// ```
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "control" => Some(Self::Control),
            "view" => Some(Self::View),
            _ => None,
        }
    }

    /// Its name in the query and the audit log.
    pub fn name(self) -> &'static str {
        match self {
            Self::Control => "control",
            Self::View => "view",
        }
    }
}

/// The term already has a controlling WebSocket and the attach did not ask to take over.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "term {term} already has a controlling client (WebSocket {socket}{from}, attached {since_ms} ms \
     ago): attach with mode=view to watch it, or with takeover=true to take it over (that client \
     is then detached and the term runs on)"
)]
pub struct Controlled {
    /// The term.
    pub term: String,
    /// The controlling WebSocket's number.
    pub socket: u64,
    /// `" from ORIGIN"`, or `""` for a client that is not a web page.
    pub from: String,
    /// How long it has been attached, in milliseconds.
    pub since_ms: u64,
}

impl Controlled {
    /// Its code.
    pub const CODE: &'static str = "term.controlled";
}

#[derive(Debug)]
struct Controller {
    socket: u64,
    origin: Option<String>,
    attached_unix_ms: u64,
    taken_over: watch::Sender<Option<u64>>,
}

/// The controlling WebSocket of each term that has one.
#[derive(Debug, Default)]
pub struct Controllers {
    by_term: Mutex<HashMap<String, Controller>>,
}

/// A WebSocket's hold on its term's control, given back when dropped.
///
/// A claim that took over is confirmed with [`ControlSlot::confirm`] once the attach is
/// certain (recorded in the audit log): only then is the previous controller told; a
/// claim dropped unconfirmed puts the previous controller back.
#[derive(Debug)]
pub struct ControlSlot {
    controllers: Arc<Controllers>,
    term: String,
    socket: u64,
    previous: Option<Controller>,
    taken_over: watch::Receiver<Option<u64>>,
}

impl ControlSlot {
    /// The previous controller is told it was taken over (its WebSocket is closed).
    pub fn confirm(&mut self) {
        if let Some(previous) = self.previous.take() {
            let _ = previous.taken_over.send(Some(self.socket));
        }
    }

    /// Resolves when another WebSocket has taken this one's control over: its number.
    pub async fn taken_over(&mut self) -> u64 {
        match self.taken_over.wait_for(Option::is_some).await {
            Ok(by) => by.unwrap_or_default(),
            // Its claim was replaced by one that was itself taken over before it was
            // confirmed: control is gone all the same (to a number no longer known).
            Err(_) => 0,
        }
    }
}

impl Drop for ControlSlot {
    fn drop(&mut self) {
        let mut by_term = self.controllers.table();
        if by_term
            .get(&self.term)
            .is_some_and(|c| c.socket == self.socket)
        {
            // The previous controller comes back unless its own WebSocket has closed
            // meanwhile (then nobody controls the term).
            match self.previous.take().filter(|p| !p.taken_over.is_closed()) {
                Some(previous) => {
                    by_term.insert(self.term.clone(), previous);
                }
                None => {
                    by_term.remove(&self.term);
                }
            }
        }
    }
}

impl Controllers {
    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, Controller>> {
        self.by_term.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes WebSocket `socket` (of `origin`, attaching at `now_unix_ms`) the controller
    /// of `term`: refused while another controls it, unless `takeover`.
    pub fn claim(
        self: &Arc<Self>,
        term: &str,
        socket: u64,
        origin: Option<&str>,
        now_unix_ms: u64,
        takeover: bool,
    ) -> Result<ControlSlot, Controlled> {
        let mut by_term = self.table();
        if let Some(current) = by_term.get(term).filter(|_| !takeover) {
            return Err(Controlled {
                term: term.to_owned(),
                socket: current.socket,
                from: current
                    .origin
                    .as_ref()
                    .map(|o| format!(" from {o}"))
                    .unwrap_or_default(),
                since_ms: now_unix_ms.saturating_sub(current.attached_unix_ms),
            });
        }
        let (taken_over, taken) = watch::channel(None);
        let previous = by_term.insert(
            term.to_owned(),
            Controller {
                socket,
                origin: origin.map(str::to_owned),
                attached_unix_ms: now_unix_ms,
                taken_over,
            },
        );
        Ok(ControlSlot {
            controllers: self.clone(),
            term: term.to_owned(),
            socket,
            previous,
            taken_over: taken,
        })
    }

    /// The WebSocket controlling `term`, if one does.
    pub fn controller(&self, term: &str) -> Option<u64> {
        self.table().get(term).map(|c| c.socket)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Duration;

    fn taken(slot: &mut ControlSlot) -> bool {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(50), slot.taken_over())
                .await
                .is_ok()
        })
    }

    #[test]
    fn one_controller_per_term_and_a_second_is_refused_naming_the_first() {
        let c = Arc::new(Controllers::default());
        let _first = c
            .claim("t1", 1, Some("https://app.example"), 1_000, false)
            .unwrap();
        let e = c.claim("t1", 2, None, 1_250, false).unwrap_err();
        assert_eq!((e.socket, e.since_ms), (1, 250));
        let text = e.to_string();
        assert!(
            text.contains("from https://app.example")
                && text.contains("mode=view")
                && text.contains("takeover=true"),
            "{text}"
        );
        // Another term is free.
        let _other = c.claim("t2", 3, None, 1_300, false).unwrap();
        assert_eq!(c.controller("t1"), Some(1));
    }

    #[test]
    fn a_confirmed_takeover_detaches_the_previous_and_its_end_frees_nothing_of_the_new() {
        let c = Arc::new(Controllers::default());
        let mut first = c.claim("t", 1, None, 0, false).unwrap();
        let mut second = c.claim("t", 2, None, 10, true).unwrap();
        assert!(!taken(&mut first), "told before the takeover was confirmed");
        second.confirm();
        assert!(taken(&mut first));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert_eq!(rt.block_on(first.taken_over()), 2);
        // The first closing does not free the second's control.
        drop(first);
        assert_eq!(c.controller("t"), Some(2));
        assert!(c.claim("t", 3, None, 20, false).is_err());
        drop(second);
        assert_eq!(c.controller("t"), None);
        c.claim("t", 4, None, 30, false).unwrap();
    }

    #[test]
    fn an_unconfirmed_takeover_of_a_controller_that_closed_meanwhile_frees_the_term() {
        let c = Arc::new(Controllers::default());
        let first = c.claim("t", 1, None, 0, false).unwrap();
        let second = c.claim("t", 2, None, 10, true).unwrap();
        drop(first);
        drop(second);
        assert_eq!(c.controller("t"), None);
    }

    #[test]
    fn an_unconfirmed_takeover_puts_the_previous_controller_back() {
        let c = Arc::new(Controllers::default());
        let mut first = c.claim("t", 1, None, 0, false).unwrap();
        let second = c.claim("t", 2, None, 10, true).unwrap();
        drop(second);
        assert_eq!(c.controller("t"), Some(1));
        assert!(!taken(&mut first));
        assert_eq!(c.claim("t", 3, None, 20, false).unwrap_err().socket, 1);
    }
}
