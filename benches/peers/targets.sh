# The targets of the peers benchmark (sourced by run.sh, and by
# crates/toolgate-gateway/benches/profile/profile.sh for toolgate's; not run): how each is
# installed, configured with policies off and on, started and stopped, and where its audit
# records go.
#
# start_target sets, for the client:
#   T_PID      the process whose CPU time and peak memory are measured (with its descendants)
#   T_URL      the URL every call is POSTed to
#   T_TOKEN    the caller's bearer token (`-`: none)
#   T_MODE     mcp (JSON-RPC tools/call in a session) or v1 (toolgate's HTTP API)
#   T_TOOL     the echo tool's name as the target exposes it
#   T_VERSION  the target's version

# A free loopback port (the peers take a port, not 127.0.0.1:0).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_listening PID PORT SECONDS: waits until something accepts on 127.0.0.1:PORT; fails
# when PID died first or the time ran out.
wait_listening() {
  local i
  for (( i = 0; i < $3 * 10; i++ )); do
    kill -0 "$1" 2>/dev/null || return 1
    (exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# stop_process PID: SIGTERM to the process (to its whole group when it leads one, as the
# peers started with setsid do), SIGKILL after 10 s.
stop_process() {
  local target=$1 i
  [ "$(ps -o pgid= -p "$1" 2>/dev/null | tr -d ' ')" = "$1" ] && target=-$1
  kill -TERM -- "$target" 2>/dev/null || return 0
  for (( i = 0; i < 100; i++ )); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "$target" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

mcp_headers() { # $1: bearer token or -
  printf '%s\n' -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream'
  [ "$1" = - ] || printf '%s\n' -H "Authorization: Bearer $1"
}

# open_session URL TOKEN: initialize, then notifications/initialized; prints the session id
# (`-` when the server keeps none).
open_session() {
  local headers session
  mapfile -t headers < <(mcp_headers "$2")
  session=$(curl -sS -f -D - -o /dev/null --max-time 30 "${headers[@]}" \
    -d '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"toolgate-peers","version":"1"}}}' \
    "$1" | tr -d '\r' | sed -n 's/^mcp-session-id: //Ip') || { echo "initialize at $1 failed" >&2; return 1; }
  [ -n "$session" ] || session=-
  if [ "$session" = - ]; then
    curl -sS -f -o /dev/null --max-time 30 "${headers[@]}" \
      -d '{"jsonrpc":"2.0","method":"notifications/initialized"}' "$1" || return 1
  else
    curl -sS -f -o /dev/null --max-time 30 "${headers[@]}" -H "Mcp-Session-Id: $session" \
      -d '{"jsonrpc":"2.0","method":"notifications/initialized"}' "$1" || return 1
  fi
  echo "$session"
}

# close_session URL TOKEN SESSION: ends the session (DELETE), whatever the server answers.
close_session() {
  local headers
  mapfile -t headers < <(mcp_headers "$2")
  curl -s -o /dev/null --max-time 10 -X DELETE "${headers[@]}" -H "Mcp-Session-Id: $3" "$1" || true
}

# start_upstream DIR: a fresh toolgate-mcp-demo for each slot, requiring its own bearer
# token ($U_TOKEN); sets U_PID and U_URL.
start_upstream() {
  U_TOKEN=up_$RANDOM$RANDOM$RANDOM
  TOOLGATE_DEMO_TOKEN=$U_TOKEN "$UPSTREAM_BIN" http 127.0.0.1:0 > "$1/upstream.out" 2> "$1/upstream.err" &
  U_PID=$!
  started+=("$U_PID")
  local i
  for (( i = 0; i < 100; i++ )); do grep -q listening "$1/upstream.out" 2>/dev/null && break; sleep 0.1; done
  U_URL=$(sed -n 's/^listening on //p' "$1/upstream.out")
  [ -n "$U_URL" ]
}

# prepare_target TARGET: installs what TARGET needs (pinned); fails with the reason.
prepare_target() {
  case $1 in
    direct | toolgate-mcp | toolgate-v1) ;;
    direct-2026 | toolgate-mcp-2026 | toolgate-mcp-2026-base) prepare_target "${1/-2026/}" ;;
    toolgate-mcp-base | toolgate-v1-base)
      [ -x "${TOOLGATE_BASE_BIN:-}" ] || { echo "$1 needs TOOLGATE_BASE_BIN, the gateway build to compare with"; return 1; } ;;
    mcp-proxy) prepare_mcp_proxy ;;
    fastmcp) prepare_venv fastmcp "fastmcp==$FASTMCP_VERSION" ;;
    contextforge) prepare_venv contextforge "mcp-contextforge-gateway==$CONTEXTFORGE_VERSION" ;;
    *) echo "unknown target (known: direct direct-2026 toolgate-mcp toolgate-mcp-2026 toolgate-v1 toolgate-mcp-base toolgate-mcp-2026-base toolgate-v1-base mcp-proxy fastmcp contextforge)"; return 1 ;;
  esac
}

