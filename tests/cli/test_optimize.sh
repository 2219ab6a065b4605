#!/usr/bin/env bash
# klineage optimize and bench --optimize from the command line, without a GPU: bad input
# gets a clear error and the right exit code before any judgement; a replay with nothing
# recorded says so. (The search itself is tested with a stand-in judge in
# tests/unit/test_optimize.c; the recorded runs replay in tests/cli/test_optimize_replay.sh
# once the archive holds them.)
set -u
K=${KLINEAGE:?set KLINEAGE to the klineage binary}
SRC=${KL_SOURCE_DIR:?set KL_SOURCE_DIR to the repository}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kl-opt.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
expect() { # expect RC PATTERN -- command...
    local want=$1 pat=$2
    shift 3
    "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [ $rc -eq "$want" ] || fail "$* exited $rc, expected $want: $(tail -2 "$tmp/err")"
    grep -q -- "$pat" "$tmp/err" "$tmp/out" || fail "$*: no '$pat' in: $(tail -2 "$tmp/err")"
}
cd "$SRC"
# an empty archive: what these cases check is decided before any verdict is needed
: >"$tmp/empty.jsonl"
A=(--archive "$tmp/empty.jsonl")

# usage errors (exit 2), before anything is opened
expect 2 "budget" -- "$K" --db "$tmp/db" optimize tasks/softmax --budget 0
expect 2 "budget" -- "$K" --db "$tmp/db" optimize tasks/softmax --budget 1
expect 2 "budget" -- "$K" --db "$tmp/db" optimize tasks/softmax --budget lots
expect 2 "skills, memory or blind" -- "$K" --db "$tmp/db" optimize tasks/softmax --policy greedy
expect 2 "which task" -- "$K" --db "$tmp/db" optimize
expect 2 "unknown option" -- "$K" --db "$tmp/db" optimize tasks/softmax --fast
expect 2 "rules, llm or command" -- "$K" --db "$tmp/db" optimize tasks/softmax --rewriter magic
expect 2 "beam" -- "$K" --db "$tmp/db" optimize tasks/softmax --beam 0
expect 2 "--optimize" -- "$K" --db "$tmp/db" bench --expert --plot x
expect 2 "--expert" -- "$K" --db "$tmp/db" bench
expect 2 "policies" -- "$K" --db "$tmp/db" bench --optimize --policies skills,greedy

# failures (exit 1) with the file, the line and what was expected
cat >"$tmp/other.cu" <<'EOF'
#include <cuda_runtime.h>
__global__ void k(float* a) { a[0] = 1; }
extern "C" void launch(float* a, cudaStream_t s) { k<<<1, 1, 0, s>>>(a); }
EOF
expect 1 "other.cu:3: launch() takes 2 parameter(s); task softmax expects 5" -- \
    "$K" --db "$tmp/db" --measure replay optimize tasks/softmax --from "$tmp/other.cu" --policy blind "${A[@]}"
expect 1 "No such file\|cannot\|missing\|not found" -- \
    "$K" --db "$tmp/db" --measure replay optimize tasks/softmax --from "$tmp/nope.cu" --policy blind "${A[@]}"
expect 1 "task.json" -- "$K" --db "$tmp/db" --measure replay optimize "$tmp/no-such-task" "${A[@]}"
# a task without a naive kernel, and no --from
mkdir -p "$tmp/nonaive"
cp tasks/softmax/reference.c tasks/softmax/expert.cu "$tmp/nonaive/"
python3 - "$SRC/tasks/softmax/task.json" "$tmp/nonaive/task.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1])); d.pop("naive"); json.dump(d, open(sys.argv[2], "w"))
EOF
expect 1 'no "naive" kernel' -- "$K" --db "$tmp/db" --measure replay optimize "$tmp/nonaive" --policy blind "${A[@]}"
# the skills policy with an empty library
expect 1 "no cards" -- "$K" --db "$tmp/empty.db" --measure replay optimize tasks/softmax "${A[@]}"
# a replay with nothing recorded for this run: it says so, and how to record it
cp -r tasks/softmax "$tmp/softmax2"
echo '// a kernel nobody recorded' >>"$tmp/softmax2/naive.cu"
expect 1 "no recorded verdict" -- "$K" --db "$tmp/db2" --measure replay optimize "$tmp/softmax2" --policy blind \
    "${A[@]}"
grep -q "^\[replay\] error:" "$tmp/err" || fail "the replayed error is not marked [replay]"
grep -q "measure record" "$tmp/err" || fail "the unmeasured error does not say how to record"

