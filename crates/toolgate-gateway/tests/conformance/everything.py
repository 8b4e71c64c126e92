"""A conformant upstream for the MCP conformance harness (`run.sh` beside this file).

An MCP server on the official Python SDK, streamable HTTP at `http://127.0.0.1:PORT/mcp`,
with the tools, resources, resource template, prompts, completion and logging that the
server scenarios of `@modelcontextprotocol/conformance` call by name. It serves both
protocol eras on one endpoint: 2025-11-25 sessions (initialize handshake; sampling and
elicitation as server-to-client requests) and 2026-07-28 stateless requests
(`server/discover`, per-request `_meta`, `subscriptions/listen`, and input-required
results instead of server-to-client requests).

Usage: python3 everything.py PORT       (or EVERYTHING_PORT=PORT; 0 picks a free port)

It binds 127.0.0.1 only, and prints `everything listening on http://127.0.0.1:PORT/mcp`
once the port is bound.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import mcp_types as types
import uvicorn
from mcp.server.caching import CacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.mcpserver import RequestStateBoundary, RequestStateSecurity
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.subscriptions import PromptsListChanged, ResourceUpdated, ToolsListChanged
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

# Logging, sampling and roots are deprecated from 2026-07-28 on, but the 2025-11-25
# scenarios exercise exactly them; the SDK's warnings would only be noise here.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

NAME = "toolgate-conformance-everything"

# A 1x1 PNG and a minimal WAV, as the image and audio scenarios expect some.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="

LOG_LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]

Context = ServerRequestContext[Any, Any]
CallParams = types.CallToolRequestParams
JSON = dict[str, Any]


def text(value: str) -> JSON:
    return {"type": "text", "text": value}


def tool_result(*content: JSON, is_error: bool = False) -> JSON:
    result: JSON = {"content": list(content)}
    if is_error:
        result["isError"] = True
    return result


def string_schema(**properties: str) -> JSON:
    """An object schema whose properties are all required strings, described by the values."""
    return {
        "type": "object",
        "properties": {name: {"type": "string", "description": d} for name, d in properties.items()},
        "required": list(properties),
    }


EMPTY_SCHEMA: JSON = {"type": "object", "properties": {}}


def is_modern(ctx: Context) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


# ---------------------------------------------------------------------------------------
# Tools. `@tool` records each one once: its listing and its handler come from the same
# place, so tools/list and tools/call cannot disagree.


@dataclass(frozen=True)
class ToolEntry:
    listing: JSON
    run: Callable[[Context, CallParams], Awaitable[JSON]]
    modern_only: bool


TOOLS: dict[str, ToolEntry] = {}


def tool(description: str, schema: JSON | None = None, *, modern_only: bool = False):
    """Registers the decorated coroutine as the tool named after it.

    `modern_only` tools answer with input-required results or rely on per-request
    `_meta`, which exist from 2026-07-28 on; a 2025-11-25 session does not list them.
    """

    def register(run):
        listing = {"name": run.__name__, "description": description, "inputSchema": schema or EMPTY_SCHEMA}
        TOOLS[run.__name__] = ToolEntry(listing, run, modern_only)
        return run

    return register


def arguments(params: CallParams) -> JSON:
    return params.arguments or {}


@tool("Returns one text block.")
async def test_simple_text(ctx: Context, params: CallParams) -> JSON:
    return tool_result(text("This is a simple text response for testing."))


@tool("Returns one image block (a 1x1 PNG).")
async def test_image_content(ctx: Context, params: CallParams) -> JSON:
    return tool_result({"type": "image", "data": PNG, "mimeType": "image/png"})


@tool("Returns one audio block (a minimal WAV).")
async def test_audio_content(ctx: Context, params: CallParams) -> JSON:
    return tool_result({"type": "audio", "data": WAV, "mimeType": "audio/wav"})


EMBEDDED = {
    "uri": "test://embedded-resource",
    "mimeType": "text/plain",
    "text": "This is an embedded resource content.",
}


@tool("Returns one embedded text resource.")
async def test_embedded_resource(ctx: Context, params: CallParams) -> JSON:
    return tool_result({"type": "resource", "resource": EMBEDDED})


@tool("Returns a text, an image and an embedded resource block.")
async def test_multiple_content_types(ctx: Context, params: CallParams) -> JSON:
    mixed = {
        "uri": "test://mixed-content-resource",
        "mimeType": "application/json",
        "text": '{"test":"data","value":123}',
    }
    return tool_result(
        text("Multiple content types test:"),
        {"type": "image", "data": PNG, "mimeType": "image/png"},
        {"type": "resource", "resource": mixed},
    )


@tool("Always fails: a tool result with isError.")
async def test_error_handling(ctx: Context, params: CallParams) -> JSON:
    return tool_result(text("This tool intentionally returns an error for testing"), is_error=True)


@tool("Sends three info log messages, 50 ms apart, while it runs.")
async def test_tool_with_logging(ctx: Context, params: CallParams) -> JSON:
    messages = ["Tool execution started", "Tool processing data", "Tool execution completed"]
    for step, message in enumerate(messages):
        if step:
            await asyncio.sleep(0.05)
        await log(ctx, "info", message)
    return tool_result(text("Tool with logging executed successfully"))


@tool("Reports progress 0, 50 and 100 of 100 against the caller's progress token.")
async def test_tool_with_progress(ctx: Context, params: CallParams) -> JSON:
    for step, progress in enumerate([0, 50, 100]):
        if step:
            await asyncio.sleep(0.05)
        await ctx.session.report_progress(progress, 100, f"Completed step {progress} of 100")
    token = (ctx.meta or {}).get("progress_token")
    return tool_result(text(f"reported progress to token {token!r}"))


@tool(
    "Asks the client's model to answer `prompt` (sampling/createMessage).",
    string_schema(prompt="The prompt to send to the LLM"),
)
async def test_sampling(ctx: Context, params: CallParams) -> JSON:
    request = {
        "messages": [{"role": "user", "content": text(arguments(params).get("prompt", ""))}],
        "maxTokens": 100,
    }
    answer = await ask_client(ctx, types.CreateMessageRequest, types.CreateMessageResult, request)
    content = answer.content if isinstance(answer.content, list) else [answer.content]
    said = " ".join(block.text for block in content if isinstance(block, types.TextContent))
    return tool_result(text(f"LLM response: {said}"))


@tool(
    "Asks the user to answer `message` (elicitation/create).",
    string_schema(message="The message to show the user"),
)
async def test_elicitation(ctx: Context, params: CallParams) -> JSON:
    schema = string_schema(response="User's response")
    return await elicit(ctx, arguments(params).get("message", ""), schema)


@tool("Elicits a form whose fields of every primitive type carry defaults (SEP-1034).")
async def test_elicitation_sep1034_defaults(ctx: Context, params: CallParams) -> JSON:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "User name", "default": "John Doe"},
            "age": {"type": "integer", "description": "User age", "default": 30},
            "score": {"type": "number", "description": "User score", "default": 95.5},
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active",
            },
            "verified": {"type": "boolean", "description": "Verification status", "default": True},
        },
        "required": [],
    }
    return await elicit(ctx, "Please review and update the form fields with defaults", schema)


@tool("Elicits a form with the five enum shapes of SEP-1330.")
async def test_elicitation_sep1330_enums(ctx: Context, params: CallParams) -> JSON:
    def titled(prefix: str) -> list[dict[str, str]]:
        return [
            {"const": f"value{n}", "title": f"{word} {prefix}"}
            for n, word in ((1, "First"), (2, "Second"), (3, "Third"))
        ]

    schema = {
        "type": "object",
        "properties": {
            "untitledSingle": {
                "type": "string",
                "description": "Pick one",
                "enum": ["option1", "option2", "option3"],
            },
            "titledSingle": {
                "type": "string",
                "description": "Pick one, with titles",
                "oneOf": titled("Option"),
            },
            "legacyEnum": {
                "type": "string",
                "description": "Pick one (legacy enumNames)",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {
                "type": "array",
                "description": "Pick some",
                "minItems": 1,
                "maxItems": 3,
                "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
            },
            "titledMulti": {
                "type": "array",
                "description": "Pick some, with titles",
                "minItems": 1,
                "maxItems": 3,
                "items": {"anyOf": titled("Choice")},
            },
        },
        "required": [],
    }
    return await elicit(ctx, "Please select options from the enum fields", schema)


JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


@tool(
    "Takes an input schema that uses JSON Schema 2020-12 keywords (SEP-1613, SEP-2106).", JSON_SCHEMA_2020_12
)
async def json_schema_2020_12_tool(ctx: Context, params: CallParams) -> JSON:
    return tool_result(text(f"called with {json.dumps(arguments(params), sort_keys=True)}"))


# -- 2026-07-28 only: per-request capabilities and logging, listen streams, and
# -- input-required results (SEP-2322), which replace server-to-client requests.


@tool("Needs the sampling capability; without it, error -32021.", modern_only=True)
async def test_missing_capability(ctx: Context, params: CallParams) -> JSON:
    require_capability(ctx, "sampling")
    return tool_result(text("the client declared sampling"))


@tool("Asks for a confirmation in its response stream, as an input-required result.", modern_only=True)
async def test_streaming_elicitation(ctx: Context, params: CallParams) -> JSON:
    require_capability(ctx, "elicitation")
    if "confirm" in (params.input_responses or {}):
        return tool_result(text("Streaming complete"))
    return input_required({"confirm": elicitation_request("Continue?", {"ok": {"type": "boolean"}})})


@tool(
    "Logs one info message, which reaches the client only if the request set a log level.", modern_only=True
)
async def test_logging_tool(ctx: Context, params: CallParams) -> JSON:
    await log(ctx, "info", "Diagnostic trace logging activated")
    return tool_result(text("Logging evaluated"))


@tool("Announces a tools list change on subscriptions/listen streams.", modern_only=True)
async def test_trigger_tool_change(ctx: Context, params: CallParams) -> JSON:
    await SUBSCRIPTIONS.publish(ToolsListChanged())
    return tool_result(text("tools list change announced"))


@tool("Announces a prompts list change on subscriptions/listen streams.", modern_only=True)
async def test_trigger_prompt_change(ctx: Context, params: CallParams) -> JSON:
    await SUBSCRIPTIONS.publish(PromptsListChanged())
    return tool_result(text("prompts list change announced"))


@tool("Changes `test://watched-resource`: its subscribers are told (resources/updated).")
async def test_touch_watched_resource(ctx: Context, params: CallParams) -> JSON:
    uri = "test://watched-resource"
    await SUBSCRIPTIONS.publish(ResourceUpdated(uri=uri))
    for session in list(SUBSCRIBERS.get(uri, [])):
        try:
            await session.send_resource_updated(uri)
        except Exception:  # a session that is gone
            SUBSCRIBERS[uri].remove(session)
    return tool_result(text("watched resource touched"))


REGION_SCHEMA = {
    "type": "object",
    "properties": {"region": {"type": "string", "description": "Where to run", "x-mcp-header": "Region"}},
    "required": ["region"],
}


@tool(
    "Mirrors its `region` argument in an `Mcp-Param-Region` header (SEP-2243).",
    REGION_SCHEMA,
    modern_only=True,
)
async def test_custom_header(ctx: Context, params: CallParams) -> JSON:
    # The SDK has already checked the header against the argument (get_tool_input_schema).
    return tool_result(text(f"region {arguments(params).get('region')}"))


def elicitation_request(message: str, properties: JSON) -> JSON:
    schema = {"type": "object", "properties": properties, "required": list(properties)}
    return {"method": "elicitation/create", "params": {"message": message, "requestedSchema": schema}}


def sampling_request(prompt: str, max_tokens: int) -> JSON:
    return {
        "method": "sampling/createMessage",
        "params": {"messages": [{"role": "user", "content": text(prompt)}], "maxTokens": max_tokens},
    }


ROOTS_REQUEST = {"method": "roots/list", "params": {}}


def input_required(requests: JSON, state: JSON | None = None) -> JSON:
    """An input-required result; `state` comes back, sealed by the SDK's boundary, on the retry."""
    result: JSON = {"resultType": "input_required", "inputRequests": requests}
    if state is not None:
        result["requestState"] = json.dumps(state)
    return result


