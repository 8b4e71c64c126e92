//! Secrets: injected for the tools that declare them, held only in the context's secret
//! slot, and scrubbed from whatever the tool sends back.
//!
//! A tool declares the secrets it needs with tags (`secret:github-token`) or through
//! [`SecretInjectionBuilder::tool`]. At `will_inject_secrets`, [`SecretInjection`] asks
//! its [sources](SecretSource) in order — [`EnvSecrets`], [`FileSecrets`],
//! [`InMemorySecrets`], or your own (a vault client) — and puts each secret into
//! [`ToolInvokeContext::secrets_mut`](toolgate_core::ToolInvokeContext::secrets_mut). A
//! secret that no source holds fails the call with code `missing_secret`.
//!
//! Secrets never enter the input, so they are never part of a cache key, an audit record
//! or a log line. [`Secret`](toolgate_core::secret::Secret) has no `Debug`, `Display` or
//! `Serialize`, so it cannot be printed or serialized by accident:
//!
//! ```compile_fail
//! let key = toolgate_core::secret::Secret::new("sk-live-123");
//! println!("{key}");
//! ```
//!
//! ```compile_fail
//! fn serialize<T: serde::Serialize>(_: &T) {}
//! serialize(&toolgate_core::secret::Secret::new("sk-live-123"));
//! ```
//!
//! ```compile_fail
//! let key = toolgate_core::secret::Secret::new("sk-live-123");
//! let _ = serde_json::to_string(&key);
//! ```
//!
//! And when a tool echoes a secret anyway, it is replaced by [`SCRUBBED`] in the output
//! (before it is cached and before it leaves) and in the error message: raw, in hex, URL-encoded
//! (in full or in part, hex digits of either case), escaped in JSON or a log field, or in
//! base64 (standard and URL-safe), also inside the base64 of a longer text such as an HTTP
//! Basic `user:secret` (see [`Scrubber`] for which secrets are long enough for that). Its
//! start is replaced too, as a server prints it to help debugging (`invalid token
//! upsecretZq8v...`): its first half, and at least 8 characters, in every form but base64.
//!
//! That catches accidents, not intent: a tool that means to leak a secret can write it
//! reversed, spaced out, in other characters or another encoding, or split across
//! messages, and no search for known text finds it. Give a tool only the secrets it needs,
//! scoped to what it does.
//!
//! The raw, hex, URL-encoded and escaped forms are found whatever the case of their ASCII
//! letters: a hex key echoed in upper case, or a secret in the output of a tool that
//! upper-cases what it prints, is the same secret once the case is guessed. Text that
//! differs from a secret only in case is therefore replaced too; that over-redaction is
//! the price. Base64 is matched exactly, since its case carries bits: the base64 of the
//! secret as it is is found, but the base64 of a re-cased secret is a different text and
//! is not — a re-cased secret is caught raw or escaped, never inside base64. The same
//! [`Scrubber`] does all the scrubbing (tool outputs and errors, audit records, the MCP
//! relay's upstream frames and stderr, the gateway's log lines), so all of it behaves so.
//!
//! # Examples
//!
//! ```
//! use futures::future::BoxFuture;
//! use serde_json::json;
//! use toolgate_core::{InvokeOptions, Pipeline, ToolError, ToolInvokeContext};
//! use toolgate_core::tool::tool_fn_with_context;
//! use toolgate_hooks::secrets::{InMemorySecrets, SecretInjection};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let leaky = tool_fn_with_context("leaky", "Echoes its API key (badly).", |_: (), ctx: &ToolInvokeContext| -> BoxFuture<'_, Result<String, ToolError>> {
//!     Box::pin(async move {
//!         let key = ctx.secrets().get("api-key").map(|s| s.expose().to_owned()).unwrap_or_default();
//!         Ok(format!("calling with {key}"))
//!     })
//! })
//! .tag("secret:api-key");
//!
//! let pipeline = Pipeline::builder()
//!     .tool(leaky)
//!     .hook(SecretInjection::builder().source(InMemorySecrets::new().with("api-key", "sk-live-123")).build())
//!     .build()?;
//! let out = pipeline.invoke("leaky", json!(null), InvokeOptions::new()).await?;
//! assert_eq!(out, json!("calling with [REDACTED:secret]"));
//! # Ok(()) }
//! ```

mod hook;
mod scrub;
mod source;

pub use hook::{SECRET_PRIORITY, SECRET_TAG_PREFIX, SecretInjection, SecretInjectionBuilder};
pub use scrub::{SCRUBBED, Scrubber};
pub use source::{EnvSecrets, FileSecrets, InMemorySecrets, SecretError, SecretSource};
