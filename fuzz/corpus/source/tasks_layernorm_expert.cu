// layernorm, expert: y = (x - mean) / sqrt(var + eps) * gamma + beta, per row of a rows x cols
// f32 matrix.
//
// Optimizations (each marked where it sits):
//  - row-parallel: a block per row (THREADS threads cooperate on one row)
//  - the row is read once into registers; mean and variance (two-pass, around the mean,
//    so no cancellation) both come from the registers; one write
//  - vectorize: float4 loads and stores of x, y, gamma and beta when aligned
//  - warp-reduce: shuffle reduction, then across warps in shared memory (two-level sums)
//  - fast-math: rsqrtf
//  - unroll, launch-bounds, restrict
// Rows longer than THREADS * MAX_ITEMS fall back to a streaming kernel that reads the row
// three times; rows whose length is not a multiple of VEC use the scalar register path.
#include <cuda_runtime.h>
#include <stdint.h>

constexpr int THREADS = 256;                 // threads per block; one block per row
constexpr int WARPS = THREADS / 32;
constexpr int VEC = 4;                       // floats per 16-byte access
constexpr int MAX_ITEMS = 64;                // floats per thread held in registers at most
constexpr float EPS = 1e-5f;
constexpr unsigned FULL_MASK = 0xffffffffu;

// Sum over the block; every thread gets the total, added in a fixed order (deterministic).
__device__ __forceinline__ float block_sum(float v, float* part)
{
    // warp-reduce: shuffle reduction
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(FULL_MASK, v, off);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    float r = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; w++) r += part[w];
    return r;
}

// The row in registers: ITEMS floats per thread. VECTOR: cols % VEC == 0 and aligned pointers,
// so every float4 is either entirely inside the row or entirely outside.
template <int ITEMS, bool VECTOR>
// launch-bounds
__global__ void __launch_bounds__(THREADS)
layernorm_rows(const float* __restrict__ x, const float* __restrict__ gamma,  // restrict
               const float* __restrict__ beta, float* __restrict__ y, int cols)
{
    __shared__ float part_mean[WARPS];
    __shared__ float part_var[WARPS];
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
                for (int e = 0; e < VEC; e++) v[i * VEC + e] = 0.0f;
            }
        }
    } else {
        // unroll
#pragma unroll
        for (int i = 0; i < ITEMS; i++) {
            const int c = i * THREADS + tid;
            v[i] = (c < cols) ? x[base + c] : 0.0f;
        }
    }

    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < ITEMS; i++) s += v[i];  // padding is 0
    const float mean = block_sum(s, part_mean) / (float)cols;

    // Second pass from registers: squared deviations, padding excluded.
    float q = 0.0f;
    if (VECTOR) {
#pragma unroll
        for (int i = 0; i < ITEMS / VEC; i++) {
            const int c = (i * THREADS + tid) * VEC;
            if (c < cols) {
#pragma unroll
                for (int e = 0; e < VEC; e++) {
                    const float d = v[i * VEC + e] - mean;
                    q += d * d;
                }
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < ITEMS; i++) {
            const int c = i * THREADS + tid;
            if (c < cols) {
                const float d = v[i] - mean;
                q += d * d;
            }
        }
    }
    // fast-math: rsqrtf
    const float rstd = rsqrtf(block_sum(q, part_var) / (float)cols + EPS);

    if (VECTOR) {
#pragma unroll
        for (int i = 0; i < ITEMS / VEC; i++) {
            const int c = (i * THREADS + tid) * VEC;
            if (c < cols) {
                // vectorize: float4 loads of gamma and beta, float4 stores of y
                const float4 g = *reinterpret_cast<const float4*>(gamma + c);
                const float4 b = *reinterpret_cast<const float4*>(beta + c);
                float4 t;
                t.x = (v[i * VEC + 0] - mean) * rstd * g.x + b.x;
                t.y = (v[i * VEC + 1] - mean) * rstd * g.y + b.y;
                t.z = (v[i * VEC + 2] - mean) * rstd * g.z + b.z;
                t.w = (v[i * VEC + 3] - mean) * rstd * g.w + b.w;
                *reinterpret_cast<float4*>(y + base + c) = t;
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < ITEMS; i++) {
            const int c = i * THREADS + tid;
            if (c < cols) y[base + c] = (v[i] - mean) * rstd * gamma[c] + beta[c];
        }
    }
}

// Rows too long for registers: mean, then variance around it, then the write, each a pass
// over the row in global memory (the second and third mostly hit L2).
__global__ void __launch_bounds__(THREADS)
layernorm_rows_long(const float* __restrict__ x, const float* __restrict__ gamma, const float* __restrict__ beta,
                    float* __restrict__ y, int cols)
{
    __shared__ float part_mean[WARPS];
    __shared__ float part_var[WARPS];
    const float* xr = x + (size_t)blockIdx.x * (size_t)cols;
    float* yr = y + (size_t)blockIdx.x * (size_t)cols;

    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += THREADS) s += xr[c];
    const float mean = block_sum(s, part_mean) / (float)cols;
    float q = 0.0f;
    for (int c = threadIdx.x; c < cols; c += THREADS) {
        const float d = xr[c] - mean;
        q += d * d;
    }
    const float rstd = rsqrtf(block_sum(q, part_var) / (float)cols + EPS);
    for (int c = threadIdx.x; c < cols; c += THREADS) yr[c] = (xr[c] - mean) * rstd * gamma[c] + beta[c];
}

template <bool VECTOR>
static void launch_rows(const float* x, const float* gamma, const float* beta, float* y, int rows, int cols,
                        cudaStream_t stream)
{
    const int per_thread = (cols + THREADS - 1) / THREADS;  // floats each thread must hold
    if (per_thread <= 4)
        layernorm_rows<4, VECTOR><<<rows, THREADS, 0, stream>>>(x, gamma, beta, y, cols);
    else if (per_thread <= 8)
        layernorm_rows<8, VECTOR><<<rows, THREADS, 0, stream>>>(x, gamma, beta, y, cols);
    else if (per_thread <= 16)
        layernorm_rows<16, VECTOR><<<rows, THREADS, 0, stream>>>(x, gamma, beta, y, cols);
    else if (per_thread <= 32)
        layernorm_rows<32, VECTOR><<<rows, THREADS, 0, stream>>>(x, gamma, beta, y, cols);
    else
        layernorm_rows<MAX_ITEMS, VECTOR><<<rows, THREADS, 0, stream>>>(x, gamma, beta, y, cols);
}

extern "C" void launch(const float* x, const float* gamma, const float* beta, float* y, int rows, int cols,
                       cudaStream_t stream)
{
    if (rows <= 0 || cols <= 0) return;
    if (cols > THREADS * MAX_ITEMS) {
        layernorm_rows_long<<<rows, THREADS, 0, stream>>>(x, gamma, beta, y, cols);
        return;
    }
    const bool aligned = cols % VEC == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)y % 16 == 0 &&
                         (uintptr_t)gamma % 16 == 0 && (uintptr_t)beta % 16 == 0;
    if (aligned)
        launch_rows<true>(x, gamma, beta, y, rows, cols, stream);
    else
        launch_rows<false>(x, gamma, beta, y, rows, cols, stream);
}
