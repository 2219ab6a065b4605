// vadd, wrong: computes only the first half of the output.
#include <cuda_runtime.h>

__global__ void vadd_half(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (n + 1) / 2) c[i] = a[i] + b[i];
}

extern "C" void launch(const float *a, const float *b, float *c, int n, cudaStream_t stream)
{
    vadd_half<<<(n + 255) / 256, 256, 0, stream>>>(a, b, c, n);
}
