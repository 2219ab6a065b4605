#!/bin/bash
# scripts/archive_prune.py: a lineage whose expert changed goes with the verdicts only it used; the
# current lineage, a verdict both used, verdicts no lineage names and the skill cards stay; a
# line that is not an archive document fails with the file and line, and writes nothing.
set -u
: "${KL_SOURCE_DIR:?}"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/klineage-test-prune-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
mkdir -p "$TMP/tasks/t"
printf '__global__ void k() {}\n' >"$TMP/tasks/t/expert.cu"
a=$(printf 'a%.0s' {1..64}); b=$(printf 'b%.0s' {1..64}); c=$(printf 'c%.0s' {1..64}); d=$(printf 'd%.0s' {1..64})
python3 - "$TMP/archive.jsonl" "$a" "$b" "$c" "$d" <<'PY'
import json, sys
p, a, b, c, d = sys.argv[1:]
rows = [
    {"kind": "lineage", "key": "new", "doc": {"task": "t", "versions": [{"source": "__global__ void k() {}\n"}], "steps": [{"verdict": a}, {"verdict": c}]}},
    {"kind": "lineage", "key": "old", "doc": {"task": "t", "versions": [{"source": "__global__ void old() {}\n"}], "steps": [{"verdict": b}, {"verdict": c}]}},
    {"kind": "skill", "key": "s-1", "doc": {}},
    {"kind": "skill-part", "key": "s-1/x", "doc": {}},
    {"kind": "verdict", "key": a, "doc": {}},
    {"kind": "verdict", "key": b, "doc": {}},
    {"kind": "verdict", "key": c, "doc": {}},
    {"kind": "verdict", "key": d, "doc": {}},
]
with open(p, "w") as f:
    for r in rows: f.write(json.dumps(r, separators=(",", ":")) + "\n")
PY
out=$(python3 "$KL_SOURCE_DIR/scripts/archive_prune.py" --archive "$TMP/archive.jsonl" --tasks "$TMP/tasks") || fail "prune exited $?"
echo "$out" | grep -q "dropping 1 lineage(s) of experts that changed (t), 1 verdict(s)" || fail "unexpected report: $out"
grep -q '"key":"old"' "$TMP/archive.jsonl" && fail "the old lineage is still there"
grep -q "\"key\":\"$b\"" "$TMP/archive.jsonl" && fail "the verdict only the old lineage used is still there"
for k in new "$a" "$c" "$d"; do grep -q "\"key\":\"$k\"" "$TMP/archive.jsonl" || fail "$k was dropped"; done
grep -q '"kind":"skill"' "$TMP/archive.jsonl" && grep -q '"kind":"skill-part"' "$TMP/archive.jsonl" ||
    fail "skill cards were dropped (a fresh store takes the library from the archive)"
# bad input: file and line, nothing written
printf '{"kind":"verdict","key":"x","doc":{}}\nnot json\n' >"$TMP/bad.jsonl"
cp "$TMP/bad.jsonl" "$TMP/bad.orig"
err=$(python3 "$KL_SOURCE_DIR/scripts/archive_prune.py" --archive "$TMP/bad.jsonl" --tasks "$TMP/tasks" 2>&1) && fail "a bad line was accepted"
echo "$err" | grep -q "bad.jsonl:2: expected a line" || fail "the error does not name the line: $err"
cmp -s "$TMP/bad.jsonl" "$TMP/bad.orig" || fail "the bad archive was changed"
echo ok
