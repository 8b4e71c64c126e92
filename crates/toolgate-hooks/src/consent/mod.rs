//! Consent (human approval) at `will_check_consent`: some tools run only with a recorded
//! approval per caller (a user id in its tenant) and tool; without one the call is
//! suspended until a person approves or rejects it.
//!
//! * [`Consent`] — the hook, built with [`Consent::builder`].
//! * [`Approvals`] — grant, revoke, approve, reject.
//! * [`ApprovalStore`] — where approvals live; [`InMemoryApprovals`] is the default.
//!
//! # Example
//!
//! ```
//! use serde_json::json;
//! use toolgate_core::{tool_fn, InvokeOptions, Pipeline, ToolError, User};
//! use toolgate_hooks::consent::Consent;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let consent = Consent::builder().tool("wipe").build();
//! let approvals = consent.approvals();
//! let pipeline = Pipeline::builder()
//!     .tool(tool_fn("wipe", "Wipes the disk.", |_: ()| async { Ok::<_, ToolError>("wiped") }))
//!     .hook(consent)
//!     .build()?;
//!
//! let ann = || InvokeOptions::new().user(User::new("ann"));
//! let err = pipeline.invoke("wipe", json!(null), ann()).await.unwrap_err();
//! let ToolError::Suspended { suspension_id, .. } = err else { panic!("expected a suspension") };
//!
//! // A person approves, and remembers the choice for ann.
//! let out = approvals.approve(&pipeline, &suspension_id, true, InvokeOptions::new()).await?;
//! assert_eq!(out, json!("wiped"));
//! assert_eq!(pipeline.invoke("wipe", json!(null), ann()).await?, json!("wiped"));
//! # Ok(()) }
//! ```

mod approvals;
mod backend;
mod hook;
mod memory;
mod taken;

pub use approvals::Approvals;
pub use backend::{ApprovalStore, ApprovalStoreError, Grant};
pub use hook::{Consent, ConsentBuilder};
pub use memory::InMemoryApprovals;
