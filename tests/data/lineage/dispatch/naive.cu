#include <cuda_runtime.h>

__global__ void scale_kernel(const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}

extern "C" void launch(const float *x, float *y, int n, cudaStream_t stream)
{
    scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
}
