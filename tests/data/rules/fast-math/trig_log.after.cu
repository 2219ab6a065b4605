// test: apply fast-math@rope:3 | remove fast-math@rope:3
#include <cuda_runtime.h>
__global__ void rope(const float *x, float *y, float base, int dim, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int p = i / dim, d = i % dim;
    float theta = (float)p * __expf(-__logf(base) * (float)(d / 2 * 2) / (float)dim);
    y[i] = (d % 2 == 0) ? x[i] * __cosf(theta) : x[i] * __sinf(theta);
}
extern "C" void launch(const float *x, float *y, float base, int dim, int n, cudaStream_t stream)
{
    rope<<<(n + 255) / 256, 256, 0, stream>>>(x, y, base, dim, n);
}
