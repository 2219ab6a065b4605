// test: remove vectorize@sum_kernel:14
// The reduce_sum expert's shape: grid-stride float4 loops up to n4, then a scalar tail that
// starts at n4 * 4 + the thread's start; remove starts the tail at the thread's start instead.
#include <cuda_runtime.h>

__global__ void sum_kernel(const float* __restrict__ x, float* __restrict__ out, int n, bool aligned)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t gtid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t n4 = aligned ? (size_t)n / 4 : 0;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float acc = 0.0f;
    size_t i = gtid;
    for (; i < n4; i += stride) {
        const float4 t = x4[i];
        acc += (t.x + t.y) + (t.z + t.w);
    }
    for (size_t j = n4 * 4 + gtid; j < (size_t)n; j += stride) acc += x[j];
    atomicAdd(out, acc);
}

extern "C" void launch(const float* x, float* out, int n, cudaStream_t stream)
{
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    const bool aligned = ((size_t)x & 15) == 0;
    sum_kernel<<<256, 256, 0, stream>>>(x, out, n, aligned);
}
