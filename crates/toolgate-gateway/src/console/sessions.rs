//! Console sessions: a random id in an `HttpOnly` cookie stands for the API key a person
//! signed in with, for a bounded time, with a token of its own against cross-site request
//! forgery.
//!
//! The store keeps the SHA-256 of each session id (never the id, so that neither a memory
//! dump, a look at Redis, nor the timing of a look-up gives one away) and who signed in: the
//! SHA-256 of the key, from which the user is found again on every request, or the user an
//! access token from the issuer named (a session opened with the authorization-code flow,
//! which ends when the token would). It is bounded: in all, and per user, so that
//! someone who holds a key and signs in over and over ends only their own older sessions.
//!
//! The sessions, and the sign-ins waiting for the issuer's callback, are kept where the
//! policies keep their state: in this process, or on Redis ([`RedisSessions`]), where every
//! replica finds them, the bounds hold across replicas, and a restart ends none.
//!
//! One client address may have at most [`MAX_FLOWS_PER_ADDRESS`] sign-ins waiting at once
//! (an IPv6 address counted by its /64, as wrong credentials are), so that no one address
//! fills the [`MAX_FLOWS`] places every sign-in shares. That allowance is counted where the
//! sign-ins are kept: in this process, or on Redis across every replica.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::time::Instant;
use toolgate_core::User;
use toolgate_redis::{FlowBounds, FlowStarted, RedisSessions, SessionBounds, SessionOpened};

use crate::config::ConsoleConfig;
use crate::identity::failures::counted;
use crate::pins::now_ms;

/// Why a session could not be opened, found or ended.
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
    /// The sessions are kept on Redis, which did not answer in time.
    #[error(
        "the console's sessions are kept on Redis, which does not answer: try again in a moment"
    )]
    Unavailable,
    /// The client's address has [`MAX_FLOWS_PER_ADDRESS`] sign-ins waiting for the issuer
    /// already; the oldest of them expires after this wait.
    #[error(
        "this address has {MAX_FLOWS_PER_ADDRESS} sign-ins waiting for the issuer already: finish one of them, or wait {} s for the oldest to expire",
        .0.as_millis().div_ceil(1000).max(1)
    )]
    FlowsFromAddress(Duration),
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
    /// When it was opened, in milliseconds since the Unix epoch (0 for a session kept on
    /// Redis by a version that did not record it).
    pub opened_ms: u64,
}

/// A live session as Redis keeps it: JSON, the key's SHA-256 in base64url.
#[derive(Serialize, Deserialize)]
struct Record {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    token: Option<User>,
    csrf: String,
    #[serde(default)]
    opened_ms: u64,
}

impl Record {
    fn of(live: &Live) -> Self {
        let (key, token) = match &live.principal {
            Principal::Key(hash) => (Some(URL_SAFE_NO_PAD.encode(hash)), None),
            Principal::Token(user) => (None, Some(User::clone(user))),
        };
        Record {
            key,
            token,
            csrf: live.csrf.clone(),
            opened_ms: live.opened_ms,
        }
    }

    /// The session, or `None` for a record this gateway cannot read (written by another
    /// version, or by hand): such a session is ended.
    fn live(text: &str) -> Option<Live> {
        let record: Record = serde_json::from_str(text).ok()?;
        let principal = match (record.key, record.token) {
            (Some(key), None) => Principal::Key(URL_SAFE_NO_PAD.decode(key).ok()?.try_into().ok()?),
            (None, Some(user)) => Principal::Token(Arc::new(user)),
            _ => return None,
        };
        Some(Live {
            principal,
            csrf: record.csrf,
            opened_ms: record.opened_ms,
        })
    }
}

struct Session {
    live: Live,
    user: String,
    opened: Instant,
    expires: Instant,
}

/// The console sessions, and the sign-ins waiting for the issuer's callback: in this
/// process, where they outlive reloads, or on Redis, where every replica shares them.
pub struct ConsoleSessions {
    store: Store,
    /// Sessions opened before this time (milliseconds since the Unix epoch) are ended:
    /// see [`end_all`](ConsoleSessions::end_all).
    ended_before_ms: AtomicU64,
}

enum Store {
    Memory {
        by_id: Mutex<HashMap<[u8; 32], Session>>,
        flows: Flows,
        /// The waiting sign-ins, by client address.
        flows_by_address: FlowsByAddress,
    },
    Redis(RedisSessions),
}

