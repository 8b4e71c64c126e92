#!/usr/bin/env bash
# Instructions per call of the engine's scenarios, counted by callgrind: the table of
# docs/performance.md, "The engine". Deterministic, so a loaded machine does not matter;
# compare two trees by running this script in each.
#
#   benches/engine_instructions.sh            # every scenario
#   benches/engine_instructions.sh pipeline_0_hooks direct_erased_json
#
# Needs valgrind. Builds `benches/instructions.rs` with the bench profile (cargo's `-j 1`
# unless CARGO_BUILD_JOBS says otherwise), runs each scenario's 10,000 calls under
# callgrind with only the function that makes them collected, and prints instructions per
# call and the issue's ratios. Callgrind's output files go to a temporary directory.
set -euo pipefail

cd "$(dirname "$0")/.."
calls=10000
scenarios=("$@")
if [ ${#scenarios[@]} -eq 0 ]; then
    scenarios=(
        direct_erased_json
        pipeline_0_hooks
        pipeline_10_hooks
        pipeline_10_written_hooks
        pipeline_10_hand_written_hooks
        pipeline_hook_on_every_stage
        pipeline_uninterested_hooks
        tower_10_layers_boxed_each
        tower_10_layers_static
    )
fi

binary=$(cargo bench --bench instructions --no-run -j "${CARGO_BUILD_JOBS:-1}" 2>&1 |
    sed -n 's/.*Executable benches\/instructions.rs (\(.*\))/\1/p' | tail -n 1)
if [ -z "$binary" ]; then
    echo "the instructions bench did not build: cargo bench --bench instructions --no-run" >&2
    exit 1
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
declare -A per_call
for scenario in "${scenarios[@]}"; do
    valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*collected_*' \
        --callgrind-out-file="$out/$scenario.out" "$binary" "$scenario" >/dev/null 2>"$out/$scenario.log" || {
        cat "$out/$scenario.log" >&2
        exit 1
    }
    total=$(sed -n 's/^totals: \([0-9]*\).*/\1/p' "$out/$scenario.out")
    per_call[$scenario]=$(( (total + calls / 2) / calls ))
done

echo "| scenario | instructions per call |"
echo "|---|---:|"
for scenario in "${scenarios[@]}"; do
    printf '| %s | %s |\n' "$scenario" "${per_call[$scenario]}"
done

ratio() {
    if [ -n "${per_call[$1]:-}" ] && [ -n "${per_call[$2]:-}" ]; then
        awk -v a="${per_call[$1]}" -v b="${per_call[$2]}" -v what="$3" \
            'BEGIN { printf "%s: %.2f×\n", what, a / b }'
    fi
}
echo
ratio pipeline_0_hooks direct_erased_json "no hooks / the direct JSON call (target ≤ 1.6)"
ratio pipeline_hook_on_every_stage direct_erased_json "a hook on every stage / the direct JSON call (target ≤ 2.5)"
ratio pipeline_10_hooks tower_10_layers_boxed_each "ten #[hook] no-ops / ten boxed tower layers (target ≤ 1.0)"
ratio pipeline_10_written_hooks tower_10_layers_boxed_each "ten #[hook] no-ops written as fns / ten boxed tower layers"
ratio pipeline_10_hand_written_hooks tower_10_layers_boxed_each "ten hand-written no-ops / ten boxed tower layers (target ≤ 1.0)"
ratio pipeline_10_hand_written_hooks pipeline_10_hooks "ten hand-written no-ops / ten #[hook] no-ops"
