#!/bin/bash
# Crash safety of the forward optimizer (tests/crash_resume.sh): an optimization of
# tasks/softmax judged by the stand-in judge (deterministic, no GPU), killed with SIGKILL at
# KL_CRASH_KILLS random points (default 50) and resumed each time: the store stays intact and
# the run document (its rounds, versions, result) equals an uninterrupted run's, but for when
# things happened (time stamps: the stand-in stamps each judgement when it makes it).
set -u
: "${KLINEAGE:?}" "${KL_SOURCE_DIR:?}"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/klineage-test-crash-opt-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export KLINEAGE_CACHE="$TMP/cache" KLINEAGE
cd "$KL_SOURCE_DIR" || exit 1
opt='"$KLINEAGE" --quiet --judge stand-in --db "$DB" optimize tasks/softmax --policy blind --budget 10 --no-compare -o "$DB.cu"'
result='"$KLINEAGE" --judge stand-in --db "$DB" --json optimize tasks/softmax --policy blind --budget 10 --no-compare -o "$DB.cu" 2>/dev/null |
    python3 "$KL_SOURCE_DIR/tests/cli/strip_times.py" &&
    cat "$DB.cu"'
KL_CRASH_DIR="$TMP/work" KL_CRASH_BUDGET_S=${KL_CRASH_BUDGET_S:-300} \
    bash "$KL_SOURCE_DIR/tests/crash_resume.sh" "${KL_CRASH_KILLS:-50}" "$opt" "$result"
