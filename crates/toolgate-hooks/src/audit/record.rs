//! [`AuditRecord`]: one structured record per invocation.

use std::time::UNIX_EPOCH;

use serde_json::{Map, Value};
use toolgate_core::{Stage, ToolError, ToolInvokeContext};

use crate::fingerprint::fingerprint;

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

/// One structured record per invocation: who, which tool, when, outcome and code,
/// duration, and the decision trace. Input and output appear as fingerprints
/// (`sha256:…` of their canonical JSON) unless the [`Audit`](super::Audit) hook is
/// configured to include values.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AuditRecord {
    /// The invocation's request id.
    pub request_id: String,
    /// The session, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Who called.
    pub user_id: String,
    /// The caller's tenant, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
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
    /// The fingerprint of the final input.
    pub input_hash: String,
    /// The fingerprint of the output, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_hash: Option<String>,
    /// The final input itself, when values are included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// The output itself, when values are included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// The error message, when values are included (messages may quote input).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The invocation metadata (argument repairs, redaction counts, cache result,
    /// truncation).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
}

fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl AuditRecord {
    /// The record of the invocation `ctx` describes (at the record phase).
    pub fn from_context(ctx: &ToolInvokeContext, include_values: bool) -> Self {
        let error = ctx.error();
        let outcome = match error {
            None => Outcome::Success,
            Some(ToolError::Suspended { .. }) => Outcome::Suspended,
            Some(_) => Outcome::Error,
        };
        let user = ctx.user();
        AuditRecord {
            request_id: ctx.request_id().to_string(),
            session_id: ctx.session_id().map(str::to_owned),
            user_id: user.id.clone(),
            tenant: user.tenant.clone(),
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
            attempts: ctx.attempt(),
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
            input_hash: fingerprint(ctx.input()),
            output_hash: ctx.output().map(fingerprint),
            input: include_values.then(|| ctx.input().clone()),
            output: if include_values {
                ctx.output().cloned()
            } else {
                None
            },
            error: if include_values {
                error.map(ToString::to_string)
            } else {
                None
            },
            metadata: ctx.metadata().clone(),
        }
    }
}
