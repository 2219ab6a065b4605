// test: apply grid-stride@clamp:10 waves=16 | remove grid-stride@clamp:10
#include <cuda_runtime.h>

#define BLOCK 128
#define GID(b, t) ((b) * BLOCK + (t))

template <typename T>
__global__ void clamp(T *x, T lo, T hi, int n)
{
    int i = GID(blockIdx.x, threadIdx.x);
    if (i < n) x[i] = x[i] < lo ? lo : (x[i] > hi ? hi : x[i]);
}

extern "C" void launch(float *x, int n, cudaStream_t stream)
{
    int grid = (n + BLOCK - 1) / BLOCK;
    clamp<float><<<grid, BLOCK, 0, stream>>>(x, 0.0f, 1.0f, n);
}