impl Default for ConsoleSessions {
    fn default() -> Self {
        ConsoleSessions {
            store: Store::Memory {
                by_id: Mutex::default(),
                flows: Flows::default(),
                flows_by_address: FlowsByAddress::default(),
            },
            ended_before_ms: AtomicU64::new(0),
        }
    }
}

/// How long a person may take at the issuer.
pub const FLOW_TTL: Duration = Duration::from_secs(600);

/// The most flows waiting for their callback at once.
pub const MAX_FLOWS: usize = 1024;

/// The most flows waiting for their callback at once that one client address started (an
/// IPv6 address counted by its /64): a few browser tabs' worth, so that one address
/// cannot take the [`MAX_FLOWS`] places everyone shares.
pub const MAX_FLOWS_PER_ADDRESS: usize = 16;

/// The flows started and not yet called back, by `state`, in this process.
#[derive(Default)]
struct Flows {
    pending: Mutex<HashMap<String, (String, Instant)>>,
}

impl Flows {
    fn start(&self, state: &str, verifier: &str) -> Result<(), SessionError> {
        let now = Instant::now();
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.retain(|_, (_, expires)| *expires > now);
        if pending.len() >= MAX_FLOWS {
            return Err(SessionError::Full);
        }
        pending.insert(state.to_owned(), (verifier.to_owned(), now + FLOW_TTL));
        Ok(())
    }

    fn finish(&self, state: &str) -> Option<String> {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        match pending.remove(state) {
            Some((verifier, expires)) if expires > Instant::now() => Some(verifier),
            _ => None,
        }
    }
}

/// The flows that still wait, by `state`: the client address they came from (an IPv6 one
/// by its /64) and when they expire. Each is taken out when its callback comes, or when it
/// expires; so the table holds at most the [`MAX_FLOWS`] flows that may start in
/// [`FLOW_TTL`].
#[derive(Default)]
struct FlowsByAddress {
    waiting: Mutex<HashMap<String, (IpAddr, Instant)>>,
}

impl FlowsByAddress {
    /// Counts the flow `state` against `client`'s allowance, or refuses it when the client
    /// has [`MAX_FLOWS_PER_ADDRESS`] waiting already (or this process [`MAX_FLOWS`]).
    fn start(&self, state: &str, client: IpAddr) -> Result<(), SessionError> {
        let now = Instant::now();
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        waiting.retain(|_, (_, expires)| *expires > now);
        let (count, oldest) = waiting
            .values()
            .filter(|(address, _)| *address == client)
            .fold((0, None::<Instant>), |(count, oldest), (_, expires)| {
                (
                    count + 1,
                    Some(oldest.map_or(*expires, |o| o.min(*expires))),
                )
            });
        if count >= MAX_FLOWS_PER_ADDRESS {
            let wait = oldest.map_or(FLOW_TTL, |at| at.saturating_duration_since(now));
            return Err(SessionError::FlowsFromAddress(wait));
        }
        if waiting.len() >= MAX_FLOWS {
            return Err(SessionError::Full);
        }
        waiting.insert(state.to_owned(), (client, now + FLOW_TTL));
        Ok(())
    }

    /// The flow `state` waits no more (called back, or not started after all).
    fn finish(&self, state: &str) {
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(state);
    }
}

impl std::fmt::Debug for ConsoleSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut debug = f.debug_struct("ConsoleSessions");
        match &self.store {
            Store::Memory { by_id, .. } => debug.field(
                "open",
                &by_id.lock().unwrap_or_else(|e| e.into_inner()).len(),
            ),
            Store::Redis(redis) => debug.field("redis", redis),
        };
        debug.finish()
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

/// Logs why Redis did not answer, and says so in the console's words.
fn unavailable(error: toolgate_redis::SessionsUnavailable) -> SessionError {
    tracing::warn!(target: "toolgate::console", %error, "console sessions unavailable");
    SessionError::Unavailable
}

impl ConsoleSessions {
    /// Sessions kept on Redis, shared by every replica on it (the default keeps them in
    /// this process).
    pub fn on_redis(sessions: RedisSessions) -> Self {
        ConsoleSessions {
            store: Store::Redis(sessions),
            ended_before_ms: AtomicU64::new(0),
        }
    }

