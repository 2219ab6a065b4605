// test: remove row-parallel@layernorm_long:31 | apply row-parallel@layernorm_long:26
// The expert's long-row layernorm: a block per row, the sums through a block helper (after
// warp-reduce was removed: a shared-memory tree).
#include <cuda_runtime.h>

constexpr int THREADS = 256;
constexpr float EPS = 1e-5f;

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

__global__ void layernorm_long(const float* x, const float* gamma, const float* beta, float* y, int cols, int kl_rows)
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
    const float rstd = rsqrtf(q / (float)cols + EPS);
    for (int c = 0; c < cols; c++) yr[c] = (xr[c] - mean) * rstd * gamma[c] + beta[c];
}

extern "C" void launch(const float* x, const float* gamma, const float* beta, float* y, int rows, int cols,
                       cudaStream_t stream)
{
    if (rows <= 0 || cols <= 0) return;
    layernorm_long<<<(rows + THREADS - 1) / THREADS, THREADS, 0, stream>>>(x, gamma, beta, y, cols, rows);
}
