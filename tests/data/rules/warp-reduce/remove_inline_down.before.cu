// test: remove warp-reduce@partial_sums:15 | apply warp-reduce@partial_sums:17
// Shuffles written inline in the kernel: down shuffles, the partials reduced again by the
// first warp, thread 0 writing the block's sum.
#include <cuda_runtime.h>

#define BLOCK 256

__global__ void partial_sums(const float* x, float* out, int n)
{
    __shared__ float red[BLOCK / 32];
    int lane = threadIdx.x & 31;
    int warp = threadIdx.x >> 5;
    float v = 0.0f;
    for (int i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += gridDim.x * BLOCK) v += x[i];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = (lane < BLOCK / 32) ? red[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
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
