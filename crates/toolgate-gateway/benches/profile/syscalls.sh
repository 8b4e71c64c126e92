#!/usr/bin/env bash
# System calls per call through the gateway: CALLS sequential `tools/call`s of the upstream's
# echo over `/mcp` (one MCP session) or `/v1`, on one kept-alive connection, with policies on
# — the configuration of profile.sh and the peers benchmark — counted by `strace -c -f` on
# the gateway. Deterministic enough to compare builds: each write or read on a socket is a
# trip through the kernel's TCP stack, which on loopback also runs the receiver's side.
#
#   syscalls.sh GATEWAY_BIN [mcp|v1|mcp-proxy] [CALLS]
# mcp-proxy: the peer of benches/peers/ in the gateway's place (installed there by run.sh).
# DEMO_BIN chooses the upstream build (default: target/release/toolgate-mcp-demo);
# TRACE=upstream counts the upstream's system calls instead of the gateway's.
set -euo pipefail
GW=$(realpath "$1"); MODE=${2:-mcp}; CALLS=${3:-500}
DEMO=$(realpath "${DEMO_BIN:-target/release/toolgate-mcp-demo}")
here=$(realpath "$(dirname "$0")")
cd "$here/../../../.."
command -v strace >/dev/null || { echo "strace is missing (apt-get install strace)" >&2; exit 1; }
PROFILE=release
# shellcheck source=../common.sh
. crates/toolgate-gateway/benches/common.sh
# shellcheck source=../../../../benches/peers/targets.sh
. benches/peers/targets.sh
started=()
trap 'for p in "${started[@]}"; do stop_process "$p"; done; cleanup' EXIT
UPSTREAM_BIN=$DEMO
TOOLGATE_BIN=$GW
start_upstream "$work"
target=toolgate-$MODE
if [ "$MODE" = mcp-proxy ]; then
  target=mcp-proxy
  PEERS_CACHE=${PEERS_CACHE:-$HOME/.cache/toolgate-peers}
  MCP_PROXY_VERSION=${MCP_PROXY_VERSION:-0.6.0}
  prepare_mcp_proxy
fi
start_target "$target" on "$work"
pid=$T_PID key=$T_TOKEN
[ "${TRACE:-gateway}" = upstream ] && pid=$U_PID
sess=-
[ "${T_MODE:-mcp}" = mcp ] && sess=$(open_session "$T_URL" "$key")
# Warm up (connections to the upstream, caches), then count.
python3 "$here/calls.py" "$T_URL" "$T_TOOL" "$key" "$sess" 50
strace -f -c -o "$work/strace.txt" -p "$pid" 2>/dev/null & tracer=$!
sleep 1
python3 "$here/calls.py" "$T_URL" "$T_TOOL" "$key" "$sess" "$CALLS"
kill -INT $tracer; wait $tracer 2>/dev/null || true
echo "$MODE: system calls of the ${TRACE:-gateway} per call over $CALLS calls"
awk -v n="$CALLS" 'NR > 2 && $NF != "total" && $1 !~ /^-/ {
  printf "  %-14s %6.2f\n", $NF, $4 / n }' "$work/strace.txt" | sort -k2,2 -g -r
