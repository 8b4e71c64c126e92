"""An MCP server (stdio, official Python SDK) whose tools answer in every shape a client
must get back unchanged through the gateway: text with an image, structured content, and
a tool with typed arguments.
"""

import base64

from mcp.server.mcpserver import MCPServer
from mcp.types import ImageContent, TextContent

# Not a real PNG: what matters is that the bytes come back exactly. The base64 holds a
# run of digits between `/` and `+` that a phone detector would take if it read it as text.
PICTURE = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\xff\xd3\x4d\x36\xe3\x5e\xf7\x8e\x79\xf7" * 3).decode() + "/020+7946+0958+AA"

server = MCPServer("shapes")


@server.tool()
def add(a: int, b: int) -> int:
    """Adds two whole numbers."""
    return a + b


@server.tool()
def picture() -> list:
    """A caption and an image."""
    return [
        TextContent(type="text", text="a picture for ann@example.com"),
        ImageContent(type="image", data=PICTURE, mimeType="image/png"),
    ]


if __name__ == "__main__":
    server.run()
