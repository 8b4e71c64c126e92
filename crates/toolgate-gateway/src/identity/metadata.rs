//! What the gateway tells clients about itself as an OAuth protected resource: the
//! metadata document of RFC 9728 and the `WWW-Authenticate` challenges of RFC 6750 that
//! point to it.

use serde_json::{Value, json};

use crate::config::OAuthConfig;

use super::Route;

/// The path of the metadata document for the whole gateway; `…/mcp` is the one for the
/// MCP endpoint (RFC 9728 §3.1: the well-known part goes between host and path).
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// The resource identifier of `route`: the gateway's address for `/v1`, the address of
/// the endpoint for `/mcp`.
pub fn resource(config: &OAuthConfig, route: Route) -> String {
    match route {
        Route::V1 => config.resource_base().to_owned(),
        Route::Mcp => format!("{}/mcp", config.resource_base()),
    }
}

/// The URL of the metadata document that describes `route`.
pub fn metadata_url(config: &OAuthConfig, route: Route) -> String {
    let url = url::Url::parse(config.resource_base());
    let (origin, path) = match &url {
        Ok(url) => (
            url.origin().ascii_serialization(),
            url.path().trim_end_matches('/').to_owned(),
        ),
        Err(_) => (config.resource_base().to_owned(), String::new()),
    };
    let suffix = match route {
        Route::V1 => "",
        Route::Mcp => "/mcp",
    };
    format!("{origin}{METADATA_PATH}{path}{suffix}")
}

/// The metadata document (RFC 9728 §2) for `route`.
///
/// `scopes_supported` is what an MCP client asks for when the challenge names no scope,
/// so by default it lists the scopes `route` requires and nothing more (and is left out
/// when the route requires none, so the client asks for no scope at all): a scope that
/// grants roles (`scope_roles`) or that one tool requires is not advertised unless the
/// operator lists it in `scopes_supported`.
pub fn document(config: &OAuthConfig, route: Route) -> Value {
    let mut document = json!({
        "resource": resource(config, route),
        "authorization_servers": [config.issuer.0],
        "bearer_methods_supported": ["header"],
        "resource_name": "toolgate",
    });
    let scopes = scopes_supported(config, route);
    if !scopes.is_empty() {
        document["scopes_supported"] = json!(scopes);
    }
    document
}

/// The scopes the metadata of `route` advertises: `scopes_supported` when configured,
/// else those `route` requires.
pub fn scopes_supported(config: &OAuthConfig, route: Route) -> Vec<String> {
    match &config.scopes_supported {
        Some(scopes) => scopes.clone(),
        None => super::required_scopes(config, route).to_vec(),
    }
}

/// The challenge of an answer 401 or 403 on `route`: `Bearer` with the metadata URL, the
/// scopes to ask for, and, when a token was refused, the error and why.
pub fn challenge(
    config: &OAuthConfig,
    route: Route,
    scopes: &[String],
    error: Option<(&str, &str)>,
) -> String {
    let mut value = format!(
        "Bearer resource_metadata=\"{}\"",
        quoted(&metadata_url(config, route))
    );
    if !scopes.is_empty() {
        value.push_str(&format!(", scope=\"{}\"", quoted(&scopes.join(" "))));
    }
    if let Some((code, description)) = error {
        value.push_str(&format!(
            ", error=\"{code}\", error_description=\"{}\"",
            quoted(description)
        ));
    }
    value
}

/// The challenge of an answer 403 to a token that lacks `scopes` on `route`.
pub fn insufficient_scope(config: &OAuthConfig, route: Route, scopes: &[String]) -> String {
    format!(
        "Bearer error=\"insufficient_scope\", scope=\"{}\", resource_metadata=\"{}\"",
        quoted(&scopes.join(" ")),
        quoted(&metadata_url(config, route))
    )
}

/// Text safe inside a quoted-string of a header: no quotes, backslashes or controls.
fn quoted(text: &str) -> String {
    text.chars()
        .filter(|c| *c != '"' && *c != '\\' && !c.is_control())
        .collect()
}
