//! Budgets at `will_acquire_quota`: a cost per call, charged against an allowance per user,
//! tenant or any partition over a fixed window of UTC time.
//!
//! * [`Budget`] — the hook, built with [`Budget::builder`].
//! * [`Cost`] — what a call costs: a fixed number, a number read from the arguments, or
//!   what the tool reports after the call (charged as an estimate first, then reconciled).
//! * [`Window`] — the period an allowance lasts, aligned on UTC (a day runs from 00:00 UTC).
//! * [`BudgetBackend`] — where the spending lives; [`InMemoryBudget`] is the default, and
//!   `toolgate-redis` shares one budget across replicas.
//! * [`LimitReport`] — what a call learnt about its limits, for the `RateLimit` headers.
//!
//! A call that costs more than is left is refused with `budget_exhausted` (HTTP 429) and a
//! message an agent can act on: ``budget `team`: 12 of 1,000 units left until 00:00 UTC
//! for this user; this call costs 30; make a cheaper call, retry after 3600000 ms`` — the
//! wait until the window ends is its retry-after.
//!
//! # Example
//!
//! ```
//! use serde_json::json;
//! use toolgate_core::{tool_fn, InvokeOptions, Pipeline, ToolError, User};
//! use toolgate_hooks::budget::{Budget, Cost, Window};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pipeline = Pipeline::builder()
//!     .tool(tool_fn("search", "Searches.", |_: ()| async { Ok::<_, ToolError>("found") }))
//!     // 10 units a day per user; a search costs 4.
//!     .hook(Budget::builder(10, Window::day()).tool_cost("search", Cost::Fixed(4)).build())
//!     .build()?;
//!
//! let ann = || InvokeOptions::new().user(User::new("ann"));
//! pipeline.invoke("search", json!(null), ann()).await?;
//! pipeline.invoke("search", json!(null), ann()).await?;
//! let err = pipeline.invoke("search", json!(null), ann()).await.unwrap_err();
//! assert_eq!((err.code(), err.status()), ("budget_exhausted", 429));
//! assert!(err.to_string().contains("2 of 10 units left until 00:00 UTC"), "{err}");
//! # Ok(()) }
//! ```

mod backend;
mod cost;
mod hook;
mod memory;
mod report;
mod window;

pub use backend::{BudgetBackend, BudgetBackendError, BudgetDecision, BudgetRequest, BudgetState};
pub use cost::{Cost, CostError};
pub use hook::{Budget, BudgetBuilder};
pub use memory::InMemoryBudget;
pub use report::{LimitReport, LimitState};
pub use window::{Window, WindowError};

/// The most units one cost counts: a tool that reports more (`1e30`, say) is charged this
/// many, which uses up any budget a file can set. Below 2^53, so a budget's count stays
/// exact where it is kept as a double (Redis's Lua).
pub const MAX_UNITS: u64 = 1_000_000_000_000_000;
