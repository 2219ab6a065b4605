// test: remove fast-math@gelu_fast:3 | apply fast-math@gelu_fast:3
#include <cuda_runtime.h>
__global__ void gelu_fast(const float *__restrict__ x, float *__restrict__ y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    // fast-math: __expf and __fdividef
    float e = expf(-1.702f * v);
    y[i] = v / (1.0f + e);
}
extern "C" void launch(const float *x, float *y, int n, cudaStream_t stream)
{
    gelu_fast<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
}
