//! `policies:` — what every call runs through.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::values::{self, ByteSize, EnvString, RateSpec};

/// Every policy of the gateway. All are optional; with none, every authenticated user may
/// call every tool.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policies {
    /// Who may call what (deny by default when present).
    pub authorization: Option<AuthorizationPolicy>,
    /// Calls that wait for a person's approval.
    pub approval: Option<ApprovalPolicy>,
    /// Rate limits.
    #[serde(default)]
    pub rate_limits: Vec<RateLimitPolicy>,
    /// Caps on calls in flight.
    #[serde(default)]
    pub concurrency: Vec<ConcurrencyPolicy>,
    /// Call timeouts.
    pub timeouts: Option<TimeoutPolicy>,
    /// Retries of idempotent tools.
    pub retry: Option<RetryPolicy>,
    /// The result cache.
    pub cache: Option<CachePolicy>,
    /// Redaction of sensitive values in input and output.
    pub redaction: Option<RedactionPolicy>,
    /// Output size limits.
    pub output_limit: Option<OutputLimitPolicy>,
}

/// `authorization:` — rules evaluated for every call and every listing; a matching `deny`
/// wins over any `allow`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthorizationPolicy {
    /// What happens when no rule matches (default `deny`).
    #[serde(default)]
    pub default: EffectName,
    /// The rules.
    #[serde(default)]
    pub rules: Vec<RuleEntry>,
}

/// `allow` or `deny`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectName {
    /// Let the call through.
    Allow,
    /// Refuse it (403).
    #[default]
    Deny,
}

/// One rule: it matches a call when every list it sets contains the call's user id, one of
/// the user's roles, the tool's name, or one of the tool's tags. An empty list matches
/// anything.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleEntry {
    /// `allow` or `deny`.
    pub effect: EffectName,
    /// User ids.
    #[serde(default)]
    pub users: Vec<String>,
    /// Roles.
    #[serde(default)]
    pub roles: Vec<String>,
    /// Tool names.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Tool tags (labels become tags: `category:math`, `safety:dangerous`).
    #[serde(default)]
    pub tags: Vec<String>,
}

/// `approval:` — calls that are suspended until a person approves them through
/// `POST /v1/suspensions/{id}/resume`, and the bounds on calls that wait.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalPolicy {
    /// Tools whose calls need approval.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Tags whose tools need approval.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Whether every tool annotated destructive needs approval (default true).
    #[serde(default = "yes")]
    pub destructive_tools: bool,
    /// Roles allowed to resume suspended calls (default `[admin]`).
    #[serde(default = "admin")]
    pub approver_roles: Vec<String>,
    /// Whether an approver is refused when approving or completing their own call
    /// (default true: an approval is a second person's check).
    #[serde(default = "yes")]
    pub four_eyes: bool,
    /// Calls one user may have waiting at once (default 100).
    #[serde(default = "max_pending_per_user")]
    pub max_pending_per_user: usize,
    /// Calls waiting in all (default 10 000).
    #[serde(default = "max_pending")]
    pub max_pending: usize,
    /// How long a call may wait before it expires (default `24h`).
    #[serde(default = "expire_after", with = "values::duration")]
    pub expire_after: Duration,
    /// How soon an approved call must start to run after the decision (default `15m`):
    /// a resumed call still queued for capacity past it is refused (`approval_expired`),
    /// and an approval for a retry (`"decision": "approve_retry"`) is void past it.
    #[serde(default = "run_within", with = "values::duration")]
    pub run_within: Duration,
    /// Where to tell that a call waits, was decided or expired (default: nowhere).
    #[serde(default)]
    pub webhooks: Vec<WebhookConfig>,
}

/// One entry of `approval.webhooks`: a receiver told, with a signed `POST`, that a call
/// started to wait, was decided or expired (see [`crate::webhooks`]).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// The receiver's `http://` or `https://` address (`${VAR}` references are expanded:
    /// some receivers, such as Slack's, put their token in it).
    pub url: EnvString,
    /// The key the body is signed with (HMAC-SHA-256), shared with the receiver: at least
    /// 16 characters, from a secret (`secret: ${WEBHOOK_SECRET}`).
    pub secret: EnvString,
    /// `json` (default) or `slack`.
    #[serde(default)]
    pub format: WebhookFormatName,
    /// The events sent (default all: `waiting`, `decided`, `expired`).
    #[serde(default = "all_webhook_events")]
    pub events: Vec<WebhookEventName>,
}

