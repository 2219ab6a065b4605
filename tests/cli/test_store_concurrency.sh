#!/bin/bash
# Two processes share one store: a backward walk (tasks/transpose, judged from recorded verdicts)
# while two other processes import skill cards into the same store, one card per call. No call
# fails with "database is locked", no card is lost, and the walk is the recorded one.
set -u
: "${KLINEAGE:?}" "${KL_SOURCE_DIR:?}"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/klineage-test-concurrency-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export KLINEAGE_CACHE="$TMP/cache"
cd "$KL_SOURCE_DIR" || exit 1
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
DB="$TMP/shared.db"
python3 - archive/verdicts.jsonl "$TMP/verdicts.jsonl" <<'PY'
import json, sys
with open(sys.argv[1]) as f, open(sys.argv[2], "w") as out:
    for line in f:
        if json.loads(line)["kind"] not in ("lineage", "skill", "skill-part"):
            out.write(line)
PY
# cards c-<importer>-<n>: the unroll card of the test data under other ids
python3 - tests/data/skills/unroll.json "$TMP" <<'PY'
import json, sys
base = json.load(open(sys.argv[1]))
for who in (1, 2):
    for n in range(1, 16):
        c = dict(base)
        c["id"] = "c-%d-%d" % (who, n)
        json.dump(c, open("%s/card-%d-%d.json" % (sys.argv[2], who, n), "w"))
PY
"$KLINEAGE" --quiet --db "$DB" --measure replay --json lineage tasks/transpose --archive "$TMP/verdicts.jsonl" \
    --probes 2 --probe-min-gain 1.05 >"$TMP/walk.json" 2>"$TMP/walk.err" &
walk=$!
importer() {
    for n in $(seq 1 15); do
        if ! "$KLINEAGE" --db "$DB" skills import "$TMP/card-$1-$n.json" >>"$TMP/import-$1.out" 2>&1; then
            echo "import $1-$n failed" >>"$TMP/import-$1.out"
        fi
    done
}
importer 1 &
i1=$!
importer 2 &
i2=$!
wait $i1 $i2
wait $walk || fail "the walk failed: $(tail -3 "$TMP/walk.err")"
for who in 1 2; do
    grep -q "failed\|locked\|error" "$TMP/import-$who.out" && fail "importer $who: $(grep -m3 'failed\|locked\|error' "$TMP/import-$who.out")"
done
grep -qi "locked" "$TMP/walk.err" && fail "the walk met a locked database"
"$KLINEAGE" --db "$DB" skills list --json >"$TMP/list.json" 2>"$TMP/list.err" || fail "skills list: $(cat "$TMP/list.err")"
python3 - "$TMP/list.json" "$TMP/walk.json" archive/verdicts.jsonl <<'PY' || fail "a card was lost, or the walk is not the recorded one"
import json, sys
ids = {c["id"] for c in json.load(open(sys.argv[1]))}
want = {"c-%d-%d" % (w, n) for w in (1, 2) for n in range(1, 16)}
lost = sorted(want - ids)
if lost:
    print("lost cards:", lost, file=sys.stderr)
walk = json.load(open(sys.argv[2]))
recorded = None
for line in open(sys.argv[3]):
    d = json.loads(line)
    if d["kind"] == "lineage" and d["doc"].get("task") == "transpose":
        recorded = d["doc"]
steps = lambda d: [(s["transform"], s["site"], s["verdict"]) for s in d["steps"]]
same = recorded is not None and steps(walk) == steps(recorded)
if not same:
    print("walk steps differ from the recorded walk's", file=sys.stderr)
extracted = len([i for i in ids if not i.startswith("c-")])
if extracted == 0:
    print("the walk stored no card", file=sys.stderr)
sys.exit(0 if not lost and same and extracted else 1)
PY
if [ "$failures" -ne 0 ]; then
    echo "$failures failure(s)" >&2
    exit 1
fi
echo "ok: a walk and two importers shared one store (30 cards imported, none lost, no lock error)"
