//! Approval notifications: a signed `POST` to each webhook of
//! `policies.approval.webhooks` when a call starts to wait for approval
//! (`suspension.waiting`), is decided (`suspension.decided`) or expires before anyone
//! decided (`suspension.expired`). See `docs/gateway.md`, "Approval webhooks".
//!
//! * What is sent — [`Event`]: the suspension's id, tool, caller, reason and times, and
//!   for a decision who decided what. Never the call's input, its payload, a completion's
//!   output or a secret.
//! * How it is signed — [`sign`]: HMAC-SHA-256 under the webhook's secret over
//!   `{id}.{timestamp}.{body}`, in the headers [`ID_HEADER`], [`TIMESTAMP_HEADER`] and
//!   [`SIGNATURE_HEADER`]; a receiver checks it with [`verify`] and a replay window
//!   ([`REPLAY_WINDOW`]).
//! * How it is delivered — each webhook from its own bounded queue ([`QUEUE_CAPACITY`];
//!   when full the newest event is dropped for that webhook, never the call held up) by its
//!   own worker, up to [`IN_FLIGHT`] requests at once, with up to [`MAX_ATTEMPTS`] attempts
//!   and jittered exponential backoff: a receiver that is slow or never answers delays and
//!   drops only its own events. Within a queue each caller holds at most the webhook's
//!   `caller_share` of events ([`CALLER_SHARE`] by default), so that one caller's flood
//!   drops only their own. Every delivery is counted in
//!   [`DELIVERIES`] by outcome (and a drop by reason), every retry in [`RETRIES`]; drops are
//!   logged at most once per [`DROPS_LOGGED_EVERY`] per webhook and reason.
//!
//! # Examples
//!
//! A receiver in Rust checks each request before it trusts the body:
//!
//! ```
//! use std::time::SystemTime;
//! use http::HeaderMap;
//! use toolgate_gateway::webhooks::{self, REPLAY_WINDOW};
//!
//! fn receive(secret: &[u8], headers: &HeaderMap, body: &[u8]) -> u16 {
//!     if webhooks::verify(secret, headers, body, SystemTime::now(), REPLAY_WINDOW).is_err() {
//!         return 401; // not retried: a forged or replayed request
//!     }
//!     // … act once per `toolgate-webhook-id` …
//!     204
//! }
//! # assert_eq!(receive(b"0123456789abcdef", &HeaderMap::new(), b"{}"), 401);
//! ```

mod admission;
mod delivery;
mod event;
mod notifications;
mod signature;
mod store;

pub use admission::{CALLER_SHARE, DROPS_LOGGED_EVERY, QUEUE_CAPACITY};
pub use delivery::{
    ATTEMPT_TIMEOUT, BASE_BACKOFF, DELIVERIES, IN_FLIGHT, MAX_ATTEMPTS, MAX_BACKOFF, RETRIES,
};
pub use event::{CallSummary, DecisionSummary, Event};
pub use notifications::Notifications;
pub use signature::{
    ID_HEADER, REPLAY_WINDOW, SIGNATURE_HEADER, TIMESTAMP_HEADER, WebhookVerifyError, sign, verify,
};

pub(crate) use store::NotifyingStore;
