//! Metrics through the [`metrics`](https://docs.rs/metrics) facade: install any recorder
//! (Prometheus, StatsD, a test recorder) and these appear.
//!
//! [`Metrics`] records at `on_metrics`, on every path:
//!
//! | name (default prefix `toolgate`) | kind | labels |
//! |---|---|---|
//! | `toolgate_calls_total` | counter | `tool`, `outcome` (`success`, `error`, `suspended`, `input_required`), `code` (`ok` or the error code) |
//! | `toolgate_call_duration_seconds` | histogram | `tool`, `outcome` |
//! | `toolgate_hook_duration_seconds` | histogram | `tool`, `stage`, `hook` (when the pipeline records hook timings) |
//! | `toolgate_cache_lookups_total` | counter | `tool`, `result` (`hit`, `coalesced`, `miss`) |
//! | `toolgate_rate_limited_total` | counter | `tool` |
//!
//! Labels are tool names, stage and hook names and error codes only — never user ids,
//! arguments or outputs, which would leak data and explode cardinality. The number of
//! series is bounded: the hook keeps the series of 4,096 tools at once, and past 64 error
//! codes of one tool, further codes are counted under `code="other"`. When a new tool
//! finds no room, the tools not called for a minute or more make room for it (a host's
//! tool set changes with reloads and upstream servers); until then it is counted under
//! `tool="other"`. A forgotten tool's series stays with the recorder, which alone can
//! remove it: a recorder that removes idle series (the Prometheus exporter's
//! `idle_timeout`) needs [`renew_handles`] called at least once every idle timeout, or the
//! hook's kept handles would go on updating series it no longer shows.
//!
//! # Examples
//!
//! ```
//! use toolgate_core::Pipeline;
//! use toolgate_hooks::metrics::Metrics;
//!
//! let builder = Pipeline::builder()
//!     .record_hook_timings(true)
//!     .hook(Metrics::builder().prefix("agent_tools").build());
//! ```

mod handles;
mod hook;
mod per_recorder;

pub use hook::{Metrics, MetricsBuilder};
pub use per_recorder::{PerRecorder, renew_handles};
