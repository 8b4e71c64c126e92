//! Providers: typed values looked up by key type in three scopes.
//!
//! A provider key is a type implementing [`TypeMapKey`]; its `Value` is what is stored.
//! Lookup from a [`ToolInvokeContext`](crate::ToolInvokeContext) goes request → session →
//! global and hands out an `Arc` of the value.
//!
//! | scope | lives | the host supplies it with | a hook binds it with |
//! |---|---|---|---|
//! | request | one invocation | [`InvokeOptions::provide`](crate::InvokeOptions::provide) | `ctx.provide(v, Scope::Request)` in `will_bind_providers` |
//! | session | the invocations with one session id, bounded ([`SessionConfig`]) | [`Pipeline::session`](crate::Pipeline::session)`(id).provide(v)` | `ctx.provide(v, Scope::Session)`, or [`bind_provider`] |
//! | global | the pipeline, read-only at invoke time | [`PipelineBuilder::provide`](crate::PipelineBuilder::provide) | — |
//!
//! A hook names what it reads with `#[requires(Key)]`; building the pipeline checks that
//! each such key is bound globally, bound per call by a hook that says so
//! ([`Hook::provided_providers`](crate::Hook::provided_providers)), or declared supplied
//! by the host with every call
//! ([`PipelineBuilder::per_call_provider`](crate::PipelineBuilder::per_call_provider)),
//! which is then checked on each call.
//!
//! docs/providers.md walks through all three scopes from the host's side and the hook's.

mod binder;
mod session;

pub use binder::{ProviderBinder, bind_provider};
pub use session::{MAX_SESSION_ID_LEN, SessionConfig, SessionProviders, bounded_session_id};
pub(crate) use session::{SessionScope, SessionStore, kept_session_id};

use std::any::TypeId;
use std::marker::PhantomData;
use std::sync::Arc;

use typemap_rev::{TypeMap, TypeMapKey};

/// The scope a provider is bound in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// This invocation only.
    Request,
    /// Every invocation with the same session id, whoever makes it.
    ///
    /// A value bound here is made once and read by the session's later calls: make it only
    /// from what keys the session (the user id and tenant, when the host keys sessions per
    /// caller), never from the caller's roles, attributes or token, which may differ
    /// between calls of one session — bind those in [`Request`](Self::Request). See
    /// [`bind_provider`].
    Session,
    /// The whole pipeline; bound only when the pipeline is built.
    Global,
}

/// A provider could not be found or bound.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// No scope has a value for this key.
    #[error(
        "provider `{key}` is not bound in the request, session or global scope: supply it with the call (`InvokeOptions::provide`), for the call's session (`Pipeline::session(id).provide`) or for every call (`PipelineBuilder::provide`), or bind it in a `will_bind_providers` hook"
    )]
    Missing {
        /// The key type.
        key: &'static str,
    },
    /// The host declared that it supplies this key with every call
    /// ([`PipelineBuilder::per_call_provider`](crate::PipelineBuilder::per_call_provider)),
    /// and this call came without it. The call is refused before any hook runs.
    #[error(
        "provider `{key}` was not supplied with this call, and the pipeline was built to expect it with every call: pass it with `InvokeOptions::provide` (for a batch, `ExecuteOptions::provide`), seed it for the call's session with `Pipeline::session(id).provide`, or bind it for every call with `PipelineBuilder::provide`"
    )]
    NotSupplied {
        /// The key type.
        key: &'static str,
    },
    /// Global providers are read-only at invoke time.
    #[error(
        "provider `{key}` cannot be bound in the global scope during an invocation: global providers are bound once, on the pipeline builder"
    )]
    GlobalReadOnly {
        /// The key type.
        key: &'static str,
    },
    /// A session-scoped binding needs a session id.
    #[error(
        "provider `{key}` cannot be bound in the session scope: this invocation has no session id"
    )]
    NoSession {
        /// The key type.
        key: &'static str,
    },
}

impl ProviderError {
    /// The stable machine code: `missing_provider`, `provider_not_supplied`,
    /// `global_provider_read_only` or `no_session`.
    pub fn code(&self) -> &'static str {
        match self {
            ProviderError::Missing { .. } => "missing_provider",
            ProviderError::NotSupplied { .. } => "provider_not_supplied",
            ProviderError::GlobalReadOnly { .. } => "global_provider_read_only",
            ProviderError::NoSession { .. } => "no_session",
        }
    }
}