def answered(params: CallParams | types.GetPromptRequestParams, key: str) -> JSON | None:
    """The client's answer to input request `key`, as a plain JSON object."""
    response = (params.input_responses or {}).get(key)
    if response is None:
        return None
    if hasattr(response, "model_dump"):
        return response.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dict(response)


def form_field(response: JSON | None, name: str) -> Any:
    return ((response or {}).get("content") or {}).get(name)


def state_of(params: CallParams) -> JSON:
    return json.loads(params.request_state) if params.request_state else {}


@tool("MRTR: asks for the user's name by elicitation, then greets them.", modern_only=True)
async def test_input_required_result_elicitation(ctx: Context, params: CallParams) -> JSON:
    if (response := answered(params, "user_name")) is not None:
        return tool_result(text(f"Hello, {form_field(response, 'name')}!"))
    return input_required(
        {"user_name": elicitation_request("What is your name?", {"name": {"type": "string"}})}
    )


@tool("MRTR: asks the client's model a question by sampling.", modern_only=True)
async def test_input_required_result_sampling(ctx: Context, params: CallParams) -> JSON:
    if (response := answered(params, "sample_request")) is not None:
        content = response.get("content") or {}
        said = content.get("text") if isinstance(content, dict) else None
        return tool_result(text(f"Sampling result: {said}"))
    return input_required({"sample_request": sampling_request("What is the capital of France?", 100)})


