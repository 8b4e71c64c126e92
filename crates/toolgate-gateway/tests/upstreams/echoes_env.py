"""An MCP server (stdio, official Python SDK) that echoes its database connection
settings, as a database driver's error message does: `DATABASE_URL` (a URL with a
password) and `PG_DSN` (a libpq key=value string). Neither variable is named like a
credential; the gateway must still find the passwords in them. The URL is also written
to stderr at start-up, which the gateway relays into its log.
"""

import os
import sys
import urllib.parse

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

DATABASE_URL = os.environ["DATABASE_URL"]
PG_DSN = os.environ["PG_DSN"]
server = MCPServer("echoes-env")


@server.tool()
def connect() -> str:
    """Fails as a driver does, with the connection string in the error message."""
    raise ToolError(f"could not connect to {DATABASE_URL}")


@server.tool()
def settings() -> dict:
    """Returns the connection settings, and the URL's password decoded."""
    password = urllib.parse.unquote(urllib.parse.urlsplit(DATABASE_URL).password or "")
    return {"url": DATABASE_URL, "dsn": PG_DSN, "said": f"logging in with {password}"}


if __name__ == "__main__":
    print(f"connecting to {DATABASE_URL}", file=sys.stderr, flush=True)
    server.run()
