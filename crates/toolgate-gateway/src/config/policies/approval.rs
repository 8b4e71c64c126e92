//! `policies.approval:` — calls that wait for a person, the bounds on waiting calls, and
//! the webhooks told about them; made into a [`ConsentBuilder`], to which the gateway adds
//! its approvals store.

use std::time::Duration;

use serde::{Deserialize, Deserializer};
use toolgate_core::suspension::SuspensionLimits;
use toolgate_hooks::Consent;
use toolgate_hooks::consent::ConsentBuilder;

use super::{checked_duration, yes};
use crate::config::ConfigError;
use crate::config::values::{ByteSize, EnvString, parse_env_str};

/// The shortest webhook `secret` accepted.
const MIN_WEBHOOK_SECRET_CHARS: usize = 16;

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
    /// The bytes one user's waiting calls may take together, each counted as its record in
    /// compact JSON (default `16MiB`).
    #[serde(default = "max_pending_bytes_per_user")]
    pub max_pending_bytes_per_user: ByteSize,
    /// The bytes all waiting calls may take together, each counted as its record in
    /// compact JSON (default `256MiB`; in memory and on Redis alike).
    #[serde(default = "max_pending_bytes")]
    pub max_pending_bytes: ByteSize,
    /// How long a call may wait before it expires (default `24h`).
    #[serde(default = "expire_after", deserialize_with = "waiting_time")]
    pub expire_after: Duration,
    /// How soon an approved call must start to run after the decision (default `15m`):
    /// a resumed call still queued for capacity past it is refused (`approval_expired`),
    /// and an approval for a retry (`"decision": "approve_retry"`) is void past it.
    #[serde(default = "run_within", deserialize_with = "start_time")]
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
    #[serde(deserialize_with = "webhook_url")]
    pub url: EnvString,
    /// The key the body is signed with (HMAC-SHA-256), shared with the receiver: at least
    /// 16 characters, from a secret (`secret: ${WEBHOOK_SECRET}`).
    #[serde(deserialize_with = "webhook_secret")]
    pub secret: EnvString,
    /// `json` (default) or `slack`.
    #[serde(default)]
    pub format: WebhookFormatName,
    /// The events sent (default all: `waiting`, `decided`, `expired`, `withdrawn`).
    #[serde(default = "all_webhook_events")]
    pub events: Vec<WebhookEventName>,
    /// The most events of one caller (a user id in its tenant) this webhook's queue holds
    /// at once, queued or being delivered (default 64, a sixteenth of the queue's 1024;
    /// at most 1024). Past it that caller's new events are dropped for this webhook, so
    /// that one caller's flood never crowds out another's `waiting`.
    #[serde(default = "caller_share")]
    pub caller_share: usize,
}

fn caller_share() -> usize {
    crate::webhooks::CALLER_SHARE
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
    /// Its caller withdrew it while it ran after an approval (`suspension.withdrawn`).
    Withdrawn,
}

impl WebhookEventName {
    /// Every event, in the order a call meets them.
    pub const ALL: [WebhookEventName; 4] = [
        WebhookEventName::Waiting,
        WebhookEventName::Decided,
        WebhookEventName::Expired,
        WebhookEventName::Withdrawn,
    ];

    /// Its name in the configuration and in metric labels: `waiting`, `decided`,
    /// `expired`, `withdrawn`.
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookEventName::Waiting => "waiting",
            WebhookEventName::Decided => "decided",
            WebhookEventName::Expired => "expired",
            WebhookEventName::Withdrawn => "withdrawn",
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
            max_pending_bytes_per_user: max_pending_bytes_per_user(),
            max_pending_bytes: max_pending_bytes(),
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

fn max_pending_bytes_per_user() -> ByteSize {
    ByteSize(SuspensionLimits::default().max_bytes_per_user)
}

fn max_pending_bytes() -> ByteSize {
    ByteSize(SuspensionLimits::default().max_bytes_total)
}

fn waiting_time<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    checked_duration(d, |time| {
        if time.is_zero() {
            Err("a waiting call must be given time for a person to decide, e.g. `24h`")
        } else {
            Ok(())
        }
    })
}

fn start_time<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    checked_duration(d, |time| {
        if time.is_zero() {
            Err(
                "must be longer than zero: it is how soon an approved call must start to run (`15m` by default)",
            )
        } else {
            Ok(())
        }
    })
}

fn run_within() -> Duration {
    Duration::from_secs(15 * 60)
}

fn expire_after() -> Duration {
    Duration::from_secs(24 * 60 * 60)
}

fn admin() -> Vec<String> {
    vec!["admin".to_owned()]
}

