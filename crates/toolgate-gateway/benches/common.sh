# Shared by the load scripts beside it (sourced, not run): wrk, the gateway binary, and a
# work directory that is removed, with the gateway process, when the script exits.

# Installs wrk from Debian's packages when it is missing.
need_wrk() {
  if ! command -v wrk >/dev/null; then
    echo "installing wrk" >&2
    (apt-get update -qq && apt-get install -y -qq wrk) >/dev/null 2>&1 || {
      echo "wrk is missing and could not be installed (apt-get install wrk)" >&2; exit 1; }
  fi
}

# Builds the gateway for $PROFILE and sets TOOLGATE_BIN to it, unless TOOLGATE_BIN is set.
need_gateway() {
  if [ -z "${TOOLGATE_BIN:-}" ]; then
    local flag=()
    [ "$PROFILE" = release ] && flag=(--release)
    cargo build -q "${flag[@]}" -p toolgate-gateway --bin toolgate
    TOOLGATE_BIN=${CARGO_TARGET_DIR:-target}/$PROFILE/toolgate
  fi
}

# Builds the upstream MCP server of the benchmarks (toolgate-mcp-demo) for $PROFILE and sets
# UPSTREAM_BIN to it, unless UPSTREAM_BIN is set.
need_upstream() {
  if [ -z "${UPSTREAM_BIN:-}" ]; then
    local flag=()
    [ "$PROFILE" = release ] && flag=(--release)
    cargo build -q "${flag[@]}" -p toolgate-mcp --bin toolgate-mcp-demo
    UPSTREAM_BIN=${CARGO_TARGET_DIR:-target}/$PROFILE/toolgate-mcp-demo
  fi
}

# Makes $work, a temporary directory; $pid, once set, is the gateway process to stop.
work=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

# serve_gateway [CONFIG]: starts $TOOLGATE_BIN on CONFIG ($work/gateway.yaml by default) on a
# free loopback port; sets $pid and $url (http://127.0.0.1:PORT), or exits with the gateway's
# stderr when it did not start.
serve_gateway() {
  "$TOOLGATE_BIN" serve --config "${1:-$work/gateway.yaml}" --listen 127.0.0.1:0 > "$work/gw.out" 2> "$work/gw.err" &
  pid=$!
  for _ in $(seq 1 100); do grep -q listening "$work/gw.out" 2>/dev/null && break; sleep 0.1; done
  url=$(sed -n 's/^toolgate listening on //p' "$work/gw.out")
  [ -n "$url" ] || { echo "the gateway did not start:" >&2; cat "$work/gw.err" >&2; exit 1; }
}

# wrk_script TOKEN SESSION PATH BODY EXPECT: a wrk Lua script that POSTs BODY (a Lua format
# string with one %d, replaced by an id unique per call) to PATH (empty: the URL's own), with
# the bearer TOKEN and, unless empty, the MCP session SESSION. An answer that is not a 200 or
# lacks EXPECT counts as wrong. Prints one line: RESULT rps=… p50_ms=… p99_ms=… errors=… wrong=….
wrk_script() {
  local path=nil
  [ -n "$3" ] && path="\"$3\""
  cat <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["Authorization"] = "Bearer $1"
$([ -n "$2" ] && echo "wrk.headers[\"mcp-session-id\"] = \"$2\"")
local threads = {}
function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end
local counter = 0
bad = 0
function request()
  counter = counter + 1
  return wrk.format(nil, $path, nil, string.format('$4', tid * 1000000000 + counter))
end
function response(status, headers, body)
  if status ~= 200 or not string.find(body, '$5', 1, true) then bad = bad + 1 end
end
function done(summary, latency, requests)
  local wrong = 0
  for _, thread in ipairs(threads) do wrong = wrong + thread:get("bad") end
  io.write(string.format("RESULT rps=%.0f p50_ms=%.3f p99_ms=%.3f errors=%d wrong=%d\\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000,
    latency:percentile(99) / 1000, summary.errors.status + summary.errors.connect
    + summary.errors.read + summary.errors.write + summary.errors.timeout, wrong))
end
LUA
}
