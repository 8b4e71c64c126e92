//! Good tokens, routes, scopes, metadata and challenges.

use serde_json::{Value, json};

use crate::common::{Answer, Gateway, check, client, key};
use crate::{MCP_RESOURCE, RESOURCE, config, invoke, mcp_echo, start};

#[tokio::test]
async fn a_provider_token_calls_a_tool_on_v1_with_roles_from_its_claims() {
    let Some((provider, gateway)) = start(
        "a_provider_token_calls_a_tool_on_v1_with_roles_from_its_claims",
        "",
        "",
    ) else {
        return;
    };
    let token = provider.token("agent", RESOURCE, "tools:read").await;
    let echo = invoke(&gateway, Some(&token), "echo", json!({"text": "hi"})).await;
    assert_eq!(echo.status, 200, "{:?}", echo.body);
    assert_eq!(echo.body["output"]["text"], "hi");
    // The `roles` claim made the agent a `reader`: echo only.
    let calculator = invoke(
        &gateway,
        Some(&token),
        "calculator",
        json!({"expression": "1+1"}),
    )
    .await;
    assert_eq!(calculator.status, 403, "{:?}", calculator.body);
    assert!(
        calculator.error_message().contains("agent"),
        "the caller is the token's `sub`: {}",
        calculator.error_message()
    );
}

#[tokio::test]
async fn a_scope_mapped_to_a_role_grants_that_role() {
    let Some((provider, gateway)) = start("a_scope_mapped_to_a_role_grants_that_role", "", "")
    else {
        return;
    };
    let token = provider
        .token("agent", RESOURCE, "tools:read tools:admin")
        .await;
    let calculator = invoke(
        &gateway,
        Some(&token),
        "calculator",
        json!({"expression": "6*7"}),
    )
    .await;
    assert_eq!(calculator.status, 200, "{:?}", calculator.body);
    assert_eq!(calculator.body["output"]["result"], 42);
}

#[tokio::test]
async fn a_provider_token_for_the_mcp_endpoint_calls_a_tool_over_mcp() {
    let Some((provider, gateway)) = start(
        "a_provider_token_for_the_mcp_endpoint_calls_a_tool_over_mcp",
        "",
        "",
    ) else {
        return;
    };
    let token = provider.token("agent", MCP_RESOURCE, "tools:read").await;
    let (status, _, body) = mcp_echo(&gateway, Some(&token), "over mcp").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("over mcp"), "{body}");
    assert!(!body.contains("\"isError\":true"), "{body}");
}