    /// Opens a session for `caller`, who signed in as `principal`, under the bounds of
    /// `limits`, for `session_ttl` or `within`, whichever is shorter. Expired sessions are
    /// dropped first; past the bound per user, the caller's oldest session ends. A caller
    /// is a user id in its tenant: `ann` of `acme` signing in never ends a session of `ann`
    /// of `globex`.
    ///
    /// # Errors
    ///
    /// [`SessionError::Full`] when live sessions of others fill every place;
    /// [`SessionError::Random`] when no id can be made; [`SessionError::Unavailable`] when
    /// Redis does not answer.
    pub async fn open(
        &self,
        principal: Principal,
        caller: &User,
        limits: &ConsoleConfig,
        within: Option<Duration>,
    ) -> Result<Opened, SessionError> {
        let key = caller.caller_key();
        let user: &str = &key;
        let id = random_hex(32)?;
        let csrf = random_hex(32)?;
        let ttl = within.map_or(limits.session_ttl, |w| w.min(limits.session_ttl));
        let live = Live {
            principal,
            csrf: csrf.clone(),
            opened_ms: now_ms(),
        };
        match &self.store {
            Store::Memory { by_id, .. } => {
                let now = Instant::now();
                let mut sessions = by_id.lock().unwrap_or_else(|e| e.into_inner());
                sessions.retain(|_, s| s.expires > now);
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
                let session = Session {
                    live,
                    user: user.to_owned(),
                    opened: now,
                    expires: now + ttl,
                };
                sessions.insert(digest(&id), session);
            }
            Store::Redis(redis) => {
                let record =
                    serde_json::to_string(&Record::of(&live)).map_err(|_| SessionError::Random)?;
                let bounds = SessionBounds {
                    max_total: limits.max_sessions,
                    max_per_user: limits.max_sessions_per_user,
                };
                let opened = redis
                    .open(&digest(&id), user, &record, ttl, bounds)
                    .await
                    .map_err(unavailable)?;
                if opened == SessionOpened::Full {
                    return Err(SessionError::Full);
                }
            }
        }
        Ok(Opened { id, csrf })
    }

    /// The live session with this id, if any (an expired one is dropped).
    ///
    /// # Errors
    ///
    /// [`SessionError::Unavailable`] when Redis does not answer.
    pub async fn find(&self, id: &str) -> Result<Option<Live>, SessionError> {
        let key = digest(id);
        match &self.store {
            Store::Memory { by_id, .. } => {
                let mut sessions = by_id.lock().unwrap_or_else(|e| e.into_inner());
                Ok(match sessions.get(&key) {
                    Some(s) if s.expires > Instant::now() && !self.was_ended(&s.live) => {
                        Some(s.live.clone())
                    }
                    Some(_) => {
                        sessions.remove(&key);
                        None
                    }
                    None => None,
                })
            }
            Store::Redis(redis) => {
                let Some(text) = redis.find(&key).await.map_err(unavailable)? else {
                    return Ok(None);
                };
                let live = Record::live(&text);
                if live.is_none() {
                    tracing::warn!(target: "toolgate::console", "a console session on Redis cannot be read: it is ended");
                }
                let live = live.filter(|live| !self.was_ended(live));
                if live.is_none() {
                    redis.close(&key).await.map_err(unavailable)?;
                }
                Ok(live)
            }
        }
    }

    /// Ends every session open now: the console was turned off, and its sessions must not
    /// come back when it is turned on again. Sessions kept in this process are dropped;
    /// those on Redis (which other replicas share) are ended as this gateway finds them,
    /// and every replica that turns its console back on ends them too.
    pub fn end_all(&self) {
        self.ended_before_ms.fetch_max(now_ms(), Ordering::Relaxed);
        if let Store::Memory { by_id, .. } = &self.store {
            by_id.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
    }

    /// Whether `live` was opened before [`end_all`](Self::end_all) was last called.
    fn was_ended(&self, live: &Live) -> bool {
        live.opened_ms < self.ended_before_ms.load(Ordering::Relaxed)
    }

    /// Ends the session with this id (nothing when there is none).
    ///
    /// # Errors
    ///
    /// [`SessionError::Unavailable`] when Redis does not answer.
    pub async fn close(&self, id: &str) -> Result<(), SessionError> {
        match &self.store {
            Store::Memory { by_id, .. } => {
                by_id
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&digest(id));
            }
            Store::Redis(redis) => {
                redis.close(&digest(id)).await.map_err(unavailable)?;
            }
        }
        Ok(())
    }

