#!/usr/bin/env bash
# The gate's own cost, on a GPU (not a test: it prints figures for docs/gate.md):
#  1. gate overhead for a 4096x4096 task (rowsum): the whole `klineage gate` minus nvcc minus
#     the kernels' own time, with the objects and the device runtime already cached;
#  2. --jobs 16 compiling 16 distinct candidates against --jobs 1 (a fresh object cache each);
#  3. the same kernel gated twice (--refresh): its two medians, and their difference.
#   KLINEAGE=build/klineage KL_SOURCE_DIR=. tests/gpu/bench_gate.sh
set -eu
KLINEAGE=${KLINEAGE:?set KLINEAGE to the klineage binary}
SRC=${KL_SOURCE_DIR:?set KL_SOURCE_DIR to the repository}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kl-bench-gate.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
task="$SRC/tests/gpu/tasks/rowsum"
cand="$SRC/tests/gpu/cands/rowsum/good.cu"
db="$tmp/bench.db"
ms() { date +%s%N | cut -b1-13; }
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

echo "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo '?')"
echo "nvcc:   $(${KLINEAGE_NVCC:-nvcc} --version 2>/dev/null | grep release || echo '?')"
echo

# ---- 1. overhead ----------------------------------------------------------------------------
# warm: the device document, the runtime and both objects are built once
"$KLINEAGE" --quiet --db "$db" gate "$task" "$cand" --refresh >/dev/null || true
printf '%-34s %8s %8s %8s %8s %8s %9s\n' "1. gate overhead (rowsum 4096^2)" wall_s nvcc_s worker_s kernel_s parent_s overhead_s
for run in 1 2 3; do
    t0=$(ms)
    "$KLINEAGE" --quiet --db "$db" gate "$task" "$cand" --refresh --json >"$tmp/v.json" || true
    t1=$(ms)
    wall=$(echo "($t1 - $t0) / 1000" | python3 -c "print(eval(input()))")
    nvcc=$(json "$tmp/v.json" "d['stages']['compile']['seconds'] + d['stages']['compile'].get('baseline', {}).get('seconds', 0)")
    worker=$(json "$tmp/v.json" "d['run']['seconds']")
    # kernel time: every timed repetition of candidate and baseline (the correctness trials' kernels
    # are not timed; at 4096^2 they are a few ms more)
    kern=$(json "$tmp/v.json" "(d['stages']['profile']['reps']*(d['stages']['profile']['candidate']['median_ms']+d['stages']['profile'].get('baseline',{}).get('median_ms',0)))/1000")
    python3 - "$run" "$wall" "$nvcc" "$worker" "$kern" <<'PY'
import sys
run, wall, nvcc, worker, kern = sys.argv[1], *map(float, sys.argv[2:])
print(f"   run {run:<30} {wall:8.3f} {nvcc:8.3f} {worker:8.3f} {kern:8.3f} {wall-worker-nvcc:8.3f} {wall-nvcc-kern:9.3f}")
PY
done
echo "   goal: overhead_s < 1.5 (overhead = wall - nvcc - kernel time; parent_s = wall - worker - nvcc)"
echo

# ---- 2. parallel compiles -------------------------------------------------------------------
mkdir -p "$tmp/cands"
for i in $(seq 1 16); do
    { cat "$cand"; echo "// variant $i: a distinct file, so a distinct object"; } >"$tmp/cands/v$i.cu"
done
printf '%-34s %8s\n' "2. compile 16 candidates" wall_s
for jobs in 1 16; do
    cache="$tmp/cache-$jobs"
    t0=$(ms)
    KLINEAGE_CACHE="$cache" "$KLINEAGE" --quiet --db "$db" --jobs "$jobs" gate --compile-only "$task" "$tmp"/cands/v*.cu >/dev/null
    t1=$(ms)
    printf '   --jobs %-26s %8s\n' "$jobs" "$(python3 -c "print(f'{($t1 - $t0)/1000:.2f}')")"
done
echo

# ---- 3. the same kernel twice -------------------------------------------------------------
printf '%-34s %10s %10s %8s\n' "3. same kernel gated twice" median1_ms median2_ms diff_%
"$KLINEAGE" --quiet --db "$db" gate "$task" "$cand" --refresh --json >"$tmp/a.json" || true
"$KLINEAGE" --quiet --db "$db" gate "$task" "$cand" --refresh --json >"$tmp/b.json" || true
m1=$(json "$tmp/a.json" "d['stages']['profile']['candidate']['median_ms']")
m2=$(json "$tmp/b.json" "d['stages']['profile']['candidate']['median_ms']")
python3 -c "m1,m2=$m1,$m2; print(f'   {\"rowsum good.cu\":<31} {m1:10.4f} {m2:10.4f} {100*abs(m1-m2)/min(m1,m2):8.2f}')"
echo "   goal: diff_% < 2"
