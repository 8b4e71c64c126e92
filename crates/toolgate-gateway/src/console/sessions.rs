//! Console sessions: a random id in an `HttpOnly` cookie stands for the API key a person
//! signed in with, for a bounded time, with a token of its own against cross-site request
//! forgery.
//!
//! The store keeps the SHA-256 of each session id (never the id, so that neither a memory
//! dump nor the timing of a look-up gives one away) and who signed in: the SHA-256 of the
//! key, from which the user is found again on every request, or the user an access token
//! from the issuer named (a session opened with the authorization-code flow, which ends
//! when the token would). It is bounded: in all, and per user, so that
//! someone who holds a key and signs in over and over ends only their own older sessions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::time::Instant;
use toolgate_core::User;

use crate::config::ConsoleConfig;

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SessionError {
    /// Every place is taken by a live session of someone else.
    #[error(
        "the console has as many sessions open as it allows (`console.max_sessions`): sign out elsewhere or wait for one to expire"
    )]
    Full,
    /// The kernel's random source could not be read.
    #[error("no random session id could be made: see the gateway's log")]
    Random,
}

/// A session just opened: the id for the cookie, the token for state changes.
#[derive(Debug)]
pub struct Opened {
    /// The session id (64 hex digits): the cookie's value.
    pub id: String,
    /// The token a state-changing request must carry in `x-toolgate-csrf`.
    pub csrf: String,
}

/// Who a session stands for.
#[derive(Clone, Debug)]
pub enum Principal {
    /// The user of the API key with this SHA-256 (found again on every request).
    Key([u8; 32]),
    /// The user of an access token the issuer gave at sign-in.
    Token(Arc<User>),
}

/// A live session, as a request finds it.
#[derive(Clone, Debug)]
pub struct Live {
    /// Who signed in.
    pub principal: Principal,
    /// Its token against cross-site request forgery.
    pub csrf: String,
    /// When it ends.
    pub expires: Instant,
}

struct Session {
    live: Live,
    user: String,
    opened: Instant,
}

/// The console sessions of this process; they outlive reloads.
#[derive(Default)]
pub struct ConsoleSessions {
    by_id: Mutex<HashMap<[u8; 32], Session>>,
    /// The sign-ins through the issuer waiting for their callback.
    pub(crate) flows: Flows,
}

/// How long a person may take at the issuer.
pub const FLOW_TTL: Duration = Duration::from_secs(600);

/// The most flows waiting for their callback at once.
pub const MAX_FLOWS: usize = 1024;

/// The flows started and not yet called back, by `state`.
#[derive(Default)]
pub struct Flows {
    pending: Mutex<HashMap<String, (String, Instant)>>,
}

impl std::fmt::Debug for Flows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flows").finish_non_exhaustive()
    }
}

impl Flows {
    /// A new flow: its `state` and PKCE verifier.
    ///
    /// # Errors
    ///
    /// [`SessionError::Full`] past [`MAX_FLOWS`] live flows, [`SessionError::Random`].
    pub fn start(&self) -> Result<(String, String), SessionError> {
        let state = random_hex(16)?;
        let verifier = random_hex(32)?;
        let now = Instant::now();
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.retain(|_, (_, expires)| *expires > now);
        if pending.len() >= MAX_FLOWS {
            return Err(SessionError::Full);
        }
        pending.insert(state.clone(), (verifier.clone(), now + FLOW_TTL));
        Ok((state, verifier))
    }

    /// The verifier of the live flow `state`, taken out (a `state` serves once).
    pub fn finish(&self, state: &str) -> Option<String> {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        match pending.remove(state) {
            Some((verifier, expires)) if expires > Instant::now() => Some(verifier),
            _ => None,
        }
    }
}

impl std::fmt::Debug for ConsoleSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleSessions")
            .field("open", &self.len())
            .finish()
    }
}

fn digest(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

/// `bytes` random bytes from the kernel, as hex.
pub(super) fn random_hex(bytes: usize) -> Result<String, SessionError> {
    use std::fmt::Write;
    use std::io::Read;
    let mut buffer = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buffer))
        .map_err(|e| {
            tracing::error!(error = %e, "/dev/urandom cannot be read: no console session");
            SessionError::Random
        })?;
    let mut text = String::with_capacity(bytes * 2);
    for b in buffer {
        let _ = write!(text, "{b:02x}");
    }
    Ok(text)
}

