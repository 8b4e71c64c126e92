//! Built-in toolgate policies, each a [`Hook`](toolgate_core::Hook) with a builder, sensible
//! defaults, and a backend trait where its state could live outside the process (the
//! in-memory backends here are the embedded default; `toolgate-redis` plugs into the same
//! traits).
//!
//! A backend of your own (Postgres, DynamoDB, a vault, a flag service) implements the
//! policy's trait — [`QuotaBackend`](quota::QuotaBackend),
//! [`ConcurrencyBackend`](concurrency::ConcurrencyBackend),
//! [`CacheBackend`](cache::CacheBackend), [`ApprovalStore`](consent::ApprovalStore),
//! [`SecretSource`](secrets::SecretSource), [`AuditSink`](audit::AuditSink),
//! [`FlagProvider`](feature_flags::FlagProvider) — with `async fn`s under
//! [`#[async_trait]`](crate::async_trait), which this crate re-exports. Each trait's page
//! shows one.
#![deny(missing_docs)]

/// Lets an implementer write the methods of this crate's backend traits as `async fn`:
/// put `#[async_trait]` on the `impl` block, and each method becomes the boxed future the
/// object-safe trait needs (one allocation per call). Re-exported from the `async-trait`
/// crate, so a user of toolgate-hooks needs no dependency of their own.
pub use async_trait::async_trait;

// ----- who may call and how much (issue #3) -----
pub mod authorize;
pub mod budget;
pub mod concurrency;
pub mod consent;
pub mod feature_flags;
pub mod partition;
pub mod policy;
pub mod quota;
pub mod retry;
pub mod timeout;

pub use authorize::Authorize;
pub use budget::Budget;
pub use concurrency::Concurrency;
pub use consent::{Approvals, Consent};
pub use feature_flags::FeatureFlags;
pub use partition::Partition;
pub use quota::{OnBackendError, Quota, Rate};
pub use retry::{Retry, RetryBudget};
pub use timeout::Timeout;

/// How long a call refused because a policy's store (Redis) did not answer is told to
/// wait before it tries again (`Retry-After`): a store that went away usually answers
/// again within a second or two, and a client that retries at once only adds to the load.
pub const BACKEND_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

// ----- what goes in and out (issue #4) -----
pub mod audit;
pub mod cache;
pub mod fingerprint;
pub mod metrics;
pub mod output_limit;
pub mod redaction;
pub mod repair;
pub mod secrets;
pub mod validation;

mod clock;
mod json;
mod now_and_then;

pub use audit::Audit;
pub use cache::ResultCache;
pub use metrics::Metrics;
pub use output_limit::OutputLimit;
pub use redaction::Redaction;
pub use repair::ArgumentRepair;
pub use secrets::SecretInjection;
pub use validation::Validation;
