// softmax, expert: row-wise softmax of a rows x cols f32 matrix.
//
// Optimizations (each marked where it sits):
//  - row-parallel: a block per row (THREADS threads cooperate on one row)
//  - the row is read once into registers and written once (one pass over memory),
//    with an online (max, sum) pair so one block reduction gives both statistics
//  - vectorize: float4 loads and stores when the row start is 16-byte aligned
//  - warp-reduce: shuffle reduction of the (max, sum) pairs, then across warps in shared memory
//  - fast-math: __expf, one exponential per element
//  - unroll, launch-bounds, restrict
// Rows longer than THREADS * MAX_ITEMS fall back to a two-pass streaming kernel (online
// max/sum over global memory, then the normalised write); rows whose length is not a
// multiple of VEC use the scalar register path.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

constexpr int THREADS = 256;                 // threads per block; one block per row
constexpr int WARPS = THREADS / 32;
constexpr int VEC = 4;                       // floats per 16-byte access
constexpr int MAX_ITEMS = 64;                // floats per thread held in registers at most
constexpr unsigned FULL_MASK = 0xffffffffu;

struct MaxSum {
    float m;  // running maximum
    float s;  // sum of exp(x - m)
};

// Merge two (max, sum) pairs; an empty pair has m = -inf and s = 0.
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b)
{
    MaxSum r;
    r.m = fmaxf(a.m, b.m);
    // fast-math: __expf
    const float sa = (a.m == -INFINITY) ? 0.0f : a.s * __expf(a.m - r.m);
    const float sb = (b.m == -INFINITY) ? 0.0f : b.s * __expf(b.m - r.m);
    r.s = sa + sb;
    return r;
}

// Every thread of the block returns the (max, sum) of the whole block, in a fixed order.
__device__ __forceinline__ MaxSum block_reduce(MaxSum v, MaxSum* part)
{
    // warp-reduce: shuffle reduction
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        MaxSum o;
        o.m = __shfl_xor_sync(FULL_MASK, v.m, off);
        o.s = __shfl_xor_sync(FULL_MASK, v.s, off);
        v = merge(v, o);
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) part[warp] = v;
    __syncthreads();
    MaxSum r = part[0];
#pragma unroll
    for (int w = 1; w < WARPS; w++) r = merge(r, part[w]);
    return r;
}

// The row in registers: ITEMS floats per thread. VECTOR: cols % VEC == 0 and aligned pointers,
// so every float4 is either entirely inside the row or entirely outside.
template <int ITEMS, bool VECTOR>
// launch-bounds
__global__ void __launch_bounds__(THREADS)
softmax_rows(const float* __restrict__ x, float* __restrict__ y, int cols)  // restrict
{
    __shared__ MaxSum part[WARPS];
    const size_t base = (size_t)blockIdx.x * (size_t)cols;
    const int tid = threadIdx.x;
    float v[ITEMS];

    if (VECTOR) {
        // unroll
#pragma unroll
        for (int i = 0; i < ITEMS / VEC; i++) {
            const int c = (i * THREADS + tid) * VEC;
            if (c < cols) {
                // vectorize: float4 loads
                const float4 t = *reinterpret_cast<const float4*>(x + base + c);
                v[i * VEC + 0] = t.x;
                v[i * VEC + 1] = t.y;
                v[i * VEC + 2] = t.z;
                v[i * VEC + 3] = t.w;
            } else {
#pragma unroll
                for (int e = 0; e < VEC; e++) v[i * VEC + e] = -INFINITY;
            }
        }
    } else {
        // unroll
#pragma unroll
        for (int i = 0; i < ITEMS; i++) {
            const int c = i * THREADS + tid;
            v[i] = (c < cols) ? x[base + c] : -INFINITY;
        }
    }

    // This thread's (max, sum); the exponentials replace the inputs in registers.
    MaxSum mine;
    mine.m = -INFINITY;
#pragma unroll
    for (int i = 0; i < ITEMS; i++) mine.m = fmaxf(mine.m, v[i]);
    mine.s = 0.0f;
    if (mine.m != -INFINITY) {
#pragma unroll
        for (int i = 0; i < ITEMS; i++) {
            v[i] = __expf(v[i] - mine.m);  // exp(-inf) = 0 for the padding
            mine.s += v[i];
        }
    }

    const MaxSum row = block_reduce(mine, part);
    const float scale = (mine.m == -INFINITY) ? 0.0f : __expf(mine.m - row.m) / row.s;

    if (VECTOR) {
#pragma unroll
        for (int i = 0; i < ITEMS / VEC; i++) {
            const int c = (i * THREADS + tid) * VEC;
            if (c < cols) {
                // vectorize: float4 stores
                float4 t;
                t.x = v[i * VEC + 0] * scale;
                t.y = v[i * VEC + 1] * scale;
                t.z = v[i * VEC + 2] * scale;
                t.w = v[i * VEC + 3] * scale;
                *reinterpret_cast<float4*>(y + base + c) = t;
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < ITEMS; i++) {
            const int c = i * THREADS + tid;
            if (c < cols) y[base + c] = v[i] * scale;
        }
    }
}

// Rows too long for registers: online (max, sum) over global memory, then the write pass.
__global__ void __launch_bounds__(THREADS)
softmax_rows_long(const float* __restrict__ x, float* __restrict__ y, int cols)
{
    __shared__ MaxSum part[WARPS];
    const float* xr = x + (size_t)blockIdx.x * (size_t)cols;
    float* yr = y + (size_t)blockIdx.x * (size_t)cols;

    MaxSum mine;
    mine.m = -INFINITY;
    mine.s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += THREADS) {
        const float xv = xr[c];
        if (xv > mine.m) {
            mine.s = mine.s * __expf(mine.m - xv) + 1.0f;  // exp(-inf) = 0 on the first element
            mine.m = xv;
        } else {
            mine.s += __expf(xv - mine.m);
        }
    }
    const MaxSum row = block_reduce(mine, part);
    const float inv = 1.0f / row.s;
    for (int c = threadIdx.x; c < cols; c += THREADS) yr[c] = __expf(xr[c] - row.m) * inv;
}

template <bool VECTOR>
static void launch_rows(const float* x, float* y, int rows, int cols, cudaStream_t stream)
{
    const int per_thread = (cols + THREADS - 1) / THREADS;  // floats each thread must hold
    if (per_thread <= 4)
        softmax_rows<4, VECTOR><<<rows, THREADS, 0, stream>>>(x, y, cols);
    else if (per_thread <= 8)
        softmax_rows<8, VECTOR><<<rows, THREADS, 0, stream>>>(x, y, cols);
    else if (per_thread <= 16)
        softmax_rows<16, VECTOR><<<rows, THREADS, 0, stream>>>(x, y, cols);
    else if (per_thread <= 32)
        softmax_rows<32, VECTOR><<<rows, THREADS, 0, stream>>>(x, y, cols);
    else
        softmax_rows<MAX_ITEMS, VECTOR><<<rows, THREADS, 0, stream>>>(x, y, cols);
}

extern "C" void launch(const float* x, float* y, int rows, int cols, cudaStream_t stream)
{
    if (rows <= 0 || cols <= 0) return;
    if (cols > THREADS * MAX_ITEMS) {
        softmax_rows_long<<<rows, THREADS, 0, stream>>>(x, y, cols);
        return;
    }
    const bool aligned = cols % VEC == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)y % 16 == 0;
    if (aligned)
        launch_rows<true>(x, y, rows, cols, stream);
    else
        launch_rows<false>(x, y, rows, cols, stream);
}
