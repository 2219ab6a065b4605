// test: apply grid-stride@saxpy:6 waves=8 | remove grid-stride@saxpy:6
#include <cuda_runtime.h>

__global__ void saxpy(const float *x, float *y, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}

extern "C" void launch(const float *x, float *y, float a, int n, cudaStream_t stream)
{
    saxpy<<<(n + 255) / 256, 256, 0, stream>>>(x, y, a, n);
}