# bench --optimize as recorded on the H200 (archive/verdicts.jsonl), replayed with no GPU into a
# fresh store, as docs/optimize.md says: the library is the archive's cards (a walk replayed first
# would extract its cards again with today's catalog, and a library that changed is another skills
# run), every run served from the archive, the table, its summary and the curves
"$K" --db "$tmp/bench.db" --measure replay bench --optimize --budget 40 --plot "$tmp/curves" \
    >"$tmp/bench.out" 2>&1 || fail "bench --optimize replayed: $(tail -3 "$tmp/bench.out")"
for t in transpose histogram reduce_sum softmax layernorm blur sgemm hgemm; do
    for p in blind memory skills; do
        grep -q "^\[replay\] | $t | $p | [0-9.]*x |" "$tmp/bench.out" || fail "bench --optimize: no row for $t $p"
    done
done
grep -q "^\[replay\] Geometric mean of the final speedups, skills / blind" "$tmp/bench.out" ||
    fail "bench --optimize: no summary"
grep -q "device: NVIDIA H200" "$tmp/bench.out" || fail "bench --optimize: the table does not name the device"
grep -v '^\[replay\]' "$tmp/bench.out" | grep -q . && fail "bench --optimize replayed: a line not marked [replay]"
# the budget curves (cairo; README.md shows docs/optimize-curves.png, drawn by this command)
for x in png svg; do [ -s "$tmp/curves.$x" ] || fail "bench --optimize --plot: no curves.$x"; done
grep -q "^\[replay\] drew $tmp/curves.svg" "$tmp/bench.out" || fail "bench --optimize --plot: not said"

# one recorded run replayed whole: its figures against the device's ceilings on one line
"$K" --db "$tmp/bench.db" --measure replay optimize tasks/softmax --leave-out softmax --policy memory \
    >"$tmp/one.out" 2>&1 || fail "optimize replayed: $(tail -3 "$tmp/one.out")"
grep -q "^\[replay\] Device: [0-9]* GB/s, [0-9.]* of the copy ceiling; [0-9.]* TFLOP/s, [0-9.]* of the f32 FMA ceiling (the task's cost" \
    "$tmp/one.out" || fail "the device line is not one line: $(grep -A2 Device "$tmp/one.out")"

# a store with a card the archive did not have when the runs were recorded (here one imported by
# hand; in use: cards learned live, or left by an older archive): the library's fingerprint is
# another, so the recorded skills run is not found and the replay stops at a missing verdict; the
# error names the recorded run's library beside the store's and says to replay into a fresh store
cp "$tmp/bench.db" "$tmp/stale.db"
"$K" --db "$tmp/stale.db" skills import tests/data/skills/unroll.json >/dev/null 2>&1 || fail "skills import failed"
expect 1 "the store holds this run, finished, made with a library of [0-9]* cards (.*this store's: [0-9]*" -- \
    "$K" --db "$tmp/stale.db" --measure replay optimize tasks/transpose --leave-out transpose --policy skills
grep -q "replay into a fresh store (--db FILE)" "$tmp/err" || fail "the stale-store error does not say what to do"

# judged now (here by the stand-in) with an empty store: the library recorded in the archive is
# taken, said so, and no verdict comes from it
"$K" --judge stand-in --db "$tmp/fresh.db" optimize tasks/transpose --leave-out transpose --budget 3 --no-compare \
    -o "$tmp/fresh.cu" >"$tmp/fresh.out" 2>&1 || fail "optimize with an empty store: $(tail -3 "$tmp/fresh.out")"
grep -q "the store had no skill cards: the library recorded in .* taken" "$tmp/fresh.out" ||
    fail "the library taken from the archive is not said"
grep -q "library: [1-9][0-9]* card(s); ranking 5; left out: transpose" "$tmp/fresh.out" || fail "no library after taking it"
python3 - "$tmp/fresh.db" <<'PY' || fail "recorded verdicts came into the store with the library"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
kinds = dict(db.execute("select kind, count(*) from documents group by kind").fetchall())
sys.exit(0 if kinds.get("skill") and not kinds.get("lineage") and not kinds.get("gpu") else 1)
PY

# help comes from the doc page
"$K" optimize --help >"$tmp/help" || fail "optimize --help failed"
sed -n '/<!-- help -->/,/<!-- \/help -->/p' docs/cli/optimize.md | sed '1,2d;$d' | sed '$d' >"$tmp/want"
cmp -s "$tmp/help" "$tmp/want" || fail "optimize --help differs from docs/cli/optimize.md"

[ $fails -eq 0 ] && echo "test_optimize: ok" || echo "test_optimize: $fails failure(s)"
[ $fails -eq 0 ]
