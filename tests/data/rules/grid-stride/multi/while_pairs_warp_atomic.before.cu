// test: remove grid-stride@pair_sum:14
// A sum in the style of the samples' reductions: each thread adds two elements a block apart per
// step of a grid-stride `while` loop into its partial, the warp adds the partials with shuffles and
// lane 0 adds the warp's sum to the output.
#include <cuda_runtime.h>

#define BLOCK 256

__global__ void pair_sum(const float* __restrict__ in, float* __restrict__ out, unsigned int n)
{
    unsigned int i = blockIdx.x * (BLOCK * 2) + threadIdx.x;
    const unsigned int stride = BLOCK * 2 * gridDim.x;
    float acc = 0.0f;
    while (i < n) {
        acc += in[i];
        if (i + BLOCK < n) acc += in[i + BLOCK];
        i += stride;
    }
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);
}

extern "C" void launch(const float* in, float* out, int n, cudaStream_t stream)
{
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    pair_sum<<<160, BLOCK, 0, stream>>>(in, out, (unsigned)n);
}
