#!/usr/bin/env bash
# Memory over many calls, with nobody scraping /metrics: drives RSS_CALLS calls (default
# 1,000,000) of `POST /v1/tools/echo/invoke` with wrk on loopback, in segments of
# RSS_SEGMENT seconds, and prints the gateway's resident memory (VmRSS from
# /proc/PID/status) after each segment. /metrics is read once, at the very end.
#
#   crates/toolgate-gateway/benches/rss.sh                       # 1M calls, release build
#   RSS_CALLS=50000 PROFILE=debug benches/rss.sh                 # a quick smoke run
#   TOOLGATE_BIN=/tmp/old/toolgate benches/rss.sh                # another build of the gateway
#   RSS_MAX_GROWTH_KB=8192 benches/rss.sh                        # fail (exit 1) when the RSS grew
#                                                                # more than this after the first segment
set -euo pipefail
cd "$(dirname "$0")/../../.."

CALLS=${RSS_CALLS:-1000000}
SEGMENT=${RSS_SEGMENT:-2}
CONNECTIONS=${LOAD_CONNECTIONS:-64}
THREADS=${LOAD_THREADS:-2}
PROFILE=${PROFILE:-release}

# shellcheck source=common.sh
. crates/toolgate-gateway/benches/common.sh
need_wrk

need_gateway


key=tg_rss_$RANDOM$RANDOM
cat > "$work/gateway.yaml" <<YAML
tools:
  builtin: [echo]
users:
  - { id: rss, key_sha256: "$(printf %s "$key" | sha256sum | cut -d' ' -f1)", roles: [bench] }
logging:
  level: warn
YAML
serve_gateway
curl -sf -X POST -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
  -d '{"text":"check"}' "$url/v1/tools/echo/invoke" | grep -q '"text":"check"'

cat > "$work/post.lua" <<LUA
wrk.method = "POST"
wrk.body = '{"text":"hello from the memory test"}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $key"
done = function(summary, latency, requests)
  io.write(string.format("RESULT requests=%d errors=%d\n", summary.requests,
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
LUA

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status"; }
echo "calls rss_kb"
echo "0 $(rss_kb)"
done_calls=0
first=
while [ "$done_calls" -lt "$CALLS" ]; do
  result=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"${SEGMENT}s" -s "$work/post.lua" "$url/v1/tools/echo/invoke" | grep RESULT)
  errors=$(sed -E 's/.*errors=([0-9]+).*/\1/' <<<"$result")
  [ "$errors" = 0 ] || { echo "the gateway answered $errors requests with errors" >&2; tail -5 "$work/gw.err" >&2; exit 1; }
  done_calls=$((done_calls + $(sed -E 's/.*requests=([0-9]+).*/\1/' <<<"$result")))
  rss=$(rss_kb)
  [ -n "$first" ] || first=$rss
  echo "$done_calls $rss"
done
last=$(rss_kb)
echo "RSS after the first segment: $first kB; at the end: $last kB; growth: $((last - first)) kB over $done_calls calls"
curl -sf "$url/metrics" | grep -q 'toolgate_calls_total{tool="echo"' || { echo "no call was counted in /metrics" >&2; exit 1; }
if [ -n "${RSS_MAX_GROWTH_KB:-}" ] && [ $((last - first)) -gt "$RSS_MAX_GROWTH_KB" ]; then
  echo "the RSS grew by more than $RSS_MAX_GROWTH_KB kB" >&2
  exit 1
fi
