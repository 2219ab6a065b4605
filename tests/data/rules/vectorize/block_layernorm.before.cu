// test: apply vectorize@layernorm_block:34 width=2 | remove vectorize@layernorm_block:36 exact
// A block per row (2-D grid: blockIdx.y picks the row), index arithmetic on a size_t base, a
// shared-memory tree for the two sums, gamma and beta read at the column: the last pass in float2.
#include <cuda_runtime.h>

#define THREADS 128

__device__ float block_sum(float v, float* sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int k = THREADS / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

__global__ void layernorm_block(const float* __restrict__ x, const float* __restrict__ gamma,
                                const float* __restrict__ beta, float* __restrict__ y, int cols)
{
    __shared__ float sh[THREADS];
    const size_t base = (size_t)blockIdx.y * cols;
    float s = 0.f, q = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = x[base + c];
        s += v;
        q += v * v;
    }
    const float mean = block_sum(s, sh) / cols;
    const float rstd = rsqrtf(block_sum(q, sh) / cols - mean * mean + 1e-5f);
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        y[base + c] = (x[base + c] - mean) * rstd * gamma[c] + beta[c];
}

extern "C" void launch(const float* x, const float* gamma, const float* beta, float* y, int rows, int cols,
                       cudaStream_t stream)
{
    layernorm_block<<<dim3(1, rows), THREADS, 0, stream>>>(x, gamma, beta, y, cols);
}
