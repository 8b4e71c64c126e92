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

# Makes $work, a temporary directory; $pid, once set, is the gateway process to stop.
work=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
