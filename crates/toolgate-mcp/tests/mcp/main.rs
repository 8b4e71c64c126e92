//! The MCP crate's integration tests, one executable for all of them: each module is
//! an area, and `cargo test -p toolgate-mcp --test mcp <module>::` runs one. Every area
//! linked on its own cost 70 MB of disk and a link; they share `common`.

mod common;

mod answers_on_shared_connections;
mod cancelled_calls;
mod cancelled_calls_keep_places;
mod cancelled_posts_keep_places;
mod cancelled_upstream_requests;
mod cancelled_upstream_streams;
mod direct;
mod http;
mod import;
mod listen_requests;
mod malformed_requests;
mod per_caller;
mod policies;
mod python_sdk;
mod repeated_keys;
mod requests_in_flight;
mod resource_subscriptions;
mod reused_ids;
mod session;
mod stateless;
mod stdio;
mod stdio_children;
mod stdio_server;
mod stdio_upstreams;
mod subscriptions_after_reconnection;
mod subscriptions_in_order;
mod task_request_errors;
mod unreadable_answers;
mod upstream_connections;
mod upstream_lists;
mod upstream_refusals;
