#!/bin/bash
# klineage-worker on a real GPU (label gpu): the device runtime builds, gpu-info reports the
# device and its ceilings, a correct vector add passes every stage against a baseline, and
# three broken candidates are rejected for the right reason (writes nothing, leaves work on
# another stream, starts a thread). Kernel objects are built by hand with a typed shim, so
# this tests the worker alone, not the parent's compile step.
set -euo pipefail
: "${KL_SOURCE_DIR:?set by ctest}" "${KLINEAGE:?set by ctest}"
WORKER=${KLINEAGE_WORKER:-$(dirname "$KLINEAGE")/klineage-worker}
NVCC=${KLINEAGE_NVCC:-/usr/local/cuda/bin/nvcc}
TASK=$KL_SOURCE_DIR/tests/gpu/tasks/vadd_smoke
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .' || true)
ARCH=sm_${cc:-90}
cache=$work/cache
echo "worker: $WORKER  nvcc: $NVCC  arch: $ARCH"

check() { # result.json python-expression-over-r message
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ok = eval(sys.argv[2], {"r": r})
if not ok:
    print("FAIL:", sys.argv[3], file=sys.stderr)
    print(json.dumps({k: v for k, v in r.items() if k != "profile"}, indent=1)[:4000], file=sys.stderr)
    sys.exit(1)
print("ok:", sys.argv[3])
PY
}

# ---- gpu-info (the worker builds the runtime from nvcc + arch) ----
echo "{\"job\": \"gpu-info\", \"nvcc\": \"$NVCC\", \"arch\": \"$ARCH\", \"cache_dir\": \"$cache\", \"reps\": 10}" |
  "$WORKER" > "$work/info.json" || fail "gpu-info exited $?: $(cat "$work/info.json")"
cat "$work/info.json"
check "$work/info.json" 'r["error"] is None and r["device"]["sms"] > 0 and r["device"]["l2_bytes"] > 0' "device properties"
check "$work/info.json" '100 < r["ceilings"]["copy_gbs"] < 20000' "copy ceiling in GB/s"
check "$work/info.json" '1 < r["ceilings"]["fma_tflops"] < 1000 and r["ceilings"]["tensor_tflops"] > r["ceilings"]["fma_tflops"]' "FMA and tensor ceilings"
ceil=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["ceilings"]; print(json.dumps({k: c[k] for k in ("copy_gbs","fma_tflops","tensor_tflops")}))' "$work/info.json")


# A candidate: a kernel file body (launch() with the task's signature) plus the shim.
build() { # name body
  cat > "$work/$1.cu" <<CU
#include <cuda_runtime.h>
#include <pthread.h>
#include <unistd.h>
$2
extern "C" int kl_shim_launch(void *const *args, cudaStream_t s)
{
    launch((const float *)args[0], (const float *)args[1], (float *)args[2], *(const int *)args[3], s);
    return (int)cudaPeekAtLastError();
}
extern "C" const char *kl_shim_abi(void) { return "klineage-shim-1"; }
CU
  "$NVCC" -shared -Xcompiler -fPIC -cudart shared -arch="$ARCH" -O3 "$work/$1.cu" -o "$work/$1.so"
}