@tool("MRTR: asks for the client's roots.", modern_only=True)
async def test_input_required_result_list_roots(ctx: Context, params: CallParams) -> JSON:
    if (response := answered(params, "roots_request")) is not None:
        return tool_result(text(f"Found {len(response.get('roots') or [])} root(s)"))
    return input_required({"roots_request": ROOTS_REQUEST})


@tool("MRTR: asks for a confirmation and carries requestState to the retry.", modern_only=True)
async def test_input_required_result_request_state(ctx: Context, params: CallParams) -> JSON:
    confirm = answered(params, "confirm")
    if state_of(params).get("kind") == "request-state" and form_field(confirm, "ok") is True:
        return tool_result(text("state-ok: requestState validated"))
    request = elicitation_request("Please confirm", {"ok": {"type": "boolean"}})
    return input_required({"confirm": request}, {"kind": "request-state"})


@tool("MRTR: asks for an elicitation, a sampling and the roots in one round.", modern_only=True)
async def test_input_required_result_multiple_inputs(ctx: Context, params: CallParams) -> JSON:
    name, greeting, roots = (answered(params, key) for key in ("user_name", "greeting", "client_roots"))
    if state_of(params).get("kind") == "multiple-inputs" and None not in (name, greeting, roots):
        said = (greeting.get("content") or {}).get("text")
        count = len(roots.get("roots") or [])
        return tool_result(text(f"Name: {form_field(name, 'name')}; Greeting: {said}; Roots: {count}"))
    requests = {
        "user_name": elicitation_request("What is your name?", {"name": {"type": "string"}}),
        "greeting": sampling_request("Generate a greeting", 50),
        "client_roots": ROOTS_REQUEST,
    }
    return input_required(requests, {"kind": "multiple-inputs"})


