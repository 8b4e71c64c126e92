//! What a webhook says: the event, and its body in each format.
//!
//! An event carries the facts an approver needs to find the call — its suspension id, tool,
//! caller (a user id, and their tenant when they have one), reason and times — and, once
//! decided, who decided what. Never the call's input (not even the redacted one), its
//! payload, or anything secret: a receiver that needs the input reads it with
//! `GET /v1/suspensions/{id}`, as an approver, over the gateway's own authentication.

use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{Value, json};
use toolgate_core::User;
use toolgate_core::suspension::{ResumeDecision, SuspendedInvocation};

use crate::config::{WebhookEventName, WebhookFormatName};

/// A waiting call as its events describe it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallSummary {
    /// The suspension id.
    pub id: String,
    /// The tool called.
    pub tool: String,
    /// Who made the call (their user id).
    pub user: String,
    /// The tenant of who made the call, if they have one: `ann` of `acme` and `ann` of
    /// `globex` are two callers.
    pub tenant: Option<String>,
    /// What the call waits for.
    pub reason: String,
    /// When it started to wait.
    pub suspended_at: SystemTime,
    /// When it expires, if it does.
    pub expires_at: Option<SystemTime>,
}

impl CallSummary {
    /// The summary of a stored call: everything but its input, output, payload and
    /// metadata.
    pub fn of(call: &SuspendedInvocation) -> Self {
        CallSummary {
            id: call.id.clone(),
            tool: call.tool.clone(),
            user: call.user.id.clone(),
            tenant: call.user.tenant.clone(),
            reason: call.reason.clone(),
            suspended_at: call.suspended_at,
            expires_at: call.expires_at,
        }
    }

    /// [`User::caller_key`] of who made the call: what their share of a webhook's queue
    /// is counted by.
    pub(super) fn caller_key(&self) -> Arc<str> {
        let mut caller = User::new(self.user.as_str());
        caller.tenant.clone_from(&self.tenant);
        caller.caller_key().into()
    }
}

/// An approver's decision, as `suspension.decided` tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecisionSummary {
    /// `approve`, `reject`, `complete` or `approve_retry`; `withdraw` for a caller's
    /// withdrawal of their running call (`suspension.withdrawn`).
    pub decision: &'static str,
    /// The approver's user id.
    pub decided_by: String,
    /// The approver's tenant, if they have one.
    pub decided_by_tenant: Option<String>,
    /// The reason given: a rejection's, or an approval's when the approver gave one.
    pub reason: Option<String>,
}

impl DecisionSummary {
    /// The summary of `decision` taken by `decided_by`: a completion's output is left out.
    pub fn of(decision: &ResumeDecision, decided_by: &User) -> Self {
        let (decision, reason) = match decision {
            ResumeDecision::Approve => ("approve", None),
            ResumeDecision::Reject { reason } => ("reject", Some(reason.clone())),
            ResumeDecision::Complete { .. } => ("complete", None),
        };
        DecisionSummary::by(decision, decided_by, reason)
    }

    /// `decision` (its name, as [`decision`](Self::decision) holds it) taken by
    /// `decided_by` for `reason`.
    pub fn by(decision: &'static str, decided_by: &User, reason: Option<String>) -> Self {
        DecisionSummary {
            decision,
            decided_by: decided_by.id.clone(),
            decided_by_tenant: decided_by.tenant.clone(),
            reason,
        }
    }
}

/// One event, sent to every webhook that subscribes to its kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Its id (`evt_` and 32 hex digits), the same on every attempt and every webhook.
    pub id: String,
    /// Which moment of the call.
    pub kind: WebhookEventName,
    /// When it happened (for `expired`, the call's expiry).
    pub occurred_at: SystemTime,
    /// The call.
    pub call: Arc<CallSummary>,
    /// The decision, for `decided`; for `withdrawn`, the withdrawal (`withdraw`, by the
    /// call's caller).
    pub decision: Option<DecisionSummary>,
}

impl Event {
    /// A new event. Its id is fresh, but for `expired`, whose id is the call's own
    /// (`expiry_event_id`): every replica that watched the call, and a restarted one, tells
    /// the same expiry under the same id, so a receiver that acts once per id acts once.
    pub fn new(
        kind: WebhookEventName,
        occurred_at: SystemTime,
        call: Arc<CallSummary>,
        decision: Option<DecisionSummary>,
    ) -> Self {
        let id = match kind {
            WebhookEventName::Expired => expiry_event_id(&call.id),
            _ => new_event_id(),
        };
        Event {
            id,
            kind,
            occurred_at,
            call,
            decision,
        }
    }

