// test: apply vectorize@partial_sums:8 width=4 | remove vectorize@partial_sums:10
// Per-block partial sums, size_t indices, blockDim-based stride: float4 loads, added in element order.
#include <cstddef>

__global__ void partial_sums(const float* __restrict__ x, float* __restrict__ partial, size_t n)
{
    float acc = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x)
        acc += x[i];
    atomicAdd(&partial[blockIdx.x], acc);
}
