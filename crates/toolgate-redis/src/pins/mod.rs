//! [`RedisPins`]: the pinned definitions of imported tools, shared by every replica.
//!
//! The `.lua` files are the scripts, each behind `server_clock.lua`; those that change a
//! pin behind `record.lua` too.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use redis::Script;

use crate::keys;
use crate::link::Link;

static CHECK: LazyLock<Script> = LazyLock::new(|| {
    crate::server_clock::script(&[include_str!("record.lua"), include_str!("check.lua")])
});
static ACCEPT: LazyLock<Script> = LazyLock::new(|| {
    crate::server_clock::script(&[include_str!("record.lua"), include_str!("accept.lua")])
});
static FORGET: LazyLock<Script> = LazyLock::new(|| {
    crate::server_clock::script(&[include_str!("record.lua"), include_str!("forget.lua")])
});
static READ: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("read.lua")));

/// The most entries the history keeps, the oldest forgotten first.
pub const PIN_HISTORY: usize = 10_000;

/// Redis gave no answer in time, or failed: nothing was pinned, accepted or read.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the pins kept on Redis cannot be reached ({0}); try again once Redis answers")]
pub struct PinsUnavailable(String);

/// What [`RedisPins::check`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PinCheck {
    /// The tool had no pin: the definition offered is now its pin (trust on first use).
    Pinned,
    /// The definition offered is the pinned one.
    Same,
    /// The definition offered is the pinned one again: the change that waited is gone.
    Withdrawn,
    /// The definition offered differs from the pin, and is now the change waiting (recorded
    /// in the history).
    Changed,
    /// The definition offered differs from the pin, and is the change waiting already.
    StillChanged,
}

impl PinCheck {
    /// Whether the tool is served: its definition is the pinned one.
    pub fn serves(self) -> bool {
        matches!(
            self,
            PinCheck::Pinned | PinCheck::Same | PinCheck::Withdrawn
        )
    }
}

/// A pinned definition, as kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredPin {
    /// Its fingerprint.
    pub fingerprint: String,
    /// The definition, as the JSON it was kept as.
    pub definition: String,
}

/// Every pin and every change waiting, read at one moment by [`RedisPins::read`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoredPins {
    /// The pins, by tool.
    pub pinned: BTreeMap<String, StoredPin>,
    /// The changes waiting, by tool: the fingerprint and definition offered.
    pub pending: BTreeMap<String, StoredPin>,
}

/// The pinned definitions of imported tools (the defence against an upstream that changes
/// what a tool says it does), shared by every replica on the same Redis (and
/// [key prefix](crate::RedisConfigBuilder::key_prefix)): a tool pinned through one replica is
/// pinned for all, a change seen by one waits for all, and a change accepted through one is
/// accepted for all.
///
/// A pin is a fingerprint and the definition it was taken of, both chosen by the caller
/// (toolgate's gateway fingerprints a definition with SHA-256). Checking a definition and
/// accepting a change are one script each, so two replicas that check one tool at once pin
/// it once, and a change is recorded once. Every pin, change and acceptance is kept in a
/// history of the last [`PIN_HISTORY`] entries, on the Redis server's clock. Pins do not
/// expire: they are trust decisions, kept until someone [forgets](Self::forget) them.
///
/// Every key lives under `<prefix>:{<prefix>:pins}`, so every script keeps to one Redis
/// Cluster slot. Built by [`RedisState::pins`](crate::RedisState::pins).
///
/// # Examples
///
/// ```no_run
/// use toolgate_redis::{PinCheck, RedisConfig, RedisState};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let state = RedisState::connect("redis://127.0.0.1:6379", RedisConfig::default()).await?;
/// let pins = state.pins();
/// let first = pins.check("search", "sha256:aa", r#"{"description":"Searches."}"#).await?;
/// assert_eq!(first, PinCheck::Pinned);
/// // The upstream now describes the tool otherwise: held back until someone accepts it.
/// let later = pins.check("search", "sha256:bb", r#"{"description":"Sends mail."}"#).await?;
/// assert!(!later.serves());
/// assert_eq!(pins.accept("search").await?.as_deref(), Some("sha256:bb"));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedisPins {
    link: Link,
    base: String,
}

impl RedisPins {
    pub(crate) fn new(link: Link) -> Self {
        let base = keys::pins(link.prefix());
        RedisPins { link, base }
    }

