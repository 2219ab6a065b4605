// test: remove coarsen@sumsq4:10
// Four squares a block apart per thread, each guarded, into one partial; warp shuffles and an atomic
// per warp. The grid is the caller's (not a ceil-div of n by four blocks): it becomes four times it.
#include <cuda_runtime.h>

__global__ void sumsq4(const float* __restrict__ x, float* __restrict__ out, int n)
{
    float s = 0.0f;
    const int b = blockDim.x;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        s += x[i] * x[i];
    }
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, s);
}

extern "C" void launch(const float* x, float* out, int n, cudaStream_t stream)
{
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    const int per_block = 4 * 128;
    const int blocks = n / per_block + 1;
    sumsq4<<<4 * (blocks), 128, 0, stream>>>(x, out, n);
}
