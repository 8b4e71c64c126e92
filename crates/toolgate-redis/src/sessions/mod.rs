//! [`RedisSessions`]: sign-in sessions shared by every replica, bounded in all and per user,
//! and the sign-ins that wait for an identity provider's callback.
//!
//! The `.lua` files are the scripts, each behind `server_clock.lua`.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Script;

use crate::link::{Link, millis_at_least_one};
use crate::seal::{self, Seal};
use crate::{RedisError, keys};

static OPEN: LazyLock<Script> = LazyLock::new(|| script(include_str!("open.lua")));
static CLOSE: LazyLock<Script> = LazyLock::new(|| script(include_str!("close.lua")));
static START_FLOW: LazyLock<Script> = LazyLock::new(|| script(include_str!("start_flow.lua")));
static FINISH_FLOW: LazyLock<Script> = LazyLock::new(|| script(include_str!("finish_flow.lua")));

/// A script of the store: the server's clock, then its own body.
fn script(body: &str) -> Script {
    crate::server_clock::script(&[body])
}

/// The longest a session or a waiting sign-in is kept: a year (a longer span is cut to it).
const LONGEST: Duration = Duration::from_secs(365 * 24 * 3600);

/// Redis gave no answer in time, or failed: nothing was opened, found or ended.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the sessions kept on Redis cannot be reached ({0}); try again once Redis answers")]
pub struct SessionsUnavailable(String);

/// How many sessions a [`RedisSessions`] store keeps live at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionBounds {
    /// Live sessions of everyone together; a sign-in past it is refused.
    pub max_total: usize,
    /// Live sessions of one user; a sign-in past it ends that user's oldest session.
    pub max_per_user: usize,
}

/// What [`RedisSessions::open`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionOpened {
    /// The session is open; `ended` older sessions of the same user ended to make room.
    Opened {
        /// How many of the user's older sessions ended.
        ended: usize,
    },
    /// Live sessions of others take every place: nothing was opened.
    Full,
}

/// The bounds on sign-ins waiting for their callback ([`RedisSessions::start_flow`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowBounds<'a> {
    /// Waiting sign-ins of everyone together; one past it is refused.
    pub max_total: usize,
    /// Where the sign-in comes from (a client's address, say: any text that names the
    /// source alike on every replica), and how many of its sign-ins may wait at once; one
    /// past it is refused. `None`: the sign-in is counted in all only.
    pub source: Option<(&'a str, usize)>,
}

/// What [`RedisSessions::start_flow`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowStarted {
    /// The sign-in waits for its callback.
    Kept,
    /// As many sign-ins wait as [`FlowBounds::max_total`]: nothing was kept.
    Full,
    /// As many sign-ins of its source wait as its allowance: nothing was kept. The
    /// source's oldest waiting sign-in expires after `retry_after`, if not called back
    /// before.
    SourceFull {
        /// When the source has a place again at the latest.
        retry_after: Duration,
    },
}

/// Sign-in sessions on Redis, shared by every replica on the same Redis (and
/// [key prefix](crate::RedisConfigBuilder::key_prefix)): a session opened through one replica
/// is found through every other, and ended on all of them at once. Restarting a replica
/// ends none.
///
/// The store knows a session by the SHA-256 of its secret id, never the id itself: whoever
/// reads Redis cannot present a session. Each session holds a record the caller chose (who
/// signed in, say) and ends when its time is up, on the Redis server's clock.
///
/// It keeps [`SessionBounds`] exactly across replicas: each sign-in is one Lua script that
/// counts the live sessions and adds the new one atomically. Past the bound per user, the
/// user's oldest sessions end first, so someone who signs in over and over ends only their
/// own sessions; past the bound in all, the sign-in is refused ([`SessionOpened::Full`]).
///
/// It also keeps sign-ins that wait for an identity provider's callback
/// ([`start_flow`](Self::start_flow), [`finish_flow`](Self::finish_flow)), so the callback
/// may reach any replica.
///
/// With an [encryption key](Self::with_encryption_key) each record is sealed with
/// AES-256-GCM and bound to its session: Redis then holds user ids, and the sources
/// (client addresses) of sign-ins waiting for their callback, in key names, and nothing
/// else in clear.
///
/// Every key lives under `<prefix>:{<prefix>:sessions}`, in one Redis Cluster slot; every key
/// expires. Built by [`RedisState::sessions`](crate::RedisState::sessions).
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use toolgate_redis::{RedisConfig, RedisState, SessionBounds, SessionOpened};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let state = RedisState::connect("redis://127.0.0.1:6379", RedisConfig::default()).await?;
/// let sessions = state.sessions();
/// let bounds = SessionBounds { max_total: 1000, max_per_user: 8 };
/// // The SHA-256 of the random id the browser holds in its cookie.
/// let id = [7u8; 32];
/// let opened = sessions
///     .open(&id, "alice", r#"{"user":"alice"}"#, Duration::from_secs(3600), bounds)
///     .await?;
/// assert!(matches!(opened, SessionOpened::Opened { .. }));
/// assert_eq!(sessions.find(&id).await?.as_deref(), Some(r#"{"user":"alice"}"#));
/// sessions.close(&id).await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedisSessions {
    link: Link,
    base: String,
    seal: Option<Arc<Seal>>,
}

