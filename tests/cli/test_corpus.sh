#!/bin/bash
# The style corpus (corpus/, docs in corpus/README.md), without a GPU:
#  - every task passes `klineage task check` (task.json, launch() signatures, a reference that is
#    not weak) and is listed in corpus/README.md and corpus/suite.json lists only corpus tasks;
#  - every kernel file compiles for sm_90 with nvcc (device code, ptxas -v) without warnings,
#    register spills or a stack frame (skipped, with a note, when nvcc is absent);
#  - `klineage rewrite --list` reads every kernel file without crashing (exit 0 or 1, never a
#    signal): the catalog's recognition on these files is issue 17's to measure, not this test's;
#  - `klineage optimize` (the stand-in judge, 4 calls) finishes on every naive kernel and keeps at
#    least one rewrite of it.
set -u
: "${KLINEAGE:?}" "${KL_SOURCE_DIR:?}"
C="$KL_SOURCE_DIR/corpus"
T=$(mktemp -d "${TMPDIR:-/tmp}/klineage-test-corpus-XXXXXX")
trap 'rm -rf "$T"' EXIT
export KLINEAGE_CACHE="$T/cache"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

tasks=()
for d in "$C"/*/; do
    [ -f "$d/task.json" ] && tasks+=("$(basename "$d")")
done
[ "${#tasks[@]}" -ge 24 ] || fail "corpus/ holds ${#tasks[@]} tasks, at least 24 expected"

# task check, and the README's table. Its kernels are gated too: on a GPU, live; without one,
# replayed, and a kernel with no recorded verdict is "unmeasured" (exit 1) — then the task must
# still be valid with its reference ok, and "unmeasured" the only thing said against it.
for t in "${tasks[@]}"; do
    "$KLINEAGE" --json task check "$C/$t" >"$T/check.json" 2>"$T/check.err"
    rc=$?
    if ! python3 - "$T/check.json" $rc <<'PY'; then
import json, sys
d = json.load(open(sys.argv[1]))
ks = d.get("kernels")
if d.get("reference") != "ok":
    print("the reference is not reported ok:", d.get("reference"), file=sys.stderr)
    sys.exit(1)
ok = sys.argv[2] == "0" or (d["valid"] and isinstance(ks, list) and ks and all(
    k.get("result") == "unmeasured" or k.get("pass") is True for k in ks))
sys.exit(0 if ok else 1)
PY
        fail "task check corpus/$t (exit $rc)"
        sed 's/^/    /' "$T/check.json" "$T/check.err" | head -40 >&2
    fi
    grep -q "^| \`$t\` |" "$C/README.md" || fail "corpus/$t is not in corpus/README.md's table"
done
# every task named in the suite file exists, and has an expert
python3 - "$C" <<'PY' || fail "corpus/suite.json"
import json, os, sys
root = sys.argv[1]
suite = json.load(open(os.path.join(root, "suite.json")))
assert suite["tasks"], "no tasks"
for e in suite["tasks"]:
    t = json.load(open(os.path.join(root, e["task"], "task.json")))
    assert t.get("expert"), f'{e["task"]} has no expert'
PY

# nvcc: device code of every kernel file, several files to a translation unit, two units at a
# time (tests/nvcc_batch.py; a unit that says anything against a file is compiled again file by
# file, so each file's log names what is wrong with it)
NVCC=${KL_NVCC:-}
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
[ -z "$NVCC" ] && NVCC=$(command -v nvcc || true)
if [ -z "$NVCC" ]; then
    echo "note: nvcc not found (set KL_NVCC): the corpus kernels were not compiled"
else
    find "$C" -name '*.cu' | sort >"$T/files"
    mapfile -t files <"$T/files"
    python3 "$KL_SOURCE_DIR/tests/nvcc_batch.py" --nvcc "$NVCC" --out "$T/nvcc" --jobs 2 --flag=-cubin "${files[@]}" ||
        fail "tests/nvcc_batch.py failed"
    i=0
    while read -r f; do
        log="$T/nvcc/$i.log"
        [ "$(cat "$T/nvcc/$i.rc" 2>/dev/null)" = 0 ] || echo "nvcc exit $(cat "$T/nvcc/$i.rc" 2>/dev/null)" >>"$log"
        i=$((i + 1))
        if grep -q "nvcc exit\|error" "$log"; then
            fail "$f does not compile for sm_90"
            sed 's/^/    /' "$log" | head -20 >&2
            continue
        fi
        grep -q "warning" "$log" && fail "$f: compiler warnings: $(grep warning "$log" | head -3)"
        grep -q "Used [0-9]* registers" "$log" || fail "$f: no ptxas report"
        grep -E "[1-9][0-9]* bytes spill (stores|loads)" "$log" >/dev/null && fail "$f: register spills: $(grep spill "$log" | sort -u)"
        grep -E "[1-9][0-9]* bytes stack frame" "$log" >/dev/null && fail "$f: a stack frame: $(grep 'stack frame' "$log" | sort -u)"
    done <"$T/files"
fi

# the catalog reads every file without crashing
for f in $(find "$C" -name '*.cu' | sort); do
    "$KLINEAGE" rewrite "$f" --list >"$T/list.out" 2>"$T/list.err"
    rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 1 ]; then
        fail "rewrite --list $f: exit $rc"
        tail -3 "$T/list.err" >&2
    fi
done

# the optimizer on kernels nobody here wrote: every naive kernel of the corpus, 4 calls of the
# stand-in judge (no GPU; the stand-in measures nothing): the run finishes, and the catalog found
# at least one rewrite on it that the search kept (a version beyond the start)
for t in "${tasks[@]}"; do
    "$KLINEAGE" --judge stand-in --db "$T/opt.db" --json optimize "$C/$t" --budget 4 >"$T/opt.json" 2>"$T/opt.err"
    rc=$?
    python3 - "$T/opt.json" <<'PY' || { fail "optimize corpus/$t (exit $rc): $(tail -2 "$T/opt.err")"; continue; }
import json, sys
d = json.load(open(sys.argv[1]))
assert d["state"] == "done", d["state"]
assert d["gate_calls"] <= 4, d["gate_calls"]
assert len(d["versions"]) >= 2, "no rewrite kept: the catalog found nothing on this kernel"
PY
    [ $rc -eq 0 ] || fail "optimize corpus/$t: exit $rc"
done

# The experts' recorded backward walks (archive/corpus-walks.jsonl, kept apart from the main
# archive so that the corpus stays unseen by the card library) replay without a GPU, as recorded:
# every step the JSON lists is in the table, and the root's speed against the naive kernel is said
# (a walk cut when it was recorded says it is unfinished instead).
for t in matmul sumsq; do
    grep -q "corpus/$t" "$KL_SOURCE_DIR/archive/corpus-walks.jsonl" 2>/dev/null || continue
    "$KLINEAGE" --db "$T/walks.db" --measure replay --json lineage "$C/$t" \
        --archive "$KL_SOURCE_DIR/archive/corpus-walks.jsonl" >"$T/walk.json" 2>"$T/walk.err"
    rc=$?
    [ $rc -eq 0 ] || { fail "replay of corpus/$t's recorded walk: exit $rc ($(tail -n 2 "$T/walk.err"))"; continue; }
    python3 - "$T/walk.json" <<'PY' || fail "corpus/$t's replayed walk"
import json, sys
d = json.load(open(sys.argv[1]))
assert d.get("steps"), "no steps replayed"
assert all(s.get("transform") for s in d["steps"]), "a step without its transform"
if d.get("unfinished"):
    # cut when it was recorded (matmul's, at step 8): shown as far as it went, with no root claim
    assert not d.get("root_vs_naive"), "an unfinished walk compares a root with the naive kernel"
else:
    assert d.get("root_vs_naive"), "the root is not compared with the naive kernel"
PY
done

if [ $failures -ne 0 ]; then
    echo "$failures failures"
    exit 1
fi
echo "corpus: ${#tasks[@]} tasks checked"
