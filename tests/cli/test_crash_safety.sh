#!/bin/bash
# Crash safety as a test (tests/crash_resume.sh): a backward walk of tasks/transpose, judged from
# the recorded verdicts (an archive without the recorded walk, so it really walks), killed with
# SIGKILL at random points and resumed each time: the store stays intact and the lineage and its
# cards equal those of an uninterrupted walk. KL_CRASH_KILLS kills (default 8 here; 50 by hand).
set -u
: "${KLINEAGE:?}" "${KL_SOURCE_DIR:?}"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/klineage-test-crash-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export KLINEAGE_CACHE="$TMP/cache" KLINEAGE
cd "$KL_SOURCE_DIR" || exit 1
# the archive less the recorded walks and cards: the walk must judge its way down
python3 - archive/verdicts.jsonl "$TMP/verdicts.jsonl" <<'PY'
import json, sys
with open(sys.argv[1]) as f, open(sys.argv[2], "w") as out:
    for line in f:
        if json.loads(line)["kind"] not in ("lineage", "skill", "skill-part"):
            out.write(line)
PY
export ARCH="$TMP/verdicts.jsonl"
walk='"$KLINEAGE" --quiet --db "$DB" --measure replay lineage tasks/transpose --archive "$ARCH" --probes 2 --probe-min-gain 1.05'
result='"$KLINEAGE" --db "$DB" --measure replay --json lineage tasks/transpose --archive "$ARCH" 2>/dev/null |
    python3 -c "import json,sys; d=json.load(sys.stdin); [d.pop(k, None) for k in (\"started\", \"updated\")]; print(json.dumps(d, sort_keys=True))" &&
    "$KLINEAGE" --db "$DB" skills export --format json'
# at most 8 kills and about 10 minutes (ctest stops a test at 15): a sanitizer build on a busy
# machine walks transpose in ~40 s
KL_CRASH_DIR="$TMP/work" KL_CRASH_BUDGET_S=${KL_CRASH_BUDGET_S:-480} \
    bash "$KL_SOURCE_DIR/tests/crash_resume.sh" "${KL_CRASH_KILLS:-8}" "$walk" "$result"