    /// Its `type`: `suspension.waiting`, `suspension.decided`, `suspension.expired` or
    /// `suspension.withdrawn`.
    pub fn type_name(&self) -> &'static str {
        match self.kind {
            WebhookEventName::Waiting => "suspension.waiting",
            WebhookEventName::Decided => "suspension.decided",
            WebhookEventName::Expired => "suspension.expired",
            WebhookEventName::Withdrawn => "suspension.withdrawn",
        }
    }

    /// The body sent in `format`.
    pub fn body(&self, format: WebhookFormatName) -> Vec<u8> {
        let value = match format {
            WebhookFormatName::Json => self.json(),
            WebhookFormatName::Slack => self.slack(),
        };
        serde_json::to_vec(&value).unwrap_or_default()
    }

    /// The `json` format. A caller's `tenant` (and an approver's `decided_by_tenant`) is
    /// there only when they have one, as in the rest of the API: the body of a gateway
    /// without tenants is what it was before tenants were told.
    pub fn json(&self) -> Value {
        let call = &self.call;
        let mut body = json!({
            "type": self.type_name(),
            "id": self.id,
            "occurred_at": rfc3339(self.occurred_at),
            "suspension": {
                "id": call.id,
                "tool": call.tool,
                "user": call.user,
                "reason": call.reason,
                "suspended_at": rfc3339(call.suspended_at),
                "expires_at": call.expires_at.map(rfc3339),
            },
        });
        if let Some(tenant) = &call.tenant {
            body["suspension"]["tenant"] = json!(tenant);
        }
        if let Some(decision) = &self.decision {
            body["decision"] = json!({
                "decision": decision.decision,
                "decided_by": decision.decided_by,
                "reason": decision.reason,
            });
            if let Some(tenant) = &decision.decided_by_tenant {
                body["decision"]["decided_by_tenant"] = json!(tenant);
            }
        }
        body
    }

    /// The `slack` format: one line of `text` (what notifications show) and blocks with
    /// the same facts. A caller or approver with a tenant is named `ann of acme`.
    pub fn slack(&self) -> Value {
        let call = &self.call;
        let (tool, id) = (slack_escape(&call.tool), &call.id);
        let user = slack_caller(&call.user, call.tenant.as_deref());
        let headline = match (&self.kind, &self.decision) {
            (WebhookEventName::Waiting, _) => {
                format!("A call of `{tool}` by {user} waits for approval ({id})")
            }
            (WebhookEventName::Decided, Some(d)) => format!(
                "{} decided `{}` on the call of `{tool}` by {user} ({id})",
                slack_caller(&d.decided_by, d.decided_by_tenant.as_deref()),
                d.decision
            ),
            (WebhookEventName::Decided, None) => {
                format!("The call of `{tool}` by {user} was decided ({id})")
            }
            (WebhookEventName::Expired, _) => {
                format!("The call of `{tool}` by {user} expired before anyone decided ({id})")
            }
            (WebhookEventName::Withdrawn, _) => {
                format!("{user} withdrew their call of `{tool}` while it ran ({id})")
            }
        };
        let mut facts = vec![format!("*Reason:* {}", slack_escape(&call.reason))];
        if let Some(reason) = self.decision.as_ref().and_then(|d| d.reason.as_ref()) {
            facts.push(format!("*Decision reason:* {}", slack_escape(reason)));
        }
        let mut context = format!("suspended {}", rfc3339(call.suspended_at));
        if let (WebhookEventName::Waiting, Some(expires_at)) = (self.kind, call.expires_at) {
            context.push_str(&format!(" · expires {}", rfc3339(expires_at)));
        }
        json!({
            "text": headline,
            "blocks": [
                { "type": "section", "text": { "type": "mrkdwn", "text": headline } },
                { "type": "section", "text": { "type": "mrkdwn", "text": facts.join("\n") } },
                { "type": "context", "elements": [ { "type": "mrkdwn", "text": context } ] },
            ],
        })
    }
}

/// A caller as Slack text: `ann`, or `ann of acme` when they have a tenant, escaped.
fn slack_caller(user: &str, tenant: Option<&str>) -> String {
    match tenant {
        Some(tenant) => format!("{} of {}", slack_escape(user), slack_escape(tenant)),
        None => slack_escape(user),
    }
}

/// Slack's three control characters in message text, escaped as it asks.
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// An instant as RFC 3339 text in UTC, to the second.
fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

fn new_event_id() -> String {
    event_id(&toolgate_hooks::fingerprint::random_key()[..16])
}

/// The id of the `expired` event of the call `suspension_id`: the first 16 bytes of the
/// SHA-256 of the event's type and the call's id. The call's id is random and unique, so
/// the event id is too, and it is the same wherever the expiry is told.
fn expiry_event_id(suspension_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(b"suspension.expired\0")
        .chain_update(suspension_id.as_bytes())
        .finalize();
    event_id(&digest[..16])
}

