// test: remove warp-reduce@block_sum:14 | apply warp-reduce@block_sum:15
// The expert style: a __device__ helper with a marked xor shuffle loop, per-warp partials,
// and every thread adding the partials in a fixed order.
#include <cuda_runtime.h>

constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
constexpr unsigned FULL_MASK = 0xffffffffu;

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

__global__ void __launch_bounds__(THREADS) row_mean(const float* __restrict__ x, float* __restrict__ y, int cols)
{
    __shared__ float part[WARPS];
    const size_t base = (size_t)blockIdx.x * cols;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += THREADS) s += x[base + c];
    const float total = block_sum(s, part);
    if (threadIdx.x == 0) y[blockIdx.x] = total / (float)cols;
}

extern "C" void launch(const float* x, float* y, int rows, int cols, cudaStream_t stream)
{
    row_mean<<<rows, THREADS, 0, stream>>>(x, y, cols);
}
