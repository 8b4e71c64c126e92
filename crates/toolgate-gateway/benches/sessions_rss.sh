#!/usr/bin/env bash
# Memory under a flood of MCP `initialize` from one key: drives `POST /mcp` initialize with
# wrk on loopback (2 threads, 8 connections) for SESSIONS_SEGMENTS segments of
# SESSIONS_SEGMENT seconds, and prints after each segment the requests answered 200 (a
# session kept) and 429 (refused past the cap), and the gateway's VmRSS.
#
#   crates/toolgate-gateway/benches/sessions_rss.sh                   # the default caps
#   SESSIONS_PER_USER=100000 SESSIONS_MAX=100000 benches/sessions_rss.sh
#                                                  # no cap in reach: the cost of a kept session
#   TOOLGATE_BIN=/tmp/old/toolgate benches/sessions_rss.sh   # another build (caps unset then)
set -euo pipefail
cd "$(dirname "$0")/../../.."

SEGMENTS=${SESSIONS_SEGMENTS:-5}
SEGMENT=${SESSIONS_SEGMENT:-2}
PROFILE=${PROFILE:-release}

# shellcheck source=common.sh
. crates/toolgate-gateway/benches/common.sh
need_wrk
need_gateway

limits=
if [ -n "${SESSIONS_PER_USER:-}${SESSIONS_MAX:-}" ]; then
  limits="server:
  mcp_sessions: { per_user: ${SESSIONS_PER_USER:-32}, max: ${SESSIONS_MAX:-4096} }"
fi
key=tg_sessions_$RANDOM$RANDOM
cat > "$work/gateway.yaml" <<YAML
$limits
tools:
  builtin: [echo]
users:
  - { id: flood, key_sha256: "$(printf %s "$key" | sha256sum | cut -d' ' -f1)", roles: [bench] }
logging:
  level: warn
YAML
serve_gateway

cat > "$work/initialize.lua" <<LUA
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"flood","version":"0"}}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["Authorization"] = "Bearer $key"
local threads = {}
function setup(thread)
  table.insert(threads, thread)
end
kept = 0
refused = 0
other = 0
function response(status, headers, body)
  if status == 200 then kept = kept + 1
  elseif status == 429 or status == 503 then refused = refused + 1
  else other = other + 1 end
end
function done(summary, latency, requests)
  local k, r, o = 0, 0, 0
  for _, thread in ipairs(threads) do
    k = k + thread:get("kept"); r = r + thread:get("refused"); o = o + thread:get("other")
  end
  io.write(string.format("RESULT kept=%d refused=%d other=%d\\n", k, r, o))
end
LUA

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status"; }
echo "requests kept refused rss_kb"
echo "0 0 0 $(rss_kb)"
total=0 kept=0 refused=0
for _ in $(seq 1 "$SEGMENTS"); do
  result=$(wrk -t2 -c8 -d"${SEGMENT}s" -s "$work/initialize.lua" "$url/mcp" | grep RESULT)
  k=$(sed -E 's/.*kept=([0-9]+).*/\1/' <<<"$result")
  r=$(sed -E 's/.*refused=([0-9]+).*/\1/' <<<"$result")
  o=$(sed -E 's/.*other=([0-9]+).*/\1/' <<<"$result")
  [ "$o" = 0 ] || { echo "$o answers were neither 200 nor 429/503" >&2; tail -5 "$work/gw.err" >&2; exit 1; }
  kept=$((kept + k)) refused=$((refused + r)) total=$((total + k + r))
  sleep 0.5  # refused sessions are closed on their own tasks
  echo "$total $kept $refused $(rss_kb)"
done