/// What a webhook's body looks like.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WebhookFormatName {
    /// The event as JSON: `type`, `id`, `occurred_at`, `suspension`, `decision`.
    #[default]
    Json,
    /// A Slack message (`text` and `blocks`), for a Slack incoming webhook.
    Slack,
}

/// The moments of a call that waits for approval.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WebhookEventName {
    /// The call started to wait (`suspension.waiting`).
    Waiting,
    /// An approver decided (`suspension.decided`).
    Decided,
    /// Nobody decided in time (`suspension.expired`).
    Expired,
}

impl WebhookEventName {
    /// Every event, in the order a call meets them.
    pub const ALL: [WebhookEventName; 3] = [
        WebhookEventName::Waiting,
        WebhookEventName::Decided,
        WebhookEventName::Expired,
    ];

    /// Its name in the configuration and in metric labels: `waiting`, `decided`, `expired`.
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookEventName::Waiting => "waiting",
            WebhookEventName::Decided => "decided",
            WebhookEventName::Expired => "expired",
        }
    }
}

fn all_webhook_events() -> Vec<WebhookEventName> {
    WebhookEventName::ALL.to_vec()
}

impl Default for ApprovalPolicy {
    /// Every field at its default. Without an `approval` section no call needs approval,
    /// but the bounds and `four_eyes` still apply to calls suspended by hooks of your own.
    fn default() -> Self {
        ApprovalPolicy {
            tools: Vec::new(),
            tags: Vec::new(),
            destructive_tools: true,
            approver_roles: admin(),
            four_eyes: true,
            max_pending_per_user: max_pending_per_user(),
            max_pending: max_pending(),
            expire_after: expire_after(),
            run_within: run_within(),
            webhooks: Vec::new(),
        }
    }
}

fn max_pending_per_user() -> usize {
    100
}

fn max_pending() -> usize {
    10_000
}

fn run_within() -> Duration {
    Duration::from_secs(15 * 60)
}

fn expire_after() -> Duration {
    Duration::from_secs(24 * 60 * 60)
}

pub(super) fn yes() -> bool {
    true
}

fn admin() -> Vec<String> {
    vec!["admin".to_owned()]
}

/// How calls split into budgets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartitionName {
    /// One budget for everyone.
    Global,
    /// One per user.
    User,
    /// One per tool.
    Tool,
    /// One per user and tool (the default).
    #[default]
    UserTool,
}

/// What a policy does when its state backend (Redis) cannot decide.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnBackendErrorName {
    /// Refuse the call (503): the default.
    #[default]
    FailClosed,
    /// Let the call through.
    FailOpen,
    /// Decide in this process while Redis is away: the policy's own limit, per replica.
    LocalFallback,
}

/// One rate limit.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitPolicy {
    /// The policy's name: it namespaces its budgets, so give each a different one.
    pub name: String,
    /// The rate: `60/minute`, `5/second`, `10/30s`.
    pub rate: RateSpec,
    /// Extra calls allowed at once on top of the steady rate (default 0).
    pub burst: Option<u32>,
    /// How calls split into budgets (default `user_tool`).
    #[serde(default)]
    pub partition: PartitionName,
    /// The tools it applies to (default: all).
    #[serde(default)]
    pub tools: Vec<String>,
    /// What happens when the state backend fails (default `fail_closed`).
    #[serde(default)]
    pub on_backend_error: OnBackendErrorName,
    /// The deadline of this policy's Redis calls, in place of `state.deadline` (default:
    /// that one). Ignored in memory.
    #[serde(default, with = "values::opt_duration")]
    pub redis_deadline: Option<Duration>,
}

