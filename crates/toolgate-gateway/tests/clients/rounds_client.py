"""An MCP client (the official Python SDK) that calls the multi-round tools of the
conformance fixture (`tests/conformance/everything.py`) through the gateway, in one
protocol era: `2025-11-25` (`initialize`: the gateway puts each round's requests to it
as elicitation requests on its connection) or `2026-07-28` (`server/discover`: it gets
the `input_required` results, answers them and calls again with the answers and the
sealed `requestState`). It answers each elicitation from a queue of canned answers.

Usage: rounds_client.py ERA URL API_KEY          (streamable HTTP)
       rounds_client.py ERA --stdio COMMAND ARG…  (stdio, to `toolgate mcp`)
Prints one JSON object with what it saw.
"""

import asyncio
import json
import sys

from contextlib import asynccontextmanager

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.types import ElicitResult, InputRequiredResult


@asynccontextmanager
async def transport(target: list[str]):
    """The read and write streams to the gateway: over stdio or streamable HTTP."""
    if target[0] == "--stdio":
        server = StdioServerParameters(command=target[1], args=target[2:])
        async with stdio_client(server) as (read, write):
            yield read, write
    else:
        url, key = target
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
        async with client, streamable_http_client(url, http_client=client) as (read, write, *_):
            yield read, write


async def main(era: str, target: list[str]) -> None:
    seen = {"elicited": [], "results": {}, "states": []}
    answers = [{"name": "Alice"}, {"color": "blue"}, {"name": "Bob"}, {"name": "Carol"}]

    async def on_elicitation(context, params):
        seen["elicited"].append(params.message)
        return ElicitResult(action="accept", content=answers.pop(0))

    async def call(session: ClientSession, name: str):
        """Calls `name`, answering every round the server asks for (2026-07-28)."""
        result = await session.call_tool(name, {}, allow_input_required=True)
        while isinstance(result, InputRequiredResult):
            seen["states"].append(result.request_state)
            responses = {}
            for key, request in (result.input_requests or {}).items():
                answer = await on_elicitation(None, request.params)
                responses[key] = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
            result = await session.call_tool(
                name,
                {},
                input_responses=responses,
                request_state=result.request_state,
                allow_input_required=True,
            )
        return result

    async with transport(target) as (read, write):
        async with ClientSession(read, write, elicitation_callback=on_elicitation) as session:
            if era == "2026-07-28":
                await session.discover()
            else:
                await session.initialize()
            multi = await call(session, "test_input_required_result_multi_round")
            seen["results"]["multi_round"] = multi.content[0].text
            # The same call twice, answered differently: neither answer is served from
            # a cache to the other.
            for round in ("first", "second"):
                greeted = await call(session, "test_input_required_result_elicitation")
                seen["results"][round] = greeted.content[0].text
    print(json.dumps(seen))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2:]))
