//! [`ProviderBinder`]: a provider the host makes from what the call carries (its user, its
//! session id, its tool), bound at `will_bind_providers` — for a host that does not build
//! each call's options itself, such as the `toolgate` gateway binary.

use std::marker::PhantomData;

use typemap_rev::TypeMapKey;

use super::{ProviderError, ProviderRequirement, Scope};
use crate::context::ToolInvokeContext;
use crate::control::HookResult;
use crate::hook::Hook;

/// Binds provider `K` on every call from a function of the call's context. It is a hook
/// (register it with [`PipelineBuilder::hook`](crate::PipelineBuilder::hook), or
/// `Extensions::hook` in the gateway) that lists `K` in its
/// [`provided_providers`](Hook::provided_providers), so a hook that `#[requires(K)]`
/// passes the build check.
///
/// Made with [`bind_provider`]. Its priority is `i32::MAX`: it binds before the other hooks
/// at `will_bind_providers`, so they can read `K` there too.
pub struct ProviderBinder<K, F> {
    scope: Scope,
    make: F,
    key: PhantomData<fn() -> K>,
}

/// A hook that binds provider `K` on every call with the value `make` returns for the
/// call's context (`None`: nothing to bind for this call).
///
/// * [`Scope::Request`] — `make` runs for every call.
/// * [`Scope::Session`] — `make` runs once per session: on the first call of a session
///   that does not bind `K` yet (and again after the session expired). A call without a
///   session id gets the value in its request scope, made for it alone.
/// * [`Scope::Global`] — the global scope is bound on the builder
///   ([`PipelineBuilder::provide`](crate::PipelineBuilder::provide)), never per call: the
///   binder fails each call with [`ProviderError::GlobalReadOnly`](super::ProviderError::GlobalReadOnly).
///
/// # What a session value may depend on
///
/// A session value is made once, by the session's first call, and every later call of the
/// session reads it. So make it only from what *keys* the session — the user id and
/// tenant, when the host keys sessions per caller — never from what may differ between its
/// calls: the user's roles or attributes, a token, the tool. The same user may call again
/// in the same session with fewer roles (a down-scoped token handed to an agent) and would
/// keep the value made for more. A value made from roles or a token is bound in
/// [`Scope::Request`], made again for every call.
///
/// And key the session per caller: the pipeline shares a session among every call with its
/// id, whoever makes it. A host that takes the id from a client qualifies it with the
/// caller first (`toolgate_http::session_key` makes `[tenant, user, id]`), so another
/// user's `"s1"` is another session.
///
/// # Examples
///
/// Each user's sessions get that user's home host, made once per session from the user id;
/// the allow-list that follows the caller's roles is made for every call:
///
/// ```
/// use serde_json::json;
/// use toolgate_core::external::TypeMapKey;
/// use toolgate_core::provider::{bind_provider, Scope};
/// use toolgate_core::tool::tool_fn_with_context;
/// use toolgate_core::{InvokeOptions, Pipeline, ToolError, ToolInvokeContext, User};
///
/// /// Made from the user id alone: the same for every call of the session.
/// struct HomeHost;
/// impl TypeMapKey for HomeHost {
///     type Value = String;
/// }
///
/// /// Made from the roles: may differ between two calls of one session.
/// struct AllowedHosts;
/// impl TypeMapKey for AllowedHosts {
///     type Value = Vec<String>;
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let pipeline = Pipeline::builder()
///     .tool(tool_fn_with_context("hosts", "Lists the hosts you may fetch.", |_: (), ctx: &ToolInvokeContext| {
///         let hosts = ctx.get::<HomeHost>().and_then(|home| {
///             let mut hosts = vec![(*home).clone()];
///             hosts.extend(ctx.get::<AllowedHosts>()?.iter().cloned());
///             Ok(hosts.join(","))
///         });
///         Box::pin(async move { hosts.map_err(ToolError::from) })
///     }))
///     .hook(bind_provider::<HomeHost, _>(Scope::Session, |ctx| {
///         Some(format!("{}.example.com", ctx.user().id))
///     }))
///     .hook(bind_provider::<AllowedHosts, _>(Scope::Request, |ctx| {
///         Some(if ctx.user().has_role("admin") { vec!["*".into()] } else { vec![] })
///     }))
///     .build()?;
///
/// // The host keys the client's "s1" by the caller (as `toolgate_http::session_key` does).
/// let session_of = |user: &User| json!([user.tenant, user.id, "s1"]).to_string();
/// let admin = User::new("ann").with_roles(["admin"]);
/// let reader = User::new("ann").with_roles(["reader"]);
/// let call = |user: &User| InvokeOptions::new().user(user.clone()).session(session_of(user));
///
/// assert_eq!(pipeline.invoke("hosts", json!(null), call(&admin)).await?, json!("ann.example.com,*"));
/// // The same session, fewer roles: the role-made list follows the roles.
/// assert_eq!(pipeline.invoke("hosts", json!(null), call(&reader)).await?, json!("ann.example.com"));
/// assert!(pipeline.session(session_of(&reader)).get::<HomeHost>().is_some());
/// # Ok(()) }
/// ```
pub fn bind_provider<K, F>(scope: Scope, make: F) -> ProviderBinder<K, F>
where
    K: TypeMapKey,
    F: Fn(&ToolInvokeContext) -> Option<K::Value> + Send + Sync + 'static,
{
    ProviderBinder {
        scope,
        make,
        key: PhantomData,
    }
}

#[crate::hook]
impl<K, F> Hook for ProviderBinder<K, F>
where
    K: TypeMapKey,
    F: Fn(&ToolInvokeContext) -> Option<K::Value> + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        "provider_binder"
    }

    fn priority(&self) -> i32 {
        i32::MAX
    }

    fn provided_providers(&self) -> Vec<ProviderRequirement> {
        vec![ProviderRequirement::of::<K>()]
    }

    fn will_bind_providers(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        let scope = match self.scope {
            Scope::Session if ctx.session_id().is_none() => Scope::Request,
            Scope::Session if ctx.session_binds::<K>() => return Ok(()),
            scope => scope,
        };
        if scope == Scope::Global {
            let key = ProviderRequirement::of::<K>().key();
            return Err(ProviderError::GlobalReadOnly { key }.into());
        }
        if let Some(value) = (self.make)(ctx) {
            ctx.provide::<K>(value, scope)?;
        }
        Ok(())
    }
}
