//! Tests of the built-in policies of issue #3: who may call and how much.

mod approval_capabilities;
mod authorize;
mod budget;
mod concurrency;
mod consent;
mod feature_flags;
mod quota;
mod retry;
mod support;
mod timeout;
