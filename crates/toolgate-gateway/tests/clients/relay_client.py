"""An MCP client (the official Python SDK) that calls tools of an upstream imported by the
gateway and answers what the upstream asks through it: it records the progress it is
sent, answers sampling with a canned model reply, and elicitation with a colour.

Usage: relay_client.py URL API_KEY. Prints one JSON object with what it saw.
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.types import CreateMessageResult, ElicitResult, TextContent


async def main(url: str, key: str) -> None:
    seen = {"progress": [], "sampling": [], "elicitation": []}

    async def on_progress(progress, total, message):
        seen["progress"].append([progress, total, message])

    async def on_sampling(context, params):
        seen["sampling"].append(params.messages[0].content.text)
        return CreateMessageResult(
            role="assistant",
            content=TextContent(type="text", text="forty-two"),
            model="canned",
        )

    async def on_elicitation(context, params):
        seen["elicitation"].append(
            {"message": params.message, "schema": params.requested_schema}
        )
        return ElicitResult(action="accept", content={"colour": "red"})

    client = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    async with client, streamable_http_client(url, http_client=client) as (read, write, *_):
        async with ClientSession(
            read,
            write,
            sampling_callback=on_sampling,
            elicitation_callback=on_elicitation,
        ) as session:
            await session.initialize()
            results = {}
            counted = await session.call_tool("count", {"steps": 3}, progress_callback=on_progress)
            results["count"] = counted.content[0].text
            asked = await session.call_tool("ask_model", {"question": "the answer?"})
            results["ask_model"] = asked.content[0].text
            picked = await session.call_tool("ask_user", {})
            results["ask_user"] = picked.content[0].text
            seen["results"] = results
    print(json.dumps(seen))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
