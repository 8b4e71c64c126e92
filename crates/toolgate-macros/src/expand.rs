//! What `#[hook]` does to an `impl Hook for … { … }` block.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{
    Attribute, FnArg, Ident, ImplItem, ImplItemFn, ItemImpl, Pat, Path, ReturnType, Signature,
    Token, Type, TypeReference,
};

use crate::stages::{OTHER_METHODS, STAGES, closest, variant_of};

/// The arguments of `#[hook(…)]`.
#[derive(Default)]
pub(crate) struct Args {
    /// `crate = path`: where `toolgate_core`'s items are, for a crate that renamed it.
    krate: Option<Path>,
}

impl Args {
    pub(crate) fn parse(attr: TokenStream) -> syn::Result<Args> {
        let mut args = Args::default();
        let parser = syn::meta::parser(|meta| {
            if meta.path.is_ident("crate") {
                args.krate = Some(meta.value()?.parse()?);
                Ok(())
            } else {
                Err(meta.error(
                    "`#[hook]` takes one optional argument: `crate = path::to::toolgate_core`",
                ))
            }
        });
        syn::parse::Parser::parse2(parser, attr)?;
        Ok(args)
    }
}

/// Expands `#[hook]` on `item`.
pub(crate) fn hook(args: Args, item: TokenStream) -> syn::Result<TokenStream> {
    let mut item: ItemImpl = syn::parse2(item).map_err(|e| {
        syn::Error::new(
            e.span(),
            "`#[hook]` goes on an impl block: `#[hook] impl Hook for YourType { … }`",
        )
    })?;
    check_trait(&item)?;
    let core = args.krate.map_or_else(core_path, |p| quote!(#p));

    let mut errors: Option<syn::Error> = None;
    let mut push_error = |e: syn::Error| match &mut errors {
        Some(all) => all.combine(e),
        None => errors = Some(e),
    };

    let mut requires = take_requires(&mut item.attrs).unwrap_or_else(|e| {
        push_error(e);
        Vec::new()
    });
    let mut stages: Vec<Ident> = Vec::new();
    // Stage methods written as `async fn`s or returning a `HookFuture`: they may not finish
    // at once. Every other stage method — a plain `fn`, or the trait's default, which
    // returns a ready future — is synchronous.
    let mut asynchronous: Vec<Ident> = Vec::new();
    let mut written_stages = false;
    let mut written_synchronous = false;
    let mut written_requirements = None;
    let mut written_filtering = false;

    // A macro invoked inside the block may write stage methods this expansion cannot see:
    // then only the methods it sees written as plain `fn`s count as synchronous.
    let hidden_methods = item
        .items
        .iter()
        .any(|impl_item| matches!(impl_item, ImplItem::Macro(_)));
    let mut plain_stages: Vec<Ident> = Vec::new();
    for impl_item in &mut item.items {
        let ImplItem::Fn(method) = impl_item else {
            continue;
        };
        match take_requires(&mut method.attrs) {
            Ok(more) => requires.extend(more),
            Err(e) => push_error(e),
        }
        let name = method.sig.ident.to_string();
        if let Some(variant) = variant_of(&name) {
            let plain = name != "around_execute"
                && method.sig.asyncness.is_none()
                && !returns_hook_future(&method.sig);
            let rewritten = if name == "around_execute" {
                around_execute(method, &core)
            } else {
                stage_method(method, &core)
            };
            match rewritten {
                Ok(()) => {
                    let variant = Ident::new(&variant, method.sig.ident.span());
                    if plain {
                        plain_stages.push(variant.clone());
                    } else {
                        asynchronous.push(variant.clone());
                    }
                    stages.push(variant);
                }
                Err(e) => push_error(e),
            }
        } else if name == "stages" {
            written_stages = true;
        } else if name == "synchronous_stages" {
            written_synchronous = true;
        } else if name == "required_providers" {
            written_requirements = Some(method.sig.ident.span());
        } else if name == "interest" || name == "filter" {
            written_filtering = true;
        } else if !OTHER_METHODS.contains(&name.as_str()) {
            push_error(unknown_method(&method.sig.ident));
        }
    }

    if !requires.is_empty()
        && let Some(span) = written_requirements
    {
        push_error(syn::Error::new(
            span,
            "this hook lists its providers twice: with `#[requires(…)]` and in a hand-written \
             `required_providers`; keep one",
        ));
    }
    if let Some(errors) = errors {
        return Err(errors);
    }

    if !written_stages {
        item.items.push(syn::parse2(quote! {
            fn stages(&self) -> #core::stage::StageSet {
                const STAGES: #core::stage::StageSet = #core::stage::StageSet::of(&[#(#core::Stage::#stages),*]);
                STAGES
            }
        })?);
    }
    if !written_synchronous && hidden_methods {
        item.items.push(syn::parse2(quote! {
            fn synchronous_stages(&self) -> #core::stage::StageSet {
                const STAGES: #core::stage::StageSet = #core::stage::StageSet::of(&[#(#core::Stage::#plain_stages),*]);
                STAGES
            }
        })?);
    } else if !written_synchronous {
        // `around_execute` is never synchronous: its default calls the rest of the chain.
        item.items.push(syn::parse2(quote! {
            fn synchronous_stages(&self) -> #core::stage::StageSet {
                const STAGES: #core::stage::StageSet = #core::stage::StageSet::ALL.difference(
                    #core::stage::StageSet::of(&[#core::Stage::AroundExecute, #(#core::Stage::#asynchronous),*]),
                );
                STAGES
            }
        })?);
    }
    // A hook that filters nothing takes part in every call of every tool: saying so spares
    // each call its filter. Not when a macro in the block may write `filter` unseen.
    if !written_filtering && !hidden_methods {
        item.items.push(syn::parse2(quote! {
            fn interest(&self, _tool: &#core::tool::ToolDefinition) -> #core::hook::Interest {
                #core::hook::Interest::always()
            }
        })?);
    }
    if !requires.is_empty() {
        item.items.push(syn::parse2(quote! {
            fn required_providers(&self) -> ::std::vec::Vec<#core::provider::ProviderRequirement> {
                ::std::vec![#(#core::provider::ProviderRequirement::of::<#requires>()),*]
            }
        })?);
    }
    Ok(quote!(#item))
}

/// The block must implement a trait named `Hook`.
fn check_trait(item: &ItemImpl) -> syn::Result<()> {
    let is_hook = item
        .trait_
        .as_ref()
        .and_then(|(_, path, _)| path.segments.last())
        .is_some_and(|last| last.ident == "Hook");
    if is_hook {
        Ok(())
    } else {
        Err(syn::Error::new(
            item.self_ty.span(),
            "`#[hook]` goes on the block that implements the trait: `#[hook] impl Hook for YourType { … }`",
        ))
    }
}

/// Where `toolgate_core` is for the crate being compiled: itself, a dependency on it, or
/// the `toolgate` facade's `core` module.
fn core_path() -> TokenStream {
    use proc_macro_crate::{FoundCrate, crate_name};
    match crate_name("toolgate-core") {
        // Inside toolgate-core, `extern crate self as toolgate_core` makes this resolve,
        // and its tests and doctests depend on it by that name.
        Ok(FoundCrate::Itself) => quote!(::toolgate_core),
        Ok(FoundCrate::Name(name)) => {
            let name = format_ident!("{}", name);
            quote!(::#name)
        }
        Err(_) => match crate_name("toolgate") {
            Ok(FoundCrate::Itself) => quote!(::toolgate::core),
            Ok(FoundCrate::Name(name)) => {
                let name = format_ident!("{}", name);
                quote!(::#name::core)
            }
            Err(_) => quote!(::toolgate_core),
        },
    }
}

/// Removes the `#[requires(A, B)]` attributes from `attrs`, returning their types.
fn take_requires(attrs: &mut Vec<Attribute>) -> syn::Result<Vec<Type>> {
    let mut types = Vec::new();
    let mut result = Ok(());
    attrs.retain(|attr| {
        if !attr.path().is_ident("requires") {
            return true;
        }
        match attr.parse_args_with(Punctuated::<Type, Token![,]>::parse_terminated) {
            Ok(list) if !list.is_empty() => types.extend(list),
            Ok(_) => {
                result = Err(syn::Error::new(
                    attr.span(),
                    "name the provider keys this hook needs: `#[requires(Database, Clock)]`",
                ))
            }
            Err(e) => {
                result = Err(syn::Error::new(
                    e.span(),
                    "`#[requires(…)]` takes provider key types: `#[requires(Database, Clock)]`",
                ))
            }
        }
        false
    });
    result.map(|()| types)
}

fn unknown_method(ident: &Ident) -> syn::Error {
    let name = ident.to_string();
    let hint = match closest(&name) {
        Some(candidate) => format!("did you mean `{candidate}`?"),
        None => String::new(),
    };
    let stages: Vec<&str> = STAGES.iter().map(|(method, _)| *method).collect();
    syn::Error::new(
        ident.span(),
        format!(
            "`{name}` is not a stage of the pipeline nor a method of `Hook`; {hint}\n\
             the stages, in pipeline order: {}\n\
             the other methods of `Hook`: {}",
            stages.join(", "),
            OTHER_METHODS.join(", "),
        ),
    )
}

/// Rewrites a stage method written as `async fn` or plain `fn` returning a result into the
/// trait's form. A method already written in the trait's form (returning `HookFuture`) is
/// left as it is.
fn stage_method(method: &mut ImplItemFn, core: &TokenStream) -> syn::Result<()> {
    if method.sig.asyncness.is_none() && returns_hook_future(&method.sig) {
        return Ok(());
    }
    let shape = "a stage method takes `&self` and the context: \
                 `fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult` \
                 (or `async fn`)";
    let (ctx, ctx_ty) = receiver_and_context(&method.sig, 2, shape)?;
    let output = result_type(&method.sig)?;
    let name = &method.sig.ident;
    let block = &method.block;
    let span = method.sig.span();
    let body = match method.sig.asyncness {
        Some(asyncness) => boxed_body(core, output, block, asyncness.span),
        // Ready at once: no allocation, no future to poll. The closure gives `return` and
        // `?` in the body their meaning.
        None => quote_spanned! {span=>
            #core::hook::HookFuture::ready((move || -> #output #block)())
        },
    };
    *method = syn::parse2(rebuilt(
        method,
        quote_spanned! {span=>
            #[allow(clippy::redundant_closure_call)]
            fn #name<'__hook>(&'__hook self, #ctx: &'__hook mut #ctx_ty) -> #core::hook::HookFuture<'__hook> {
                #body
            }
        },
    ))?;
    Ok(())
}

/// Rewrites `async fn around_execute(&self, ctx, next: Next<'_>) -> HookResult`.
fn around_execute(method: &mut ImplItemFn, core: &TokenStream) -> syn::Result<()> {
    if method.sig.asyncness.is_none() {
        if returns_hook_future(&method.sig) {
            return Ok(());
        }
        return Err(syn::Error::new(
            method.sig.fn_token.span(),
            "`around_execute` awaits the rest of the chain, so it is an `async fn`: \
             `async fn around_execute(&self, ctx: &mut ToolInvokeContext, next: Next<'_>) -> HookResult`",
        ));
    }
    let shape = "`around_execute` takes `&self`, the context and the rest of the chain: \
                 `async fn around_execute(&self, ctx: &mut ToolInvokeContext, next: Next<'_>) -> HookResult`";
    let (ctx, ctx_ty) = receiver_and_context(&method.sig, 3, shape)?;
    let Some(FnArg::Typed(next)) = method.sig.inputs.iter().nth(2) else {
        return Err(syn::Error::new(method.sig.inputs.span(), shape));
    };
    let next_pat = &next.pat;
    let next_ty = with_hook_lifetime(&next.ty)?;
    let output = result_type(&method.sig)?;
    let span = method.sig.span();
    let async_span = method.sig.asyncness.map_or(span, |a| a.span);
    let body = boxed_body(core, output, &method.block, async_span);
    *method = syn::parse2(rebuilt(
        method,
        quote_spanned! {span=>
            fn around_execute<'__hook>(
                &'__hook self,
                #ctx: &'__hook mut #ctx_ty,
                #next_pat: #next_ty,
            ) -> #core::hook::HookFuture<'__hook> {
                #body
            }
        },
    ))?;
    Ok(())
}