@tool("MRTR: two rounds, a name and then a colour, the name carried in requestState.", modern_only=True)
async def test_input_required_result_multi_round(ctx: Context, params: CallParams) -> JSON:
    state = state_of(params)
    if state.get("round") == 1 and (step1 := answered(params, "step1")) is not None:
        request = elicitation_request("Step 2: What is your favorite color?", {"color": {"type": "string"}})
        return input_required({"step2": request}, {"round": 2, "name": form_field(step1, "name")})
    if state.get("round") == 2 and (step2 := answered(params, "step2")) is not None:
        return tool_result(
            text(f"Multi-round complete for {state.get('name')} who likes {form_field(step2, 'color')}")
        )
    request = elicitation_request("Step 1: What is your name?", {"name": {"type": "string"}})
    return input_required({"step1": request}, {"round": 1})


@tool("MRTR: requestState is sealed, so a tampered one is refused.", modern_only=True)
async def test_input_required_result_tampered_state(ctx: Context, params: CallParams) -> JSON:
    # The SDK's RequestStateBoundary verifies the echo before this handler runs.
    if state_of(params).get("kind") == "tamper-test" and answered(params, "confirm") is not None:
        return tool_result(text("integrity-ok: state verified"))
    request = elicitation_request("Please confirm", {"ok": {"type": "boolean"}})
    return input_required({"confirm": request}, {"kind": "tamper-test"})


