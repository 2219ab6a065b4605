// vadd, broken: `i <= n` writes one element past the end of c (memcheck sees it).
#include <cuda_runtime.h>

__global__ void vadd_le(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) c[i] = (i < n) ? a[i] + b[i] : 0.0f;
}

extern "C" void launch(const float *a, const float *b, float *c, int n, cudaStream_t stream)
{
    vadd_le<<<n / 256 + 1, 256, 0, stream>>>(a, b, c, n);
}
