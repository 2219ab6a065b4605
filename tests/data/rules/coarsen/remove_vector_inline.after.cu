// test: remove coarsen@sq_sum_groups:12:src
// The sum of squares of n floats: every thread gathers four consecutive floats at a time into a
// float4 (by hand, no cast) inside a grid-stride loop over the n / 4 whole groups, and squares
// them inline; thread 0 of block 0 adds the last n % 4. Warps reduce by shuffles, lane 0 adds its
// warp's sum to out with atomicAdd (out is zeroed first).
#include <cuda_runtime.h>

__global__ void sq_sum_groups(const float* __restrict__ src, float* __restrict__ total, int groups, int n)
{
    float part = 0.f;
    for (int g = blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += gridDim.x * blockDim.x) {
        const float q = src[g];
        part += q * q;
    }
    if (blockIdx.x == 0 && threadIdx.x == 0)
        for (int r = n & ~3; r < n; r++) part += src[r] * src[r];
    for (int o = 16; o > 0; o >>= 1) part += __shfl_down_sync(0xffffffffu, part, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(total, part);
}

extern "C" void launch(const float* x, float* out, int n, cudaStream_t stream)
{
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    int blocks = (n / 4 + 255) / 256;
    if (blocks > 2048) blocks = 2048;
    if (blocks < 1) blocks = 1;
    sq_sum_groups<<<4 * (blocks), 256, 0, stream>>>(x, out, 4 * (n / 4), n);
}