/// `evt_` and `bytes` in lowercase hex.
fn event_id(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut id = String::with_capacity(4 + 2 * bytes.len());
    id.push_str("evt_");
    for byte in bytes {
        let _ = write!(id, "{byte:02x}");
    }
    id
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn call() -> Arc<CallSummary> {
        Arc::new(CallSummary {
            id: "susp-1".into(),
            tool: "deploy".into(),
            user: "bob".into(),
            tenant: None,
            reason: "tool `deploy` needs approval".into(),
            suspended_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            expires_at: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_086_400)),
        })
    }

    #[test]
    fn an_expiry_has_one_id_wherever_it_is_told_and_other_events_a_fresh_one_each() {
        let expired = |call| Event::new(WebhookEventName::Expired, SystemTime::now(), call, None);
        let one = expired(call());
        assert_eq!(one.id, expired(call()).id, "the same call's expiry");
        assert_eq!(one.id.len(), 4 + 32);
        assert!(one.id.starts_with("evt_"));
        let mut other = (*call()).clone();
        other.id = "susp-2".into();
        assert_ne!(one.id, expired(Arc::new(other)).id, "another call's");
        let waiting = |call| Event::new(WebhookEventName::Waiting, SystemTime::now(), call, None);
        assert_ne!(waiting(call()).id, waiting(call()).id);
    }

    #[test]
    fn a_decided_event_names_the_approver_and_leaves_a_completion_output_out() {
        let output = json!({"secret_output": "do-not-send"});
        let decision =
            DecisionSummary::of(&ResumeDecision::Complete { output }, &User::new("alice"));
        let event = Event::new(
            WebhookEventName::Decided,
            SystemTime::UNIX_EPOCH,
            call(),
            Some(decision),
        );

        let json = event.json();

        assert_eq!(json["type"], "suspension.decided");
        assert_eq!(
            json["decision"],
            json!({"decision": "complete", "decided_by": "alice", "reason": null})
        );
        assert_eq!(json["suspension"]["suspended_at"], "2023-11-14T22:13:20Z");
        assert!(!json.to_string().contains("do-not-send"), "{json}");
        assert!(
            event.id.starts_with("evt_") && event.id.len() == 36,
            "{}",
            event.id
        );
    }

    #[test]
    fn a_callers_and_an_approvers_tenants_are_told_beside_their_ids_and_absent_without_one() {
        let mut of_acme = (*call()).clone();
        of_acme.user = "ann".into();
        of_acme.tenant = Some("acme".into());
        let approver = User::new("alice").with_tenant("acme");
        let decision = DecisionSummary::of(&ResumeDecision::Approve, &approver);
        let decided = |call| {
            Event::new(
                WebhookEventName::Decided,
                SystemTime::UNIX_EPOCH,
                call,
                Some(decision.clone()),
            )
        };

        let json = decided(Arc::new(of_acme)).json();

        assert_eq!(json["suspension"]["user"], "ann");
        assert_eq!(json["suspension"]["tenant"], "acme");
        assert_eq!(json["decision"]["decided_by_tenant"], "acme");
        let without = Event::new(
            WebhookEventName::Waiting,
            SystemTime::UNIX_EPOCH,
            call(),
            None,
        );
        let json = without.json();
        assert!(json["suspension"].get("tenant").is_none(), "{json}");
        let by_operator = DecisionSummary::of(&ResumeDecision::Approve, &User::new("root"));
        let json = Event::new(
            WebhookEventName::Decided,
            SystemTime::UNIX_EPOCH,
            call(),
            Some(by_operator),
        )
        .json();
        assert_eq!(
            json["decision"],
            json!({"decision": "approve", "decided_by": "root", "reason": null})
        );
    }

    #[test]
    fn the_slack_text_names_a_caller_and_an_approver_with_their_tenants() {
        let mut of_acme = (*call()).clone();
        of_acme.user = "ann".into();
        of_acme.tenant = Some("<acme>".into());
        let approver = User::new("alice").with_tenant("globex");
        let event = Event::new(
            WebhookEventName::Decided,
            SystemTime::UNIX_EPOCH,
            Arc::new(of_acme),
            Some(DecisionSummary::of(&ResumeDecision::Approve, &approver)),
        );

        let slack = event.slack();

        let text = slack["text"].as_str().unwrap();
        assert!(
            text.starts_with("alice of globex decided `approve`"),
            "{text}"
        );
        assert!(text.contains("by ann of &lt;acme&gt; ("), "{text}");
    }

    #[test]
    fn the_slack_body_has_one_line_of_text_with_slack_characters_escaped() {
        let mut summary = (*call()).clone();
        summary.user = "<!channel> & co".into();
        let event = Event::new(
            WebhookEventName::Waiting,
            SystemTime::UNIX_EPOCH,
            Arc::new(summary),
            None,
        );

        let slack: Value = serde_json::from_slice(&event.body(WebhookFormatName::Slack)).unwrap();

        let text = slack["text"].as_str().unwrap();
        assert!(!text.contains('\n'), "{text}");
        assert!(
            text.contains("`deploy`") && text.contains("susp-1"),
            "{text}"
        );
        assert!(text.contains("&lt;!channel&gt; &amp; co"), "{text}");
        assert_eq!(slack["blocks"].as_array().unwrap().len(), 3);
    }
}
