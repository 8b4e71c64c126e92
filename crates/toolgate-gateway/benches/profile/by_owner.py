#!/usr/bin/env python3
# Reads `perf script` output of the gateway (profile.sh) and shares its samples out by the code
# that owns them: the innermost frame that names one of the owners below.
import sys, collections
cats = [
 ("upstream client (rmcp client, reqwest/hyper client, toolgate's client)", ["streamable_http_client", "hyper_util::client", "reqwest", "hyper::client", "toolgate_mcp::client", "client_side_sse", "sse_stream"]),
 ("toolgate pipeline and policies", ["toolgate_core::", "toolgate_hooks::"]),
 ("rmcp server side (session worker, handler, SSE)", ["rmcp::transport::streamable_http_server", "rmcp::handler::server", "toolgate_mcp::server"]),
 ("rmcp service loops and message (de)serialization, client and server", ["rmcp::"]),
 ("inbound HTTP (hyper server, axum, gateway layers)", ["hyper::server", "axum", "toolgate_gateway", "hyper::proto"]),
 ("tokio runtime", ["tokio::runtime"]),
]
SOCKETS = "socket reads and writes (the kernel's TCP on loopback, through tokio)"
CLIENT_SIDE = ["dispatch::Client", "hyper::client", "hyper_util::client", "reqwest"]
counts = collections.Counter(); total = 0
stack = []
def flush():
    global total
    if not stack: return
    total += 1
    for frame in stack:
        for name, keys in cats:
            if any(k in frame for k in keys):
                # hyper's HTTP/1 machinery (`hyper::proto`) serves both sides: its work, and the
                # socket reads and writes under it, is the upstream client's when it runs in a
                # client connection's dispatcher, not the inbound server's.
                if name.startswith("inbound") and "hyper::proto" in frame and any(
                        k in f for f in stack for k in CLIENT_SIDE):
                    name = cats[0][0]
                # tokio's I/O registration is where a socket's read or write goes into the
                # kernel: on loopback the kernel's TCP work for both ends is done there.
                if name == "tokio runtime" and "Registration::poll_io" in frame:
                    name = SOCKETS
                counts[name] += 1; return
    counts["other (allocator, std, unresolved)"] += 1
for line in sys.stdin:
    line = line.rstrip("\n")
    if not line.strip():
        flush(); stack = []; continue
    if line.startswith("\t") or line.startswith(" "):
        stack.append(line.strip())
flush()
for name, n in counts.most_common():
    print(f"{100*n/total:5.1f}%  {name}")
print("samples", total)
