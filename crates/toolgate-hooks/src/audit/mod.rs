//! Audit: one structured record per invocation, on every path.
//!
//! [`Audit`] builds an [`AuditRecord`] at `will_audit` — who (user, tenant, session,
//! request id, and the [client's address](ClientAddress) when the host binds it), which
//! tool and version, when, the outcome with its code and HTTP status (and, for a call that
//! suspended, the id it waits under), the duration, the attempts, and the decision trace
//! (which hook decided what at which stage, and how long each stage and, with
//! [`record_hook_timings`](toolgate_core::PipelineBuilder::record_hook_timings), each hook
//! took) — and hands it to every [sink](AuditSink): [`TracingSink`], an append-only
//! [`JsonLinesSink`], a [`ChannelSink`], or [`MemorySink`]. Input and output are recorded
//! as fingerprints under a key of the deployment ([`hash_key`](AuditBuilder::hash_key),
//! HMAC-SHA-256) unless [`include_values`](AuditBuilder::include_values) is set.
//!
//! [`JsonLinesSink::chained`] makes the file tamper-evident: every line carries `seq`,
//! `chain` and the SHA-256 of the line before it, and a [`CheckpointKey`] signs
//! checkpoints of the chain; [`JsonLinesSink::rotated`] starts new files by size or age,
//! the chain carried across them; [`verify`] checks it all and names the first changed,
//! missing, reordered or cut record. Records the sink had to drop (its file took no
//! writes while 16 MiB waited: a full disk) are declared in the chain by a
//! [gap marker](Gap), which [`verify`] reports as a gap the gateway declared, not as
//! tampering. One process writes a file: [`JsonLinesSink::open`] takes a lock on a file
//! beside it, and opening a file another process writes fails with
//! [`AuditError::InUse`].
//!
//! A record holds only redacted values. The record phase runs after the input was
//! redacted and the output was redacted and scrubbed, and on the error path after
//! `on_error` (where secrets are scrubbed from the error). A call refused before its
//! input was redacted — forbidden, over a rate limit, invalid — is redacted by the audit
//! hook itself with the rules given to [`redact_with`](AuditBuilder::redact_with), as are
//! error messages (which may quote the input); [`scrub`](AuditBuilder::scrub) adds
//! credentials the host holds. A sink that fails is logged; the call's outcome never
//! changes.
//!
//! # Examples
//!
//! ```
//! use serde_json::json;
//! use toolgate_core::{tool_fn, InvokeOptions, Pipeline, ToolError, User};
//! use toolgate_hooks::audit::{Audit, MemorySink, Outcome};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let records = MemorySink::new();
//! let pipeline = Pipeline::builder()
//!     .tool(tool_fn("ping", "Answers pong.", |_: ()| async { Ok::<_, ToolError>("pong") }))
//!     .hook(Audit::builder().sink(records.clone()).build())
//!     .build()?;
//!
//! pipeline.invoke("ping", json!(null), InvokeOptions::new().user(User::new("ann"))).await?;
//! let record = &records.records()[0];
//! assert_eq!((record.user_id.as_str(), record.tool.as_str(), record.outcome), ("ann", "ping", Outcome::Success));
//! assert!(record.output_hash.as_deref().is_some_and(|h| h.starts_with("hmac-sha256:")));
//! # Ok(()) }
//! ```

mod chain;
mod claim;
mod gap;
mod hook;
mod record;
mod rotation;
mod sink;
pub mod verify;

pub use chain::{ChainOptions, CheckpointKey, CheckpointPublicKey, KeyError, line_hash};
pub use gap::{Gap, GapReason};
pub use hook::{Audit, AuditBuilder};
pub use record::{ApprovalEntry, AuditRecord, ClientAddress, DecisionEntry, Outcome, TimingEntry};
pub use rotation::Rotation;
pub use sink::{AuditError, AuditSink, ChannelSink, JsonLinesSink, MemorySink, TracingSink};