/// One cap on calls in flight.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConcurrencyPolicy {
    /// The policy's name: it namespaces its budgets.
    pub name: String,
    /// How many calls may run at once.
    pub limit: u32,
    /// How calls split into budgets (default `user_tool`).
    #[serde(default)]
    pub partition: PartitionName,
    /// How long a call waits for a free slot before it is refused (default `0s`).
    #[serde(default, with = "values::opt_duration")]
    pub wait: Option<Duration>,
    /// The tools it applies to (default: all).
    #[serde(default)]
    pub tools: Vec<String>,
    /// What happens when the state backend fails (default `fail_closed`).
    #[serde(default)]
    pub on_backend_error: OnBackendErrorName,
    /// The deadline of this policy's Redis calls, in place of `state.deadline` (default:
    /// that one). Ignored in memory.
    #[serde(default, with = "values::opt_duration")]
    pub redis_deadline: Option<Duration>,
}

/// `timeouts:` — how long a call may run.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeoutPolicy {
    /// The limit of every call (default: none beyond the server's request timeout).
    #[serde(default, with = "values::opt_duration")]
    pub default: Option<Duration>,
    /// Limits per tool.
    #[serde(default, with = "values::duration_map")]
    pub tools: BTreeMap<String, Duration>,
    /// Apply each limit to every attempt rather than to the whole call (default false).
    #[serde(default)]
    pub per_attempt: bool,
}

/// `retry:` — retries of idempotent, trusted tools on transient failures.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (default 3).
    pub max_attempts: Option<u32>,
    /// The first backoff (default 100 ms).
    #[serde(default, with = "values::opt_duration")]
    pub base_delay: Option<Duration>,
    /// The longest backoff (default 2 s).
    #[serde(default, with = "values::opt_duration")]
    pub max_delay: Option<Duration>,
    /// Tools to treat as idempotent even if not annotated so.
    #[serde(default)]
    pub idempotent_tools: Vec<String>,
}

/// `cache:` — the result cache (per user unless a tool is listed in `public`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CachePolicy {
    /// How long entries live (default 60 s).
    #[serde(default, with = "values::opt_duration")]
    pub ttl: Option<Duration>,
    /// TTLs per tool; a listed tool is cached even if not annotated read-only.
    #[serde(default, with = "values::duration_map")]
    pub tools: BTreeMap<String, Duration>,
    /// Tools never cached.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Tools whose results every user may share.
    #[serde(default)]
    pub public: Vec<String>,
    /// The most entries kept in memory (default 10 000; ignored on Redis).
    pub max_entries: Option<u64>,
    /// The deadline of this policy's Redis calls, in place of `state.deadline` (default:
    /// that one). Ignored in memory.
    #[serde(default, with = "values::opt_duration")]
    pub redis_deadline: Option<Duration>,
}

/// `redaction:` — sensitive values found in input and output.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactionPolicy {
    /// Built-in detectors by name: `email`, `phone`, `card`, `iban`, `aws_access_key`,
    /// `bearer_token`, `jwt`, `private_key` (default: all).
    pub detectors: Option<Vec<String>>,
    /// Extra detectors: a name and a regular expression.
    #[serde(default)]
    pub patterns: Vec<RedactionPattern>,
    /// What replaces a value (default `redact`).
    #[serde(default)]
    pub mode: RedactionModeName,
    /// The salt of `hash` mode.
    pub salt: Option<super::EnvString>,
    /// Redact the input (default true).
    #[serde(default = "yes")]
    pub input: bool,
    /// Redact the output (default true).
    #[serde(default = "yes")]
    pub output: bool,
}

/// One custom detector.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactionPattern {
    /// Its name, shown in placeholders.
    pub name: String,
    /// The regular expression.
    pub regex: String,
}

/// What replaces a sensitive value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedactionModeName {
    /// `[REDACTED:email]`.
    #[default]
    Redact,
    /// All but the last four characters masked.
    Mask,
    /// A salted hash prefix (set `salt`).
    Hash,
    /// The call fails with 422.
    Block,
}

/// `output_limit:` — the largest output returned.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputLimitPolicy {
    /// The limit for every tool.
    pub max_bytes: ByteSize,
    /// Limits per tool.
    #[serde(default)]
    pub tools: BTreeMap<String, ByteSize>,
    /// `truncate` (default) or `fail`.
    #[serde(default)]
    pub on_overflow: OverflowName,
}

/// What happens to an output over the limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OverflowName {
    /// Cut it, with a marker.
    #[default]
    Truncate,
    /// Fail the call.
    Fail,
}