@tool("MRTR: asks only for what the client declared it can answer.", modern_only=True)
async def test_input_required_result_capabilities(ctx: Context, params: CallParams) -> JSON:
    if params.input_responses:
        return tool_result(text(f"capabilities-ok: received {','.join(sorted(params.input_responses))}"))
    caps = ctx.session.client_capabilities
    requests: JSON = {}
    if caps is not None and caps.elicitation is not None:
        requests["elicit_input"] = elicitation_request("Elicitation input", {"value": {"type": "string"}})
    if caps is not None and caps.sampling is not None:
        requests["sample_input"] = sampling_request("Sample request", 50)
    if not requests:
        return tool_result(text("No supported capabilities declared"))
    return input_required(requests, {"kind": "capabilities-test"})


# ---------------------------------------------------------------------------------------
# Talking back to the client: logging, and (2025-11-25 only) sampling and elicitation
# as requests on the tool call's own stream.

LOG_LEVEL: dict[str | None, str] = {}


def session_key(ctx: Context) -> str | None:
    headers = getattr(ctx.request, "headers", None)
    return headers.get("mcp-session-id") if headers is not None else None


async def log(ctx: Context, level: str, message: str) -> None:
    """A `notifications/message` on the request's stream, at or above the session's level.

    From 2026-07-28 on the SDK itself drops it unless the request's `_meta` asked for logs.
    """
    if not is_modern(ctx):
        floor = LOG_LEVEL.get(session_key(ctx), "debug")
        if LOG_LEVELS.index(level) < LOG_LEVELS.index(floor):
            return
    await ctx.session.send_log_message(level, message, logger=NAME, related_request_id=ctx.request_id)


async def ask_client(ctx: Context, request_type: type, result_type: type, params: JSON):
    """Sends a server-to-client request related to the current call and waits for the answer."""
    method = request_type.model_fields["method"].default
    request = request_type.model_validate({"method": method, "params": params})
    metadata = ServerMessageMetadata(related_request_id=ctx.request_id)
    return await ctx.session.send_request(request, result_type, metadata=metadata)


async def elicit(ctx: Context, message: str, schema: JSON) -> JSON:
    answer = await ask_client(
        ctx, types.ElicitRequest, types.ElicitResult, {"message": message, "requestedSchema": schema}
    )
    return tool_result(
        text(f"Elicitation completed: action={answer.action}, content={json.dumps(answer.content or {})}")
    )


def require_capability(ctx: Context, capability: str) -> None:
    caps = ctx.session.client_capabilities
    if caps is None or getattr(caps, capability) is None:
        raise MCPError(
            code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
            message=f"this tool needs the client capability `{capability}`",
            data={"requiredCapabilities": {capability: {}}},
        )


# ---------------------------------------------------------------------------------------
# Resources: three fixed ones and a template.

STATIC_TEXT = "This is the content of the static text resource."
WATCHED_TEXT = "Watched resource content"

RESOURCES: dict[str, JSON] = {
    "test://static-text": {
        "listing": {"name": "static-text", "title": "Static Text Resource", "mimeType": "text/plain"},
        "contents": {"mimeType": "text/plain", "text": STATIC_TEXT},
    },
    "test://static-binary": {
        "listing": {
            "name": "static-binary",
            "title": "Static Binary Resource (a PNG)",
            "mimeType": "image/png",
        },
        "contents": {"mimeType": "image/png", "blob": PNG},
    },
    "test://watched-resource": {
        "listing": {"name": "watched-resource", "title": "Watched Resource", "mimeType": "text/plain"},
        "contents": {"mimeType": "text/plain", "text": WATCHED_TEXT},
    },
}

TEMPLATE = {
    "uriTemplate": "test://template/{id}/data",
    "name": "template",
    "title": "Resource Template",
    "description": "JSON data for the id in the URI",
    "mimeType": "application/json",
}
TEMPLATE_PREFIX, TEMPLATE_SUFFIX = "test://template/", "/data"

SUBSCRIBED: set[str] = set()
# The 2025-11-25 sessions subscribed to each resource, for its updates.
SUBSCRIBERS: dict[str, list[Any]] = {}


async def list_resources(ctx: Context, params: types.PaginatedRequestParams | None) -> JSON:
    return {"resources": [{"uri": uri, **entry["listing"]} for uri, entry in RESOURCES.items()]}


async def list_resource_templates(ctx: Context, params: types.PaginatedRequestParams | None) -> JSON:
    return {"resourceTemplates": [TEMPLATE]}


