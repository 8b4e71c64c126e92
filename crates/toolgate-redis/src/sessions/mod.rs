//! [`RedisSessions`]: sign-in sessions shared by every replica, bounded in all and per user,
//! and the sign-ins that wait for an identity provider's callback.
//!
//! The `.lua` files are the scripts, each behind `server_clock.lua`.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use crate::keys;
use crate::link::{Link, millis_at_least_one};

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
}

impl RedisSessions {
    pub(crate) fn new(link: Link) -> Self {
        let base = keys::sessions(link.prefix());
        RedisSessions { link, base }
    }

    fn key(&self, what: &str) -> String {
        format!("{}:{what}", self.base)
    }

    async fn run<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        first_key: &str,
        args: &[&str],
    ) -> Result<T, SessionsUnavailable> {
        let mut invocation = script.prepare_invoke();
        invocation.key(self.key(first_key)).arg(&self.base);
        for arg in args {
            invocation.arg(*arg);
        }
        let mut connection = self.link.connection();
        self.link
            .within(invocation.invoke_async::<T>(&mut connection))
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
        let ttl = millis_at_least_one(ttl.min(LONGEST)).to_string();
        let per_user = bounds.max_per_user.max(1).to_string();
        let total = bounds.max_total.to_string();
        let (outcome, _, ended): (String, u64, usize) = self
            .run(
                &OPEN,
                "all",
                &[&hex(id), user, record, &ttl, &per_user, &total],
            )
            .await?;
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
        let mut command = redis::cmd("HGET");
        command
            .arg(self.key(&format!("session:{}", hex(id))))
            .arg("record");
        let mut connection = self.link.connection();
        self.link
            .within(command.query_async::<Option<String>>(&mut connection))
            .await
            .map_err(|failure| SessionsUnavailable(failure.to_string()))
    }

    /// Ends the session `id`; whether there was one.
    ///
    /// # Errors
    ///
    /// [`SessionsUnavailable`] when Redis gives no answer within the deadline.
    pub async fn close(&self, id: &[u8; 32]) -> Result<bool, SessionsUnavailable> {
        let ended: u8 = self.run(&CLOSE, "all", &[&hex(id)]).await?;
        Ok(ended == 1)
    }

    /// Keeps a sign-in that waits for its callback under `state`, with its `secret` (a PKCE
    /// verifier, say), for `ttl`; `false` when `max` sign-ins wait already.
    ///
    /// # Errors
    ///
    /// [`SessionsUnavailable`] when Redis gives no answer within the deadline.
    pub async fn start_flow(
        &self,
        state: &str,
        secret: &str,
        ttl: Duration,
        max: usize,
    ) -> Result<bool, SessionsUnavailable> {
        let ttl = millis_at_least_one(ttl.min(LONGEST)).to_string();
        let kept: u8 = self
            .run(
                &START_FLOW,
                "flows",
                &[state, secret, &ttl, &max.to_string()],
            )
            .await?;
        Ok(kept == 1)
    }

    /// The secret of the sign-in waiting under `state`, taken out: a state serves once.
    /// `None` when it is unknown, used or expired.
    ///
    /// # Errors
    ///
    /// [`SessionsUnavailable`] when Redis gives no answer within the deadline.
    pub async fn finish_flow(&self, state: &str) -> Result<Option<String>, SessionsUnavailable> {
        self.run(&FINISH_FLOW, "flows", &[state]).await
    }
}

fn hex(id: &[u8; 32]) -> String {
    use std::fmt::Write;
    id.iter().fold(String::with_capacity(64), |mut text, b| {
        let _ = write!(text, "{b:02x}");
        text
    })
}
