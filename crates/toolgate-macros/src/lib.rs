//! The `#[hook]` attribute of toolgate. Use it through `toolgate::hook` or
//! `toolgate_core::hook`; its documentation is there.

mod expand;
mod stages;

use proc_macro::TokenStream;

/// Writes a hook's `Hook::stages` from the stage methods its `impl Hook` block defines, so
/// the list can never drift from the code: a method you write always runs.
///
/// Put it on the impl block. Inside, write only the stage methods you need, in any of
/// three forms:
///
/// * `fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult` — synchronous:
///   the result is ready at once and nothing is allocated;
/// * `async fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult` — may
///   await; the future is boxed once per call;
/// * the trait's own signature, returning a `HookFuture` — left as it is.
///
/// `around_execute` is written `async fn around_execute(&self, ctx: &mut
/// ToolInvokeContext, next: Next<'_>) -> HookResult`.
///
/// The other methods of `Hook` (`name`, `priority`, `interest`, `filter`,
/// `provided_providers`, `wants_stage_durations`) are written as usual and left alone. A name that is neither a
/// stage nor one of those is a compile error that names the closest stage and lists them
/// all.
///
/// * `#[requires(Key, …)]`, on the impl block or on a method, writes
///   `required_providers`: building a pipeline then fails when a key is not bound.
/// * A block that writes neither `interest` nor `filter` gets an `interest` that answers
///   `Interest::always()`: the hook takes part in every call of every tool, so the pipeline
///   does not ask its (default) filter per call.
/// * A hand-written `stages` is kept: write one only when the set depends on
///   configuration, and list a subset of the methods you wrote.
/// * `#[hook(crate = path)]` names where `toolgate_core` is, for a crate that renamed it
///   (the default finds `toolgate_core`, or the `toolgate` facade).
///
/// # Examples
///
/// A deny list, synchronous:
///
/// ```
/// use toolgate_core::{hook, Hook, HookResult, ToolInvokeContext};
///
/// struct DenyList(Vec<String>);
///
/// #[hook]
/// impl Hook for DenyList {
///     fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult {
///         if self.0.contains(&ctx.user().id) {
///             return ctx.abort("you may not call tools", "forbidden", 403);
///         }
///         Ok(())
///     }
/// }
///
/// use toolgate_core::Stage;
/// assert_eq!(DenyList(vec![]).stages(), Stage::WillAuthorize.into());
/// ```
///
/// An async stage that needs a provider:
///
/// ```
/// use toolgate_core::external::TypeMapKey;
/// use toolgate_core::{hook, Hook, HookResult, Pipeline, ToolInvokeContext};
///
/// struct Blocklist;
/// impl TypeMapKey for Blocklist {
///     type Value = Vec<String>;
/// }
///
/// struct CheckBlocklist;
///
/// #[hook]
/// #[requires(Blocklist)]
/// impl Hook for CheckBlocklist {
///     async fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult {
///         let blocked = ctx.get::<Blocklist>()?;
///         tokio::task::yield_now().await;
///         if blocked.contains(&ctx.user().id) {
///             return ctx.abort("you are blocked", "forbidden", 403);
///         }
///         Ok(())
///     }
/// }
///
/// // Without the provider, the wiring mistake shows when the pipeline is built.
/// let err = Pipeline::builder().hook(CheckBlocklist).build().err().unwrap();
/// assert!(err.to_string().contains("Blocklist"));
/// ```
#[proc_macro_attribute]
pub fn hook(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::Args::parse(attr.into())
        .and_then(|args| expand::hook(args, item.into()))
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// The stage list, spelled once: `__stages!(callback)` expands to
/// `callback! { method => Variant: "doc", … }` with every stage in pipeline order, the
/// one-line documentation of its `Stage` variant beside it. toolgate-core declares its
/// `Stage` enum with it.
#[doc(hidden)]
#[proc_macro]
pub fn __stages(callback: TokenStream) -> TokenStream {
    let callback = proc_macro2::TokenStream::from(callback);
    let stages = stages::STAGES.iter().map(|(method, doc)| {
        let method = quote::format_ident!("{}", method);
        let variant = quote::format_ident!("{}", stages::variant(&method.to_string()));
        quote::quote!(#method => #variant: #doc,)
    });
    quote::quote!(#callback! { #(#stages)* }).into()
}

/// `__stage_methods!(callback)` expands to `callback! { method => Variant, … }` with every
/// stage whose `Hook` method takes only the context — all but `around_execute` — in
/// pipeline order: what a macro that writes one method per stage needs.
#[doc(hidden)]
#[proc_macro]
pub fn __stage_methods(callback: TokenStream) -> TokenStream {
    let callback = proc_macro2::TokenStream::from(callback);
    let stages = stages::STAGES
        .iter()
        .filter(|(method, _)| *method != stages::AROUND_EXECUTE)
        .map(|(method, _)| {
            let variant = quote::format_ident!("{}", stages::variant(method));
            let method = quote::format_ident!("{}", method);
            quote::quote!(#method => #variant,)
        });
    quote::quote!(#callback! { #(#stages)* }).into()
}
