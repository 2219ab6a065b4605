// dot, naive: one product per thread; each warp adds its 32 products with a shuffle-down loop
// and lane 0 adds the warp's sum to the result with atomicAdd (zeroed first). Threads past the
// end contribute 0 but still take part in the shuffles.
#include <cuda_runtime.h>

__global__ void dot_kernel(const float* x, const float* y, float* result, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] * y[i] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    if ((threadIdx.x & 31) == 0) atomicAdd(result, v);
}

extern "C" void launch(const float* x, const float* y, float* result, int n, cudaStream_t stream)
{
    cudaMemsetAsync(result, 0, sizeof(float), stream);
    const int threads = 256;
    dot_kernel<<<(n + threads - 1) / threads, threads, 0, stream>>>(x, y, result, n);
}