    /// A new sign-in through the issuer from `client` (its address, when known): its
    /// `state` and PKCE verifier, kept until its callback for [`FLOW_TTL`].
    ///
    /// # Errors
    ///
    /// [`SessionError::FlowsFromAddress`] when `client` has [`MAX_FLOWS_PER_ADDRESS`]
    /// sign-ins waiting; [`SessionError::Full`] past [`MAX_FLOWS`] waiting sign-ins;
    /// [`SessionError::Random`], [`SessionError::Unavailable`].
    pub async fn start_flow(
        &self,
        client: Option<IpAddr>,
    ) -> Result<(String, String), SessionError> {
        let state = random_hex(16)?;
        let verifier = random_hex(32)?;
        let client = client.map(counted);
        match &self.store {
            Store::Memory {
                flows,
                flows_by_address,
                ..
            } => {
                if let Some(client) = client {
                    flows_by_address.start(&state, client)?;
                }
                if let Err(e) = flows.start(&state, &verifier) {
                    flows_by_address.finish(&state);
                    return Err(e);
                }
            }
            Store::Redis(redis) => {
                let source = client.map(|client| client.to_string());
                let bounds = FlowBounds {
                    max_total: MAX_FLOWS,
                    source: source.as_deref().map(|s| (s, MAX_FLOWS_PER_ADDRESS)),
                };
                match redis
                    .start_flow(&state, &verifier, FLOW_TTL, bounds)
                    .await
                    .map_err(unavailable)?
                {
                    FlowStarted::Kept => {}
                    FlowStarted::Full => return Err(SessionError::Full),
                    FlowStarted::SourceFull { retry_after } => {
                        return Err(SessionError::FlowsFromAddress(retry_after));
                    }
                }
            }
        }
        Ok((state, verifier))
    }