# The pinned mcp-proxy's binary (a function, so that sourcing this file needs no peer's settings).
mcp_proxy_bin() { echo "$PEERS_CACHE/mcp-proxy-$MCP_PROXY_VERSION/bin/mcp-proxy"; }
prepare_mcp_proxy() {
  [ -x "$(mcp_proxy_bin)" ] && return 0
  echo "installing mcp-proxy $MCP_PROXY_VERSION from crates.io (several minutes)" >&2
  mkdir -p "$PEERS_CACHE"
  cargo install --locked --version "$MCP_PROXY_VERSION" --root "$PEERS_CACHE/mcp-proxy-$MCP_PROXY_VERSION" \
    mcp-proxy > "$PEERS_CACHE/mcp-proxy-install.log" 2>&1 \
    || { echo "cargo install mcp-proxy $MCP_PROXY_VERSION failed: $(tail -3 "$PEERS_CACHE/mcp-proxy-install.log" | tr '\n' ' ')"; return 1; }
}

# prepare_venv NAME REQUIREMENT: a venv per pinned peer, $PEERS_CACHE/NAME-VERSION.
venv_dir() { # $1: fastmcp | contextforge
  case $1 in
    fastmcp) echo "$PEERS_CACHE/fastmcp-$FASTMCP_VERSION" ;;
    contextforge) echo "$PEERS_CACHE/contextforge-$CONTEXTFORGE_VERSION" ;;
  esac
}
prepare_venv() {
  local dir
  dir=$(venv_dir "$1")
  [ -f "$dir/.installed" ] && return 0
  echo "installing $2 from PyPI into $dir" >&2
  mkdir -p "$PEERS_CACHE"
  { python3 -m venv "$dir" && "$dir/bin/pip" install -q "$2"; } > "$PEERS_CACHE/$1-install.log" 2>&1 \
    || { echo "pip install $2 failed: $(tail -3 "$PEERS_CACHE/$1-install.log" | tr '\n' ' ')"; return 1; }
  touch "$dir/.installed"
}

# start_target TARGET POLICY DIR: starts TARGET in front of the running upstream.
start_target() {
  T_MODE=mcp T_TOOL=echo T_TOKEN=-
  case $1 in
    direct)
      T_PID=$U_PID T_URL=$U_URL T_TOKEN=$U_TOKEN T_VERSION=toolgate-mcp-demo ;;
    # The `-2026` targets: their plain target, called as a 2026-07-28 client calls.
    direct-2026 | toolgate-mcp-2026 | toolgate-mcp-2026-base)
      start_target "${1/-2026/}" "${@:2}"; T_MODE=mcp-2026 ;;
    toolgate-mcp | toolgate-v1) start_toolgate "$@" ;;
    # The same gateway configuration on another build (TOOLGATE_BASE_BIN): a change
    # measured against what it changes, in the same sitting.
    toolgate-mcp-base | toolgate-v1-base) TOOLGATE_BIN=$TOOLGATE_BASE_BIN start_toolgate "${1%-base}" "${@:2}" ;;
    mcp-proxy) start_mcp_proxy "$@" ;;
    fastmcp) start_fastmcp "$@" ;;
    contextforge) start_contextforge "$@" ;;
  esac
}

# toolgate importing the upstream's tools. Off: the API key alone (the gateway always
# authenticates its callers). On: the API key, an authorization rule, a per-user rate limit
# that never refuses here, an audit record per call in a file.
start_toolgate() {
  local key=tg_peers_$RANDOM$RANDOM$RANDOM
  {
    cat <<YAML
upstreams:
  - name: demo
    url: $U_URL
    credential_env: UPSTREAM_TOKEN
users:
  - { id: bench, key_sha256: "$(printf %s "$key" | sha256sum | cut -d' ' -f1)", roles: [bench] }
logging: { level: warn }
YAML
    [ "$2" = on ] && cat <<YAML
policies:
  authorization:
    rules:
      - { effect: allow, roles: [bench], tools: [echo] }
  rate_limits:
    - { name: per-user, rate: 1000000/second, burst: 1000000, partition: user }
audit:
  sink: file
  path: $3/audit.jsonl
YAML
  } > "$3/gateway.yaml"
  UPSTREAM_TOKEN=$U_TOKEN serve_gateway "$3/gateway.yaml"
  T_PID=$pid
  pid=
  started+=("$T_PID")
  T_TOKEN=$key
  T_VERSION=$("$TOOLGATE_BIN" --version 2>/dev/null | head -1 || echo toolgate)
  if [ "$1" = toolgate-v1 ]; then
    T_MODE=v1 T_URL=$url/v1/tools/echo/invoke
  else
    T_URL=$url/mcp
  fi
}

