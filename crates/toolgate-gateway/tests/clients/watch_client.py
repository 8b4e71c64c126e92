"""An MCP client (the official Python SDK) that watches `test://watched-resource` of the
conformance fixture through the gateway, in one protocol era — `2025-11-25`
(`resources/subscribe`, updates as notifications on its session) or `2026-07-28`
(`subscriptions/listen` with the URI, updates on the listen stream) — then calls the
fixture's `test_touch_watched_resource` and waits (10 s at most) for the update.

Usage: watch_client.py ERA URL API_KEY. Prints one JSON object with what it saw.
"""

import asyncio
import json
import sys

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.client.subscriptions import listen
from mcp.types import ResourceUpdatedNotification

URI = "test://watched-resource"


async def main(era: str, url: str, key: str) -> None:
    seen: dict = {"updates": []}
    updated = anyio.Event()

    async def on_message(message) -> None:
        root = getattr(message, "root", message)
        if isinstance(root, ResourceUpdatedNotification):
            seen["updates"].append(root.params.uri)
            updated.set()

    client = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    async with client, streamable_http_client(url, http_client=client) as (read, write, *_):
        # At 2026-07-28 the update is read from the listen stream only.
        handler = None if era == "2026-07-28" else on_message
        async with ClientSession(read, write, message_handler=handler) as session:
            if era == "2026-07-28":
                await session.discover()
                async with listen(session, resource_subscriptions=[URI]) as stream:
                    seen["honored"] = list(stream.honored.resource_subscriptions or [])
                    await session.call_tool("test_touch_watched_resource", {})
                    with anyio.move_on_after(10):
                        async for event in stream:
                            seen["updates"].append(str(getattr(event, "uri", event)))
                            break
            else:
                await session.initialize()
                await session.subscribe_resource(URI)
                await session.call_tool("test_touch_watched_resource", {})
                with anyio.move_on_after(10):
                    await updated.wait()
    print(json.dumps(seen))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
