//! [`AuditRecord`]: one structured record per invocation.

use std::borrow::Cow;
use std::net::IpAddr;
use std::time::UNIX_EPOCH;

use serde_json::{Map, Value};
use toolgate_core::error::error_text;
use toolgate_core::external::TypeMapKey;
use toolgate_core::suspension::ResumeDecision;
use toolgate_core::{Stage, ToolError, ToolInvokeContext};

use crate::fingerprint::KeyedFingerprint;
use crate::policy::PolicyDecision;
use crate::redaction::{Findings, Redactor, input_redacted, output_redacted};
use crate::secrets::Scrubber;

/// What an [`Audit`](super::Audit) hook keeps of values and how.
pub(crate) struct RecordRules {
    pub include_values: bool,
    pub fingerprints: KeyedFingerprint,
    /// Applied to values that did not go through a redaction hook, and to messages.
    pub redactor: Option<Redactor>,
    pub scrubber: Scrubber,
}

impl RecordRules {
    /// `value` as a record may keep it: redacted unless `redacted` says a redaction hook
    /// already did it, and with known secrets scrubbed.
    fn clean<'v>(&self, value: &'v Value, redacted: bool) -> Cow<'v, Value> {
        let mut value = Cow::Borrowed(value);
        if let Some(redactor) = &self.redactor
            && !redacted
            && redactor.may_redact(&value)
        {
            // Without blocking modes, redacting cannot fail.
            let _ = redactor.redact_value(value.to_mut());
        }
        if self.scrubber.occurs_in_value(&value) {
            self.scrubber.scrub_value(value.to_mut());
        }
        value
    }

    /// An error message as a record may keep it (messages may quote the input).
    fn clean_message(&self, mut message: String) -> String {
        if let Some(redactor) = &self.redactor
            && let Ok(Some(clean)) = redactor.redact_text(&message, "", &mut Findings::new())
        {
            message = clean;
        }
        self.scrubber.scrub_string(&mut message);
        message
    }
}

/// How an invocation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// It returned an output.
    Success,
    /// It failed (refused, invalid, timed out, cancelled, the tool failed…).
    Error,
    /// It waits for a person.
    Suspended,
    /// It waits for its caller's answers (elicitation, sampling, roots), to be sent with
    /// the next call.
    InputRequired,
}

/// One hook's decision, as recorded.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DecisionEntry {
    /// The stage it was made at.
    pub stage: Stage,
    /// The hook.
    pub hook: String,
    /// `respond`, `suspend`, or an error code.
    pub outcome: String,
    /// Whether it took effect (false in shadow mode).
    pub applied: bool,
}

/// The decision a resumed invocation ran with (or the approval a retry used), as recorded.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ApprovalEntry {
    /// `approve`, `reject` or `complete`.
    pub decision: String,
    /// Who decided (an approver's user id), when the resume said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// The tenant of who decided, when they have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by_tenant: Option<String>,
    /// Why: a rejection's reason, or the one an approver gave with an approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// For a call that ran on an approval for a retry, the waiting call that was approved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<String>,
}

/// How long one hook (or one stage, with `hook` empty) took.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TimingEntry {
    /// The stage.
    pub stage: Stage,
    /// The hook; empty for a whole stage.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hook: String,
    /// How long, in microseconds.
    pub micros: u64,
}

/// The network address a call came from, as the host that received it knows it: bind it
/// per call, and the [`Audit`](super::Audit) hook records it as the record's
/// `client_address`. The `toolgate` gateway binds it on every route (the connection's
/// peer, or the client its trusted proxies name).
///
/// ```
/// use std::net::{IpAddr, Ipv4Addr};
/// use toolgate_core::InvokeOptions;
/// use toolgate_hooks::audit::ClientAddress;
///
/// let client = ClientAddress(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9)));
/// let options = InvokeOptions::new().provide::<ClientAddress>(client);
/// # let _ = options;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddress(pub IpAddr);

impl TypeMapKey for ClientAddress {
    type Value = ClientAddress;
}

