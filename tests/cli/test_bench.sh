#!/usr/bin/env bash
# klineage bench --expert, replayed from the archive in the repository: the suite's table
# as recorded on the H200, every line marked as replayed, no GPU needed.
set -u
K=${KLINEAGE:?set KLINEAGE to the klineage binary}
SRC=${KL_SOURCE_DIR:?set KL_SOURCE_DIR to the repository}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kl-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

cd "$SRC"
"$K" --db "$tmp/db" --measure replay bench --expert >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] || fail "replay exited $rc: $(tail -3 "$tmp/err")"
# every line of both streams says it is replayed
if grep -qv '^\[replay\]' "$tmp/out" "$tmp/err"; then fail "a line without [replay]: $(grep -hv '^\[replay\]' "$tmp/out" "$tmp/err" | head -2)"; fi
# one row per task of the suite, each with measured times (no "unmeasured")
for t in $(python3 -c 'import json; print(" ".join(e["task"] for e in json.load(open("tasks/suite.json"))["tasks"]))' 2>/dev/null ||
           sed -n 's/.*"task": "\([a-z_]*\)".*/\1/p' tasks/suite.json); do
    grep -q "^\[replay\] | $t | [0-9]" "$tmp/out" || fail "no measured row for $t"
done
grep -q unmeasured "$tmp/out" && fail "an unmeasured row"
# the JSON rows carry the verdict keys, and the same replay gives the same bytes
"$K" --db "$tmp/db2" --measure replay --json bench --expert >"$tmp/j1" 2>/dev/null || fail "--json replay failed"
"$K" --db "$tmp/db3" --measure replay --json bench --expert >"$tmp/j2" 2>/dev/null
cmp -s "$tmp/j1" "$tmp/j2" || fail "two replays differ"
grep -q '"verdict": "[0-9a-f]\{64\}"' "$tmp/j1" || fail "no verdict keys in the JSON rows"
# live means measured now: without a GPU, --measure live and record are errors (docs say exit 1),
# and record leaves the archive as it is
if [ ! -d /proc/driver/nvidia/gpus ] && [ ! -e /dev/nvidia0 ]; then
    cp "$SRC/archive/verdicts.jsonl" "$tmp/archive.jsonl"
    "$K" --db "$tmp/dbl" --measure live bench --expert --archive "$tmp/archive.jsonl" >"$tmp/ol" 2>"$tmp/el"
    [ $? -eq 1 ] || fail "--measure live bench without a GPU did not exit 1"
    grep -q "measures now" "$tmp/el" || fail "--measure live bench: no reason given: $(cat "$tmp/el")"
    "$K" --db "$tmp/dbr" --measure record bench --expert --archive "$tmp/archive.jsonl" >"$tmp/or" 2>"$tmp/er"
    [ $? -eq 1 ] || fail "--measure record bench without a GPU did not exit 1"
    grep -q "recorded to" "$tmp/er" && fail "--measure record without a GPU claims it recorded"
    cmp -s "$tmp/archive.jsonl" "$SRC/archive/verdicts.jsonl" || fail "--measure record without a GPU changed the archive"
    [ -e "$tmp/dbl" ] && fail "--measure live without a GPU created a store"
fi

# a task the archive does not hold is unmeasured, and says so, exit 1
mkdir -p "$tmp/suite/softmax"
cp tasks/softmax/* "$tmp/suite/softmax/"
echo '// changed: a new content hash, so no recorded verdict' >>"$tmp/suite/softmax/expert.cu"
printf '{"tasks": [{"task": "softmax", "target": {"kind": "gbps", "value": 1}}]}\n' >"$tmp/suite/suite.json"
"$K" --db "$tmp/db4" --measure replay bench --expert --archive "$SRC/archive/verdicts.jsonl" --suite "$tmp/suite" >"$tmp/o4" 2>"$tmp/e4"
rc=$?
[ $rc -eq 1 ] || fail "a task with no record should exit 1, not $rc"
grep -q unmeasured "$tmp/o4" || fail "no 'unmeasured' for the unrecorded task"

[ $fails -eq 0 ] && echo "test_bench: ok" || echo "test_bench: $fails failure(s)"
[ $fails -eq 0 ]
