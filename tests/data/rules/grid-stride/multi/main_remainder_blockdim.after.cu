// test: remove grid-stride@sum_into:10
// An unrolled main loop and its remainder over one index, with blockDim.x as the block.
#include <cuda_runtime.h>

__global__ void sum_into(const float* __restrict__ x, float* out, unsigned n)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    // four elements in flight
    if (i < n) atomicAdd(out, x[i]);
}

extern "C" void launch(const float* x, float* out, int n, cudaStream_t stream)
{
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    sum_into<<<((unsigned)n + 128 - 1) / 128, 128, 0, stream>>>(x, out, (unsigned)n);
}
