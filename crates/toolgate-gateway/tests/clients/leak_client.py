"""An MCP client (the official Python SDK) that calls every tool the gateway lists, in
order, asking for progress and log messages at every level, and records everything the
gateway sends it: progress messages, log data, sampling and elicitation requests (answered
with a canned reply), and each tool's result.

Usage: leak_client.py URL API_KEY. Prints one JSON object with what it saw.
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.types import CreateMessageResult, ElicitResult, TextContent


async def main(url: str, key: str) -> None:
    seen = {"progress": [], "logs": [], "sampling": [], "elicitation": [], "results": {}}

    async def on_progress(progress, total, message):
        seen["progress"].append(message)

    async def on_log(params):
        seen["logs"].append(params.data)

    async def on_sampling(context, params):
        seen["sampling"].append(params.model_dump(mode="json", by_alias=True, exclude_none=True))
        return CreateMessageResult(role="assistant", content=TextContent(type="text", text="ok"), model="canned")

    async def on_elicitation(context, params):
        seen["elicitation"].append(params.model_dump(mode="json", by_alias=True, exclude_none=True))
        return ElicitResult(action="decline")

    client = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    async with client, streamable_http_client(url, http_client=client) as (read, write, *_):
        async with ClientSession(
            read,
            write,
            logging_callback=on_log,
            sampling_callback=on_sampling,
            elicitation_callback=on_elicitation,
        ) as session:
            await session.initialize()
            await session.set_logging_level("debug")
            for tool in (await session.list_tools()).tools:
                result = await session.call_tool(tool.name, {}, progress_callback=on_progress)
                seen["results"][tool.name] = result.content[0].text if result.content else ""
            await asyncio.sleep(0.3)
    print(json.dumps(seen))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
