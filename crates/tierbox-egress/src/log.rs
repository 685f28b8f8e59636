//! The decision log: bounded, in decision order, with live byte counters.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::{Decision, EgressLog, Protocol, Verdict};

/// Bytes moved through one tunnel, updated by the copy loop and read by snapshots.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Client → destination.
    pub(crate) sent: AtomicU64,
    /// Destination → client.
    pub(crate) received: AtomicU64,
}

impl Counters {
    pub(crate) fn add(counter: &AtomicU64, bytes: usize) {
        counter.fetch_add(u64::try_from(bytes).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
}

/// A decision about to be recorded.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) protocol: Protocol,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) verdict: Verdict,
    pub(crate) message: String,
    pub(crate) address: Option<SocketAddr>,
    /// The request (`METHOD /path`) a terminated host's rules refused.
    pub(crate) request: Option<String>,
}

#[derive(Debug)]
struct Kept {
    decision: Decision,
    counters: Arc<Counters>,
}

#[derive(Debug, Default)]
struct State {
    kept: Vec<Kept>,
    dropped: u64,
    credentials_used: BTreeMap<String, u64>,
}

/// The log of one proxy: at most `limit` decisions, the rest counted.
#[derive(Debug)]
pub(crate) struct Recorder {
    limit: usize,
    state: Mutex<State>,
}

impl Recorder {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            state: Mutex::new(State::default()),
        }
    }

    /// Records a decision and returns the counters its tunnel (if any) updates. Past the
    /// limit the decision is only counted, and the counters go nowhere.
    pub(crate) fn record(&self, entry: Entry) -> Arc<Counters> {
        let counters = Arc::new(Counters::default());
        // A poisoned lock only means another thread panicked while holding it; the
        // vector is still consistent (pushes are the only mutation).
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.kept.len() < self.limit {
            state.kept.push(Kept {
                decision: Decision {
                    protocol: entry.protocol,
                    host: entry.host,
                    port: entry.port,
                    allowed: entry.verdict.is_allowed(),
                    verdict: entry.verdict,
                    message: entry.message,
                    address: entry.address,
                    request: entry.request,
                    bytes_sent: 0,
                    bytes_received: 0,
                },
                counters: Arc::clone(&counters),
            });
        } else {
            state.dropped = state.dropped.saturating_add(1);
        }
        counters
    }

    /// Adds what a terminated connection's relay reports: `injected` requests per
    /// credential rule.
    pub(crate) fn credentials_used(&self, injected: &BTreeMap<String, u64>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        for (name, n) in injected {
            let total = state.credentials_used.entry(name.clone()).or_default();
            *total = total.saturating_add(*n);
        }
    }

    /// Counts a decision that was made without being recorded.
    pub(crate) fn count_dropped(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.dropped = state.dropped.saturating_add(1);
    }

    /// The log so far, with the current byte counts.
    pub(crate) fn snapshot(&self) -> EgressLog {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        EgressLog {
            decisions: state
                .kept
                .iter()
                .map(|kept| Decision {
                    bytes_sent: kept.counters.sent.load(Ordering::Relaxed),
                    bytes_received: kept.counters.received.load(Ordering::Relaxed),
                    ..kept.decision.clone()
                })
                .collect(),
            dropped: state.dropped,
            credentials_used: state.credentials_used.clone(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn entry(host: &str, verdict: Verdict) -> Entry {
        Entry {
            protocol: Protocol::Connect,
            host: host.to_owned(),
            port: 443,
            verdict,
            message: format!("about {host}"),
            address: None,
            request: None,
        }
    }

    #[test]
    fn decisions_past_the_limit_are_counted_not_kept() {
        let log = Recorder::new(2);
        log.record(entry("a.example", Verdict::NotAllowlisted));
        log.record(entry("b.example", Verdict::Allowed));
        log.record(entry("c.example", Verdict::Allowed));
        log.count_dropped();
        let snap = log.snapshot();
        let hosts: Vec<_> = snap.decisions.iter().map(|d| d.host.as_str()).collect();
        assert_eq!(hosts, ["a.example", "b.example"]);
        assert_eq!(snap.dropped, 2);
        assert!(!snap.decisions[0].allowed && snap.decisions[1].allowed);
    }

    #[test]
    fn snapshots_see_live_counts() {
        let log = Recorder::new(4);
        let counters = log.record(entry("a.example", Verdict::Allowed));
        Counters::add(&counters.sent, 10);
        Counters::add(&counters.received, 7);
        let d = &log.snapshot().decisions[0];
        assert_eq!((d.bytes_sent, d.bytes_received), (10, 7));
        Counters::add(&counters.sent, 5);
        assert_eq!(log.snapshot().decisions[0].bytes_sent, 15);
    }
}