impl ApprovalPolicy {
    /// Refuses bounds of zero and unusable webhooks (field paths relative to the section);
    /// durations of zero are refused while they are read.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.max_pending_per_user == 0 || self.max_pending == 0 {
            return Err(ConfigError::invalid(
                "",
                "`max_pending_per_user` and `max_pending` must be at least 1 (to need no approval, leave the tool out of `tools`)",
            ));
        }
        if self.max_pending_bytes_per_user.0 == 0 || self.max_pending_bytes.0 == 0 {
            return Err(ConfigError::invalid(
                "",
                "`max_pending_bytes_per_user` and `max_pending_bytes` must be larger than zero (e.g. `16MiB`): a call that waits takes some bytes",
            ));
        }
        for (i, webhook) in self.webhooks.iter().enumerate() {
            webhook
                .check()
                .map_err(|e| e.within(&format!("webhooks[{i}]")))?;
        }
        Ok(())
    }
}

impl From<&ApprovalPolicy> for ConsentBuilder {
    /// The hook's builder, without the store of waiting calls.
    fn from(policy: &ApprovalPolicy) -> Self {
        let consent = Consent::builder().destructive_tools(policy.destructive_tools);
        let consent = (policy.tools.iter()).fold(consent, |c, t| c.tool(t.clone()));
        policy.tags.iter().fold(consent, |c, t| c.tag(t.clone()))
    }
}

// Neither the secret nor the address (which may carry a token) is quoted in a message.

fn webhook_url<'de, D: Deserializer<'de>>(d: D) -> Result<EnvString, D::Error> {
    parse_env_str(d, |url| {
        let usable = url::Url::parse(&url)
            .is_ok_and(|url| matches!(url.scheme(), "http" | "https") && url.host().is_some());
        if usable {
            Ok(EnvString(url))
        } else {
            Err("must be the receiver's http:// or https:// address, e.g. `https://hooks.example.com/toolgate`".to_owned())
        }
    })
}

fn webhook_secret<'de, D: Deserializer<'de>>(d: D) -> Result<EnvString, D::Error> {
    parse_env_str(d, |secret| {
        if secret.trim().is_empty() {
            Err("is empty: every webhook is signed, so give it a secret shared with the receiver, e.g. `secret: ${APPROVAL_WEBHOOK_SECRET}` (generate one with `openssl rand -hex 32`)".to_owned())
        } else if secret.chars().count() < MIN_WEBHOOK_SECRET_CHARS {
            Err(format!(
                "is too short to sign with (not shown: it is a secret): use at least {MIN_WEBHOOK_SECRET_CHARS} characters, e.g. one made with `openssl rand -hex 32`"
            ))
        } else {
            Ok(EnvString(secret))
        }
    })
}

