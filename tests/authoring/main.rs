//! Tests of the hook author's API: `#[hook]`, closure hooks, guards held by instance, and
//! hooks switched off by configuration.

mod attribute;
mod closures;
mod guards;