/// The internal key under which a provider value is stored: shared, so lookups hand out
/// an `Arc` without cloning the value.
pub(crate) struct Shared<K>(PhantomData<K>);

impl<K> TypeMapKey for Shared<K>
where
    K: TypeMapKey,
{
    type Value = Arc<K::Value>;
}

/// A provider key type named by a hook as required (or as bound by it per call).
///
/// ```
/// use toolgate_core::external::TypeMapKey;
/// use toolgate_core::provider::ProviderRequirement;
/// struct Clock;
/// impl TypeMapKey for Clock { type Value = u64; }
/// let r = ProviderRequirement::of::<Clock>();
/// assert!(r.key().ends_with("Clock"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProviderRequirement {
    type_id: TypeId,
    key: &'static str,
}

impl ProviderRequirement {
    /// The requirement for key type `K`.
    pub fn of<K: TypeMapKey>() -> Self {
        ProviderRequirement {
            type_id: TypeId::of::<K>(),
            key: std::any::type_name::<K>(),
        }
    }

    /// The key type's name.
    pub fn key(&self) -> &'static str {
        self.key
    }

    pub(crate) fn type_id(&self) -> TypeId {
        self.type_id
    }
}

/// A set of provider bindings in one scope (the request scope of an invocation, or what a
/// caller hands in through [`InvokeOptions`](crate::InvokeOptions)).
#[derive(Default)]
pub struct Providers {
    /// Made on the first binding: most invocations bind nothing in their request scope,
    /// and an empty set then costs nothing to make or drop.
    map: Option<TypeMap>,
}

impl Providers {
    /// No bindings.
    pub fn new() -> Self {
        Self::default()
    }

    /// Binds `value` under key `K`, replacing an earlier value.
    pub fn insert<K: TypeMapKey>(&mut self, value: K::Value) {
        self.insert_arc::<K>(Arc::new(value));
    }

    /// Binds an already shared value under key `K`.
    pub fn insert_arc<K: TypeMapKey>(&mut self, value: Arc<K::Value>) {
        self.map
            .get_or_insert_with(TypeMap::new)
            .insert::<Shared<K>>(value);
    }

    /// The value under key `K`.
    pub fn get<K: TypeMapKey>(&self) -> Option<&Arc<K::Value>> {
        self.map.as_ref()?.get::<Shared<K>>()
    }

    /// Whether a value is bound under key `K`.
    pub fn contains<K: TypeMapKey>(&self) -> bool {
        self.map
            .as_ref()
            .is_some_and(TypeMap::contains_key::<Shared<K>>)
    }

    /// Whether nothing is bound.
    pub fn is_empty(&self) -> bool {
        self.map.as_ref().is_none_or(TypeMap::is_empty)
    }
}

impl std::fmt::Debug for Providers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Providers")
            .field("len", &self.map.as_ref().map_or(0, TypeMap::len))
            .finish()
    }
}

/// The pipeline-wide provider scopes: the global providers and the live sessions.
pub(crate) struct Scopes {
    pub globals: Providers,
    pub sessions: SessionStore,
}

/// A provider the host declared it supplies with every call
/// ([`PipelineBuilder::per_call_provider`](crate::PipelineBuilder::per_call_provider)).
#[derive(Clone, Copy)]
pub(crate) struct PerCall {
    pub requirement: ProviderRequirement,
    /// Whether a set of providers binds the key.
    bound: fn(&Providers) -> bool,
}

impl PerCall {
    pub fn of<K: TypeMapKey>() -> Self {
        PerCall {
            requirement: ProviderRequirement::of::<K>(),
            bound: Providers::contains::<K>,
        }
    }
}

impl Scopes {
    /// Checks that a call brings every provider the host supplies with every call, in its
    /// request scope or its session's (the global scope never counts: a key bound there is
    /// not a per-call provider).
    ///
    /// # Errors
    ///
    /// [`ProviderError::NotSupplied`] naming the first key missing.
    pub fn check_supplied(
        &self,
        per_call: &[PerCall],
        request: &Providers,
        session_id: Option<&str>,
    ) -> Result<(), ProviderError> {
        let mut session = None;
        for p in per_call {
            if (p.bound)(request) {
                continue;
            }
            let session =
                session.get_or_insert_with(|| session_id.and_then(|id| self.sessions.get(id)));
            if !session.as_ref().is_some_and(|s| s.holds(p.bound)) {
                return Err(ProviderError::NotSupplied {
                    key: p.requirement.key(),
                });
            }
        }
        Ok(())
    }
}
