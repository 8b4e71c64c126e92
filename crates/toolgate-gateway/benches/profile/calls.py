"""CALLS sequential tools/call of the echo through the gateway on one kept-alive connection.

    calls.py URL TOOL API_KEY|- SESSION_ID|- CALLS

URL is the MCP endpoint, or a toolgate `/v1/tools/NAME/invoke` address (then TOOL is unused).

Every answer is checked; the first wrong one stops the run with its status and body.
"""
import http.client
import json
import sys
import urllib.parse

url, tool, key, session, calls = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
parsed = urllib.parse.urlparse(url)
connection = http.client.HTTPConnection(parsed.hostname, parsed.port)
headers = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
}
if key != "-":
    headers["Authorization"] = "Bearer " + key
v1 = "/v1/tools/" in parsed.path
if session != "-":
    headers["Mcp-Session-Id"] = session
for n in range(calls):
    if v1:
        body = {"text": "hello %d" % n}
    else:
        body = {"jsonrpc": "2.0", "id": n + 1, "method": "tools/call",
                "params": {"name": tool, "arguments": {"text": "hello"}}}
    connection.request("POST", parsed.path, json.dumps(body), headers)
    response = connection.getresponse()
    data = response.read()
    if response.status != 200 or b"hello" not in data:
        sys.exit("call %d: %d %r" % (n, response.status, data[:300]))
