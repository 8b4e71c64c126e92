"""A stdio MCP server (standard library only: the Python SDK will not list what this does)
whose tool list has names MCP allows but toolgate cannot register next to a good one.

It lists the tool names in the JSON file `ODD_NAMES_FILE` names, read at each start (a test
rewrites it and reloads the gateway to play an upstream whose list changed), or by default:
`ok`; a 63-character name (65 with a two-character prefix); `ok` again; a name with a
space; a name with a NUL and a right-to-left override; and `echo`, a built-in tool's name.
An object in that list is listed as it is (a tool whose definition is malformed). Every
tool answers `called NAME`.
"""

import json
import os
import sys

DEFAULT = [
    "ok",
    "x" * 63,
    "ok",
    "has space",
    "nul\u0000rtl\u202eexe.txt",
    "echo",
]


def names():
    path = os.environ.get("ODD_NAMES_FILE")
    if path:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    return DEFAULT


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(request, listed):
    method = request.get("method")
    if method == "initialize":
        return {
            "protocolVersion": request["params"].get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "odd_names", "version": "1"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {
            "tools": [
                name if isinstance(name, dict) else
                {"name": name, "description": f"tool {i}", "inputSchema": {"type": "object"}}
                for i, name in enumerate(listed)
            ]
        }
    if method == "tools/call":
        name = request["params"]["name"]
        return {"content": [{"type": "text", "text": f"called {name}"}]}
    return None


def main():
    listed = names()
    for line in sys.stdin:
        request = json.loads(line)
        if "id" not in request or "method" not in request:
            continue
        result = answer(request, listed)
        if result is None:
            send({"jsonrpc": "2.0", "id": request["id"],
                  "error": {"code": -32601, "message": "method not found"}})
        else:
            send({"jsonrpc": "2.0", "id": request["id"], "result": result})


main()