impl WebhookConfig {
    /// Refuses an empty list of events and a caller's share that is zero or larger than
    /// the queue (field paths relative to the entry); the address and the secret are
    /// refused while they are read.
    fn check(&self) -> Result<(), ConfigError> {
        if self.events.is_empty() {
            return Err(ConfigError::invalid(
                "events",
                "lists no event: name some of `waiting`, `decided`, `expired`, `withdrawn` (or leave `events` out for all four), or remove the webhook",
            ));
        }
        let capacity = crate::webhooks::QUEUE_CAPACITY;
        if self.caller_share == 0 {
            return Err(ConfigError::invalid(
                "caller_share",
                "must be at least 1, e.g. `64` (the default): with none, no caller's event could be sent",
            ));
        }
        if self.caller_share > capacity {
            return Err(ConfigError::invalid(
                "caller_share",
                format!(
                    "is larger than the webhook's queue, which holds {capacity} events: give at most {capacity} (the default, 64, leaves room for sixteen callers at once)"
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;

    #[test]
    fn approval_bounds_default_to_a_hundred_per_user_and_a_day_and_refuse_zero() {
        let config = parse("policies:\n  approval:\n    tools: [sleep]\n").unwrap();
        let approval = config.policies.approval.expect("the section");
        assert_eq!(
            (approval.max_pending_per_user, approval.max_pending),
            (100, 10_000)
        );
        assert_eq!(approval.expire_after.as_secs(), 24 * 3600);
        assert!(approval.four_eyes);

        let zero = parse("policies:\n  approval:\n    max_pending_per_user: 0\n").unwrap_err();
        assert_eq!(zero.field(), "policies.approval");
        let also_zero = parse("policies:\n  approval:\n    max_pending: 0\n").unwrap_err();
        assert_eq!(also_zero.field(), "policies.approval");
        assert!(also_zero.to_string().contains("at least 1"), "{also_zero}");
        assert_eq!(
            (
                approval.max_pending_bytes_per_user,
                approval.max_pending_bytes
            ),
            (ByteSize(16 << 20), ByteSize(256 << 20))
        );
        let no_bytes = parse("policies:\n  approval:\n    max_pending_bytes: 0\n").unwrap_err();
        assert_eq!(no_bytes.field(), "policies.approval");
        assert!(
            no_bytes.to_string().contains("must be larger than zero"),
            "{no_bytes}"
        );
        let set = parse("policies:\n  approval:\n    max_pending_bytes_per_user: 1MiB\n")
            .unwrap()
            .policies
            .approval
            .unwrap();
        assert_eq!(set.max_pending_bytes_per_user, ByteSize(1 << 20));
        let never = parse("policies:\n  approval:\n    expire_after: 0s\n").unwrap_err();
        assert_eq!(never.field(), "policies.approval.expire_after");
        assert!(never.to_string().starts_with("<config>:3:19:"), "{never}");
        let late = parse("policies:\n  approval:\n    run_within: 0s\n").unwrap_err();
        assert_eq!(late.field(), "policies.approval.run_within");
        assert!(
            late.to_string().contains("how soon an approved call"),
            "{late}"
        );
    }

    #[test]
    fn approval_webhooks_default_to_json_and_every_event() {
        let config = parse(
            "policies:\n  approval:\n    webhooks:\n      - { url: \"https://hooks.example.com/a\", secret: 0123456789abcdef0123 }\n      - { url: \"http://127.0.0.1:9/b\", secret: 0123456789abcdef0123, format: slack, events: [decided] }\n",
        )
        .unwrap();
        let webhooks = &config.policies.approval.unwrap().webhooks;
        assert_eq!(webhooks[0].format, WebhookFormatName::Json);
        assert_eq!(webhooks[0].events, WebhookEventName::ALL);
        assert_eq!(webhooks[1].format, WebhookFormatName::Slack);
        assert_eq!(webhooks[1].events, [WebhookEventName::Decided]);
    }

    #[test]
    fn a_webhooks_caller_share_defaults_to_64_and_may_be_anything_up_to_its_queue() {
        let webhook = |more: &str| {
            format!(
                "policies:\n  approval:\n    webhooks:\n      - {{ url: \"https://hooks.example.com\", secret: 0123456789abcdef0123{more} }}\n"
            )
        };
        let share =
            |text: &str| parse(text).unwrap().policies.approval.unwrap().webhooks[0].caller_share;
        assert_eq!(share(&webhook("")), 64);
        assert_eq!(share(&webhook(", caller_share: 2")), 2);
        assert_eq!(
            share(&webhook(", caller_share: 1024")),
            1024,
            "the whole queue"
        );

        let zero = parse(&webhook(", caller_share: 0")).unwrap_err();
        assert_eq!(zero.field(), "policies.approval.webhooks[0].caller_share");
        assert!(zero.to_string().contains("must be at least 1"), "{zero}");
        let past = parse(&webhook(", caller_share: 1025")).unwrap_err();
        assert_eq!(past.field(), "policies.approval.webhooks[0].caller_share");
        assert!(
            past.to_string()
                .contains("larger than the webhook's queue, which holds 1024 events"),
            "{past}"
        );
    }

    #[test]
    fn bad_approval_webhooks_are_refused_with_their_field_and_never_show_the_secret() {
        let webhook =
            |entry: &str| format!("policies:\n  approval:\n    webhooks:\n      - {entry}\n");
        let secret = "0123456789abcdef0123";
        let cases = [
            (
                webhook(&format!(
                    "{{ url: \"ftp://hooks.example.com\", secret: {secret} }}"
                )),
                "policies.approval.webhooks[0].url",
                "http:// or https://",
            ),
            (
                webhook(&format!("{{ url: not-a-url, secret: {secret} }}")),
                "policies.approval.webhooks[0].url",
                "http:// or https://",
            ),
            (
                webhook("{ url: \"https://hooks.example.com\", secret: \"\" }"),
                "policies.approval.webhooks[0].secret",
                "is empty",
            ),
            (
                webhook("{ url: \"https://hooks.example.com\", secret: tiny-secret-42 }"),
                "policies.approval.webhooks[0].secret",
                "at least 16",
            ),
            (
                webhook(&format!(
                    "{{ url: \"https://hooks.example.com\", secret: {secret}, format: xml }}"
                )),
                "policies.approval.webhooks[0].format",
                "`slack`",
            ),
            (
                webhook(&format!(
                    "{{ url: \"https://hooks.example.com\", secret: {secret}, events: [started] }}"
                )),
                "policies.approval.webhooks[0].events[0]",
                "`expired`",
            ),
            (
                webhook(&format!(
                    "{{ url: \"https://hooks.example.com\", secret: {secret}, events: [] }}"
                )),
                "policies.approval.webhooks[0].events",
                "no event",
            ),
            (
                webhook("{ url: \"https://hooks.example.com\" }"),
                "policies.approval.webhooks[0]",
                "secret",
            ),
        ];
        for (text, field, says) in cases {
            let error = parse(&text).expect_err(&text);
            assert_eq!(error.field(), field, "{text}: {error}");
            let message = error.to_string();
            assert!(message.contains(says), "{text}: {message}");
            assert!(!message.contains("tiny-secret-42"), "{message}");
            assert!(!message.contains(secret), "{message}");
        }

        // The address and the secret are refused where they are written.
        let text = webhook("{ url: \"https://hooks.example.com\", secret: tiny-secret-42 }");
        let column = text.lines().nth(3).unwrap().find("tiny").unwrap() + 1;
        let short = parse(&text).unwrap_err().to_string();
        assert!(
            short.starts_with(&format!("<config>:4:{column}:")),
            "{short}"
        );
    }
}
