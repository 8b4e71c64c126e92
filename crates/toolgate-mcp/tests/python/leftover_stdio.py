"""A stdio MCP server written by hand that, at its first `tools/call`, starts a process
that outlives it holding its stdout (`sleep 1000`, which inherits the pipe), writes that
process's id to the file named by its second argument, then exits, as its first argument
says:

- `exits-at-call`: without answering the call;
- `answers-then-exits`: right after writing the call's answer;
- `stops-reading-then-exits`: a second later, without answering the call or reading
  its stdin meanwhile (what toolgate writes to it then waits in the pipe, which the
  process left behind holds open).

Every start appends the process id to the file named by `LEFTOVER_STARTS`, when set.
One tool is served: `echo`, which answers its arguments.
"""

import json
import os
import subprocess
import sys
import time

MODE = sys.argv[1]
PID_FILE = sys.argv[2]

starts = os.environ.get("LEFTOVER_STARTS")
if starts:
    with open(starts, "a") as f:
        f.write(f"{os.getpid()}\n")


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def leave_a_process_behind():
    # Inherits stdin, stdout and stderr: the pipe to toolgate stays open after this exits.
    leftover = subprocess.Popen(["sleep", "1000"])
    with open(PID_FILE + ".tmp", "w") as f:
        f.write(f"{leftover.pid}\n")
    os.rename(PID_FILE + ".tmp", PID_FILE)


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
                "serverInfo": {"name": "leftover", "version": "1"},
            },
        })
    elif method == "tools/list":
        tools = [{"name": "echo", "inputSchema": {"type": "object"}}]
        send({"jsonrpc": "2.0", "id": message["id"], "result": {"tools": tools}})
    elif method == "tools/call":
        leave_a_process_behind()
        if MODE == "answers-then-exits":
            text = json.dumps(message["params"].get("arguments", {}))
            send({
                "jsonrpc": "2.0",
                "id": message["id"],
                "result": {"content": [{"type": "text", "text": text}]},
            })
        if MODE == "stops-reading-then-exits":
            time.sleep(1)
        # Exits at once: no flush or clean-up of the interpreter's to wait for.
        os._exit(0)
    else:
        send({
            "jsonrpc": "2.0",
            "id": message["id"],
            "error": {"code": -32601, "message": "method not found"},
        })
