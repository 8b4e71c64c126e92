//! The result cache: serve repeated calls from a cache without ever crossing users.
//!
//! [`ResultCache`] looks the call up at `will_read_cache` and, on a hit, responds with the
//! stored value — so the pipeline skips execution but still runs output redaction,
//! validation, transforms, audit and metrics. After a real execution it stores the output
//! at `will_write_cache` (errors never get there, so they are never cached).
//!
//! * **Keys** ([`cache_key`]): tool name + tool version + caller scope (the caller, a user
//!   id in its tenant, or the tenant with [`ScopeBy::Tenant`]) + the normalized input. The
//!   scope is left out only for tools that declare their results public
//!   ([`PUBLIC_RESULTS_TAG`]).
//! * **What is cached**: read-only tools from this program by default; per-tool
//!   [`include`](ResultCacheBuilder::include), [`exclude`](ResultCacheBuilder::exclude)
//!   and [TTL](ResultCacheBuilder::tool_ttl). Never a call made with
//!   [`InvokeOptions::no_store`](toolgate_core::InvokeOptions::no_store) (neither looked up
//!   nor stored) nor a result marked with
//!   [`set_no_store`](toolgate_core::ToolInvokeContext::set_no_store) (not stored): a result
//!   that depends on the caller's answers during the call is not another caller's.
//!   Never a tool tagged [`NO_CACHE_TAG`], whose answers change without a call of it
//!   (the gateway's tool that reports approval outcomes is one), whatever the rules say.
//! * **Per-call providers**: a tool that reads a request- or session-scoped provider
//!   while it runs (or looks one up that no scope binds) has a result that may belong to
//!   that request alone — a remote address, a session's allow-list. It is not stored,
//!   unless its value is in the key ([`key_includes`](ResultCacheBuilder::key_includes))
//!   or the result does not depend on it
//!   ([`independent_of`](ResultCacheBuilder::independent_of)). Global providers are the
//!   same for every call and never stop a result from being stored; lookups by hooks do
//!   not count.
//! * **Coalescing**: concurrent identical misses run the tool once; the others wait for
//!   the leader's result. A leader that fails, is cancelled or panics releases its claim
//!   (an RAII guard in its context), and the waiting calls look again — one becomes the
//!   next leader, so after an error the next call executes.
//! * **Backends** ([`CacheBackend`]): small, async and object-safe; [`MokaCache`] in memory
//!   by default (64 MiB, no result larger than 4 MiB), Redis in `toolgate-redis`.
//!
//! Output redaction and secret scrubbing run at `will_write_cache` before the cache (their
//! priorities are higher), so what is stored is what the caller may see.
//!
//! # Examples
//!
//! ```
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//! use garde::Validate;
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use serde_json::json;
//! use toolgate_core::{tool_fn, InvokeOptions, Pipeline, ToolError, User};
//! use toolgate_core::tool::ToolAnnotations;
//! use toolgate_hooks::cache::ResultCache;
//!
//! #[derive(Deserialize, Validate, JsonSchema)]
//! struct Square {
//!     #[garde(range(min = -1000, max = 1000))]
//!     n: i64,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let runs = Arc::new(AtomicU32::new(0));
//! let counter = Arc::clone(&runs);
//! let pipeline = Pipeline::builder()
//!     .tool(
//!         tool_fn("square", "Squares a number.", move |s: Square| {
//!             counter.fetch_add(1, Ordering::SeqCst);
//!             async move { Ok::<_, ToolError>(s.n * s.n) }
//!         })
//!         .annotations(ToolAnnotations::READ_ONLY),
//!     )
//!     .hook(ResultCache::builder().ttl(Duration::from_secs(60)).build())
//!     .build()?;
//!
//! let alice = || InvokeOptions::new().user(User::new("alice"));
//! assert_eq!(pipeline.invoke("square", json!({"n": 7}), alice()).await?, json!(49));
//! assert_eq!(pipeline.invoke("square", json!({"n": 7}), alice()).await?, json!(49));
//! assert_eq!(runs.load(Ordering::SeqCst), 1); // the second call was a hit
//!
//! pipeline.invoke("square", json!({"n": 7}), InvokeOptions::new().user(User::new("bob"))).await?;
//! assert_eq!(runs.load(Ordering::SeqCst), 2); // bob never sees alice's entry
//! # Ok(()) }
//! ```

mod backend;
mod flight;
mod hook;
mod key;
mod providers;

pub use backend::{CacheBackend, CacheError, MokaCache, MokaCacheBuilder};
pub use hook::{
    CACHE_METADATA_KEY, NO_CACHE_TAG, PUBLIC_RESULTS_TAG, ResultCache, ResultCacheBuilder,
};
pub use key::{CacheKey, KeyScope, ScopeBy, cache_key, cache_key_with_providers};
