"""An MCP server (official Python SDK) whose tools answer in every shape a client must get
back unchanged through the gateway: text with an image, structured content, a tool with
typed arguments, tools that report progress, sample and elicit; and a prompt and a
resource.

Usage: shapes.py (stdio) or shapes.py --http (streamable HTTP on a free loopback port;
prints `shapes listening on URL`).
"""

import base64
import os
import socket
import sys

from pydantic import BaseModel, Field

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ImageContent, SamplingMessage, TextContent

# Not a real PNG: what matters is that the bytes come back exactly. The base64 holds a
# run of digits between `/` and `+` that a phone detector would take if it read it as text.
PICTURE = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\xff\xd3\x4d\x36\xe3\x5e\xf7\x8e\x79\xf7" * 3).decode() + "/020+7946+0958+AA"

server = MCPServer("shapes")


def add_description() -> str:
    """The description of `add`: from the file `SHAPES_ADD_DESCRIPTION_FILE` names, when
    set (a test changes it to play an upstream that changes what a tool says it does)."""
    path = os.environ.get("SHAPES_ADD_DESCRIPTION_FILE")
    if path and os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    return "Adds two whole numbers."


@server.tool(description=add_description())
def add(a: int, b: int) -> int:
    return a + b


@server.tool()
def picture() -> list:
    """A caption and an image."""
    return [
        TextContent(type="text", text="a picture for ann@example.com"),
        ImageContent(type="image", data=PICTURE, mimeType="image/png"),
    ]


@server.tool()
async def count(steps: int, ctx: Context) -> str:
    """Counts to `steps`, reporting progress at each step."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step} of {steps}")
    return f"counted to {steps}"


@server.tool()
async def ask_model(question: str, ctx: Context) -> str:
    """Asks the caller's model (sampling) and returns its answer."""
    result = await ctx.session.create_message(
        [SamplingMessage(role="user", content=TextContent(type="text", text=question))],
        max_tokens=50,
        related_request_id=ctx.request_id,
    )
    return f"the model said: {result.content.text}"


class Colour(BaseModel):
    colour: str = Field(default="blue", description="A colour", json_schema_extra={"enum": ["red", "blue"]})


@server.tool()
async def ask_user(ctx: Context) -> str:
    """Asks the caller's user (elicitation) for a colour."""
    answer = await ctx.elicit("Pick a colour", Colour)
    if answer.action == "accept":
        return f"the user picked {answer.data.colour}"
    return f"the user chose to {answer.action}"


@server.prompt()
def greet(name: str) -> str:
    """Greets someone by name."""
    return f"Say hello to {name}."


@server.resource("shapes://note", mime_type="text/plain")
def note() -> str:
    """A note that mentions someone's email."""
    return "write to ann@example.com"


if __name__ == "__main__":
    if "--http" in sys.argv:
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        print(f"shapes listening on http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
        app = server.streamable_http_app()
        uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
    else:
        server.run()
