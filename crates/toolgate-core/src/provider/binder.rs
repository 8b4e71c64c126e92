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
/// # Examples
///
/// Every session of a user gets that user's allow-list, looked up once per session:
///
/// ```
/// use serde_json::json;
/// use toolgate_core::external::TypeMapKey;
/// use toolgate_core::provider::{bind_provider, Scope};
/// use toolgate_core::tool::tool_fn_with_context;
/// use toolgate_core::{InvokeOptions, Pipeline, ToolError, ToolInvokeContext, User};
///
/// struct AllowedHosts;
/// impl TypeMapKey for AllowedHosts {
///     type Value = Vec<String>;
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let pipeline = Pipeline::builder()
///     .tool(tool_fn_with_context("hosts", "Lists the hosts you may fetch.", |_: (), ctx: &ToolInvokeContext| {
///         let hosts = ctx.get::<AllowedHosts>().map(|h| h.join(","));
///         Box::pin(async move { hosts.map_err(ToolError::from) })
///     }))
///     .hook(bind_provider::<AllowedHosts, _>(Scope::Session, |ctx| {
///         Some(vec![format!("{}.example.com", ctx.user().id)])
///     }))
///     .build()?;
///
/// let ann = InvokeOptions::new().user(User::new("ann")).session("s1");
/// assert_eq!(pipeline.invoke("hosts", json!(null), ann).await?, json!("ann.example.com"));
/// assert!(pipeline.session("s1").get::<AllowedHosts>().is_some());
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
