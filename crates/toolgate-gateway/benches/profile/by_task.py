#!/usr/bin/env python3
# Reads `perf script` output of the gateway (profile.sh) and shares its samples out by the tokio
# task they ran in, told by the outermost frame that names the task.
import sys, collections
# The task a sample ran in, told by the outermost frame that names it (perf script stacks list the leaf first).
tasks = [
 ("inbound HTTP connection (hyper server, axum, gateway layers, rmcp's POST handling up to its session)", ["toolgate_gateway::connections::serve"]),
 ("rmcp server: session worker", ["session::local", "LocalSessionWorker"]),
 ("rmcp service loops (the upstream client's; for /mcp also the session's)", ["serve_inner"]),
 ("rmcp server: request handler task (toolgate's tools/call: pipeline, policies, upstream call)", ["handle_request"]),
 ("upstream client: rmcp client worker (POSTs, SSE parsing)", ["StreamableHttpClientWorker"]),
 ("upstream client: hyper client connection", ["hyper::client::conn", "UpgradeableConnection", "hyper_util::client::legacy"]),
]
counts = collections.Counter(); total = 0; stack = []
def flush():
    global total
    if not stack: return
    total += 1
    for frame in reversed(stack):
        for name, keys in tasks:
            if any(k in frame for k in keys):
                counts[name] += 1; return
    counts["unattributed (runtime scheduling, truncated stacks)"] += 1
for line in sys.stdin:
    line = line.rstrip("\n")
    if not line.strip():
        flush(); stack = []; continue
    if line[0] in " \t":
        stack.append(line.strip())
flush()
for name, n in counts.most_common():
    print(f"{100*n/total:5.1f}%  {name}")
print("samples", total)
