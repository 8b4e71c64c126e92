#!/usr/bin/env bash
# Load benchmark on loopback: what the gateway adds in front of an MCP server. The same
# `tools/call` of `echo` over streamable HTTP (one MCP session, connections kept alive),
# sent directly to an upstream MCP server (toolgate-mcp-demo, a Rust server) and sent to
# the gateway importing that upstream (a credential to the upstream, API key, argument
# check against the upstream's schema, the upstream's result passed through whole), with
# 1 and 16 connections. Prints rps, p50 and p99 of both, the latency added, and the TCP
# connections the gateway opened to the upstream per call.
#
#   crates/toolgate-gateway/benches/upstream_load.sh            # 10 s per run, release
#   LOAD_SECONDS=1 PROFILE=debug benches/upstream_load.sh       # a quick smoke run (CI)
set -euo pipefail
cd "$(dirname "$0")/../../.."

SECONDS_PER_RUN=${LOAD_SECONDS:-10}
THREADS=${LOAD_THREADS:-2}
PROFILE=${PROFILE:-release}

# shellcheck source=common.sh
. crates/toolgate-gateway/benches/common.sh
need_wrk
need_gateway
need_upstream

# The upstream, requiring toolgate's credential.
upstream_token=tg_upstream_$RANDOM$RANDOM
TOOLGATE_DEMO_TOKEN=$upstream_token "$UPSTREAM_BIN" http 127.0.0.1:0 > "$work/up.out" 2> "$work/up.err" &
upstream_pid=$!
trap 'kill $upstream_pid 2>/dev/null || true; cleanup' EXIT
for _ in $(seq 1 100); do grep -q listening "$work/up.out" 2>/dev/null && break; sleep 0.1; done
upstream_url=$(sed -n 's/^listening on //p' "$work/up.out")
[ -n "$upstream_url" ] || { echo "the upstream did not start:" >&2; cat "$work/up.err" >&2; exit 1; }

# The gateway in front of it.
key=tg_load_$RANDOM$RANDOM
cat > "$work/gateway.yaml" <<YAML
upstreams:
  - name: demo
    url: $upstream_url
    credential_env: UPSTREAM_TOKEN
users:
  - { id: load, key_sha256: "$(printf %s "$key" | sha256sum | cut -d' ' -f1)", roles: [bench] }
logging: { level: warn }
YAML
UPSTREAM_TOKEN=$upstream_token serve_gateway
gateway_url=$url/mcp

# $1: the MCP URL, $2: the bearer token; opens a session and prints its id.
open_session() {
  local headers=(-H "Authorization: Bearer $2" -H 'Content-Type: application/json'
    -H 'Accept: application/json, text/event-stream')
  local session
  session=$(curl -sf -D - -o /dev/null "${headers[@]}" -d '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"upstream_load.sh","version":"0"}}}' \
    "$1" | tr -d '\r' | sed -n 's/^mcp-session-id: //Ip')
  [ -n "$session" ] || { echo "initialize at $1 gave no session id" >&2; exit 1; }
  curl -sf -o /dev/null "${headers[@]}" -H "mcp-session-id: $session" \
    -d '{"jsonrpc":"2.0","method":"notifications/initialized"}' "$1"
  echo "$session"
}

call='{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello through the gateway"}}}'
wrk_script "$upstream_token" "$(open_session "$upstream_url" "$upstream_token")" "" "$call" 'hello through the gateway' > "$work/direct.lua"
wrk_script "$key" "$(open_session "$gateway_url" "$key")" "" "$call" 'hello through the gateway' > "$work/gateway.lua"

run() { # $1: target (direct|gateway), $2: connections, $3: seconds
  local threads=$THREADS url=$upstream_url
  [ "$1" = gateway ] && url=$gateway_url
  [ "$2" -lt "$threads" ] && threads=$2
  wrk -t"$threads" -c"$2" -d"$3s" -s "$work/$1.lua" "$url" | grep RESULT
}
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
# Sockets toward the upstream's port, open or in TIME-WAIT: what a run adds to this count
# is the connections opened during it (a closed one stays in TIME-WAIT for 60 s, longer
# than the whole script; loopback may reuse a TIME-WAIT port after 1 s, so this is a
# lower bound when connections are not kept alive).
upstream_port=${upstream_url##*:}; upstream_port=${upstream_port%%/*}
upstream_sockets() { ss -Htan "( dport = :$upstream_port )" | wc -l; }
# The upstream's CPU time so far (user + system), in clock ticks.
upstream_ticks() { awk '{ print $14 + $15 }' "/proc/$upstream_pid/stat"; }
ticks_per_second=$(getconf CLK_TCK)
warm=$(( SECONDS_PER_RUN < 2 ? SECONDS_PER_RUN : 2 ))
echo "warm-up"; run direct 16 "$warm" >/dev/null; run gateway 16 "$warm" >/dev/null
failed=0
for connections in 1 16; do
  direct=$(run direct "$connections" "$SECONDS_PER_RUN")
  sockets_before=$(upstream_sockets) ticks_before=$(upstream_ticks)
  gateway=$(run gateway "$connections" "$SECONDS_PER_RUN")
  opened=$(( $(upstream_sockets) - sockets_before )) ticks=$(( $(upstream_ticks) - ticks_before ))
  # Sockets of earlier runs leave TIME-WAIT meanwhile: the count is a lower bound, never below 0.
  (( opened < 0 )) && opened=0
  calls=$(awk "BEGIN { print $(field rps "$gateway") * $SECONDS_PER_RUN }")
  printf 'direct  %2d connection(s): %s\n' "$connections" "$direct"
  printf 'gateway %2d connection(s): %s\n' "$connections" "$gateway"
  printf 'upstream, gateway %2d connection(s): %d TCP connections opened for about %.0f calls (%.3f per call), %.3f ms CPU per call\n' \
    "$connections" "$opened" "$calls" "$(awk "BEGIN { print $opened / $calls }")" \
    "$(awk "BEGIN { print $ticks * 1000 / $ticks_per_second / $calls }")"
  printf 'added   %2d connection(s): p50 %+.3f ms, p99 %+.3f ms\n' "$connections" \
    "$(awk "BEGIN { print $(field p50_ms "$gateway") - $(field p50_ms "$direct") }")" \
    "$(awk "BEGIN { print $(field p99_ms "$gateway") - $(field p99_ms "$direct") }")"
  for result in "$direct" "$gateway"; do
    [[ "$result" == *"errors=0 wrong=0"* ]] || failed=1
  done
done
[ "$failed" = 0 ] || { echo "some answers were errors or lacked the echo" >&2; tail -5 "$work/gw.err" >&2; exit 1; }
