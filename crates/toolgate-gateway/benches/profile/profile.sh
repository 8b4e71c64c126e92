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
# shellcheck source=../common.sh
. crates/toolgate-gateway/benches/common.sh
# The upstream, the gateway with policies on, and the MCP session are the peers benchmark's
# (benches/peers/targets.sh: start_upstream, start_toolgate, open_session), so a profile is
# of the very configuration that benchmark measures.
# shellcheck source=../../../../benches/peers/targets.sh
. benches/peers/targets.sh
started=()
trap 'for p in "${started[@]}"; do stop_process "$p"; done; cleanup' EXIT
UPSTREAM_BIN=$DEMO
TOOLGATE_BIN=$GW
start_upstream "$work"
start_toolgate "toolgate-$MODE" on "$work"
pid=$T_PID up=$U_PID key=$T_TOKEN
sess=$(open_session "$url/mcp" "$key")
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
  perf_pid=$!
fi
threads=2; [ $CONNS -lt 2 ] && threads=1
res=$(wrk -t$threads -c$CONNS -d${SECS}s -s $work/s.lua "$url" | grep RESULT)
t1=$(awk '{print $14+$15}' /proc/$pid/stat); u1=$(awk '{print $14+$15}' /proc/$up/stat)
cs1=$(cat /proc/$pid/task/*/status | awk '/voluntary_ctxt_switches/ {s+=$2} END {print s}')
rps=$(sed -n 's/.*rps=\([0-9.]*\).*/\1/p' <<<"$res")
echo "$MODE c=$CONNS $res gw_cpu_ms_per_call=$(awk "BEGIN{print ($t1-$t0)*10/($rps*$SECS)}") up_cpu_ms_per_call=$(awk "BEGIN{print ($u1-$u0)*10/($rps*$SECS)}") ctxsw_per_call=$(awk "BEGIN{print ($cs1-$cs0)/($rps*$SECS)}") rss_kb=$(awk '/VmHWM/{print $2}' /proc/$pid/status)"
# The recording, not job %1 (the upstream, which runs until the script stops it).
[ "$PERF" = 1 ] && wait "$perf_pid" 2>/dev/null || true
