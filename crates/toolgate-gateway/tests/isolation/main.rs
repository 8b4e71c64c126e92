//! No caller sees, answers or exhausts what belongs to another, and every path goes through
//! policy: two users against malicious upstreams written with the official Python MCP SDK,
//! floods of sessions from one key, and what a caller reads or a log shows.

#[path = "../common/mod.rs"]
mod common;

mod attribution;
mod echoed_secrets;
mod errors;
mod others_credentials;
mod pipeline_paths;
mod scrubbing;
mod sessions;
mod subscriptions;
mod tenant_approvers;
mod tenant_state;
mod tokens;
mod upstream_noise;
mod upstream_shares;