#[tokio::test]
async fn api_keys_keep_working_beside_oauth() {
    let Some((_provider, gateway)) = start("api_keys_keep_working_beside_oauth", "", "") else {
        return;
    };
    let answer = invoke(
        &gateway,
        Some(&key("alice")),
        "calculator",
        json!({"expression": "2+2"}),
    )
    .await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let (status, _, body) = mcp_echo(&gateway, Some(&key("alice")), "key").await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn each_route_accepts_only_the_credentials_configured_for_it() {
    let routes = "  routes:\n    v1: [api_key]\n    mcp: [oauth]\n";
    let Some((provider, gateway)) = start(
        "each_route_accepts_only_the_credentials_configured_for_it",
        "",
        routes,
    ) else {
        return;
    };
    let v1_token = provider.token("agent", RESOURCE, "tools:read").await;
    let refused = invoke(&gateway, Some(&v1_token), "echo", json!({"text": "x"})).await;
    assert_eq!(refused.status, 401, "a token on an API-key route");
    let (status, _, body) = mcp_echo(&gateway, Some(&key("alice")), "x").await;
    assert_eq!(status, 401, "an API key on an OAuth route: {body}");

    let mcp_token = provider.token("agent", MCP_RESOURCE, "tools:read").await;
    let (status, _, body) = mcp_echo(&gateway, Some(&mcp_token), "x").await;
    assert_eq!(status, 200, "{body}");
    let answer = invoke(&gateway, Some(&key("alice")), "echo", json!({"text": "x"})).await;
    assert_eq!(answer.status, 200);
}

#[tokio::test]
async fn a_token_is_taken_only_on_the_endpoint_it_was_issued_for() {
    let Some((provider, gateway)) = start(
        "a_token_is_taken_only_on_the_endpoint_it_was_issued_for",
        "",
        "",
    ) else {
        return;
    };
    let v1_token = provider.token("agent", RESOURCE, "tools:read").await;
    let mcp_token = provider.token("agent", MCP_RESOURCE, "tools:read").await;
    assert_eq!(
        invoke(&gateway, Some(&v1_token), "echo", json!({"text": "x"}))
            .await
            .status,
        200
    );
    let (status, challenge, body) = mcp_echo(&gateway, Some(&v1_token), "x").await;
    assert_eq!(status, 401, "a /v1 token on /mcp: {body}");
    let challenge = challenge.expect("a challenge");
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
    assert!(challenge.contains("other endpoint"), "{challenge}");

    let refused = invoke(&gateway, Some(&mcp_token), "echo", json!({"text": "x"})).await;
    assert_eq!(
        refused.status, 401,
        "an /mcp token on /v1: {:?}",
        refused.body
    );
    let (status, _, body) = mcp_echo(&gateway, Some(&mcp_token), "x").await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn a_401_without_credentials_points_to_the_metadata_and_scopes() {
    let extra = "    required_scopes: { mcp: [\"tools:call\"] }\n";
    let Some((_provider, gateway)) = start(
        "a_401_without_credentials_points_to_the_metadata_and_scopes",
        extra,
        "",
    ) else {
        return;
    };
    let (status, challenge, body) = mcp_echo(&gateway, None, "x").await;
    assert_eq!(status, 401, "{body}");
    let challenge = challenge.expect("a WWW-Authenticate header");
    assert_eq!(
        challenge,
        "Bearer resource_metadata=\"https://tools.test/.well-known/oauth-protected-resource/mcp\", scope=\"tools:call\""
    );
    let answer = invoke(&gateway, None, "echo", json!({"text": "x"})).await;
    assert_eq!(answer.status, 401);
    assert_eq!(answer.error_code(), "unauthenticated");
    // `/v1` requires no scope: the challenge names none.
    assert_eq!(
        answer.header("www-authenticate"),
        Some(
            "Bearer resource_metadata=\"https://tools.test/.well-known/oauth-protected-resource\""
        )
    );
}

#[tokio::test]
async fn protected_resource_metadata_names_the_issuer_resource_and_scopes() {
    let extra = "    required_scopes: { mcp: [\"tools:call\"] }\n";
    let Some((provider, gateway)) = start(
        "protected_resource_metadata_names_the_issuer_resource_and_scopes",
        extra,
        "",
    ) else {
        return;
    };
    for (path, resource, scopes) in [
        (
            "/.well-known/oauth-protected-resource",
            RESOURCE,
            Value::Null,
        ),
        (
            "/.well-known/oauth-protected-resource/mcp",
            MCP_RESOURCE,
            json!(["tools:call"]),
        ),
    ] {
        let answer = Answer::read(
            client()
                .get(gateway.url(path))
                .send()
                .await
                .expect("an answer"),
        )
        .await;
        assert_eq!(answer.status, 200, "{path}");
        assert_eq!(answer.body["resource"], resource, "{path}");
        assert_eq!(
            answer.body["authorization_servers"],
            json!([provider.issuer])
        );
        assert_eq!(answer.body["scopes_supported"], scopes, "{path}");
        assert_eq!(answer.body["bearer_methods_supported"], json!(["header"]));
    }
}

/// The `WWW-Authenticate` of a request without a token to `/mcp` and to `/v1`, and the
/// `scopes_supported` of their metadata.
async fn what_a_client_is_told(gateway: &Gateway) -> [(Option<String>, Value); 2] {
    let (status, mcp_challenge, body) = mcp_echo(gateway, None, "x").await;
    assert_eq!(status, 401, "{body}");
    let v1 = invoke(gateway, None, "echo", json!({"text": "x"})).await;
    assert_eq!(v1.status, 401);
    let metadata = |path: &'static str| async move {
        let answer = Answer::read(
            client()
                .get(gateway.url(path))
                .send()
                .await
                .expect("an answer"),
        )
        .await;
        assert_eq!(answer.status, 200, "{path}");
        answer.body["scopes_supported"].clone()
    };
    [
        (
            mcp_challenge,
            metadata("/.well-known/oauth-protected-resource/mcp").await,
        ),
        (
            v1.header("www-authenticate").map(str::to_owned),
            metadata("/.well-known/oauth-protected-resource").await,
        ),
    ]
}

#[tokio::test]
async fn the_challenge_names_only_the_scopes_a_route_requires() {
    // `scope_roles` grants `admin` for `tools:admin` (see `config`); no route requires a
    // scope. MCP clients ask for the scopes the challenge names, else for the metadata's
    // `scopes_supported`: neither may steer them to `tools:admin`.
    let gateway = Gateway::start(&config("http://127.0.0.1:9", "", ""));
    let [(mcp, mcp_scopes), (v1, v1_scopes)] = what_a_client_is_told(&gateway).await;
    assert_eq!(
        mcp.as_deref(),
        Some(
            "Bearer resource_metadata=\"https://tools.test/.well-known/oauth-protected-resource/mcp\""
        )
    );
    assert_eq!(
        v1.as_deref(),
        Some(
            "Bearer resource_metadata=\"https://tools.test/.well-known/oauth-protected-resource\""
        )
    );
    assert_eq!((mcp_scopes, v1_scopes), (Value::Null, Value::Null));

    // A scope required on `/mcp` is named there, and only there; a tool's scope is asked
    // for when the tool is called (403 `insufficient_scope`), not up front.
    let gateway = Gateway::start(&config(
        "http://127.0.0.1:9",
        "    required_scopes: { mcp: [\"tools:call\"], tools: { calculator: [\"tools:calc\"] } }\n",
        "",
    ));
    let [(mcp, mcp_scopes), (v1, v1_scopes)] = what_a_client_is_told(&gateway).await;
    assert!(
        mcp.as_deref()
            .is_some_and(|c| c.ends_with(", scope=\"tools:call\"")),
        "{mcp:?}"
    );
    assert!(
        v1.as_deref().is_some_and(|c| !c.contains("scope=")),
        "{v1:?}"
    );
    assert_eq!(mcp_scopes, json!(["tools:call"]));
    assert_eq!(v1_scopes, Value::Null);
}

#[tokio::test]
async fn an_operator_advertises_more_scopes_with_scopes_supported_not_in_the_challenge() {
    let gateway = Gateway::start(&config(
        "http://127.0.0.1:9",
        "    required_scopes: { mcp: [\"tools:call\"] }\n    scopes_supported: [\"tools:read\", \"tools:call\"]\n",
        "",
    ));
    let [(mcp, mcp_scopes), (v1, v1_scopes)] = what_a_client_is_told(&gateway).await;
    assert!(
        mcp.as_deref()
            .is_some_and(|c| c.ends_with(", scope=\"tools:call\"")),
        "{mcp:?}"
    );
    assert!(
        v1.as_deref().is_some_and(|c| !c.contains("scope=")),
        "{v1:?}"
    );
    assert_eq!(mcp_scopes, json!(["tools:read", "tools:call"]));
    assert_eq!(v1_scopes, json!(["tools:read", "tools:call"]));
}

#[tokio::test]
async fn a_token_without_a_required_scope_is_a_403_naming_the_scope() {
    let extra = "    required_scopes: { mcp: [\"tools:call\"] }\n";
    let Some((provider, gateway)) = start(
        "a_token_without_a_required_scope_is_a_403_naming_the_scope",
        extra,
        "",
    ) else {
        return;
    };
    let reader = provider.token("agent", MCP_RESOURCE, "tools:read").await;
    let (status, challenge, body) = mcp_echo(&gateway, Some(&reader), "x").await;
    assert_eq!(status, 403, "{body}");
    let challenge = challenge.expect("a WWW-Authenticate header");
    assert!(
        challenge.starts_with("Bearer error=\"insufficient_scope\", scope=\"tools:call\""),
        "{challenge}"
    );
    assert!(body.contains("insufficient_scope"), "{body}");

    let caller = provider
        .token("agent", MCP_RESOURCE, "tools:read tools:call")
        .await;
    let (status, _, body) = mcp_echo(&gateway, Some(&caller), "x").await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn the_metadata_is_not_found_without_oauth() {
    let gateway = Gateway::start("tools:\n  builtin: [echo]\n");
    let answer = Answer::read(
        client()
            .get(gateway.url("/.well-known/oauth-protected-resource"))
            .send()
            .await
            .expect("an answer"),
    )
    .await;
    assert_eq!(answer.status, 404);
}

#[test]
fn check_prints_which_identity_each_route_and_upstream_uses() {
    // `check` does not contact the issuer: any address will do.
    let text = config(
        "http://127.0.0.1:9",
        "    required_scopes: { mcp: [\"tools:call\"] }\n",
        "  routes:\n    v1: [api_key]\n",
    );
    let (status, out, err) = check(&text);
    assert!(status.success(), "{err}");
    assert!(out.contains("  /v1    API keys (1 user)\n"), "{out}");
    assert!(
        out.contains(
            "  /mcp   API keys (1 user); or OAuth tokens from http://127.0.0.1:9 for https://tools.test/mcp (RS256), scopes required: tools:call\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("metadata: https://tools.test/.well-known/oauth-protected-resource and"),
        "{out}"
    );
}

#[tokio::test]
async fn a_token_without_a_tools_scope_cannot_call_or_see_it_and_is_told_to_step_up() {
    let extra = "    required_scopes: { tools: { calculator: [\"tools:call\"] } }\n";
    let Some((provider, gateway)) = start(
        "a_token_without_a_tools_scope_cannot_call_or_see_it_and_is_told_to_step_up",
        extra,
        "",
    ) else {
        return;
    };
    // `admin` may call anything by the authorization rules; the scope still decides.
    let reader = provider.token("admin", RESOURCE, "tools:read").await;
    let refused = invoke(
        &gateway,
        Some(&reader),
        "calculator",
        json!({"expression": "6*7"}),
    )
    .await;
    assert_eq!(refused.status, 403, "{:?}", refused.body);
    assert_eq!(refused.error_code(), "insufficient_scope");
    assert_eq!(
        refused.header("www-authenticate"),
        Some(
            "Bearer error=\"insufficient_scope\", scope=\"tools:call\", resource_metadata=\"https://tools.test/.well-known/oauth-protected-resource\""
        )
    );
    let listed = Answer::read(
        client()
            .get(gateway.url("/v1/tools"))
            .bearer_auth(&reader)
            .send()
            .await
            .expect("an answer"),
    )
    .await;
    let names = listed.body.to_string();
    assert!(names.contains("\"echo\""), "{names}");
    assert!(!names.contains("calculator"), "{names}");

    // Over MCP the tool is not listed to such a caller; a 2026-07-28 call of it (named in
    // its Mcp-Method and Mcp-Name headers) is answered 403 with the challenge, so the
    // client can step up.
    let mcp_reader = provider.token("admin", MCP_RESOURCE, "tools:read").await;
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {
            "name": "calculator", "arguments": {"expression": "1+1"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "identity-tests", "version": "0"},
            },
        },
    });
    let response = client()
        .post(gateway.url("/mcp"))
        .bearer_auth(&mcp_reader)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "calculator")
        .body(body.to_string())
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status().as_u16(), 403);
    assert_eq!(
        response
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok()),
        Some(
            "Bearer error=\"insufficient_scope\", scope=\"tools:call\", resource_metadata=\"https://tools.test/.well-known/oauth-protected-resource/mcp\""
        )
    );
    let text = response.text().await.expect("a body");
    assert!(text.contains("\"code\":\"insufficient_scope\""), "{text}");
    // With the scope, the same call goes through.
    let caller = provider
        .token("admin", MCP_RESOURCE, "tools:read tools:call")
        .await;
    let (status, _, text) = crate::mcp_call(
        &gateway,
        Some(&caller),
        "calculator",
        json!({"expression": "1+1"}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("\"result\""), "{text}");

    let caller = provider
        .token("admin", RESOURCE, "tools:read tools:call")
        .await;
    let answer = invoke(
        &gateway,
        Some(&caller),
        "calculator",
        json!({"expression": "6*7"}),
    )
    .await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    // API keys are held to the authorization rules, not to scopes.
    let alice = invoke(
        &gateway,
        Some(&key("alice")),
        "calculator",
        json!({"expression": "1"}),
    )
    .await;
    assert_eq!(alice.status, 200, "{:?}", alice.body);
}