build good '
__global__ void add4(const float4 *a, const float4 *b, float4 *c, int n4)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += gridDim.x * blockDim.x) {
        float4 x = a[i], y = b[i];
        c[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
}
__global__ void add1(const float *a, const float *b, float *c, int from, int n)
{
    int i = from + blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
extern "C" void launch(const float *a, const float *b, float *c, int n, cudaStream_t s)
{
    int n4 = n / 4;
    if (n4) add4<<<1056, 256, 0, s>>>((const float4 *)a, (const float4 *)b, (float4 *)c, n4);
    if (n % 4) add1<<<1, 4, 0, s>>>(a, b, c, n4 * 4, n);
}'

build naive '
__global__ void add(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
extern "C" void launch(const float *a, const float *b, float *c, int n, cudaStream_t s)
{
    add<<<(n + 255) / 256, 256, 0, s>>>(a, b, c, n);
}'

build skips '
extern "C" void launch(const float *a, const float *b, float *c, int n, cudaStream_t s) {}'

build other_stream '
__global__ void slow_add(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    long long t0 = clock64();
    while (clock64() - t0 < 2000000) {}
    if (i < n) c[i] = a[i] + b[i];
}
extern "C" void launch(const float *a, const float *b, float *c, int n, cudaStream_t s)
{
    static cudaStream_t mine;
    if (!mine) cudaStreamCreateWithFlags(&mine, cudaStreamNonBlocking);
    slow_add<<<(n + 255) / 256, 256, 0, mine>>>(a, b, c, n);
}'

build threads '
static void *spin(void *) { for (;;) sleep(1); return 0; }
__attribute__((constructor)) static void start(void) { pthread_t t; pthread_create(&t, 0, spin, 0); }
__global__ void add(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
extern "C" void launch(const float *a, const float *b, float *c, int n, cudaStream_t s)
{
    add<<<(n + 255) / 256, 256, 0, s>>>(a, b, c, n);
}'

job() { # candidate [extra json]
  cat <<J
{"job": "gate", "nvcc": "$NVCC", "arch": "$ARCH", "cache_dir": "$cache", "task_dir": "$TASK",
 "candidate": "$work/$1.so", "baseline": "$work/naive.so",
 "shapes": ["check[0]", "check[1]", "check[2]", "check[3]", "bench"], "seeds": [11, 22],
 "ceilings": $ceil,
 "stages": {"correct": true, "determinism": true, "integrity": true, "stream": true,
            "profile": {"shape": "bench", "min_reps": 20, "max_reps": 100, "max_seconds": 3, "warmup": 2, "flush_l2": true}}${2:-}}
J
}

# ---- a correct kernel passes every stage ----
job good | "$WORKER" > "$work/good.json" || fail "gate (good) exited $?: $(head -c 3000 "$work/good.json")"
check "$work/good.json" 'r["error"] is None and r["hygiene"]["ok"] and r["load"]["ok"]' "good: loads, no threads, no interposition"
check "$work/good.json" 'len(r["correct"]) == 5 * 2 * 2 and all(e["ok"] for e in r["correct"])' "good: correct at 5 shapes x 2 seeds x 2 poisons"
check "$work/good.json" 'all(e["checked_against"] == "reference" for e in r["correct"])' "good: every shape against the reference"
check "$work/good.json" 'r["determinism"]["ok"] and r["integrity"]["ok"] and r["stream"]["ok"]' "good: determinism, integrity, stream"
check "$work/good.json" 'r["profile"]["ok"] and r["profile"]["timer"] in ("cupti", "events") and r["profile"]["reps"] >= 20' "good: profiled"
check "$work/good.json" '0 < r["profile"]["candidate"]["median_ms"] and r["profile"]["candidate"]["q1_ms"] <= r["profile"]["candidate"]["median_ms"] <= r["profile"]["candidate"]["q3_ms"]' "good: quartiles ordered"
check "$work/good.json" 'r["profile"]["speedup"] > 0.5 and 0.2 < r["profile"]["frac_copy"] < 1.25' "good: speedup and roofline fraction plausible"
python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["profile"]; print("good: %.4f ms (%s), %.0f GB/s, speedup %.2f over naive" % (p["candidate"]["median_ms"], p["timer"], p["gbs"], p["speedup"]))' "$work/good.json"

# ---- a kernel that writes nothing ----
job skips | "$WORKER" > "$work/skips.json" || fail "gate (skips) exited $?"
check "$work/skips.json" 'not any(e["ok"] for e in r["correct"]) and all(o["unwritten"] == o["count"] for e in r["correct"] for o in e["outputs"])' "skips: every element unwritten in both passes"
check "$work/skips.json" '"profile" not in r and "determinism" not in r' "skips: later stages not run"

# ---- work left on another stream ----
job other_stream | "$WORKER" > "$work/other.json" || fail "gate (other_stream) exited $?"
check "$work/other.json" '(not all(e["ok"] for e in r["correct"])) or (r.get("stream") and not r["stream"]["ok"] and "another stream" in r["stream"]["detail"])' "other_stream: rejected (wrong outputs or the stream contract)"

# ---- a constructor that starts a thread ----
job threads | "$WORKER" > "$work/threads.json" || fail "gate (threads) exited $?"
check "$work/threads.json" 'not r["hygiene"]["ok"] and "thread" in r["hygiene"]["detail"] and "correct" not in r' "threads: rejected before running"

# ---- cuBLAS as a named baseline: the suite's naive sgemm against cublas-sgemm; the bench
# shape is past reference_max_flops, so the validated baseline stands in for the reference ----
cat > "$work/sgemm.cu" <<CU
#include "$KL_SOURCE_DIR/tasks/sgemm/naive.cu"
extern "C" int kl_shim_launch(void *const *args, cudaStream_t s)
{
    launch((const float *)args[0], (const float *)args[1], (float *)args[2], *(const int *)args[3],
           *(const int *)args[4], *(const int *)args[5], s);
    return (int)cudaPeekAtLastError();
}
extern "C" const char *kl_shim_abi(void) { return "klineage-shim-1"; }
CU
"$NVCC" -shared -Xcompiler -fPIC -cudart shared -arch="$ARCH" -O3 "$work/sgemm.cu" -o "$work/sgemm.so"
cat > "$work/sgemm.job" <<J
{"job": "gate", "nvcc": "$NVCC", "arch": "$ARCH", "cache_dir": "$cache", "task_dir": "$KL_SOURCE_DIR/tasks/sgemm",
 "candidate": "$work/sgemm.so", "baseline_builtin": "cublas-sgemm", "reference_max_flops": 2e10,
 "shapes": ["check[5]", "check[7]", "bench"], "seeds": [3, 4], "ceilings": $ceil,
 "stages": {"correct": true, "determinism": false, "integrity": true, "stream": false,
            "profile": {"shape": "bench", "min_reps": 5, "max_reps": 20, "max_seconds": 3, "warmup": 1, "flush_l2": true}}}
J
"$WORKER" < "$work/sgemm.job" > "$work/sgemm.json" || fail "gate (sgemm vs cuBLAS) exited $?: $(head -c 3000 "$work/sgemm.json")"
check "$work/sgemm.json" 'all(e["ok"] for e in r["baseline_correct"]) and len(r["baseline_correct"]) == 2' "sgemm: cuBLAS baseline validated at the small shapes"
check "$work/sgemm.json" 'all(e["ok"] for e in r["correct"]) and [e["checked_against"] for e in r["correct"]][-1] == "baseline"' "sgemm: bench checked against the baseline"
check "$work/sgemm.json" 'r["profile"]["baseline_name"] == "cublas-sgemm" and 5 < r["profile"]["baseline"]["median_ms"] * 0 + 2 * 4096**3 / (r["profile"]["baseline"]["median_ms"] * 1e-3) / 1e12 < 200' "sgemm: cuBLAS f32 GEMM at a plausible TFLOP/s"

echo "all worker smoke checks passed"
