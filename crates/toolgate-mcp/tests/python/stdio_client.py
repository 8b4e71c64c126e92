"""Checks toolgate's MCP stdio server with the official Python MCP SDK (not built on rmcp).

Usage: python3 stdio_client.py PATH_TO_toolgate-mcp-demo

Starts the server as a child process over stdio, lists its tools, calls `add` and
`echo`, and checks that a validation error comes back as a tool result with isError.
Exits 0 and prints `python-mcp-check: ok` on success; any failure raises.
"""

import asyncio
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def field(obj, snake: str, camel: str):
    """Reads a field by its SDK 2.x (snake_case) or 1.x (camelCase) name."""
    return getattr(obj, snake) if hasattr(obj, snake) else getattr(obj, camel)


async def main(server: str) -> None:
    params = StdioServerParameters(command=server, args=["stdio"])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()

            listed = await session.list_tools()
            names = {tool.name for tool in listed.tools}
            assert {"echo", "add", "slow"} <= names, f"missing tools: {sorted(names)}"
            assert "admin_stats" not in names, "admin_stats must be hidden from a non-admin"
            add = next(tool for tool in listed.tools if tool.name == "add")
            assert field(add, "input_schema", "inputSchema")["type"] == "object"
            assert "a" in field(add, "input_schema", "inputSchema")["properties"]
            assert field(add, "output_schema", "outputSchema") is not None, "add declares an output schema"
            assert add.annotations is not None and field(add.annotations, "read_only_hint", "readOnlyHint") is True

            result = await session.call_tool("add", {"a": 2, "b": 40})
            assert not field(result, "is_error", "isError"), result
            structured = field(result, "structured_content", "structuredContent")
            assert structured == {"sum": 42}, structured

            result = await session.call_tool("echo", {"text": "hello from python"})
            assert not field(result, "is_error", "isError"), result
            assert result.content[0].text == "hello from python", result.content

            result = await session.call_tool("add", {"a": 5000, "b": 1})
            assert field(result, "is_error", "isError"), result
            assert "argument `a`" in result.content[0].text, result.content

    print("python-mcp-check: ok")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
