// test: remove grid-stride@fill:9
// Two loops declaring their indexes: the first half, and the rest from an offset.
#include <cuda_runtime.h>
#define BLOCK 128

__global__ void fill(float* y, int n)
{
    const int half = n / 2;
    for (int i = blockIdx.x * BLOCK + threadIdx.x; i < half; i += BLOCK * gridDim.x) y[i] = 1.0f;
    for (int j = half + blockIdx.x * BLOCK + threadIdx.x; j < n; j += BLOCK * gridDim.x) y[j] = 2.0f;
}

extern "C" void launch(float* y, int n, cudaStream_t stream)
{
    fill<<<64, BLOCK, 0, stream>>>(y, n);
}
