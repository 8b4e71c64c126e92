"""An MCP server (streamable HTTP, official Python SDK) whose one tool, `whoami`, answers
with the `Authorization` header its request came with: what an upstream behind the gateway
is sent. Beside the header (which the gateway scrubs when it is a credential it holds), it
tells the header's SHA-256 and, for a JWT, the claims that say for whom it was issued.
Binds 127.0.0.1 on a free port and prints `headers listening on URL`.
"""

import base64
import hashlib
import json
import socket

import uvicorn

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("headers")


@server.tool()
def whoami(ctx: Context) -> str:
    """The Authorization header of this call's HTTP request."""
    headers = ctx.headers or {}
    authorization = headers.get("authorization", "(none)")
    digest = hashlib.sha256(authorization.encode()).hexdigest()
    said = f"authorization={authorization}; sha256={digest}"
    token = authorization.removeprefix("Bearer ")
    if token.count(".") == 2:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        actor = (claims.get("act") or {}).get("sub")
        said += f"; sub={claims.get('sub')}; aud={claims.get('aud')}; act={actor}"
    return said


if __name__ == "__main__":
    app = server.streamable_http_app(stateless_http=True, json_response=True)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    print(f"headers listening on http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