# mcp-proxy (crates.io), one HTTP backend with the upstream's token; tools are namespaced
# (`demo/echo`). Off: nothing but the proxying. On: bearer-token auth, the global rate limit
# (mcp-proxy has no per-caller one), audit logging. The binary's log filter only lets its
# own crates' targets through, so the audit target `mcp::audit` is added to log_level
# (spliced into that filter); without it no audit record is written at all.
start_mcp_proxy() {
  local port key=mp_peers_$RANDOM$RANDOM$RANDOM
  port=$(free_port)
  {
    cat <<TOML
[proxy]
name = "peers"
[proxy.listen]
host = "127.0.0.1"
port = $port

[[backends]]
name = "demo"
transport = "http"
url = "$U_URL"
bearer_token = "$U_TOKEN"

[observability]
log_level = "warn"
[observability.metrics]
enabled = false
TOML
    [ "$2" = on ] && cat <<TOML

[auth]
type = "bearer"
tokens = ["$key"]
TOML
  } > "$3/mcp-proxy.toml"
  if [ "$2" = on ]; then
    python3 - "$3/mcp-proxy.toml" <<'PY'
import sys
path = sys.argv[1]
text = open(path).read()
# The global limit sits under [proxy]; audit under [observability].
text = text.replace('[proxy.listen]', '[proxy.rate_limit]\nrequests = 1000000\nperiod_seconds = 1\n\n[proxy.listen]', 1)
text = text.replace('log_level = "warn"', 'log_level = "warn,mcp::audit=info"\naudit = true', 1)
open(path, 'w').write(text)
PY
    T_TOKEN=$key
  fi
  "$(mcp_proxy_bin)" --config "$3/mcp-proxy.toml" > "$3/mcp-proxy.out" 2> "$3/mcp-proxy.err" &
  T_PID=$!
  started+=("$T_PID")
  T_URL=http://127.0.0.1:$port/ T_TOOL=demo/echo T_VERSION=mcp-proxy-$MCP_PROXY_VERSION
  wait_listening "$T_PID" "$port" 60
}

# FastMCP's proxy (benches/peers/fastmcp_proxy.py, in the pinned venv), one upstream
# session shared by all callers. On: static bearer token, per-caller rate limiting
# middleware, structured logging middleware to a file as the audit.
start_fastmcp() {
  local port key=fm_peers_$RANDOM$RANDOM$RANDOM args=()
  port=$(free_port)
  [ "$2" = on ] && { args=("$key" "$3/fastmcp-audit.log"); T_TOKEN=$key; }
  UPSTREAM_TOKEN=$U_TOKEN FASTMCP_SHOW_SERVER_BANNER=false setsid "$(venv_dir fastmcp)/bin/python" \
    benches/peers/fastmcp_proxy.py "$U_URL" "$port" "$2" "${args[@]}" > "$3/fastmcp.out" 2> "$3/fastmcp.err" &
  T_PID=$!
  started+=("$T_PID")
  T_URL=http://127.0.0.1:$port/mcp T_VERSION=fastmcp-$FASTMCP_VERSION
  wait_listening "$T_PID" "$port" 60
}

