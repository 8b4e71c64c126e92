//! Built-in toolgate policies, each a [`Hook`](toolgate_core::Hook) with a builder, sensible
//! defaults, and a backend trait where its state could live outside the process (the
//! in-memory backends here are the embedded default; `toolgate-redis` plugs into the same
//! traits).
#![deny(missing_docs)]

// ----- who may call and how much (issue #3) -----

// ----- what goes in and out (issue #4) -----
