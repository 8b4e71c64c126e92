"""An MCP server (official Python SDK) that is loud, for the gateway's log:

- `long_stderr_line` writes one stderr line of 9000 bytes, then 50 lines of 4000 bytes
  (more than a pipe holds) and `after the long line`, and answers `stderr open` — or
  `stderr closed` if a write failed because the gateway stopped reading its stderr;
- `notify` sends `count` log messages (`notifications/message`, data
  `noisy-notification`) that name no request, then answers `notified`.

`python noisy.py` serves stdio.
"""

import os
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("noisy")

# The SDK points fd 1 at stderr while it serves stdio and writes the wire through a
# duplicate: `notify` writes through its own duplicate, taken before that.
WIRE = os.dup(1)


@server.tool()
def long_stderr_line() -> str:
    """Writes a stderr line of 9000 bytes, then more lines; tells whether stderr stayed open."""
    try:
        sys.stderr.write("x" * 9000 + "\n")
        for i in range(50):
            sys.stderr.write(f"{i:04d}" + "y" * 3996 + "\n")
        sys.stderr.write("after the long line\n")
        sys.stderr.flush()
    except OSError:
        return "stderr closed"
    return "stderr open"


@server.tool()
def notify(count: int) -> str:
    """Sends `count` log messages, then answers."""
    message = b'{"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "noisy-notification"}}\n'
    data = memoryview(message * count)
    while data:
        data = data[os.write(WIRE, data):]
    return "notified"


if __name__ == "__main__":
    server.run()