# ContextForge (mcpgateway, in the pinned venv): one uvicorn process, SQLite in the slot's
# directory, stateful MCP sessions, the upstream registered as a gateway (with its bearer
# token) and its echo in a virtual server, called at /servers/ID/mcp. The admin API that
# registers them always takes a JWT made with the gateway's secret. Off: /mcp without
# authentication (MCP_REQUIRE_AUTH=false, the server and tool public) and without the rate
# limiter (on by default at 100 calls a minute). On: a JWT on every call, the rate limiter
# (per IP, user and team, in Redis database 13) with limits that never refuse here, and
# every call's structured log records kept in the database at level INFO (and the audit
# trail on, which records changes to the catalogue, not calls).
start_contextforge() {
  local port dir=$3 venv admin secret
  venv=$(venv_dir contextforge)
  port=$(free_port)
  secret=peers-jwt-$(head -c 32 /dev/urandom | base64 | tr -dc a-zA-Z0-9)
  local env=(
    JWT_SECRET_KEY="$secret"
    AUTH_ENCRYPTION_SECRET="peers-enc-$(head -c 32 /dev/urandom | base64 | tr -dc a-zA-Z0-9)"
    DATABASE_URL="sqlite:///$dir/contextforge.db"
    PLATFORM_ADMIN_EMAIL=admin@example.com PLATFORM_ADMIN_PASSWORD="Peers-Admin-$RANDOM!x"
    BASIC_AUTH_PASSWORD="Peers-Basic-$RANDOM!x"
    MCPGATEWAY_UI_ENABLED=false MCPGATEWAY_ADMIN_API_ENABLED=true
    USE_STATEFUL_SESSIONS=true SSRF_ALLOW_LOCALHOST=true
    REDIS_URL=redis://127.0.0.1:6379/13 AUTH_REQUIRED=true
  )
  # Structured records below LOG_LEVEL are dropped before they reach the database: the
  # per-call ones ("MCP tool call started/completed") are INFO.
  if [ "$2" = on ]; then
    env+=(MCP_REQUIRE_AUTH=true RATE_LIMITING_ENABLED=true RATE_LIMIT_MEDIUM_RPM=100000000
      RATE_LIMIT_MEDIUM_BURST=1000000 STRUCTURED_LOGGING_DATABASE_ENABLED=true
      AUDIT_TRAIL_ENABLED=true LOG_LEVEL=INFO)
  else
    env+=(MCP_REQUIRE_AUTH=false RATE_LIMITING_ENABLED=false LOG_LEVEL=WARNING)
  fi
  (cd "$dir" && exec env "${env[@]}" setsid "$venv/bin/mcpgateway" --host 127.0.0.1 --port "$port" \
    > "$dir/contextforge.out" 2> "$dir/contextforge.err") &
  T_PID=$!
  started+=("$T_PID")
  T_VERSION=contextforge-$CONTEXTFORGE_VERSION
  wait_listening "$T_PID" "$port" 300 || return 1
  local base=http://127.0.0.1:$port i
  for (( i = 0; i < 600; i++ )); do curl -sf -m 5 -o /dev/null "$base/health" && break; sleep 0.5; done
  admin=$(env "${env[@]}" "$venv/bin/python" -m mcpgateway.utils.create_jwt_token \
    --username admin@example.com --admin --exp 600 2>/dev/null | tail -1)
  local auth=(-H "Authorization: Bearer $admin" -H 'Content-Type: application/json')
  curl -sf -m 120 "${auth[@]}" -o "$dir/gateway.json" -d "$(printf \
    '{"name":"demo","url":"%s","transport":"STREAMABLEHTTP","visibility":"public","auth_type":"bearer","auth_token":"%s"}' \
    "$U_URL" "$U_TOKEN")" "$base/gateways" || { echo "registering the upstream failed" >&2; return 1; }
  local tool server
  tool=$(curl -sf -m 60 "${auth[@]}" "$base/tools" | python3 -c '
import json, sys
tools = json.load(sys.stdin)
tools = tools if isinstance(tools, list) else tools.get("items", [])
print(next(t["id"] for t in tools if t.get("originalName") == "echo"))') || return 1
  server=$(curl -sf -m 60 "${auth[@]}" -d "{\"server\":{\"name\":\"peers\",\"associated_tools\":[\"$tool\"],\"visibility\":\"public\"}}" \
    "$base/servers" | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])') || return 1
  T_URL=$base/servers/$server/mcp T_TOOL=demo-echo
  if [ "$2" = on ]; then
    # The caller's own token: a user of the gateway (not its admin), made with its secret.
    T_TOKEN=$(env "${env[@]}" "$venv/bin/python" -m mcpgateway.utils.create_jwt_token \
      --username admin@example.com --exp 600 2>/dev/null | tail -1)
  fi
}

contextforge_audit_records() {
  python3 - "$1/contextforge.db" <<'PY'
import sqlite3, sys
try:
    db = sqlite3.connect(sys.argv[1])
    print(db.execute("select count(*) from structured_log_entries where message like 'MCP tool call completed%'").fetchone()[0])
except sqlite3.Error:
    print(0)
PY
}

# audit_records TARGET DIR: how many audit records of tools/call the stopped target left.
audit_records() {
  local n=
  case $1 in
    toolgate-*) n=$(wc -l < "$2/audit.jsonl") ;;
    mcp-proxy) n=$(grep -c 'mcp::audit.*tools/call' "$2/mcp-proxy.err") ;;
    fastmcp) n=$(grep -c '"event": "request_success", "method": "tools/call"' "$2/fastmcp-audit.log") ;;
    contextforge) n=$(contextforge_audit_records "$2") ;;
  esac 2>/dev/null
  echo "${n:-0}"
}
