// vadd, naive: one thread per element.
#include <cuda_runtime.h>

__global__ void vadd_naive(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

extern "C" void launch(const float *a, const float *b, float *c, int n, cudaStream_t stream)
{
    vadd_naive<<<(n + 255) / 256, 256, 0, stream>>>(a, b, c, n);
}
