#!/usr/bin/env bash
# The peers benchmark (issue 32): `tools/call` of echo through toolgate and through its
# peers, against the same upstream (toolgate-mcp-demo over streamable HTTP) with the same
# client (wrk and benches/peers/client.lua: one MCP session per connection, every answer
# checked), with 1 and 16 connections, policies off and on. Targets alternate inside each
# round, each round in another order; every run is one line of JSON in
# benches/peers/results/<sitting>.jsonl, and benches/peers/summary.py makes the table.
#
#   benches/peers/run.sh                                  # 3 rounds of 10 s runs, release builds
#   ROUNDS=5 SECONDS_PER_RUN=20 benches/peers/run.sh      # longer sittings
#   TOOLGATE_BIN=/path/to/toolgate benches/peers/run.sh   # another build of the gateway
#   TARGETS="direct toolgate-mcp mcp-proxy" benches/peers/run.sh   # some targets only
#   TOOLGATE_BASE_BIN=/path/to/old/toolgate \
#     TARGETS="direct toolgate-mcp toolgate-mcp-base mcp-proxy" benches/peers/run.sh
#                                                 # a build against another, in one sitting
#   python3 benches/peers/summary.py benches/peers/results/<sitting>.jsonl
#
# The peers are installed, pinned, on first use under $PEERS_CACHE (~/.cache/toolgate-peers):
# mcp-proxy from crates.io (cargo install --locked), FastMCP and ContextForge from PyPI (a
# venv each). A peer that cannot be installed or started is left out with a `skipped` row
# saying why, never replaced by anything else.
set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=${ROUNDS:-3}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
WARM_SECONDS=${WARM_SECONDS:-2}
CONNECTIONS=${CONNECTIONS:-"1 16"}
POLICIES=${POLICIES:-"off on"}
TARGETS=${TARGETS:-"direct toolgate-mcp toolgate-v1 mcp-proxy fastmcp contextforge"}
PEERS_CACHE=${PEERS_CACHE:-$HOME/.cache/toolgate-peers}
MCP_PROXY_VERSION=${MCP_PROXY_VERSION:-0.6.0}
FASTMCP_VERSION=${FASTMCP_VERSION:-4.2.3}
CONTEXTFORGE_VERSION=${CONTEXTFORGE_VERSION:-1.0.7}
PROFILE=release
mkdir -p benches/peers/results
OUT=${OUT:-benches/peers/results/$(date -u +%Y-%m-%dT%H%MZ).jsonl}

# shellcheck source=../../crates/toolgate-gateway/benches/common.sh
. crates/toolgate-gateway/benches/common.sh
# shellcheck source=targets.sh
. benches/peers/targets.sh
need_wrk
need_gateway
need_upstream
command -v curl >/dev/null || { echo "curl is needed" >&2; exit 1; }

# Every process this script started, by id (a peer started with setsid leads its own
# process group, so its workers stop with it); stopped when the script exits.
started=()
stop_all() { for p in "${started[@]}"; do stop_process "$p"; done; started=(); }
trap 'stop_all; cleanup' EXIT

