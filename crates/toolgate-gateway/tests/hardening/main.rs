//! What a careless or hostile client can do to the real binary, and what it may not:
//! grow the metrics, hold connections open, send bodies that never end or do not parse;
//! and how fast calls on one kept-alive `/mcp` connection are answered.

#[path = "../common/mod.rs"]
mod common;

mod audit_records;
mod connections;
mod console_cookie;
mod failed_credentials;
mod imported_tools;
mod logs;
mod mcp_accept;
mod mcp_endpoint;
mod mcp_latency;
mod mcp_origin;
mod mcp_sessions;
mod metrics;
mod pins;
mod redis_outage;
mod repeated_credentials;
mod repeated_keys;
mod special_files;
mod upstream_errors;
mod upstream_secrets;
mod upstream_tool_names;
