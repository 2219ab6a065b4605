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
    cp "$tmp/v.json" "$tmp/v$run.json"
done
echo "   goal: overhead_s < 1.5 (overhead = wall - nvcc - kernel time; parent_s = wall - worker - nvcc)"
# where the time went: the worker's own clock (run.timings) and the parent's (run.parent), per run
python3 - "$tmp"/v1.json "$tmp"/v2.json "$tmp"/v3.json <<'PY'
import json, sys
docs = []
for f in sys.argv[1:]:
    try:
        docs.append(json.load(open(f)))
    except Exception as e:
        print(f"   (no verdict in {f}: {e})")
if not docs:
    sys.exit(0)
def get(d, *path):
    for p in path:
        d = d.get(p, {}) if isinstance(d, dict) else {}
    return d if not isinstance(d, dict) else None
rows = [
    ("worker wall (parent's clock)", ("run", "seconds")),
    ("  worker total (its own clock)", ("run", "timings", "total")),
    ("  parse job", ("run", "timings", "parse")),
    ("  task, pool, queue inputs", ("run", "timings", "inputs_start")),
    ("  runtime load (dlopen)", ("run", "timings", "runtime_load")),
    ("  CUDA init (context)", ("run", "timings", "cuda_init")),
    ("  device info", ("run", "timings", "device_info")),
    ("  CUPTI init", ("run", "timings", "cupti_init")),
    ("  cuBLAS init", ("run", "timings", "cublas_init")),
    ("  baseline load", ("run", "timings", "baseline_load")),
    ("  snapshot", ("run", "timings", "snapshot")),
    ("  candidate load", ("run", "timings", "candidate_load")),
    ("  stage correct", ("run", "timings", "correct")),
    ("  stage determinism", ("run", "timings", "determinism")),
    ("  stage stream", ("run", "timings", "stream")),
    ("  stage profile", ("run", "timings", "profile")),
    ("    profile setup", ("run", "timings", "profile_setup")),
    ("    profile warm-up", ("run", "timings", "profile_warmup")),
    ("    profile timed loop", ("run", "timings", "profile_timed")),
    ("    profile reps", ("run", "timings", "profile_reps")),
    ("    profile batches", ("run", "timings", "profile_batches")),
    ("    profile stopped", ("run", "timings", "profile_stopped")),
    ("    profile median rse", ("run", "timings", "profile_median_rse")),
    ("  final sync + hygiene", ("run", "timings", "finish")),
    ("  in stages: alloc", ("run", "timings", "alloc")),
    ("  in stages: release", ("run", "timings", "release")),
    ("  in stages: upload", ("run", "timings", "upload")),
    ("  in stages: launch+sync", ("run", "timings", "launch")),
    ("  in stages: readback", ("run", "timings", "readback")),
    ("  in stages: integrity", ("run", "timings", "integrity")),
    ("  in stages: compare", ("run", "timings", "compare")),
    ("  waiting for inputs", ("run", "timings", "wait_inputs")),
    ("  waiting for references", ("run", "timings", "wait_reference")),
    ("  pool: fills (cpu s)", ("run", "timings", "fills_cpu")),
    ("  pool: references (cpu s)", ("run", "timings", "references_cpu")),
    ("  pool: reference load", ("run", "timings", "reference_load")),
    ("  pool: threads", ("run", "timings", "pool_threads")),
    ("parent: compile (cache)", ("run", "parent", "compile")),
    ("parent: object check", ("run", "parent", "object_check")),
    ("parent: runtime check", ("run", "parent", "runtime")),
    ("parent: worker", ("run", "parent", "worker")),
    ("parent: judge until worker done", ("run", "parent", "until_worker_done")),
]
print("   breakdown (seconds)" + "".join(f"{'run ' + str(i + 1):>12}" for i in range(len(docs))))
for name, path in rows:
    vals = [get(d, *path) for d in docs]
    cells = "".join(f"{v:12.4f}" if isinstance(v, float) else f"{str(v) if v is not None else '-':>12}" for v in vals)
    print(f"   {name:<33}{cells}")
PY
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