/// One structured record per invocation: who, which tool, when, outcome and code,
/// duration, and the decision trace. Input and output appear as keyed fingerprints
/// (`hmac-sha256:…` of their canonical JSON, see
/// [`KeyedFingerprint`]) unless the [`Audit`](super::Audit) hook is configured to
/// include values. Either way, what is fingerprinted or kept is the redacted value.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AuditRecord {
    /// The invocation's request id.
    pub request_id: String,
    /// The session, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// For a call that suspended to wait (for approval), the id it waits under: the one a
    /// decision on it names; for the call resumed after the decision, the same id. Given by
    /// the pipeline, never by the caller (unlike `request_id`, which a caller may choose),
    /// so it ties the two records together; absent for a call that neither suspended nor
    /// was resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspension_id: Option<String>,
    /// Who called.
    pub user_id: String,
    /// The caller's tenant, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The network address the call came from, when the host bound one
    /// ([`ClientAddress`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_address: Option<IpAddr>,
    /// The tool.
    pub tool: String,
    /// The tool's version.
    pub tool_version: String,
    /// When the call started, in milliseconds since the Unix epoch.
    pub started_at_ms: u64,
    /// How long it took, in microseconds.
    pub duration_us: u64,
    /// How it ended.
    pub outcome: Outcome,
    /// The error code (`forbidden`, `invalid_input`…), when it did not succeed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The HTTP status the caller gets (200 on success).
    pub status: u16,
    /// How many times the tool ran (0 for a cache hit or a refusal).
    pub attempts: u32,
    /// The hooks' decisions, in order.
    pub decisions: Vec<DecisionEntry>,
    /// How long each stage with hooks took, in order.
    pub stages: Vec<TimingEntry>,
    /// How long each hook took (when the pipeline records hook timings).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<TimingEntry>,
    /// The keyed fingerprint of the final (redacted) input.
    pub input_hash: String,
    /// The keyed fingerprint of the (redacted) output, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_hash: Option<String>,
    /// The final input itself, when values are included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// The output itself, when values are included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// The error message, when values are included (messages may quote input): at most
    /// [`MAX_ERROR_CHARS`](toolgate_core::error::MAX_ERROR_CHARS) characters, cut with a
    /// marker saying how long it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The invocation metadata (argument repairs, redaction counts, cache result,
    /// truncation).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
    /// For a call that waited for approval and was resumed: the decision, who made it
    /// and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalEntry>,
    /// What the policy hooks decided (the decision, the policies that determined it, and
    /// what shadow policies would have decided), one entry per hook that decided.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<PolicyDecision>,
}

fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl AuditRecord {
    /// The record of the invocation `ctx` describes (at the record phase).
    pub(crate) fn from_context(ctx: &ToolInvokeContext, rules: &RecordRules) -> Self {
        let error = ctx.error();
        let input = rules.clean(ctx.input(), input_redacted(ctx));
        let output = ctx
            .output()
            .map(|output| rules.clean(output, output_redacted(ctx)));
        let include_values = rules.include_values;
        let outcome = match error {
            None => Outcome::Success,
            Some(ToolError::Suspended { .. }) => Outcome::Suspended,
            Some(ToolError::InputRequired { .. }) => Outcome::InputRequired,
            Some(_) => Outcome::Error,
        };
        let user = ctx.user();
        AuditRecord {
            request_id: ctx.request_id().to_string(),
            session_id: ctx.session_id().map(str::to_owned),
            suspension_id: match error {
                Some(ToolError::Suspended { suspension_id, .. }) => Some(suspension_id.clone()),
                _ => ctx.resumed_from().map(str::to_owned),
            },
            user_id: user.id.clone(),
            tenant: user.tenant.clone(),
            client_address: ctx.try_get::<ClientAddress>().map(|client| client.0),
            tool: ctx.tool_name().to_owned(),
            tool_version: ctx.tool().version.clone(),
            started_at_ms: ctx
                .started_at()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            duration_us: micros(ctx.elapsed()),
            outcome,
            code: error.map(|e| e.code().to_owned()),
            status: error.map_or(200, ToolError::status),
            attempts: ctx.runs(),
            decisions: ctx
                .decisions()
                .iter()
                .map(|d| DecisionEntry {
                    stage: d.stage,
                    hook: d.hook.to_string(),
                    outcome: d.outcome.clone(),
                    applied: d.applied,
                })
                .collect(),
            stages: ctx
                .stage_durations()
                .iter()
                .map(|(stage, d)| TimingEntry {
                    stage: *stage,
                    hook: String::new(),
                    micros: micros(*d),
                })
                .collect(),
            hooks: ctx
                .hook_timings()
                .iter()
                .map(|t| TimingEntry {
                    stage: t.stage,
                    hook: t.hook.to_string(),
                    micros: micros(t.duration),
                })
                .collect(),
            input_hash: rules.fingerprints.of(&input),
            output_hash: output.as_deref().map(|o| rules.fingerprints.of(o)),
            input: include_values.then(|| input.into_owned()),
            output: output.filter(|_| include_values).map(Cow::into_owned),
            error: error.filter(|_| include_values).map(|e| {
                // Cleaned whole, then cut to the bound of an error's message: a cut never
                // leaves half a secret behind.
                let message = rules.clean_message(e.to_string());
                error_text(format_args!("{message}"))
            }),
            metadata: ctx.metadata().clone(),
            approval: ctx.resumed().map(|decision| {
                let (decision, reason) = match decision {
                    ResumeDecision::Approve => ("approve", None),
                    ResumeDecision::Reject { reason } => ("reject", Some(reason)),
                    ResumeDecision::Complete { .. } => ("complete", None),
                };
                ApprovalEntry {
                    decision: decision.to_owned(),
                    decided_by: ctx.decided_by().map(str::to_owned),
                    decided_by_tenant: ctx.decided_by_tenant().map(str::to_owned),
                    reason: reason
                        .map(String::as_str)
                        .or(ctx.decision_reason())
                        .map(|reason| rules.clean_message(reason.to_owned())),
                    retry_of: ctx.approved_retry_of().map(str::to_owned),
                }
            }),
            policies: PolicyDecision::of(ctx).to_vec(),
        }
    }
}
