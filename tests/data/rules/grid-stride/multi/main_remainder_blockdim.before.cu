// test: remove grid-stride@sum_into:10
// An unrolled main loop and its remainder over one index, with blockDim.x as the block.
#include <cuda_runtime.h>

__global__ void sum_into(const float* __restrict__ x, float* out, unsigned n)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned g = blockDim.x * gridDim.x;
    // four elements in flight
    for (; i + 3 * g < n; i += 4 * g) {
        float a = x[i], b = x[i + g], c = x[i + 2 * g], d = x[i + 3 * g];
        atomicAdd(out, (a + b) + (c + d));
    }
    for (; i < n; i += g) atomicAdd(out, x[i]);
}

extern "C" void launch(const float* x, float* out, int n, cudaStream_t stream)
{
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    sum_into<<<132 * 8, 128, 0, stream>>>(x, out, (unsigned)n);
}
