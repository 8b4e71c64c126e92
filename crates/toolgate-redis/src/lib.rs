//! Shared toolgate state on Redis: rate limits, concurrency caps and the result cache that
//! every replica behind a load balancer sees alike.
//!
//! With per-process state, N replicas let N times a limit through. The backends here
//! implement the traits of the built-in policies of `toolgate-hooks` on one Redis, so a
//! policy keeps its meaning however many replicas run it:
//!
//! * [`RedisQuota`] ([`QuotaBackend`](toolgate_hooks::quota::QuotaBackend)) — exact GCRA,
//!   one Lua script per decision on the Redis server's clock;
//! * [`RedisBudget`] ([`BudgetBackend`](toolgate_hooks::budget::BudgetBackend)) — costs
//!   charged against budgets per window, exact, one Lua script per charge on the Redis
//!   server's clock;
//! * [`RedisConcurrency`] ([`ConcurrencyBackend`](toolgate_hooks::concurrency::ConcurrencyBackend))
//!   — leases that are renewed while their call runs, released when it ends however it
//!   ends, and that expire when their replica dies;
//! * [`RedisCache`] ([`CacheBackend`](toolgate_hooks::cache::CacheBackend)) — entries with a
//!   TTL under the hook's scoped [`CacheKey`](toolgate_hooks::cache::CacheKey), size-capped
//!   and bounded per caller (so one caller's results cannot fill the Redis everyone's
//!   limits live in), with an optional fill lock so that one replica runs a missed call
//!   for all.
//!
//! It also keeps the calls that wait for a person — [`RedisSuspensions`]
//! ([`SuspensionStore`](toolgate_core::suspension::SuspensionStore)) — shared by every
//! replica and kept across restarts, under exact per-user and total caps, optionally
//! encrypted at rest — sign-in sessions, [`RedisSessions`], bounded in all and per user
//! and found through every replica, bounded histories, [`RedisHistory`] (and [`RedisPartedHistory`], bounded per part), the pinned
//! definitions of imported tools, [`RedisPins`], and per-tool counts summed over every
//! replica, [`RedisCounters`].
//!
//! [`RedisState`] connects once and builds all of them on one connection — to one Redis
//! node, or to a Redis Cluster ([`RedisState::connect_cluster`], [`ClusterNodes`], or a
//! `redis+cluster://host1:port1,host2:port2` URL), where every script keeps its keys in one
//! slot and the backends work unchanged.
//!
//! # When Redis is away
//!
//! Every Redis call has a deadline ([`RedisConfigBuilder::deadline`], 100 ms by default),
//! waiting for a reconnect included. A call without an answer in time is decided by the
//! backend's failure policy — fail closed (the default), fail open, or a local fallback
//! budget ([`QuotaFailurePolicy`], [`ConcurrencyFailurePolicy`]) — and counted
//! ([`UnavailableDecisions`], the `toolgate_redis_unavailable_decisions_total` counter). The
//! cache treats a read without an answer as a miss and a write as "not stored".
//! Authorization never depends on Redis.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use serde_json::json;
//! use toolgate_core::{tool_fn, InvokeOptions, Pipeline, ToolError, User};
//! use toolgate_hooks::quota::{Quota, Rate};
//! use toolgate_redis::{QuotaFailurePolicy, RedisConfig, RedisState};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let state = RedisState::connect("redis://127.0.0.1:6379", RedisConfig::default()).await?;
//! let quota = state
//!     .quota()
//!     .on_unavailable(QuotaFailurePolicy::LocalFallback(Rate::per_minute(10)?));
//!
//! let pipeline = Pipeline::builder()
//!     .tool(tool_fn("ping", "Answers pong.", |_: ()| async { Ok::<_, ToolError>("pong") }))
//!     .hook(Quota::builder(Rate::per_minute(60)?).backend(Arc::new(quota)).build())
//!     .build()?;
//!
//! // Every replica built like this one shares alice's 60 calls a minute.
//! let answer = pipeline
//!     .invoke("ping", json!(null), InvokeOptions::new().user(User::new("alice")))
//!     .await?;
//! assert_eq!(answer, json!("pong"));
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod budget;
mod cache;
mod client_log;
mod cluster;
mod concurrency;
mod config;
mod counters;
mod error;
mod history;
mod keys;
mod link;
mod pins;
mod quota;
mod seal;
mod server_clock;
mod sessions;
mod state;
mod stats;
mod suspensions;
mod topology;

pub use budget::RedisBudget;
pub use cache::{CACHE_OVER_CALLER_BOUND, CACHE_OVERSIZE, CacheStats, RedisCache};
pub use client_log::ClientLogLimit;
pub use cluster::ClusterNodes;
pub use concurrency::{ConcurrencyFailurePolicy, LEASES_LOST, RedisConcurrency};
pub use config::{RedisConfig, RedisConfigBuilder};
pub use counters::{CountersUnavailable, RedisCounters, SharedCounts};
pub use error::RedisError;
pub use history::{HistoryUnavailable, RedisHistory, RedisPartedHistory};
pub use link::REDIS_UP;
pub use pins::{PIN_HISTORY, PinCheck, PinsUnavailable, RedisPins, StoredPin, StoredPins};
pub use quota::{QuotaFailurePolicy, RedisQuota};
pub use sessions::{
    FlowBounds, FlowStarted, RedisSessions, SessionBounds, SessionOpened, SessionsUnavailable,
};
pub use state::RedisState;
pub use stats::{UNAVAILABLE_DECISIONS, UnavailableDecisions};
pub use suspensions::RedisSuspensions;

/// The guide `docs/scaling.md`, compiled as a doctest so that it always matches the real
/// API.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/scaling.md")]
pub struct ScalingGuide;