async def read_resource(ctx: Context, params: types.ReadResourceRequestParams) -> JSON:
    uri = str(params.uri)
    if uri in RESOURCES:
        return {"contents": [{"uri": uri, **RESOURCES[uri]["contents"]}]}
    if uri.startswith(TEMPLATE_PREFIX) and uri.endswith(TEMPLATE_SUFFIX):
        item = uri[len(TEMPLATE_PREFIX) : -len(TEMPLATE_SUFFIX)]
        if item and "/" not in item:
            data = {"id": item, "templateTest": True, "data": f"Data for ID: {item}"}
            return {"contents": [{"uri": uri, "mimeType": "application/json", "text": json.dumps(data)}]}
    # SEP-2164: an unknown resource is invalid params, with the URI in `data`.
    raise MCPError(code=types.INVALID_PARAMS, message=f"no resource {uri}", data={"uri": uri})


async def subscribe(ctx: Context, params: types.SubscribeRequestParams) -> JSON:
    SUBSCRIBED.add(str(params.uri))
    SUBSCRIBERS.setdefault(str(params.uri), []).append(ctx.session)
    return {}


async def unsubscribe(ctx: Context, params: types.UnsubscribeRequestParams) -> JSON:
    SUBSCRIBED.discard(str(params.uri))
    sessions = SUBSCRIBERS.get(str(params.uri), [])
    if ctx.session in sessions:
        sessions.remove(ctx.session)
    return {}


# ---------------------------------------------------------------------------------------
# Prompts.

PROMPT_ARGUMENTS = {
    "test_prompt_with_arguments": [
        {"name": "arg1", "description": "First test argument", "required": True},
        {"name": "arg2", "description": "Second test argument", "required": True},
    ],
    "test_prompt_with_embedded_resource": [
        {"name": "resourceUri", "description": "URI of the resource to embed", "required": True},
    ],
}

PROMPTS: list[JSON] = [
    {
        "name": "test_simple_prompt",
        "title": "Simple Test Prompt",
        "description": "A prompt without arguments",
    },
    {
        "name": "test_prompt_with_arguments",
        "title": "Prompt With Arguments",
        "description": "A prompt with two required arguments",
        "arguments": PROMPT_ARGUMENTS["test_prompt_with_arguments"],
    },
    {
        "name": "test_prompt_with_embedded_resource",
        "title": "Prompt With Embedded Resource",
        "description": "A prompt that embeds the resource it is given",
        "arguments": PROMPT_ARGUMENTS["test_prompt_with_embedded_resource"],
    },
    {"name": "test_prompt_with_image", "title": "Prompt With Image", "description": "A prompt with an image"},
]
MODERN_PROMPTS: list[JSON] = [
    {
        "name": "test_input_required_result_prompt",
        "description": "MRTR: asks for context by elicitation first",
    },
]


def user(content: JSON) -> JSON:
    return {"role": "user", "content": content}


async def list_prompts(ctx: Context, params: types.PaginatedRequestParams | None) -> JSON:
    return {"prompts": PROMPTS + (MODERN_PROMPTS if is_modern(ctx) else [])}


async def get_prompt(ctx: Context, params: types.GetPromptRequestParams) -> JSON:
    args = params.arguments or {}
    missing = [
        a["name"]
        for a in PROMPT_ARGUMENTS.get(params.name, [])
        if a.get("required") and a["name"] not in args
    ]
    if missing:
        raise MCPError(code=types.INVALID_PARAMS, message=f"missing prompt arguments: {', '.join(missing)}")
    match params.name:
        case "test_simple_prompt":
            return {"messages": [user(text("This is a simple prompt for testing."))]}
        case "test_prompt_with_arguments":
            return {
                "messages": [
                    user(text(f"Prompt with arguments: arg1='{args['arg1']}', arg2='{args['arg2']}'"))
                ]
            }
        case "test_prompt_with_embedded_resource":
            resource = {
                "uri": args["resourceUri"],
                "mimeType": "text/plain",
                "text": "Embedded resource content for testing.",
            }
            return {
                "messages": [
                    user({"type": "resource", "resource": resource}),
                    user(text("Please process the embedded resource above.")),
                ]
            }
        case "test_prompt_with_image":
            return {
                "messages": [
                    user({"type": "image", "data": PNG, "mimeType": "image/png"}),
                    user(text("Please analyze the image above.")),
                ]
            }
        case "test_input_required_result_prompt" if is_modern(ctx):
            if (response := answered(params, "user_context")) is not None:
                return {"messages": [user(text(f"Prompt with context: {form_field(response, 'context')}"))]}
            request = elicitation_request(
                "What context should the prompt use?", {"context": {"type": "string"}}
            )
            return input_required({"user_context": request})
    raise MCPError(code=types.INVALID_PARAMS, message=f"no prompt named {params.name}")


