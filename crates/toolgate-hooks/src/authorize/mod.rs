//! Authorization at `will_authorize`: allow and deny rules over user id, tenant, roles, tool
//! name and tags (deny wins, a configurable default), failing closed; the same decision filters
//! tool listings.
//!
//! * [`Authorize`] — the hook; [`Authorize::visible_tools`] filters listings.
//! * [`Rules`] and [`Rule`] — the built-in [`Authorizer`].

mod hook;
mod rules;

pub use hook::{Authorize, AuthorizeError, Authorizer, Verdict};
pub use rules::{Effect, Rule, Rules};
