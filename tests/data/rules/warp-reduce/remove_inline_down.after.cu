// test: remove warp-reduce@partial_sums:15 | apply warp-reduce@partial_sums:17
// Shuffles written inline in the kernel: down shuffles, the partials reduced again by the
// first warp, thread 0 writing the block's sum.
#include <cuda_runtime.h>

#define BLOCK 256

__global__ void partial_sums(const float* x, float* out, int n)
{
    int lane = threadIdx.x & 31;
    int warp = threadIdx.x >> 5;
    float v = 0.0f;
    for (int i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += gridDim.x * BLOCK) v += x[i];
    __shared__ float kl_red[256];
    kl_red[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) kl_red[threadIdx.x] = kl_red[threadIdx.x] + kl_red[threadIdx.x + s];
        __syncthreads();
    }
    v = kl_red[0];
    __syncthreads();
    if (warp == 0) {
        if (lane == 0) atomicAdd(out, v);
    }
}

extern "C" void launch(const float* x, float* out, int n, cudaStream_t stream)
{
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    int grid = (n + BLOCK - 1) / BLOCK;
    if (grid > 1024) grid = 1024;
    if (grid < 1) grid = 1;
    partial_sums<<<grid, BLOCK, 0, stream>>>(x, out, n);
}