# ---------------------------------------------------------------------------------------
# Completion and logging/setLevel.

SUGGESTIONS = ["paris", "park", "party", "test", "testing", "tested"]


async def complete(ctx: Context, params: types.CompleteRequestParams) -> JSON:
    ref, argument = params.ref, params.argument
    known = isinstance(ref, types.PromptReference) and any(
        a["name"] == argument.name for a in PROMPT_ARGUMENTS.get(ref.name, [])
    )
    values = [s for s in SUGGESTIONS if s.startswith(argument.value)] if known else []
    return {"completion": {"values": values, "total": len(values), "hasMore": False}}


async def set_level(ctx: Context, params: types.SetLevelRequestParams) -> JSON:
    LOG_LEVEL[session_key(ctx)] = params.level
    return {}


# ---------------------------------------------------------------------------------------
# Wiring.


async def list_tools(ctx: Context, params: types.PaginatedRequestParams | None) -> JSON:
    modern = is_modern(ctx)
    return {"tools": [entry.listing for entry in TOOLS.values() if modern or not entry.modern_only]}


async def call_tool(ctx: Context, params: CallParams) -> JSON:
    entry = TOOLS.get(params.name)
    if entry is None or (entry.modern_only and not is_modern(ctx)):
        raise MCPError(code=types.INVALID_PARAMS, message=f"no tool named {params.name}")
    return await entry.run(ctx, params)


def tool_input_schema(name: str) -> JSON | None:
    entry = TOOLS.get(name)
    return entry.listing["inputSchema"] if entry is not None else None


SUBSCRIPTIONS = InMemorySubscriptionBus()

LISTED = CacheHint(ttl_ms=300_000, scope="public")


def complete_by_default(handler):
    """From 2026-07-28 on every result names its `resultType`; ours are `complete` unless
    they say otherwise (the SDK checks results it is handed as plain JSON, and fills
    this only for results it builds itself)."""

    async def answer(ctx: Context, params: Any) -> JSON:
        result = await handler(ctx, params)
        if is_modern(ctx):
            result.setdefault("resultType", "complete")
        return result

    return answer


def build_server() -> Server:
    handlers = {
        "on_list_tools": list_tools,
        "on_call_tool": call_tool,
        "on_list_resources": list_resources,
        "on_list_resource_templates": list_resource_templates,
        "on_read_resource": read_resource,
        "on_subscribe_resource": subscribe,
        "on_unsubscribe_resource": unsubscribe,
        "on_list_prompts": list_prompts,
        "on_get_prompt": get_prompt,
        "on_completion": complete,
        "on_set_logging_level": set_level,
    }
    server = Server(
        NAME,
        version="1.0.0",
        cache_hints={
            "tools/list": LISTED,
            "prompts/list": LISTED,
            "resources/list": LISTED,
            "resources/templates/list": LISTED,
            "resources/read": CacheHint(ttl_ms=300_000, scope="private"),
        },
        get_tool_input_schema=tool_input_schema,
        on_subscriptions_listen=ListenHandler(SUBSCRIPTIONS),
        **{name: complete_by_default(handler) for name, handler in handlers.items()},
    )
    # Seals requestState on the way out and verifies it on the way back, so MRTR
    # handlers only ever see state they minted (the tampered-state scenario).
    server.middleware.append(RequestStateBoundary(RequestStateSecurity.ephemeral(), default_audience=NAME))
    return server


def port_from_args() -> int:
    raw = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("EVERYTHING_PORT", "0")
    try:
        return int(raw)
    except ValueError:
        sys.exit(f"usage: {sys.argv[0]} PORT (a number; 0 picks a free port), not {raw!r}")


def main() -> None:
    app = build_server().streamable_http_app(host="127.0.0.1")
    # Bound and listening before the line is printed, so a caller that reads the port
    # from it can connect at once (with port 0 there is no race for a free port).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port_from_args()))
    sock.listen(128)
    print(f"everything listening on http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