/// The body of an `async fn` stage method: its block as an async block, boxed once. The
/// block's value is the future's output (the compiler infers it from `HookFuture::new`);
/// the declared result type is checked against it separately, so that a body that never
/// finishes normally (only `return`s, or panics) reads as the same code would in a
/// plain `async fn`. A future that is not `Send` is reported at the method's `async`.
fn boxed_body(
    core: &TokenStream,
    output: &Type,
    block: &syn::Block,
    async_span: proc_macro2::Span,
) -> TokenStream {
    let declared = quote_spanned! {output.span()=>
        let _: ::core::marker::PhantomData<#output> = ::core::marker::PhantomData::<#core::HookResult>;
    };
    quote_spanned! {async_span=>
        #declared
        #core::hook::HookFuture::new(async move #block)
    }
}

/// The author's `Next<'_>` (or `Next`) as `Next<'__hook>`, keeping their path.
fn with_hook_lifetime(ty: &Type) -> syn::Result<Type> {
    let mut ty = ty.clone();
    let Type::Path(path) = &mut ty else {
        return Err(syn::Error::new(
            ty.span(),
            "the rest of the chain is `next: Next<'_>`",
        ));
    };
    let Some(last) = path.path.segments.last_mut() else {
        return Err(syn::Error::new(
            path.span(),
            "the rest of the chain is `next: Next<'_>`",
        ));
    };
    let span = last.ident.span();
    last.arguments =
        syn::PathArguments::AngleBracketed(syn::parse_quote_spanned! {span=> <'__hook> });
    Ok(ty)
}

/// The method's own attributes (docs, lints) in front of its new signature and body.
fn rebuilt(method: &ImplItemFn, function: TokenStream) -> TokenStream {
    let attrs = &method.attrs;
    quote!(#(#attrs)* #function)
}

fn returns_hook_future(sig: &Signature) -> bool {
    match &sig.output {
        ReturnType::Type(_, ty) => match &**ty {
            Type::Path(path) => path
                .path
                .segments
                .last()
                .is_some_and(|s| s.ident == "HookFuture"),
            _ => false,
        },
        ReturnType::Default => false,
    }
}

/// Checks `&self, ctx: &mut T[, …]` with `arity` inputs; returns the context's pattern and `T`.
fn receiver_and_context<'s>(
    sig: &'s Signature,
    arity: usize,
    shape: &str,
) -> syn::Result<(&'s Pat, &'s Type)> {
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        return Err(syn::Error::new(
            sig.generics.span(),
            "a stage method has no generic parameters of its own",
        ));
    }
    let wrong = || syn::Error::new(sig.inputs.span(), shape);
    if sig.inputs.len() != arity {
        return Err(wrong());
    }
    let mut inputs = sig.inputs.iter();
    match inputs.next() {
        Some(FnArg::Receiver(receiver))
            if receiver.reference.is_some() && receiver.mutability.is_none() => {}
        _ => return Err(wrong()),
    }
    let Some(FnArg::Typed(ctx)) = inputs.next() else {
        return Err(wrong());
    };
    match &*ctx.ty {
        Type::Reference(TypeReference {
            mutability: Some(_),
            elem,
            ..
        }) => Ok((&ctx.pat, elem)),
        other => Err(syn::Error::new(
            other.span(),
            "the context is borrowed mutably: `ctx: &mut ToolInvokeContext`",
        )),
    }
}

/// The declared result type of an `async fn` or plain `fn` stage method.
fn result_type(sig: &Signature) -> syn::Result<&Type> {
    match &sig.output {
        ReturnType::Type(_, ty) => Ok(ty),
        ReturnType::Default => Err(syn::Error::new(
            sig.paren_token.span.close(),
            "a stage method returns `HookResult`: `Ok(())` to go on, or a control outcome \
             such as `ctx.abort(…)`",
        )),
    }
}