impl RedisSessions {
    pub(crate) fn new(link: Link) -> Self {
        let base = keys::sessions(link.prefix());
        RedisSessions {
            link,
            base,
            seal: None,
        }
    }

    /// The same store, sealing each record with AES-256-GCM under `key`: 32 bytes, or 64
    /// hexadecimal digits (`openssl rand -hex 32`). Every replica needs the same key: a
    /// record this store cannot open (sealed with another key, or written without one) is
    /// taken for no session, and logged.
    ///
    /// # Errors
    ///
    /// [`RedisError::InvalidEncryptionKey`] for a key of another length or form.
    pub fn with_encryption_key(mut self, key: &[u8]) -> Result<Self, RedisError> {
        self.seal = Some(Arc::new(Seal::new(key)?));
        Ok(self)
    }

    /// Whether the store seals its records ([`with_encryption_key`](Self::with_encryption_key)).
    pub fn is_encrypted(&self) -> bool {
        self.seal.is_some()
    }

    /// Where the record of session `id` is kept, as a sealed record is bound to it.
    fn place(id: &str) -> Vec<u8> {
        format!("toolgate session\0{id}").into_bytes()
    }

    /// Where the secret of the waiting sign-in `state` is kept.
    fn flow_place(state: &str) -> Vec<u8> {
        format!("toolgate sign-in\0{state}").into_bytes()
    }

    /// The text kept at `place`, opened with the store's key; `None`, logged, when it
    /// cannot be (see [`with_encryption_key`](Self::with_encryption_key)).
    fn opened(&self, what: &str, place: &[u8], stored: &[u8]) -> Option<String> {
        seal::read_text(self.seal.as_deref(), place, stored)
            .map_err(|why| {
                tracing::warn!(store = %self.base, "{what} on Redis {why}; it is taken for none");
            })
            .ok()
    }

    fn key(&self, what: &str) -> String {
        format!("{}:{what}", self.base)
    }

