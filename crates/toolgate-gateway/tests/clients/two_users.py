"""Two users of the gateway, bob and carol, each an MCP client (the official Python SDK) on
a session of their own, calling tools of the `crosstalk` upstream
(`tests/upstreams/crosstalk.py`) so that what the upstream sends about carol's call
arrives while bob's call is the only one in flight. Each client records everything the
gateway sends it: log messages, progress, sampling requests (answered "BOB-ANSWER" or
"CAROL-ANSWER").

Usage: two_users.py SCENARIO URL BOB_KEY CAROL_KEY TAG, SCENARIO one of
- late_log: carol's `tell(TAG)` is answered; bob's `hold` is in flight when the late log
  comes;
- sampling: carol's `consult(TAG)` times out at the gateway; bob's `hold` is in flight when
  the upstream asks for a sampling about TAG;
- restart: carol's `late_progress(TAG)` is answered before its progress comes, then the
  upstream is crashed and started again, and bob makes twelve calls asking for progress.
Prints one JSON object: {"bob": {...}, "carol": {...}}.
"""

import asyncio
import json
import sys
from contextlib import AsyncExitStack

from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.types import CreateMessageResult, TextContent


class User:
    """One user's session and what it was sent."""

    def __init__(self, name: str):
        self.name = name
        self.seen = {"logs": [], "progress": [], "sampling": [], "results": []}
        self.session: ClientSession | None = None

    async def on_log(self, params):
        self.seen["logs"].append(json.dumps(params.data))

    async def on_sampling(self, context, params):
        self.seen["sampling"].append(params.messages[0].content.text)
        return CreateMessageResult(
            role="assistant",
            content=TextContent(type="text", text=f"{self.name.upper()}-ANSWER"),
            model="canned",
        )

    async def on_progress(self, progress, total, message):
        self.seen["progress"].append(message)

    async def open(self, stack: AsyncExitStack, url: str, key: str) -> None:
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
        await stack.enter_async_context(client)
        read, write, *_ = await stack.enter_async_context(streamable_http_client(url, http_client=client))
        self.session = await stack.enter_async_context(
            ClientSession(
                read,
                write,
                logging_callback=self.on_log,
                sampling_callback=self.on_sampling,
            )
        )
        await self.session.initialize()
        await self.session.set_logging_level("debug")

    async def call(self, tool: str, arguments: dict, progress: bool = False) -> None:
        try:
            result = await self.session.call_tool(
                tool, arguments, progress_callback=self.on_progress if progress else None
            )
            text = result.content[0].text if result.content else ""
            self.seen["results"].append(f"{tool}: {'error: ' if result.is_error else ''}{text}")
        except Exception as e:  # noqa: BLE001 - a refused call is something seen
            self.seen["results"].append(f"{tool}: raised {e}")


async def main(scenario: str, url: str, bob_key: str, carol_key: str, tag: str) -> None:
    bob, carol = User("bob"), User("carol")
    async with AsyncExitStack() as stack:
        await bob.open(stack, url, bob_key)
        await carol.open(stack, url, carol_key)
        if scenario == "late_log":
            held = asyncio.create_task(bob.call("hold", {"seconds": 2.5}))
            await asyncio.sleep(0.5)
            await carol.call("tell", {"tag": tag})
            await held
        elif scenario == "sampling":
            await carol.call("consult", {"tag": tag})
            held = asyncio.create_task(bob.call("hold", {"seconds": 3.5}))
            await held
        elif scenario == "restart":
            await carol.call("late_progress", {"tag": tag}, progress=True)
            await asyncio.sleep(1.0)
            await carol.call("crash", {})
            for _ in range(12):
                await bob.call("quick", {}, progress=True)
        else:
            raise SystemExit(f"unknown scenario {scenario}")
        await asyncio.sleep(0.5)
    print(json.dumps({"bob": bob.seen, "carol": carol.seen}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
