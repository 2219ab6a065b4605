// vadd, broken: the last thread also writes far past the end of c (an illegal address).
#include <cuda_runtime.h>

__global__ void vadd_oob(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
    if (i == n - 1) c[i + (1L << 34) / sizeof(float)] = 1.0f;
}

extern "C" void launch(const float *a, const float *b, float *c, int n, cudaStream_t stream)
{
    vadd_oob<<<(n + 255) / 256, 256, 0, stream>>>(a, b, c, n);
}
