#!/usr/bin/env bash
# Load benchmark on loopback: `tools/call` of echo over MCP streamable HTTP (`POST /mcp`,
# one MCP session, every connection kept alive and reused) next to the same call on the
# HTTP API (`POST /v1/tools/echo/invoke`), on the gateway of benches/load.yaml (API key,
# authorization rule, rate limit, audit record per call), with 1 and with 64 connections.
# Both sides use the same wrk script shape (a request built per call, every answer
# checked), so the client's cost is the same.
#
#   crates/toolgate-gateway/benches/mcp_load.sh              # 10 s per run, release build
#   LOAD_SECONDS=2 PROFILE=debug benches/mcp_load.sh         # a quick smoke run (CI)
#   TOOLGATE_BIN=/tmp/old/toolgate benches/mcp_load.sh       # another build of the gateway
set -euo pipefail
cd "$(dirname "$0")/../../.."

SECONDS_PER_RUN=${LOAD_SECONDS:-10}
THREADS=${LOAD_THREADS:-2}
PROFILE=${PROFILE:-release}

# shellcheck source=common.sh
. crates/toolgate-gateway/benches/common.sh
need_wrk

need_gateway


key=tg_load_$RANDOM$RANDOM
export LOAD_KEY_SHA256=$(printf %s "$key" | sha256sum | cut -d' ' -f1)
export LOAD_AUDIT_PATH=$work/audit.jsonl
serve_gateway crates/toolgate-gateway/benches/load.yaml

# One MCP session for every connection: initialize, then the initialized notification.
mcp_headers=(-H "Authorization: Bearer $key" -H 'Content-Type: application/json'
  -H 'Accept: application/json, text/event-stream')
session=$(curl -sf -D - -o /dev/null "${mcp_headers[@]}" -d '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"mcp_load.sh","version":"0"}}}' \
  "$url/mcp" | tr -d '\r' | sed -n 's/^mcp-session-id: //Ip')
[ -n "$session" ] || { echo "initialize gave no session id" >&2; exit 1; }
curl -sf -o /dev/null "${mcp_headers[@]}" -H "mcp-session-id: $session" \
  -d '{"jsonrpc":"2.0","method":"notifications/initialized"}' "$url/mcp"

wrk_script "$key" "$session" /mcp '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello from the load test"}}}' '"result"' > "$work/mcp.lua"
wrk_script "$key" "" /v1/tools/echo/invoke '{"text":"hello from the load test %d"}' '"output"' > "$work/v1.lua"

run() { # $1: lua script, $2: connections, $3: seconds
  local threads=$THREADS
  [ "$2" -lt "$threads" ] && threads=$2
  wrk -t"$threads" -c"$2" -d"$3s" -s "$work/$1" "$url" | grep RESULT
}
warm=$(( SECONDS_PER_RUN < 2 ? SECONDS_PER_RUN : 2 ))
echo "warm-up"; run v1.lua 64 "$warm" >/dev/null; run mcp.lua 64 "$warm" >/dev/null
failed=0
for connections in 1 64; do
  for target in v1 mcp; do
    result=$(run "$target.lua" "$connections" "$SECONDS_PER_RUN")
    printf '%-4s %2d connection(s): %s\n' "$target" "$connections" "$result"
    [[ "$result" == *"errors=0 wrong=0"* ]] || failed=1
  done
done
[ "$failed" = 0 ] || { echo "some answers were errors or lacked a result" >&2; tail -5 "$work/gw.err" >&2; exit 1; }