    async fn run<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        args: &[&str],
    ) -> Result<T, PinsUnavailable> {
        let args: Vec<&[u8]> = std::iter::once(self.base.as_str())
            .chain(args.iter().copied())
            .map(str::as_bytes)
            .collect();
        self.link
            .run_script(script, format!("{}:pinned", self.base), &args)
            .await
            .map_err(|failure| PinsUnavailable(failure.to_string()))
    }

    /// Checks the definition `definition` (with its `fingerprint`) offered for `tool`
    /// against the tool's pin, pinning it when the tool has none.
    ///
    /// # Errors
    ///
    /// [`PinsUnavailable`] when Redis gives no answer within the deadline: then nothing is
    /// known of the pin, and the tool is to be held back.
    pub async fn check(
        &self,
        tool: &str,
        fingerprint: &str,
        definition: &str,
    ) -> Result<PinCheck, PinsUnavailable> {
        self.checked(tool, fingerprint, definition, false).await
    }

    /// Brings a pin kept elsewhere (a pin file) here: as [`check`](Self::check), except
    /// that a change waiting stays in place — the imported definition is not what the
    /// tool's upstream offers now, and the change waiting is what a replica saw offered. A
    /// definition alike the pin is then [`PinCheck::Same`], one that differs
    /// [`PinCheck::StillChanged`]; never [`PinCheck::Withdrawn`].
    ///
    /// # Errors
    ///
    /// [`PinsUnavailable`] when Redis gives no answer within the deadline.
    pub async fn import(
        &self,
        tool: &str,
        fingerprint: &str,
        definition: &str,
    ) -> Result<PinCheck, PinsUnavailable> {
        self.checked(tool, fingerprint, definition, true).await
    }

    async fn checked(
        &self,
        tool: &str,
        fingerprint: &str,
        definition: &str,
        import: bool,
    ) -> Result<PinCheck, PinsUnavailable> {
        let history = PIN_HISTORY.to_string();
        let import = if import { "1" } else { "0" };
        let found: String = self
            .run(&CHECK, &[tool, fingerprint, definition, &history, import])
            .await?;
        match found.as_str() {
            "pinned" => Ok(PinCheck::Pinned),
            "same" => Ok(PinCheck::Same),
            "withdrawn" => Ok(PinCheck::Withdrawn),
            "changed" => Ok(PinCheck::Changed),
            "still_changed" => Ok(PinCheck::StillChanged),
            other => Err(PinsUnavailable(format!(
                "the check answered `{other}`, which this version does not know"
            ))),
        }
    }

    /// Accepts the change waiting for `tool`: its definition becomes the pin. The
    /// fingerprint accepted, or `None` when no change of `tool` waits.
    ///
    /// # Errors
    ///
    /// [`PinsUnavailable`] when Redis gives no answer within the deadline.
    pub async fn accept(&self, tool: &str) -> Result<Option<String>, PinsUnavailable> {
        let history = PIN_HISTORY.to_string();
        self.run(&ACCEPT, &[tool, &history]).await
    }

    /// Forgets the pin of `tool` and any change waiting for it, for a tool gone for good:
    /// the next definition offered for `tool` is pinned afresh, trusted on first use. The
    /// fingerprint that was pinned (empty when only a change waited), or `None` when the
    /// tool had neither.
    ///
    /// # Errors
    ///
    /// [`PinsUnavailable`] when Redis gives no answer within the deadline.
    pub async fn forget(&self, tool: &str) -> Result<Option<String>, PinsUnavailable> {
        let history = PIN_HISTORY.to_string();
        self.run(&FORGET, &[tool, &history]).await
    }

    /// Every pin and every change waiting.
    ///
    /// # Errors
    ///
    /// [`PinsUnavailable`] when Redis gives no answer within the deadline.
    pub async fn read(&self) -> Result<StoredPins, PinsUnavailable> {
        type Fields = Vec<(String, String)>;
        let (pinned, pinned_forms, pending, pending_forms): (Fields, Fields, Fields, Fields) =
            self.run(&READ, &[]).await?;
        Ok(StoredPins {
            pinned: joined(pinned, pinned_forms),
            pending: joined(pending, pending_forms),
        })
    }

    /// The newest `limit` entries of the history (at most [`PIN_HISTORY`]), newest first:
    /// each JSON, `{"at_ms", "tool", "event", "fingerprint"}`, the event `pinned`,
    /// `changed`, `accepted` or `forgotten`.
    ///
    /// # Errors
    ///
    /// [`PinsUnavailable`] when Redis gives no answer within the deadline.
    pub async fn history(&self, limit: usize) -> Result<Vec<String>, PinsUnavailable> {
        let last = limit.min(PIN_HISTORY);
        if last == 0 {
            return Ok(Vec::new());
        }
        let mut command = redis::cmd("LRANGE");
        command
            .arg(format!("{}:history", self.base))
            .arg(0)
            .arg(last - 1);
        let mut connection = self.link.connection();
        self.link
            .within(command.query_async::<Vec<String>>(&mut connection))
            .await
            .map_err(|failure| PinsUnavailable(failure.to_string()))
    }
}

/// The fingerprints by tool joined with the definitions by tool; a definition missing (a
/// key removed by hand) reads as `null`.
fn joined(
    fingerprints: Vec<(String, String)>,
    definitions: Vec<(String, String)>,
) -> BTreeMap<String, StoredPin> {
    let mut definitions: BTreeMap<String, String> = definitions.into_iter().collect();
    fingerprints
        .into_iter()
        .map(|(tool, fingerprint)| {
            let definition = definitions.remove(&tool).unwrap_or_else(|| "null".into());
            (
                tool,
                StoredPin {
                    fingerprint,
                    definition,
                },
            )
        })
        .collect()
}
