#!/bin/bash
# Crash safety as a test (tests/crash_resume.sh): a backward walk of tasks/transpose, judged by
# the stand-in judge (docs/cluster.md: deterministic verdicts from the candidates' text, so the
# walk really walks whatever today's rules propose, with no GPU and no archive), killed with
# SIGKILL at random points and resumed each time: the store stays intact and the lineage and its
# cards equal those of an uninterrupted walk. KL_CRASH_KILLS kills (default 8 here; 50 by hand).
set -u
: "${KLINEAGE:?}" "${KL_SOURCE_DIR:?}"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/klineage-test-crash-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export KLINEAGE_CACHE="$TMP/cache" KLINEAGE
cd "$KL_SOURCE_DIR" || exit 1
walk='"$KLINEAGE" --quiet --judge stand-in --db "$DB" lineage tasks/transpose --probes 2 --probe-min-gain 1.05'
result='"$KLINEAGE" --judge stand-in --db "$DB" --json lineage tasks/transpose 2>/dev/null |
    python3 "$KL_SOURCE_DIR/tests/cli/strip_times.py" &&
    "$KLINEAGE" --db "$DB" skills export --format json | python3 "$KL_SOURCE_DIR/tests/cli/strip_times.py"'
# at most 8 kills and about 10 minutes (ctest stops a test at 15): a sanitizer build on a busy
# machine walks transpose in ~40 s
KL_CRASH_DIR="$TMP/work" KL_CRASH_BUDGET_S=${KL_CRASH_BUDGET_S:-480} \
    bash "$KL_SOURCE_DIR/tests/crash_resume.sh" "${KL_CRASH_KILLS:-8}" "$walk" "$result"
