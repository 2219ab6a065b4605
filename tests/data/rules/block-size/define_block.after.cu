// test: apply block-size@scale:4:BLOCK threads=128 | remove block-size@scale:4:BLOCK
#include <cuda_runtime.h>

#define BLOCK 128

__global__ void scale(const float *x, float *y, float a, int n)
{
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}

extern "C" void launch(const float *x, float *y, float a, int n, cudaStream_t stream)
{
    int grid = (n + BLOCK - 1) / BLOCK;
    scale<<<grid, BLOCK, 0, stream>>>(x, y, a, n);
}
