//! What a careless or hostile client can do to the real binary, and what it may not:
//! grow the metrics, hold connections open, send bodies that never end or do not parse,
//! and slow down the calls of others.

#[path = "../common/mod.rs"]
mod common;

mod connections;
mod mcp_endpoint;
mod metrics;
