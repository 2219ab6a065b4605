// test: apply vectorize@partial_sums:8 width=4 | remove vectorize@partial_sums:10
// Per-block partial sums, size_t indices, blockDim-based stride: float4 loads, added in element order.
#include <cstddef>

__global__ void partial_sums(const float* __restrict__ x, float* __restrict__ partial, size_t n)
{
    float acc = 0.0f;
    // vectorize: 4 elements per load of 'x' (float4); the loop below does the last n % 4, or all when an address is not aligned
    const size_t nv = (reinterpret_cast<unsigned long long>(x) % 16 == 0) ? n / 4 : 0;
    for (size_t v = (size_t)blockIdx.x * blockDim.x + threadIdx.x; v < nv; v += (size_t)blockDim.x * gridDim.x) {
        const float4 x_v = reinterpret_cast<const float4*>(x)[v];
        acc += x_v.x;
        acc += x_v.y;
        acc += x_v.z;
        acc += x_v.w;
    }
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x + nv * 4; i < n; i += (size_t)blockDim.x * gridDim.x)
        acc += x[i];
    atomicAdd(&partial[blockIdx.x], acc);
}
