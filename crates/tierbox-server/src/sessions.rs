//! Session tokens: the HTTP API's second kind of token.
//!
//! The server's own token (the state directory's `http-token`, or `--token-file`) is the
//! **operator token**: whoever holds it may do everything, including applying change
//! sets and issuing session tokens. An agent gets a **session token** instead: the
//! operator asks `POST /v1/sessions`, the server makes a token bound to a fresh session
//! (an owner, `session:<id>`), and every request made with it is that session's — its
//! background processes, its change sets, nothing of another session's. A session
//! token cannot issue tokens, and applies change sets only where the policy says
//! `workspace.agent_may_apply`.
//!
//! Session tokens live in the server's memory: they end with `DELETE /v1/session` (made
//! with the token), `DELETE /v1/sessions/{id}` (the operator), or the server.
//!
//! ```
//! use tierbox_server::sessions::Sessions;
//!
//! let sessions = Sessions::default();
//! let (token, session) = sessions.issue(Some("agent-1".to_owned())).unwrap();
//! assert_eq!(sessions.lookup(&token).unwrap().id, session.id);
//! assert_eq!(session.owner(), format!("session:{}", session.id));
//! assert!(sessions.revoke(&session.id).is_some());
//! assert!(sessions.lookup(&token).is_none());
//! ```

use std::sync::{Arc, Mutex, PoisonError};

use crate::service::ServiceError;

/// Most session tokens a server holds at once; more are refused (`sessions.limit`)
/// until some end. Bounds the server's memory and the cost of a token lookup (each is
/// compared in constant time).
pub const MAX_SESSIONS: usize = 1_024;

/// What every session token starts with, so one is told from the operator token.
pub const SESSION_TOKEN_PREFIX: &str = "tbs_";

/// Prefix of a session's owner id ([`Session::owner`]).
pub const SESSION_OWNER_PREFIX: &str = "session:";

/// One session a token was issued for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// Its id (32 hex digits).
    pub id: String,
    /// The name the operator gave it, if any (the `Tierbox-Session` charset).
    pub name: Option<String>,
}

impl Session {
    /// The owner of the session's background processes and change sets.
    pub fn owner(&self) -> String {
        format!("{SESSION_OWNER_PREFIX}{}", self.id)
    }
}

/// The session tokens a server issued.
#[derive(Debug, Default)]
pub struct Sessions {
    table: Mutex<Vec<(String, Arc<Session>)>>,
}

impl Sessions {
    /// Issues a token for a new session named `name`; the token is shown once.
    pub fn issue(&self, name: Option<String>) -> Result<(String, Arc<Session>), ServiceError> {
        let random = |what: &str| {
            tierbox_attest::new_id().map_err(|e| {
                ServiceError::new(
                    "run.failed",
                    format!("no randomness for the session {what}: {e}"),
                )
            })
        };
        let id = random("id")?;
        let token = format!(
            "{SESSION_TOKEN_PREFIX}{}{}",
            random("token")?,
            random("token")?
        );
        let session = Arc::new(Session { id, name });
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        if table.len() >= MAX_SESSIONS {
            return Err(ServiceError::new(
                "sessions.limit",
                format!(
                    "{MAX_SESSIONS} session tokens are live, the most a server holds; end one \
                     (DELETE /v1/session with its token, or DELETE /v1/sessions/{{id}})"
                ),
            ));
        }
        table.push((token.clone(), session.clone()));
        Ok((token, session))
    }

    /// The session of `token`, compared in constant time with every live token.
    pub fn lookup(&self, token: &str) -> Option<Arc<Session>> {
        if !token.starts_with(SESSION_TOKEN_PREFIX) {
            return None;
        }
        let table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let mut found = None;
        for (t, s) in table.iter() {
            if crate::http::same(t.as_bytes(), token.as_bytes()) {
                found = Some(s.clone());
            }
        }
        found
    }

    /// Ends the session `id`: its token no longer authenticates.
    pub fn revoke(&self, id: &str) -> Option<Arc<Session>> {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let at = table.iter().position(|(_, s)| s.id == id)?;
        Some(table.swap_remove(at).1)
    }

    /// How many sessions are live.
    pub fn len(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_distinct_prefixed_and_capped() {
        let sessions = Sessions::default();
        let (a, sa) = sessions.issue(None).unwrap();
        let (b, sb) = sessions.issue(None).unwrap();
        assert_ne!(a, b);
        assert_ne!(sa.id, sb.id);
        assert!(
            a.starts_with(SESSION_TOKEN_PREFIX) && a.len() == 4 + 64,
            "{a}"
        );
        assert!(sessions.lookup(&a[..a.len() - 1]).is_none());
        assert!(sessions.lookup("operator-token").is_none());
        for _ in 2..MAX_SESSIONS {
            sessions.issue(None).unwrap();
        }
        assert_eq!(sessions.issue(None).unwrap_err().code, "sessions.limit");
        sessions.revoke(&sa.id).unwrap();
        assert!(sessions.lookup(&a).is_none());
        assert_eq!(sessions.lookup(&b).unwrap().id, sb.id);
        sessions.issue(None).unwrap();
    }
}
