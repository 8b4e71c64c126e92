//! The agent-facing toolgate tool system.
#![deny(missing_docs)]