# json_row KEY VALUE…: appends one JSON object to $OUT; a value that is a number is written
# as one, anything else as a string.
json_row() {
  local line="{" sep="" key value
  while [ $# -gt 0 ]; do
    key=$1 value=$2
    shift 2
    if [[ $value =~ ^-?[0-9]+(\.[0-9]+)?$ ]]; then
      line+="$sep\"$key\":$value"
    else
      value=${value//\\/\\\\} value=${value//\"/\\\"}
      line+="$sep\"$key\":\"$value\""
    fi
    sep=,
  done
  echo "$line}" >> "$OUT"
}

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
ticks_per_second=$(getconf CLK_TCK)

# CPU time of a process and of its live descendants (utime + stime, and the cutime + cstime
# of children already reaped), in clock ticks.
tree_pids() {
  local p=$1 child
  echo "$p"
  for child in $(cat /proc/"$p"/task/*/children 2>/dev/null); do tree_pids "$child"; done
}
tree_ticks() {
  local total=0 p
  for p in $(tree_pids "$1"); do
    total=$(( total + $(awk '{ sub(/^.*\) /, ""); print $12 + $13 + $14 + $15 }' /proc/"$p"/stat 2>/dev/null || echo 0) ))
  done
  echo "$total"
}
# Peak resident memory (VmHWM) summed over the process and its live descendants, in kB.
tree_hwm_kb() {
  local total=0 p
  for p in $(tree_pids "$1"); do
    total=$(( total + $(awk '/^VmHWM:/ { print $2 }' /proc/"$p"/status 2>/dev/null || echo 0) ))
  done
  echo "$total"
}
field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<" $2"; }

# wrk_run CONNECTIONS SECONDS: one run of the client against the started target (T_*),
# each connection in a session of its own, opened before the clock starts and closed after.
wrk_run() {
  local connections=$1 seconds=$2 sessions=() i session result
  for (( i = 0; i < connections; i++ )); do
    session=-
    if [ "$T_MODE" = mcp ] && ! session=$(open_session "$T_URL" "$T_TOKEN" 2>> "$work/wrk.err"); then
      echo "RESULT requests=0 rps=0 p50_ms=0 p99_ms=0 errors=1 wrong=0 (initialize failed)"
      return 0
    fi
    sessions+=("$session")
  done
  result=$(wrk -t"$connections" -c"$connections" -d"${seconds}s" --timeout 10s \
    -s benches/peers/client.lua "$T_URL" -- "$T_MODE" "$T_TOKEN" "$T_TOOL" "${sessions[@]}" \
    2> "$work/wrk.err" | grep RESULT || true)
  for i in "${sessions[@]}"; do [ "$i" = - ] || close_session "$T_URL" "$T_TOKEN" "$i"; done
  echo "${result:-RESULT requests=0 rps=0 p50_ms=0 p99_ms=0 errors=0 wrong=0}"
}

# The sitting: what ran, where, on what.
versions_row() {
  json_row kind sitting file "$(basename "$OUT")" started_utc "$(date -u +%FT%TZ)" \
    machine "$(lscpu | sed -n 's/^Model name: *//p' | head -1)" cpus "$(nproc)" \
    memory_gib "$(awk '/MemTotal/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo)" \
    kernel "$(uname -r)" load_start "$(loadavg)" \
    rounds "$ROUNDS" seconds_per_run "$SECONDS_PER_RUN" warm_seconds "$WARM_SECONDS" \
    connections "$CONNECTIONS" policies "$POLICIES" targets "$TARGETS" \
    wrk "$(wrk -v 2>&1 | head -1 | cut -d' ' -f2)" \
    toolgate_commit "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates src || echo +dirty)" \
    toolgate_bin "$TOOLGATE_BIN" toolgate_bin_sha256 "$(sha256sum "$TOOLGATE_BIN" | cut -c1-16)" \
    toolgate_base_bin "${TOOLGATE_BASE_BIN:--}" \
    toolgate_base_bin_sha256 "$( [ -n "${TOOLGATE_BASE_BIN:-}" ] && sha256sum "$TOOLGATE_BASE_BIN" | cut -c1-16 || echo -)" \
    upstream_bin "$UPSTREAM_BIN" \
    mcp_proxy "$MCP_PROXY_VERSION" fastmcp "$FASTMCP_VERSION" contextforge "$CONTEXTFORGE_VERSION" \
    python "$(python3 -c 'import platform; print(platform.python_version())')"
}

# The slots of a round: every target with every policy setting (direct to the upstream has
# no policies of its own: it runs once, as the baseline).
slots=()
available=()
skipped_rows=()
for target in $TARGETS; do
  if reason=$(prepare_target "$target" 2>&1); then
    available+=("$target")
  else
    echo "SKIPPED $target: $reason" >&2
    skipped_rows+=("$target" "$reason")
  fi
done
for target in "${available[@]}"; do
  if [ "$target" = direct ]; then slots+=("direct off"); continue; fi
  for policy in $POLICIES; do slots+=("$target $policy"); done
done
[ ${#slots[@]} -gt 0 ] || { echo "nothing to run" >&2; exit 1; }

versions_row
for (( i = 0; i < ${#skipped_rows[@]}; i += 2 )); do
  json_row kind skipped target "${skipped_rows[i]}" reason "${skipped_rows[i+1]}"
done
echo "results: $OUT"

failed=0
for (( round = 1; round <= ROUNDS; round++ )); do
  json_row kind round round "$round" event start load "$(loadavg)" utc "$(date -u +%T)"
  # Each round starts one slot further along: no target is always first.
  for (( s = 0; s < ${#slots[@]}; s++ )); do
    read -r target policy <<<"${slots[(s + round - 1) % ${#slots[@]}]}"
    slot_dir=$work/r$round-$target-$policy
    mkdir -p "$slot_dir"
    if ! start_upstream "$slot_dir" || ! start_target "$target" "$policy" "$slot_dir"; then
      echo "round $round: $target ($policy) did not start; see the row" >&2
      json_row kind run round "$round" target "$target" policies "$policy" status failed \
        error "did not start: $(tail -c 300 "$slot_dir"/*.err 2>/dev/null | tr '\n' ' ')"
      failed=1; stop_all; continue
    fi
    calls=0
    warm=$(wrk_run 16 "$WARM_SECONDS")
    calls=$(( calls + $(field requests "$warm") ))
    for connections in $CONNECTIONS; do
      load_before=$(loadavg) ticks_before=$(tree_ticks "$T_PID")
      up_ticks_before=$(tree_ticks "$U_PID")
      result=$(wrk_run "$connections" "$SECONDS_PER_RUN")
      ticks=$(( $(tree_ticks "$T_PID") - ticks_before ))
      up_ticks=$(( $(tree_ticks "$U_PID") - up_ticks_before ))
      hwm=$(tree_hwm_kb "$T_PID")
      requests=$(field requests "$result")
      calls=$(( calls + requests ))
      status=ok
      [ "$requests" -gt 0 ] && [ "$(field errors "$result")" = 0 ] && [ "$(field wrong "$result")" = 0 ] || status=failed
      [ "$status" = ok ] || { failed=1; echo "  wrk: $(head -c 400 "$work/wrk.err")" >&2; }
      cpu_per_1000=$(awk "BEGIN { printf \"%.4f\", $requests ? $ticks / $ticks_per_second / $requests * 1000 : 0 }")
      up_cpu_per_1000=$(awk "BEGIN { printf \"%.4f\", $requests ? $up_ticks / $ticks_per_second / $requests * 1000 : 0 }")
      json_row kind run round "$round" target "$target" policies "$policy" \
        connections "$connections" seconds "$SECONDS_PER_RUN" status "$status" \
        requests "$requests" rps "$(field rps "$result")" p50_ms "$(field p50_ms "$result")" \
        p99_ms "$(field p99_ms "$result")" errors "$(field errors "$result")" \
        wrong "$(field wrong "$result")" cpu_s_per_1000 "$cpu_per_1000" \
        upstream_cpu_s_per_1000 "$up_cpu_per_1000" peak_rss_kb "$hwm" \
        processes "$(tree_pids "$T_PID" | wc -l)" load_before "$load_before" load_after "$(loadavg)" \
        version "$T_VERSION"
      printf 'round %d  %-13s %-3s %2d conn: %s cpu_s/1000=%s rss_mb=%d\n' "$round" "$target" \
        "$policy" "$connections" "${result#RESULT }" "$cpu_per_1000" $(( hwm / 1024 ))
    done
    stop_all
    # What the target's audit kept of the calls it answered (counted once it has stopped,
    # so that buffered records are flushed).
    if [ "$policy" = on ]; then
      json_row kind audit round "$round" target "$target" calls "$calls" \
        audit_records "$(audit_records "$target" "$slot_dir")"
    fi
  done
  json_row kind round round "$round" event end load "$(loadavg)" utc "$(date -u +%T)"
done
echo "results: $OUT"
python3 benches/peers/summary.py "$OUT"
[ "$failed" = 0 ] || { echo "some runs failed (errors or wrong answers): see status in $OUT" >&2; exit 1; }
