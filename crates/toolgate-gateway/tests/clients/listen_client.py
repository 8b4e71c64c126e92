"""An MCP client (the official Python SDK, 2026-07-28) that listens to one resource
through the gateway (`subscriptions/listen`) until the stream ends.

It prints `updated` (one line) at the first update, then, when the stream ends — or after
60 s — one JSON object: how many updates it saw, and how the stream ended (`graceful`,
`timeout`, or the error it ended with: its message, code and data).

Usage: listen_client.py URL API_KEY URI
"""

import asyncio
import json
import sys

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.client.subscriptions import SubscriptionLost, listen


async def main(url: str, key: str, uri: str) -> None:
    seen: dict = {"updates": 0, "end": "timeout"}
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    async with client, streamable_http_client(url, http_client=client) as (read, write, *_):
        async with ClientSession(read, write) as session:
            await session.discover()
            with anyio.move_on_after(60):
                async with listen(session, resource_subscriptions=[uri]) as stream:
                    try:
                        async for _event in stream:
                            seen["updates"] += 1
                            if seen["updates"] == 1:
                                print("updated", flush=True)
                        seen["end"] = "graceful"
                    except SubscriptionLost as lost:
                        cause = lost.__cause__
                        error = getattr(cause, "error", None)
                        seen["end"] = {
                            "message": error.message if error else str(lost),
                            "code": error.code if error else None,
                            "data": error.data if error else None,
                        }
    print(json.dumps(seen), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
