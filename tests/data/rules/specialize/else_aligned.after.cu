// test: remove specialize@launch:36
// Scale a vector: a float4 kernel when n is a multiple of 4 (an if / else at the launch), else
// a scalar kernel that handles every n.
//
// Optimizations:
//  - restrict
#include <cuda_runtime.h>

constexpr int BLOCK = 256;

__global__ void scale(const float* __restrict__ x, float* __restrict__ y, float a, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}

extern "C" void launch(const float* x, float* y, float a, int n, cudaStream_t stream)
{
    if (n <= 0) return;
    const int grid = (n + BLOCK - 1) / BLOCK;
    scale<<<grid, BLOCK, 0, stream>>>(x, y, a, n);
}
