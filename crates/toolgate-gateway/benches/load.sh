#!/usr/bin/env bash
# Load benchmark on loopback: requests per second and latency of
# `POST /v1/tools/echo/invoke` on the gateway (auth + quota + audit) against a bare axum
# handler doing the same echo, in one run, with wrk (installed here if missing).
#
#   crates/toolgate-gateway/benches/load.sh            # 20 s per target, release build
#   LOAD_SECONDS=2 PROFILE=debug benches/load.sh       # a quick smoke run (CI)
#   TOOLGATE_BIN=/tmp/old/toolgate benches/load.sh     # another build of the gateway
set -euo pipefail
cd "$(dirname "$0")/../../.."

SECONDS_PER_RUN=${LOAD_SECONDS:-20}
CONNECTIONS=${LOAD_CONNECTIONS:-64}
THREADS=${LOAD_THREADS:-2}
PROFILE=${PROFILE:-release}

# shellcheck source=common.sh
. crates/toolgate-gateway/benches/common.sh
need_wrk

flag=()
[ "$PROFILE" = release ] && flag=(--release)
cargo build -q "${flag[@]}" -p toolgate-gateway --bin toolgate --example bare_echo
target=${CARGO_TARGET_DIR:-target}/$PROFILE

# Two servers here (the gateway and the bare echo): stop both, then remove $work.
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }

key=tg_load_$RANDOM$RANDOM
export LOAD_KEY_SHA256=$(printf %s "$key" | sha256sum | cut -d' ' -f1)
export LOAD_AUDIT_PATH=$work/audit.jsonl

"$target/examples/bare_echo" 127.0.0.1:8090 > "$work/bare.out" &
pids+=($!)
"${TOOLGATE_BIN:-$target/toolgate}" serve --config crates/toolgate-gateway/benches/load.yaml > "$work/gw.out" 2> "$work/gw.err" &
pids+=($!)
for _ in $(seq 1 100); do
  grep -q listening "$work/bare.out" 2>/dev/null && grep -q listening "$work/gw.out" 2>/dev/null && break
  sleep 0.1
done

cat > "$work/post.lua" <<LUA
wrk.method = "POST"
wrk.body = '{"text":"hello from the load test"}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $key"
done = function(summary, latency, requests)
  io.write(string.format("RESULT rps=%.0f p50_ms=%.3f p99_ms=%.3f errors=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000,
    latency:percentile(99) / 1000, summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
LUA

# Both answer the same request first, so a broken target fails the run.
for port in 8090 8091; do
  curl -sf -X POST -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
    -d '{"text":"check"}' "http://127.0.0.1:$port/v1/tools/echo/invoke" | grep -q '"text":"check"'
done

run() {
  wrk -t"$THREADS" -c"$CONNECTIONS" -d"${SECONDS_PER_RUN}s" -s "$work/post.lua" \
    "http://127.0.0.1:$1/v1/tools/echo/invoke" | grep RESULT
}
echo "warm-up"; SECONDS_PER_RUN=2 run 8090 >/dev/null; SECONDS_PER_RUN=2 run 8091 >/dev/null
bare=$(run 8090); echo "bare axum echo:            $bare"
gw=$(run 8091);   echo "gateway (auth+quota+audit): $gw"
audited=$(wc -l < "$LOAD_AUDIT_PATH"); echo "audit records written: $audited"
rps() { sed -E 's/.*rps=([0-9]+).*/\1/' <<<"$1"; }
python3 -c "print(f'gateway / bare throughput: {$(rps "$gw") / $(rps "$bare"):.2f}')"
errors=$(sed -E 's/.*errors=([0-9]+).*/\1/' <<<"$gw")
[ "$errors" = 0 ] || { echo "the gateway answered $errors requests with errors" >&2; tail -5 "$work/gw.err" >&2; exit 1; }
