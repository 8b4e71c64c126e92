"""An MCP server (stdio, official Python SDK) that echoes its database connection
settings, as a database driver's error message does: `DATABASE_URL` (a URL with a
password), `PG_DSN` (a libpq key=value string) and `APP_CONFIG` (a JSON blob with a nested
password). No variable is named like a credential; the gateway must still find the
passwords in them. The URL and the blob are also written to stderr at start-up, which the
gateway relays into its log.
"""

import json
import os
import sys
import urllib.parse

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

DATABASE_URL = os.environ["DATABASE_URL"]
PG_DSN = os.environ["PG_DSN"]
APP_CONFIG = os.environ["APP_CONFIG"]
server = MCPServer("echoes-env")


@server.tool()
def connect() -> str:
    """Fails as a driver does, with the connection string in the error message."""
    raise ToolError(f"could not connect to {DATABASE_URL} with {APP_CONFIG}")


@server.tool()
def settings() -> dict:
    """Returns the connection settings, the URL's password decoded and the JSON's."""
    password = urllib.parse.unquote(urllib.parse.urlsplit(DATABASE_URL).password or "")
    config = json.loads(APP_CONFIG)
    return {
        "url": DATABASE_URL,
        "dsn": PG_DSN,
        "config": APP_CONFIG,
        "said": f"logging in with {password}",
        "json_said": f"and with {config['db']['password']}",
    }


if __name__ == "__main__":
    print(f"connecting to {DATABASE_URL} with config {APP_CONFIG}", file=sys.stderr, flush=True)
    server.run()
