#!/usr/bin/env bash
# Compiles each crate with the oldest Rust its `rust-version` promises: toolgate-core,
# toolgate-macros and toolgate-test with 1.88, the library crates with 1.89, the gateway with 1.90
# (`cargo check --locked`, the crates' own code, not their tests). `scripts/msrv.py`, which CI
# runs, checks only that Cargo.lock's dependencies allow those versions; this proves the code
# itself compiles with them. Not part of CI: it installs three toolchains (rustup, minimal
# profile) and checks the workspace three times, about ten minutes on two cores.
#
#   scripts/msrv_check.sh        # CARGO_TARGET_DIR defaults to target/msrv
set -euo pipefail

cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/msrv}"

check() {
    local toolchain=$1
    shift
    rustup toolchain install "$toolchain" --profile minimal >/dev/null
    local packages=()
    for crate in "$@"; do
        packages+=(-p "$crate")
    done
    echo "== Rust $toolchain: $*"
    cargo "+$toolchain" check --locked "${packages[@]}"
}

check 1.88 toolgate-core toolgate-macros toolgate-test
check 1.89 toolgate toolgate-hooks toolgate-agent toolgate-mcp toolgate-redis toolgate-http
check 1.90 toolgate-gateway
echo "every crate compiles with the Rust its rust-version names"
