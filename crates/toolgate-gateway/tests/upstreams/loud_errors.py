"""A hand-written MCP server (no SDK) whose every call fails with 10,000,000 characters of
text: `refuse` answers a JSON-RPC error, `fail` a result with `isError`, each ending with
`END-OF-THE-ERROR`, which no caller should ever read.

`python loud_errors.py` serves stdio; `python loud_errors.py http` serves plain JSON over
HTTP on a free loopback port and prints `loud_errors listening on URL`;
`python loud_errors.py unlisted` serves stdio and refuses `tools/list` with the same text.
"""

import http.server
import json
import sys

HUGE = "x" * 10_000_000 + " END-OF-THE-ERROR"
UNLISTED = sys.argv[1:] == ["unlisted"]

TOOLS = [
    {"name": name, "description": f"Fails: {name}.", "inputSchema": {"type": "object"}}
    for name in ("refuse", "fail")
]


def answer(message):
    """The answer to `message`, or None for a notification."""
    if "id" not in message:
        return None
    ident, method = message["id"], message.get("method")
    if method == "initialize":
        result = {
            "protocolVersion": message["params"].get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "loud_errors", "version": "1"},
        }
    elif method == "tools/list" and UNLISTED:
        return {"jsonrpc": "2.0", "id": ident, "error": {"code": -32000, "message": HUGE}}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call" and message["params"]["name"] == "refuse":
        return {"jsonrpc": "2.0", "id": ident, "error": {"code": -32000, "message": HUGE}}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": HUGE}], "isError": True}
    elif method == "ping":
        result = {}
    else:
        return {"jsonrpc": "2.0", "id": ident,
                "error": {"code": -32601, "message": "method not found"}}
    return {"jsonrpc": "2.0", "id": ident, "result": result}


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        reply = answer(json.loads(body))
        if reply is None:
            self.send_response(202)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.send_response(405)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def main():
    if sys.argv[1:] == ["http"]:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        print(f"loud_errors listening on http://127.0.0.1:{server.server_port}/mcp", flush=True)
        server.serve_forever()
        return
    for line in sys.stdin:
        reply = answer(json.loads(line))
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


main()
