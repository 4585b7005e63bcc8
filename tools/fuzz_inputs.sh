#!/bin/sh
# fuzz_inputs.sh BUILD SECONDS - runs the libFuzzer targets of
# tools/fuzz_inputs.c (BUILD/fuzz_parse, fuzz_load, fuzz_model; built by
# `make fuzz-inputs`) for SECONDS each, from the seeds in
# tools/fuzz_seeds/<target>/ plus what earlier runs found (kept in
# BUILD/fuzz-corpus/<target>/; the checked-in seeds are never written).
# A crash, leak, sanitizer report or timeout fails the target and leaves
# its input in BUILD/fuzz-findings/. Ends with "N passed, M failed".
set -u
build=$1
seconds=$2
passed=0
failed=0
for t in parse load model; do
    corpus=$build/fuzz-corpus/$t
    findings=$build/fuzz-findings
    mkdir -p "$corpus" "$findings"
    log=$build/fuzz-$t.log
    # max_len: longer than every seed; rss_limit: a corrupt size may ask
    # for no more than the file could hold, so 2 GiB is never near.
    if "$build/fuzz_$t" -max_total_time="$seconds" -max_len=4096 -timeout=20 \
            -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$findings/$t-" \
            "$corpus" "tools/fuzz_seeds/$t" >"$log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
        echo "fuzz-inputs: $t: ${runs:-?} inputs in ${seconds}s, no finding"
        passed=$((passed + 1))
    else
        echo "fuzz-inputs: $t: FAILED (see $log and $findings/)"
        grep -m 5 -E 'ERROR|SUMMARY|fuzz_inputs:' "$log"
        failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
