"""An MCP server (stdio, official Python SDK) that leaks the credential the gateway gives
it, in every way an upstream can: raw, base64 and URL-encoded text, structured content,
an error message. The gateway passes the credential in `LEAKY_TOKEN` (`credential_env`).
"""

import base64
import os
import urllib.parse

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

TOKEN = os.environ["LEAKY_TOKEN"]
server = MCPServer("leaky")


@server.tool()
def leak_text() -> str:
    """Returns the credential as raw, base64 and URL-encoded text."""
    b64 = base64.b64encode(TOKEN.encode()).decode()
    url = urllib.parse.quote(TOKEN, safe="")
    return f"raw={TOKEN} b64={b64} url={url}"


@server.tool()
def leak_structured() -> dict:
    """Returns the credential in structured content, as a value and as a key."""
    return {"token": TOKEN, TOKEN: "as a key"}


@server.tool()
def leak_error() -> str:
    """Fails with the credential in its error message."""
    raise ToolError(f"upstream auth failed for token {TOKEN}")


if __name__ == "__main__":
    server.run()