impl ConsoleSessions {
    /// Opens a session for `user`, who signed in as `principal`, under the bounds of
    /// `limits`, for `session_ttl` or `within`, whichever is shorter. Expired sessions are
    /// dropped first; past the bound per user, the user's oldest session ends.
    ///
    /// # Errors
    ///
    /// [`SessionError::Full`] when live sessions of others fill every place;
    /// [`SessionError::Random`] when no id can be made.
    pub fn open(
        &self,
        principal: Principal,
        user: &str,
        limits: &ConsoleConfig,
        within: Option<Duration>,
    ) -> Result<Opened, SessionError> {
        let id = random_hex(32)?;
        let csrf = random_hex(32)?;
        let now = Instant::now();
        let mut sessions = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|_, s| s.live.expires > now);
        let mut own: Vec<([u8; 32], Instant)> = sessions
            .iter()
            .filter(|(_, s)| s.user == user)
            .map(|(k, s)| (*k, s.opened))
            .collect();
        own.sort_by_key(|(_, opened)| *opened);
        let over = (own.len() + 1).saturating_sub(limits.max_sessions_per_user);
        for (k, _) in own.into_iter().take(over) {
            sessions.remove(&k);
        }
        if sessions.len() >= limits.max_sessions {
            return Err(SessionError::Full);
        }
        sessions.insert(
            digest(&id),
            Session {
                live: Live {
                    principal,
                    csrf: csrf.clone(),
                    expires: now + within.map_or(limits.session_ttl, |w| w.min(limits.session_ttl)),
                },
                user: user.to_owned(),
                opened: now,
            },
        );
        Ok(Opened { id, csrf })
    }

    /// The live session with this id, if any (an expired one is dropped).
    pub fn find(&self, id: &str) -> Option<Live> {
        let key = digest(id);
        let mut sessions = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        match sessions.get(&key) {
            Some(s) if s.live.expires > Instant::now() => Some(s.live.clone()),
            Some(_) => {
                sessions.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Ends the session with this id (nothing when there is none).
    pub fn close(&self, id: &str) {
        self.by_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&digest(id));
    }

    /// How many sessions are held (expired ones included until they are next swept).
    pub fn len(&self) -> usize {
        self.by_id.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Whether `presented` is the session's token, compared in constant time.
pub fn token_matches(live: &Live, presented: &str) -> bool {
    live.csrf.len() == presented.len()
        && bool::from(live.csrf.as_bytes().ct_eq(presented.as_bytes()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn limits(max: usize, per_user: usize) -> ConsoleConfig {
        ConsoleConfig {
            session_ttl: Duration::from_secs(60),
            max_sessions: max,
            max_sessions_per_user: per_user,
            oauth: None,
        }
    }

    fn key(byte: u8) -> Principal {
        Principal::Key([byte; 32])
    }

    #[tokio::test(start_paused = true)]
    async fn a_session_is_found_by_its_id_until_it_expires() {
        let sessions = ConsoleSessions::default();
        let opened = sessions
            .open(key(1), "alice", &limits(10, 2), None)
            .unwrap();
        let live = sessions.find(&opened.id).expect("live");
        assert!(matches!(live.principal, Principal::Key(k) if k == [1; 32]));
        assert!(token_matches(&live, &opened.csrf));
        assert!(sessions.find("0".repeat(64).as_str()).is_none());

        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(sessions.find(&opened.id).is_none());
        assert_eq!(sessions.len(), 0, "the expired session is dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn signing_in_past_the_bound_per_user_ends_that_users_oldest_session_only() {
        let sessions = ConsoleSessions::default();
        let bob = sessions.open(key(2), "bob", &limits(10, 2), None).unwrap();
        let first = sessions
            .open(key(1), "alice", &limits(10, 2), None)
            .unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
        let second = sessions
            .open(key(1), "alice", &limits(10, 2), None)
            .unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
        let third = sessions
            .open(key(1), "alice", &limits(10, 2), None)
            .unwrap();

        assert!(sessions.find(&first.id).is_none());
        assert!(sessions.find(&second.id).is_some());
        assert!(sessions.find(&third.id).is_some());
        assert!(sessions.find(&bob.id).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_store_refuses_a_sign_in_until_a_session_expires() {
        let sessions = ConsoleSessions::default();
        sessions.open(key(1), "alice", &limits(2, 5), None).unwrap();
        sessions.open(key(2), "bob", &limits(2, 5), None).unwrap();
        assert_eq!(
            sessions
                .open(key(3), "carol", &limits(2, 5), None)
                .unwrap_err(),
            SessionError::Full
        );
        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(sessions.open(key(3), "carol", &limits(2, 5), None).is_ok());
        assert_eq!(sessions.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_session_opened_with_a_token_ends_when_the_token_would() {
        let sessions = ConsoleSessions::default();
        let user = Arc::new(User::new("carol"));
        let opened = sessions
            .open(
                Principal::Token(user),
                "carol",
                &limits(10, 2),
                Some(Duration::from_secs(5)),
            )
            .unwrap();
        tokio::time::advance(Duration::from_secs(4)).await;
        assert!(sessions.find(&opened.id).is_some());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(sessions.find(&opened.id).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_closed_session_is_gone_and_tokens_differ_per_session() {
        let sessions = ConsoleSessions::default();
        let one = sessions
            .open(key(1), "alice", &limits(10, 5), None)
            .unwrap();
        let two = sessions
            .open(key(1), "alice", &limits(10, 5), None)
            .unwrap();
        assert_ne!(one.id, two.id);
        assert_ne!(one.csrf, two.csrf);
        let live = sessions.find(&one.id).unwrap();
        assert!(!token_matches(&live, &two.csrf));
        assert!(!token_matches(&live, ""));
        sessions.close(&one.id);
        assert!(sessions.find(&one.id).is_none());
        assert!(sessions.find(&two.id).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_flow_serves_once_and_expires() {
        let flows = Flows::default();
        let (state, verifier) = flows.start().unwrap();
        assert_eq!(verifier.len(), 64);
        assert_eq!(flows.finish(&state), Some(verifier));
        assert_eq!(flows.finish(&state), None, "once");
        let (late, _) = flows.start().unwrap();
        tokio::time::advance(FLOW_TTL + Duration::from_secs(1)).await;
        assert_eq!(flows.finish(&late), None, "expired");
        assert_eq!(flows.finish("made-up"), None);
    }
}
