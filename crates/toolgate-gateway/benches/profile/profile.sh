#!/usr/bin/env bash
# Where a call's time goes through the gateway: `tools/call` of an upstream's echo over
# `/mcp` (one MCP session) or `/v1`, with policies on (API key, authorization rule, per-user
# rate limit, an audit record per call), driven by wrk on loopback. Prints req/s, p50, p99,
# the gateway's and the upstream's CPU per call and the gateway's context switches per call;
# with PERF=1, records the gateway with `perf record --call-graph dwarf` for half the run.
# Read the recording with the two classifiers beside this script:
#   perf script -i $PERF_DATA --no-inline | python3 by_task.py    # by tokio task (the hops)
#   perf script -i $PERF_DATA --no-inline | python3 by_owner.py   # by owning code
#
#   profile.sh GATEWAY_BIN [mcp|v1] [CONNECTIONS] [SECONDS] [PERF: 0|1]
# DEMO_BIN chooses the upstream build (default: target/release/toolgate-mcp-demo).
set -euo pipefail
GW=$(realpath "$1"); MODE=${2:-mcp}; CONNS=${3:-16}; SECS=${4:-10}; PERF=${5:-0}
DEMO=$(realpath "${DEMO_BIN:-target/release/toolgate-mcp-demo}")
PERF_DATA=$(realpath -m "${PERF_DATA:-/tmp/toolgate-profile.data}")
cd "$(dirname "$0")/../../../.."
PROFILE=release
. crates/toolgate-gateway/benches/common.sh
tok=tg_up_$RANDOM
TOOLGATE_DEMO_TOKEN=$tok "$DEMO" http 127.0.0.1:0 > "$work/up.out" 2> "$work/up.err" &
up=$!
trap 'kill $up 2>/dev/null || true; cleanup' EXIT
for _ in $(seq 1 100); do grep -q listening "$work/up.out" 2>/dev/null && break; sleep 0.1; done
upurl=$(sed -n 's/^listening on //p' "$work/up.out")
key=tg_load_$RANDOM$RANDOM
cat > "$work/gateway.yaml" <<YAML
upstreams:
  - name: demo
    url: $upurl
    credential_env: UPSTREAM_TOKEN
users:
  - { id: load, key_sha256: "$(printf %s "$key" | sha256sum | cut -d' ' -f1)", roles: [bench] }
policies:
  authorization:
    rules:
      - { effect: allow, roles: [bench], tools: [echo] }
  rate_limits:
    - { name: per-user, rate: 1000000/second, burst: 1000000, partition: user }
audit:
  sink: file
  path: $work/audit.jsonl
logging: { level: warn }
YAML
TOOLGATE_BIN=$GW
UPSTREAM_TOKEN=$tok serve_gateway
hdr=(-H "Authorization: Bearer $key" -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream')
sess=$(curl -sf -D - -o /dev/null "${hdr[@]}" -d '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"p","version":"0"}}}' "$url/mcp" | tr -d '\r' | sed -n 's/^mcp-session-id: //Ip')
curl -sf -o /dev/null "${hdr[@]}" -H "mcp-session-id: $sess" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}' "$url/mcp"
if [ "$MODE" = mcp ]; then
  wrk_script "$key" "$sess" /mcp '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}' 'hello' > $work/s.lua
else
  wrk_script "$key" "" /v1/tools/echo/invoke '{"text":"hello %d"}' 'hello' > $work/s.lua
fi
wrk -t2 -c16 -d2s -s $work/s.lua "$url" | grep RESULT
t0=$(awk '{print $14+$15}' /proc/$pid/stat); u0=$(awk '{print $14+$15}' /proc/$up/stat)
cs0=$(cat /proc/$pid/task/*/status | awk '/voluntary_ctxt_switches/ {s+=$2} END {print s}')
if [ "$PERF" = 1 ]; then
  perf record -F 499 -g --call-graph dwarf,32768 -p $pid -o $PERF_DATA -- sleep $((SECS/2)) >/dev/null 2>&1 &
fi
threads=2; [ $CONNS -lt 2 ] && threads=1
res=$(wrk -t$threads -c$CONNS -d${SECS}s -s $work/s.lua "$url" | grep RESULT)
t1=$(awk '{print $14+$15}' /proc/$pid/stat); u1=$(awk '{print $14+$15}' /proc/$up/stat)
cs1=$(cat /proc/$pid/task/*/status | awk '/voluntary_ctxt_switches/ {s+=$2} END {print s}')
rps=$(sed -n 's/.*rps=\([0-9.]*\).*/\1/p' <<<"$res")
echo "$MODE c=$CONNS $res gw_cpu_ms_per_call=$(awk "BEGIN{print ($t1-$t0)*10/($rps*$SECS)}") up_cpu_ms_per_call=$(awk "BEGIN{print ($u1-$u0)*10/($rps*$SECS)}") ctxsw_per_call=$(awk "BEGIN{print ($cs1-$cs0)/($rps*$SECS)}") rss_kb=$(awk '/VmHWM/{print $2}' /proc/$pid/status)"
[ "$PERF" = 1 ] && wait %1 2>/dev/null || true
