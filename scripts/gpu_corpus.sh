#!/usr/bin/env bash
# The style corpus on the GPU (corpus/README.md): every naive and expert kernel of corpus/ gated
# with --measure record (each verdict goes to archive/verdicts.jsonl), then the two experts'
# table against their naive kernels and the vendor (klineage bench --expert --suite corpus).
#   scripts/gpu_corpus.sh [TASK...]        default: every task folder of corpus/
# Called by `scripts/gpu_session.sh corpus`; runs alone too, with:
#   KLINEAGE  the klineage binary (default .carry/bin/klineage)
#   KL_DB     the store (default /tmp/klineage-session.db)
#   OUT       where corpus.log (one line per verdict) and corpus-table.md go (default ./out)
#   KL_CORPUS_JOBS    task folders compiled at once before judging (default 8; nvcc --jobs 2 each)
#   KL_CORPUS_TASK_S  the limit of one task's gate call in seconds (default 90)
#   KL_CORPUS_ARCH    the target of the compile-ahead (default sm_90, the H200's; the judging
#                     recompiles if the device's differs)
# Time on the H200 (16 cores): about 1 minute of nvcc for the 30 kernel files, then about 2 to 3
# seconds of worker per verdict (30 verdicts; the reference at the bench shape is the largest CPU
# part), then the experts' table (both verdicts from the store, one cuBLAS run): about 3 minutes.
# Exit status: 0 every kernel passed the gate and the table was written, 1 otherwise.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
KLINEAGE=${KLINEAGE:-$here/.carry/bin/klineage}
db=${KL_DB:-/tmp/klineage-session.db}
out=${OUT:-$here/out}
jobs=${KL_CORPUS_JOBS:-8}
limit=${KL_CORPUS_TASK_S:-90}
arch=${KL_CORPUS_ARCH:-sm_90}   # what the gate probes on the H200; a wgmma file still gets sm_90a
export PATH=/usr/local/cuda/bin:$PATH
export KL_SOURCE_DIR=${KL_SOURCE_DIR:-$here}
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/kl-gpu-corpus.XXXXXX")
trap 'rm -rf "$work"' EXIT

if [ $# -gt 0 ]; then
    tasks=("$@")
else
    tasks=()
    for d in corpus/*/; do [ -f "$d/task.json" ] && tasks+=("$(basename "$d")"); done
fi
log="$out/corpus.log"
start=$(date +%s)
stamp() { echo "[$(($(date +%s) - start)) s] $*" | tee -a "$log"; }
stamp "corpus: ${#tasks[@]} tasks, $(nproc) cores"

# Every kernel file of a task: naive.cu, then expert.cu, then variants/*.cu when present.
files_of() {
    local t=$1 f
    printf '%s\n' "corpus/$t/naive.cu"
    [ -f "corpus/$t/expert.cu" ] && printf '%s\n' "corpus/$t/expert.cu"
    for f in corpus/"$t"/variants/*.cu; do [ -f "$f" ] && printf '%s\n' "$f"; done
    return 0
}

# 1. Compile everything first, several task folders at once (the gate caches objects by content,
#    flags and toolchain, so the judging below finds them compiled).
for t in "${tasks[@]}"; do echo "$t"; done >"$work/tasks"
export KLINEAGE db work arch
export -f files_of
xargs -P "$jobs" -I{} bash -c '
    t={}
    mapfile -t fs < <(files_of "$t")
    "$KLINEAGE" --db "$db" --jobs 2 gate --compile-only --arch "$arch" "corpus/$t" "${fs[@]}" >"$work/compile-$t.txt" 2>&1 ||
        echo "compile failed: $t" >>"$work/compile-failures"
' <"$work/tasks"
if [ -s "$work/compile-failures" ]; then
    cat "$work/compile-failures" | tee -a "$log"
    for t in "${tasks[@]}"; do grep -q FAILED "$work/compile-$t.txt" && sed 's/^/    /' "$work/compile-$t.txt" | tee -a "$log"; done
fi
stamp "compiled"

# 2. Judge: one gate call per task, its files one after another, each against the naive kernel.
fails=0
for t in "${tasks[@]}"; do
    mapfile -t fs < <(files_of "$t")
    timeout -k 10 "$limit" "$KLINEAGE" --db "$db" --measure record gate "corpus/$t" "${fs[@]}" --json \
        >"$work/gate-$t.jsonl" 2>"$work/gate-$t.err"
    rc=$?
    python3 - "$work/gate-$t.jsonl" "$t" "$rc" <<'PY' | tee -a "$log"
import json, sys
path, task, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
text = open(path).read()
dec, i, seen, docs = json.JSONDecoder(), 0, 0, []
while True:  # one document per verdict: indented when there is one, one line each when several
    i = text.find("{", i)
    if i < 0:
        break
    v, i = dec.raw_decode(text, i)
    docs.append(v)
for v in docs:
    seen += 1
    p = (v.get("stages") or {}).get("profile") or {}
    c = p.get("candidate") or {}
    fr = p.get("fraction") or {}
    name = (v.get("candidate") or {}).get("name", "?").split("/")[-1]
    if v.get("pass"):
        extra = []
        if p.get("gbps"):
            extra.append(f"{p['gbps']:.0f} GB/s")
        if p.get("tflops"):
            extra.append(f"{p['tflops']:.2f} TFLOP/s")
        if fr.get("bandwidth"):
            extra.append(f"{fr['bandwidth']:.2f} of copy")
        print(f"{task:<18} {name:<10} PASS  median {c.get('median_ms', 0):.4f} ms  x{p.get('speedup', 0):.2f} of naive  "
              + "  ".join(extra))
    else:
        print(f"{task:<18} {name:<10} REJECTED at {v.get('failed_stage')}: {str(v.get('reason'))[:300]}")
if seen == 0:
    print(f"{task:<18} no verdict (gate exit {rc})")
PY
    if [ "$rc" -ne 0 ]; then
        fails=$((fails + 1))
        tail -5 "$work/gate-$t.err" | sed 's/^/    /' | tee -a "$log"
    fi
done
stamp "judged (${#tasks[@]} tasks, $fails with a rejected kernel or an error)"

# 3. The experts against their naive kernels (from the store) and the vendor (cuBLAS in the worker).
timeout -k 10 150 "$KLINEAGE" --db "$db" --measure record bench --expert --suite corpus -o "$out/corpus-table.md" \
    >"$work/bench.txt" 2>&1
brc=$?
grep -v '^\[' "$work/bench.txt" | tail -8 | tee -a "$log"
stamp "experts' table: exit $brc"
[ "$fails" -eq 0 ] && [ "$brc" -eq 0 ]
