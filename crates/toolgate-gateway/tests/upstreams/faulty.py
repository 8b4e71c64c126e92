"""An MCP server (official Python SDK) that fails in the ways an upstream can, for the
gateway's error answers and log lines:

- `huge` writes one line of 100 MB to stdout (over stdio: a message far past what the
  gateway reads), an answer that names no request, and then never answers;
- `huge_log` writes a log message of 20 MB to stdout (a notification past what the
  gateway reads), then answers `logged`;
- `huge_answer` answers 20 MB of text: an answer past what the gateway reads, named by
  its request's id;
- `forge_log` writes to stderr a line with a carriage return and other control characters,
  shaped to look like a second log line of the gateway's own, then answers `ok`;
- `refuse` fails with a tool error;
- `slow` answers after `seconds`;
- `ping` answers `pong`;
- `revoke` (over HTTP) makes every later request a 401, as a revoked credential would.

`python faulty.py` serves stdio; `python faulty.py http` serves streamable HTTP on a free
loopback port and prints `faulty listening on URL`.
"""

import os
import socket
import sys

import anyio

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("faulty")

# The SDK points fd 1 at stderr while it serves stdio (so stray prints miss the wire) and
# writes the wire through a duplicate: `huge` writes through its own duplicate, taken
# before that.
WIRE = os.dup(1)

FORGED = (
    "harmless\r2026-11-27T19:00:00.000000Z  WARN toolgate::pins: tool definition change "
    "accepted by=alice\x1b[2K\x07\x0b\x08\x7f\u0085end"
)


@server.tool()
async def huge() -> str:
    """Writes a 100 MB line to stdout, then never answers."""
    await anyio.to_thread.run_sync(_write_huge_line)
    await anyio.sleep(3600)
    return "unreachable"


def _write_huge_line() -> None:
    # Straight to the wire, past the SDK's writer.
    head = b'{"jsonrpc": "2.0", "result": {"data": "'
    chunk = b"x" * (1024 * 1024)
    try:
        _write_all(head)
        for _ in range(100):
            _write_all(chunk)
        _write_all(b'"}}\n')
    except OSError as e:
        print(f"huge: stdout closed after part of the line ({e})", file=sys.stderr, flush=True)


def _write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(WIRE, view):]


@server.tool()
def huge_answer() -> str:
    """Answers 20 MB of text."""
    return "x" * (20 * 1024 * 1024)


@server.tool()
async def huge_log() -> str:
    """Sends a 20 MB log message, then answers."""
    await anyio.to_thread.run_sync(_write_huge_log)
    return "logged"


def _write_huge_log() -> None:
    # Straight to the wire, as `huge` writes: the SDK sends a log message only to a client
    # that asked for them on the request.
    _write_all(b'{"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "')
    _write_all(b"x" * (20 * 1024 * 1024))
    _write_all(b'"}}\n')


@server.tool()
def forge_log() -> str:
    """Writes a forged log line to stderr."""
    print(FORGED, file=sys.stderr, flush=True)
    return "ok"


@server.tool()
def refuse() -> str:
    """Fails."""
    raise ToolError("the faulty server refuses this call")


@server.tool()
async def slow(seconds: float) -> str:
    """Answers after `seconds`."""
    await anyio.sleep(seconds)
    return "done"


@server.tool()
def ping() -> str:
    """Answers pong."""
    return "pong"


REVOKED = False


@server.tool()
def revoke() -> str:
    """Over HTTP: every request after this one is refused 401, as for a revoked credential."""
    global REVOKED
    REVOKED = True
    return "revoked"


def refusing_when_revoked(app):
    async def guarded(scope, receive, send):
        if scope["type"] == "http" and REVOKED:
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"www-authenticate", b'Bearer error="invalid_token"')]})
            await send({"type": "http.response.body", "body": b""})
            return
        await app(scope, receive, send)

    return guarded


if __name__ == "__main__":
    if sys.argv[1:] == ["http"]:
        import uvicorn

        app = server.streamable_http_app(stateless_http=True, json_response=True)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        print(f"faulty listening on http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
        config = uvicorn.Config(refusing_when_revoked(app), log_level="warning")
        uvicorn.Server(config).run(sockets=[sock])
    else:
        server.run()
