// test: remove grid-stride@fill:9
// Two loops declaring their indexes: the first half, and the rest from an offset.
#include <cuda_runtime.h>
#define BLOCK 128

__global__ void fill(float* y, int n)
{
    const int half = n / 2;
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < half) y[i] = 1.0f;
    int j = half + blockIdx.x * BLOCK + threadIdx.x;
    if (j < n) y[j] = 2.0f;
}

extern "C" void launch(float* y, int n, cudaStream_t stream)
{
    fill<<<(n + BLOCK - 1) / BLOCK, BLOCK, 0, stream>>>(y, n);
}
