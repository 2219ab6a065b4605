// test: remove specialize@launch:140 | apply specialize@layernorm_rows_long:19:cols values=1024
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
    __shared__ float kl_red[256];
    kl_red[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) kl_red[threadIdx.x] = kl_red[threadIdx.x] + kl_red[threadIdx.x + s];
        __syncthreads();
    }
    v = kl_red[0];
    __syncthreads();
    float r = v;
    return r;
}

// The row in registers: ITEMS floats per thread. VECTOR: cols % VEC == 0 and aligned pointers,
// so every float4 is either entirely inside the row or entirely outside.
template <int ITEMS, bool VECTOR>
// launch-bounds
__global__ void layernorm_rows(const float* x, const float* gamma,  // restrict
               const float* beta, float* y, int cols)
{
    __shared__ float part_mean[WARPS];
    __shared__ float part_var[WARPS];
    const size_t base = (size_t)blockIdx.x * (size_t)cols;
    const int tid = threadIdx.x;
    float v[ITEMS];

    {
        for (int i = 0; i < ITEMS; i++) {
            const int c = i * THREADS + tid;
            v[i] = (c < cols) ? x[base + c] : 0.0f;
        }
    }

    float s = 0.0f;
    for (int i = 0; i < ITEMS; i++) s += v[i];  // padding is 0
    const float mean = block_sum(s, part_mean) / (float)cols;

    // Second pass from registers: squared deviations, padding excluded.
    float q = 0.0f;
    if (VECTOR) {
        for (int i = 0; i < ITEMS / VEC; i++) {
            const int c = (i * THREADS + tid) * VEC;
            if (c < cols) {
                for (int e = 0; e < VEC; e++) {
                    const float d = v[i * VEC + e] - mean;
                    q += d * d;
                }
            }
        }
    } else {
        for (int i = 0; i < ITEMS; i++) {
            const int c = i * THREADS + tid;
            if (c < cols) {
                const float d = v[i] - mean;
                q += d * d;
            }
        }
    }
    // fast-math: rsqrtf
    const float rstd = 1.0f / sqrtf(block_sum(q, part_var) / (float)cols + EPS);

    {
        for (int i = 0; i < ITEMS; i++) {
            const int c = i * THREADS + tid;
            if (c < cols) y[base + c] = (v[i] - mean) * rstd * gamma[c] + beta[c];
        }
    }
}

// Rows too long for registers: mean, then variance around it, then the write, each a pass
// over the row in global memory (the second and third mostly hit L2).
__global__ void layernorm_rows_long(const float* x, const float* gamma, const float* beta,
                    float* y, int cols, int kl_rows)
{
    const int kl_row = blockIdx.x * blockDim.x + threadIdx.x;
    if (kl_row >= kl_rows) return;
    const float* xr = x + (size_t)kl_row * (size_t)cols;
    float* yr = y + (size_t)kl_row * (size_t)cols;

    float s = 0.0f;
    for (int c = 0; c < cols; c++) s += xr[c];
    const float mean = s / (float)cols;
    float q = 0.0f;
    for (int c = 0; c < cols; c++) {
        const float d = xr[c] - mean;
        q += d * d;
    }
    const float rstd = 1.0f / sqrtf(q / (float)cols + EPS);
    for (int c = 0; c < cols; c++) yr[c] = (xr[c] - mean) * rstd * gamma[c] + beta[c];
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
        layernorm_rows_long<<<(rows + THREADS - 1) / THREADS, THREADS, 0, stream>>>(x, gamma, beta, y, cols, rows);
        return;
    }
    const bool aligned = cols % VEC == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)y % 16 == 0 &&
                         (uintptr_t)gamma % 16 == 0 && (uintptr_t)beta % 16 == 0;
    if (aligned)
        launch_rows<true>(x, gamma, beta, y, rows, cols, stream);
    else
        launch_rows<false>(x, gamma, beta, y, rows, cols, stream);
}