    async fn run<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        first_key: &str,
        args: &[&[u8]],
    ) -> Result<T, SessionsUnavailable> {
        let args: Vec<&[u8]> = std::iter::once(self.base.as_bytes())
            .chain(args.iter().copied())
            .collect();
        self.link
            .run_script(script, self.key(first_key), &args)
            .await
            .map_err(|failure| SessionsUnavailable(failure.to_string()))
    }

    /// Opens the session `id` (the SHA-256 of its secret) for `user`, holding `record`, for
    /// `ttl` (at least a millisecond, at most a year), under `bounds`. Expired sessions
    /// leave first; past the bound per user, the user's oldest sessions end.
    ///
    /// # Errors
    ///
    /// [`SessionsUnavailable`] when Redis gives no answer within the deadline.
    pub async fn open(
        &self,
        id: &[u8; 32],
        user: &str,
        record: &str,
        ttl: Duration,
        bounds: SessionBounds,
    ) -> Result<SessionOpened, SessionsUnavailable> {
        let id = hex(id);
        let record = seal::write(self.seal.as_deref(), &Self::place(&id), record.into())
            .map_err(SessionsUnavailable)?;
        let ttl = millis_at_least_one(ttl.min(LONGEST)).to_string();
        let per_user = bounds.max_per_user.max(1).to_string();
        let total = bounds.max_total.to_string();
        let args: [&[u8]; 6] = [
            id.as_bytes(),
            user.as_bytes(),
            &record,
            ttl.as_bytes(),
            per_user.as_bytes(),
            total.as_bytes(),
        ];
        let (outcome, _, ended): (String, u64, usize) = self.run(&OPEN, "all", &args).await?;
        Ok(if outcome == "ok" {
            SessionOpened::Opened { ended }
        } else {
            SessionOpened::Full
        })
    }

    /// The record of the live session `id`, or `None` when there is none (never opened,
    /// ended, or expired).
    ///
    /// # Errors
    ///
    /// [`SessionsUnavailable`] when Redis gives no answer within the deadline.
    pub async fn find(&self, id: &[u8; 32]) -> Result<Option<String>, SessionsUnavailable> {
        let id = hex(id);
        let mut command = redis::cmd("HGET");
        command
            .arg(self.key(&format!("session:{id}")))
            .arg("record");
        let mut connection = self.link.connection();
        let stored = self
            .link
            .within(command.query_async::<Option<Vec<u8>>>(&mut connection))
            .await
            .map_err(|failure| SessionsUnavailable(failure.to_string()))?;
        Ok(stored.and_then(|stored| self.opened("a session's record", &Self::place(&id), &stored)))
    }

    /// Ends the session `id`; whether there was one.
    ///
    /// # Errors
    ///
    /// [`SessionsUnavailable`] when Redis gives no answer within the deadline.
    pub async fn close(&self, id: &[u8; 32]) -> Result<bool, SessionsUnavailable> {
        let ended: u8 = self.run(&CLOSE, "all", &[hex(id).as_bytes()]).await?;
        Ok(ended == 1)
    }

    /// Keeps a sign-in that waits for its callback under `state`, with its `secret` (a PKCE
    /// verifier, say), for `ttl`, when fewer than `bounds.max_total` sign-ins wait, and fewer
    /// than its source's allowance from its source (see [`FlowBounds`]). Across replicas
    /// the bounds are exact: the count and the addition are one script.
    ///
    /// # Errors
    ///
    /// [`SessionsUnavailable`] when Redis gives no answer within the deadline.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use toolgate_redis::{FlowBounds, FlowStarted, RedisConfig, RedisState};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let state = RedisState::connect("redis://127.0.0.1:6379", RedisConfig::default()).await?;
    /// let sessions = state.sessions();
    /// let bounds = FlowBounds { max_total: 1024, source: Some(("203.0.113.7", 16)) };
    /// let ten_minutes = Duration::from_secs(600);
    /// match sessions.start_flow("3f9a…", "verifier", ten_minutes, bounds).await? {
    ///     FlowStarted::Kept => { /* send the browser to the issuer */ }
    ///     FlowStarted::Full => { /* 503: everyone's places are taken */ }
    ///     FlowStarted::SourceFull { retry_after } => { /* 429, Retry-After */ }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn start_flow(
        &self,
        state: &str,
        secret: &str,
        ttl: Duration,
        bounds: FlowBounds<'_>,
    ) -> Result<FlowStarted, SessionsUnavailable> {
        let ttl = millis_at_least_one(ttl.min(LONGEST)).to_string();
        let secret = seal::write(
            self.seal.as_deref(),
            &Self::flow_place(state),
            secret.into(),
        )
        .map_err(SessionsUnavailable)?;
        let max = bounds.max_total.to_string();
        let (source, max_from) = bounds.source.unwrap_or(("", 0));
        let max_from = max_from.to_string();
        let args: [&[u8]; 6] = [
            state.as_bytes(),
            &secret,
            ttl.as_bytes(),
            max.as_bytes(),
            source.as_bytes(),
            max_from.as_bytes(),
        ];
        let (outcome, wait_ms): (String, u64) = self.run(&START_FLOW, "flows", &args).await?;
        Ok(match outcome.as_str() {
            "kept" => FlowStarted::Kept,
            "source" => FlowStarted::SourceFull {
                retry_after: Duration::from_millis(wait_ms),
            },
            _ => FlowStarted::Full,
        })
    }

    /// The secret of the sign-in waiting under `state`, taken out: a state serves once.
    /// `None` when it is unknown, used or expired.
    ///
    /// # Errors
    ///
    /// [`SessionsUnavailable`] when Redis gives no answer within the deadline.
    pub async fn finish_flow(&self, state: &str) -> Result<Option<String>, SessionsUnavailable> {
        let stored: Option<Vec<u8>> = self.run(&FINISH_FLOW, "flows", &[state.as_bytes()]).await?;
        let place = Self::flow_place(state);
        Ok(stored.and_then(|stored| self.opened("a waiting sign-in's secret", &place, &stored)))
    }
}

fn hex(id: &[u8; 32]) -> String {
    use std::fmt::Write;
    id.iter().fold(String::with_capacity(64), |mut text, b| {
        let _ = write!(text, "{b:02x}");
        text
    })
}
