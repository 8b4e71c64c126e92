"""An MCP server (streamable HTTP, official Python SDK) whose one tool, `whoami`, answers
with the `Authorization` header its request came with: what an upstream behind the gateway
is sent. Binds 127.0.0.1 on a free port and prints `headers listening on URL`.
"""

import socket

import uvicorn

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("headers")


@server.tool()
def whoami(ctx: Context) -> str:
    """The Authorization header of this call's HTTP request."""
    headers = ctx.headers or {}
    return f"authorization={headers.get('authorization', '(none)')}"


if __name__ == "__main__":
    app = server.streamable_http_app(stateless_http=True, json_response=True)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    print(f"headers listening on http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