    /// The verifier of the waiting sign-in `state`, taken out (a `state` serves once).
    ///
    /// # Errors
    ///
    /// [`SessionError::Unavailable`] when Redis does not answer.
    pub async fn finish_flow(&self, state: &str) -> Result<Option<String>, SessionError> {
        match &self.store {
            Store::Memory {
                flows,
                flows_by_address,
                ..
            } => {
                flows_by_address.finish(state);
                Ok(flows.finish(state))
            }
            Store::Redis(redis) => redis.finish_flow(state).await.map_err(unavailable),
        }
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

    impl ConsoleSessions {
        /// How many sessions this process holds (expired ones until they are next swept).
        fn held(&self) -> usize {
            match &self.store {
                Store::Memory { by_id, .. } => by_id.lock().unwrap().len(),
                Store::Redis(_) => unreachable!("the unit tests keep sessions in memory"),
            }
        }

        async fn live(&self, id: &str) -> Option<Live> {
            self.find(id).await.unwrap()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_session_is_found_by_its_id_until_it_expires() {
        let sessions = ConsoleSessions::default();
        let opened = sessions
            .open(key(1), &User::new("alice"), &limits(10, 2), None)
            .await
            .unwrap();
        let live = sessions.live(&opened.id).await.expect("live");
        assert!(matches!(live.principal, Principal::Key(k) if k == [1; 32]));
        assert!(token_matches(&live, &opened.csrf));
        assert!(sessions.live("0".repeat(64).as_str()).await.is_none());

        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(sessions.live(&opened.id).await.is_none());
        assert_eq!(sessions.held(), 0, "the expired session is dropped");
    }

    #[tokio::test]
    async fn sessions_ended_all_at_once_stay_ended_and_new_ones_open() {
        let sessions = ConsoleSessions::default();
        let before = sessions
            .open(key(1), &User::new("alice"), &limits(10, 2), None)
            .await
            .unwrap();
        sessions.end_all();
        assert!(sessions.live(&before.id).await.is_none());
        assert_eq!(sessions.held(), 0);

        let after = sessions
            .open(key(1), &User::new("alice"), &limits(10, 2), None)
            .await
            .unwrap();
        assert!(sessions.live(&after.id).await.is_some());
        // A session recorded as opened before the end (as one on Redis is) is ended.
        let stale = Live {
            opened_ms: now_ms() - 1_000,
            ..sessions.live(&after.id).await.unwrap()
        };
        sessions.end_all();
        assert!(sessions.was_ended(&stale));
    }

    #[tokio::test(start_paused = true)]
    async fn signing_in_past_the_bound_per_user_ends_that_users_oldest_session_only() {
        let sessions = ConsoleSessions::default();
        let open = async |principal, user| {
            let opened = sessions
                .open(principal, &User::new(user), &limits(10, 2), None)
                .await;
            tokio::time::advance(Duration::from_secs(1)).await;
            opened.unwrap()
        };
        let bob = open(key(2), "bob").await;
        let first = open(key(1), "alice").await;
        let second = open(key(1), "alice").await;
        let third = open(key(1), "alice").await;

        assert!(sessions.live(&first.id).await.is_none());
        assert!(sessions.live(&second.id).await.is_some());
        assert!(sessions.live(&third.id).await.is_some());
        assert!(sessions.live(&bob.id).await.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn signing_in_past_the_bound_spares_the_sessions_of_the_same_id_in_another_tenant() {
        let sessions = ConsoleSessions::default();
        let open = async |principal, user: &User| {
            let opened = sessions.open(principal, user, &limits(10, 2), None).await;
            tokio::time::advance(Duration::from_secs(1)).await;
            opened.unwrap()
        };
        let of_acme = User::new("ann").with_tenant("acme");
        let of_globex = User::new("ann").with_tenant("globex");
        let first = open(key(1), &of_acme).await;
        let second = open(key(1), &of_acme).await;
        for _ in 0..3 {
            open(key(2), &of_globex).await;
        }

        assert!(sessions.live(&first.id).await.is_some());
        assert!(sessions.live(&second.id).await.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_store_refuses_a_sign_in_until_a_session_expires() {
        let sessions = ConsoleSessions::default();
        let open = async |byte, user| {
            sessions
                .open(key(byte), &User::new(user), &limits(2, 5), None)
                .await
                .map(drop)
        };
        open(1, "alice").await.unwrap();
        open(2, "bob").await.unwrap();
        assert_eq!(open(3, "carol").await.unwrap_err(), SessionError::Full);
        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(open(3, "carol").await.is_ok());
        assert_eq!(sessions.held(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_session_opened_with_a_token_ends_when_the_token_would() {
        let sessions = ConsoleSessions::default();
        let user = Arc::new(User::new("carol"));
        let opened = sessions
            .open(
                Principal::Token(user),
                &User::new("carol"),
                &limits(10, 2),
                Some(Duration::from_secs(5)),
            )
            .await
            .unwrap();
        tokio::time::advance(Duration::from_secs(4)).await;
        assert!(sessions.live(&opened.id).await.is_some());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(sessions.live(&opened.id).await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_closed_session_is_gone_and_tokens_differ_per_session() {
        let sessions = ConsoleSessions::default();
        let one = sessions
            .open(key(1), &User::new("alice"), &limits(10, 5), None)
            .await
            .unwrap();
        let two = sessions
            .open(key(1), &User::new("alice"), &limits(10, 5), None)
            .await
            .unwrap();
        assert_ne!(one.id, two.id);
        assert_ne!(one.csrf, two.csrf);
        let live = sessions.live(&one.id).await.unwrap();
        assert!(!token_matches(&live, &two.csrf));
        assert!(!token_matches(&live, ""));
        sessions.close(&one.id).await.unwrap();
        assert!(sessions.live(&one.id).await.is_none());
        assert!(sessions.live(&two.id).await.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_flow_serves_once_and_expires() {
        let sessions = ConsoleSessions::default();
        let (state, verifier) = sessions.start_flow(None).await.unwrap();
        assert_eq!(verifier.len(), 64);
        let finish = async |state: &str| sessions.finish_flow(state).await.unwrap();
        assert_eq!(finish(&state).await, Some(verifier));
        assert_eq!(finish(&state).await, None, "once");
        let (late, _) = sessions.start_flow(None).await.unwrap();
        tokio::time::advance(FLOW_TTL + Duration::from_secs(1)).await;
        assert_eq!(finish(&late).await, None, "expired");
        assert_eq!(finish("made-up").await, None);
    }

    fn ip(address: &str) -> Option<IpAddr> {
        Some(address.parse().unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn one_address_has_its_allowance_of_waiting_sign_ins_and_gets_places_back_as_they_end() {
        let sessions = ConsoleSessions::default();
        let flooder = ip("203.0.113.9");
        let mut states = Vec::new();
        for _ in 0..MAX_FLOWS_PER_ADDRESS {
            states.push(sessions.start_flow(flooder).await.unwrap().0);
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        // The oldest expires FLOW_TTL after it started, MAX_FLOWS_PER_ADDRESS s ago.
        let wait = FLOW_TTL - Duration::from_secs(MAX_FLOWS_PER_ADDRESS as u64);
        assert_eq!(
            sessions.start_flow(flooder).await.unwrap_err(),
            SessionError::FlowsFromAddress(wait)
        );
        // Others are not held to the flooder's count, nor is an unknown address.
        assert!(sessions.start_flow(ip("203.0.113.10")).await.is_ok());
        assert!(sessions.start_flow(None).await.is_ok());
        // A sign-in called back gives its place back.
        assert!(sessions.finish_flow(&states[5]).await.unwrap().is_some());
        assert!(sessions.start_flow(flooder).await.is_ok());
        assert!(sessions.start_flow(flooder).await.is_err());
        // So does one that expires.
        tokio::time::advance(wait).await;
        assert!(sessions.start_flow(flooder).await.is_ok());
        assert!(sessions.start_flow(flooder).await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn the_addresses_of_one_ipv6_block_share_an_allowance_of_waiting_sign_ins() {
        let sessions = ConsoleSessions::default();
        for i in 0..MAX_FLOWS_PER_ADDRESS {
            let address = ip(&format!("2001:db8:1:2::{i:x}"));
            assert!(sessions.start_flow(address).await.is_ok());
        }
        let refused = sessions.start_flow(ip("2001:db8:1:2:ffff::1")).await;
        assert!(matches!(refused, Err(SessionError::FlowsFromAddress(_))));
        assert!(sessions.start_flow(ip("2001:db8:1:3::1")).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn many_addresses_fill_the_shared_places_and_a_refused_sign_in_costs_its_address_nothing()
    {
        let sessions = ConsoleSessions::default();
        let address = |i: usize| Some(IpAddr::from([10, 0, (i >> 8) as u8, i as u8]));
        for i in 0..MAX_FLOWS {
            let from = address(i / MAX_FLOWS_PER_ADDRESS);
            assert!(sessions.start_flow(from).await.is_ok(), "flow {i}");
        }
        let late = address(5000);
        for _ in 0..MAX_FLOWS_PER_ADDRESS + 1 {
            assert_eq!(
                sessions.start_flow(late).await.unwrap_err(),
                SessionError::Full
            );
        }
        tokio::time::advance(FLOW_TTL).await;
        for _ in 0..MAX_FLOWS_PER_ADDRESS {
            assert!(sessions.start_flow(late).await.is_ok());
        }
        let Store::Memory {
            flows_by_address, ..
        } = &sessions.store
        else {
            unreachable!("kept in memory");
        };
        assert_eq!(
            flows_by_address.waiting.lock().unwrap().len(),
            MAX_FLOWS_PER_ADDRESS,
            "the expired ones are swept"
        );
    }

    #[test]
    fn a_record_on_redis_reads_back_as_the_session_and_a_foreign_one_does_not() {
        let user = User {
            roles: vec!["approver".into()],
            ..User::new("carol")
        };
        for principal in [key(9), Principal::Token(Arc::new(user))] {
            let live = Live {
                principal,
                csrf: "c".repeat(64),
                opened_ms: 1_700_000_000_000,
            };
            let text = serde_json::to_string(&Record::of(&live)).unwrap();
            let back = Record::live(&text).expect("readable");
            assert_eq!(back.csrf, live.csrf);
            assert_eq!(back.opened_ms, live.opened_ms);
            match (back.principal, live.principal) {
                (Principal::Key(a), Principal::Key(b)) => assert_eq!(a, b),
                (Principal::Token(a), Principal::Token(b)) => assert_eq!(a, b),
                _ => panic!("another kind of principal: {text}"),
            }
        }
        for foreign in [
            "",
            "{}",
            r#"{"csrf": "c"}"#,
            r#"{"key": "AAAA", "csrf": "c"}"#,
            r#"{"key": "not base64!", "csrf": "c"}"#,
            r#"{"key": "CQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQk", "token": {"id": "x"}, "csrf": "c"}"#,
        ] {
            assert!(Record::live(foreign).is_none(), "{foreign}");
        }
    }
}
