"""An MCP server (streamable HTTP, official Python SDK) that, once its token expires,
answers every request 401 with a body that prints the first half of the Bearer token it
was sent (`invalid token upsecretZq8v...`), as servers and libraries do to help whoever
debugs them: not on purpose, but the start of a credential all the same.

- `expire` makes every later request a 401 so answered;
- `ping` answers `pong`.

`python prints_token_start.py` serves on a free loopback port and prints
`prints_token_start listening on URL`.
"""

import socket

import uvicorn

from mcp.server.mcpserver import MCPServer

server = MCPServer("prints_token_start")
EXPIRED = False


@server.tool()
def ping() -> str:
    """Answers pong."""
    return "pong"


@server.tool()
def expire() -> str:
    """Every request after this one is refused 401, its body printing half the token."""
    global EXPIRED
    EXPIRED = True
    return "expired"


def refusing_when_expired(app):
    async def guarded(scope, receive, send):
        if scope["type"] == "http" and EXPIRED:
            sent = dict(scope["headers"]).get(b"authorization", b"")
            token = sent.removeprefix(b"Bearer ")
            body = b"invalid token " + token[: len(token) // 2] + b"..."
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    return guarded


if __name__ == "__main__":
    app = server.streamable_http_app(stateless_http=True, json_response=True)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    print(f"prints_token_start listening on http://127.0.0.1:{sock.getsockname()[1]}/mcp",
          flush=True)
    config = uvicorn.Config(refusing_when_expired(app), log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])
