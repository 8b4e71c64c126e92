"""A stdio MCP server written by hand (no SDK: it starts fast) that misbehaves as its
first argument says, for the stdio upstream tests:

- `stops-reading`: answers `initialize` and `tools/list`, then never reads its stdin
  again (and never exits), as a wedged server would;
- `dies-after-init`: answers `initialize` and `tools/list`, then exits on the first
  `tools/call`;
- anything else: serves as it should.

Every start appends the process id to the file named by `WAYWARD_STARTS`, when set.
Two tools are served: `echo`, which answers its arguments, and `env`, which answers the
process's environment as a JSON object.
"""

import json
import os
import sys
import time

MODE = sys.argv[1]

starts = os.environ.get("WAYWARD_STARTS")
if starts:
    with open(starts, "a") as f:
        f.write(f"{os.getpid()}\n")


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


TOOLS = [
    {"name": "echo", "inputSchema": {"type": "object"}},
    {"name": "env", "inputSchema": {"type": "object"}},
]

for line in sys.stdin:
    message = json.loads(line)
    method = message.get("method")
    if "id" not in message or method is None:
        continue
    if method == "initialize":
        send({
            "jsonrpc": "2.0",
            "id": message["id"],
            "result": {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "wayward", "version": "1"},
            },
        })
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": message["id"], "result": {"tools": TOOLS}})
        if MODE == "stops-reading":
            while True:
                time.sleep(3600)
    elif method == "tools/call":
        if MODE == "dies-after-init":
            sys.exit(0)
        if message["params"].get("name") == "env":
            text = json.dumps(dict(os.environ))
        else:
            text = json.dumps(message["params"].get("arguments", {}))
        send({
            "jsonrpc": "2.0",
            "id": message["id"],
            "result": {"content": [{"type": "text", "text": text}]},
        })
    else:
        send({
            "jsonrpc": "2.0",
            "id": message["id"],
            "error": {"code": -32601, "message": "method not found"},
        })
