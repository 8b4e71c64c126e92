"""An MCP server (stdio, official Python SDK, low-level API) for the paths a caller takes
around `tools/call`: a prompt and a resource template whose argument completions carry an
email address, and a resource that, once subscribed, is updated every 200 ms for as long
as the subscription lasts.

Every `resources/subscribe`, `resources/unsubscribe`, `resources/list`, `resources/read`
and `completion/complete` it receives is written as one line (`subscribe URI`,
`unsubscribe URI`, `list`, `read URI`, `complete REF`) to the file `PATHS_EVENTS` names, so
a test can tell what reached the upstream.
"""

from __future__ import annotations

import asyncio
import os
import warnings
from typing import Any

import anyio
import mcp_types as types
from mcp.server.caching import CacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

Context = ServerRequestContext[Any, Any]
JSON = dict[str, Any]

WATCHED = "paths://watched"
TEMPLATE = "paths://item/{id}"
NAMES = ["ann@example.com", "annabel", "bob"]

# The update loops of the subscribed resources, by URI.
LOOPS: dict[str, asyncio.Task] = {}


def event(line: str) -> None:
    path = os.environ.get("PATHS_EVENTS")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def answer(ctx: Context, result: JSON) -> JSON:
    # From 2026-07-28 on, every result names its `resultType`.
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        result.setdefault("resultType", "complete")
    return result


async def list_tools(ctx: Context, params: Any) -> JSON:
    return answer(ctx, {"tools": []})


async def list_prompts(ctx: Context, params: Any) -> JSON:
    prompt = {
        "name": "greet",
        "description": "Greets someone by name.",
        "arguments": [{"name": "name", "description": "Who to greet", "required": True}],
    }
    return answer(ctx, {"prompts": [prompt]})


async def get_prompt(ctx: Context, params: types.GetPromptRequestParams) -> JSON:
    name = (params.arguments or {}).get("name", "")
    message = {"role": "user", "content": {"type": "text", "text": f"Say hello to {name}."}}
    return answer(ctx, {"messages": [message]})


async def complete(ctx: Context, params: types.CompleteRequestParams) -> JSON:
    ref = params.ref
    which = ref.name if isinstance(ref, types.PromptReference) else ref.uri
    event(f"complete {which}")
    if isinstance(ref, types.PromptReference):
        values = [n for n in NAMES if n.startswith(params.argument.value)]
    else:
        values = ["7", "77"]
    return answer(ctx, {"completion": {"values": values, "total": len(values), "hasMore": False}})


async def list_resources(ctx: Context, params: Any) -> JSON:
    event("list")
    return answer(ctx, {"resources": [{"uri": WATCHED, "name": "watched", "mimeType": "text/plain"}]})


async def list_resource_templates(ctx: Context, params: Any) -> JSON:
    template = {"uriTemplate": TEMPLATE, "name": "item", "mimeType": "text/plain"}
    return answer(ctx, {"resourceTemplates": [template]})


async def read_resource(ctx: Context, params: types.ReadResourceRequestParams) -> JSON:
    uri = str(params.uri)
    event(f"read {uri}")
    if uri == WATCHED or uri.startswith("paths://item/"):
        return answer(ctx, {"contents": [{"uri": uri, "mimeType": "text/plain", "text": f"contents of {uri}"}]})
    raise MCPError(code=-32002, message=f"no resource {uri}", data={"uri": uri})


async def updates(session: Any, uri: str) -> None:
    while True:
        await anyio.sleep(0.2)
        try:
            await session.send_resource_updated(uri)
        except Exception:  # the session is gone
            return


async def subscribe(ctx: Context, params: types.SubscribeRequestParams) -> JSON:
    uri = str(params.uri)
    event(f"subscribe {uri}")
    if uri not in LOOPS:
        LOOPS[uri] = asyncio.get_running_loop().create_task(updates(ctx.session, uri))
    return answer(ctx, {})


async def unsubscribe(ctx: Context, params: types.UnsubscribeRequestParams) -> JSON:
    uri = str(params.uri)
    event(f"unsubscribe {uri}")
    loop = LOOPS.pop(uri, None)
    if loop is not None:
        loop.cancel()
    return answer(ctx, {})


async def main() -> None:
    # 2026-07-28 list results say how long they may be cached.
    listed = CacheHint(ttl_ms=300_000, scope="public")
    server = Server(
        "paths",
        version="1.0.0",
        cache_hints={
            "tools/list": listed,
            "prompts/list": listed,
            "resources/list": listed,
            "resources/templates/list": listed,
        },
        on_list_tools=list_tools,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
        on_completion=complete,
        on_list_resources=list_resources,
        on_list_resource_templates=list_resource_templates,
        on_read_resource=read_resource,
        on_subscribe_resource=subscribe,
        on_unsubscribe_resource=unsubscribe,
    )
    options = server.create_initialization_options(NotificationOptions())
    async with stdio_server() as (read, write):
        await server.run(read, write, options)


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
