"""A stdio MCP server written by hand (no SDK: it starts fast) that misbehaves as its
first argument says, for the stdio upstream tests:

- `stops-reading`: answers `initialize` and `tools/list`, then never reads its stdin
  again (and never exits), as a wedged server would;
- `dies-after-init`: answers `initialize` and `tools/list`, then exits on the first
  `tools/call`;
- `unreadable-answers`: answers a call of `echo` whose arguments name `unreadable`
  (`number`, `surrogate`, `code`, `deep`) with its own `id` and a message that JSON
  readers refuse: a number past a 64-bit float, half a surrogate pair, an error whose
  `code` is a string, or 100 000 levels of nesting;
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

# Each with `%s` where the call's id goes.
UNREADABLE = {
    "number": '{"jsonrpc":"2.0","id":%s,"result":{"content":[],"structuredContent":{"v":1e999}}}',
    "surrogate": '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"a\\ud800b"}]}}',
    "code": '{"jsonrpc":"2.0","id":%s,"error":{"code":"notint","message":"no"}}',
    "deep": '{"jsonrpc":"2.0","id":%s,"result":{"content":[],"structuredContent":'
    + "[" * 100_000 + "]" * 100_000 + "}}",
}

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
        unreadable = message["params"].get("arguments", {}).get("unreadable")
        if MODE == "unreadable-answers" and unreadable:
            sys.stdout.write(UNREADABLE[unreadable] % json.dumps(message["id"]) + "\n")
            sys.stdout.flush()
            continue
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
