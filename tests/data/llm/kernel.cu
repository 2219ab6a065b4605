#include <cuda_runtime.h>

// y = a*x + y, four elements per thread
__global__ void saxpy4(const float *__restrict__ x, float *__restrict__ y, float a, int n)
{
    int base = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        int i = base + k;
        if (i < n) y[i] = a * x[i] + y[i];
    }
}

extern "C" void launch(const float *x, float *y, int n, cudaStream_t stream)
{
    int threads = 256;
    int blocks = (n + threads * 4 - 1) / (threads * 4);
    saxpy4<<<blocks, threads, 0, stream>>>(x, y, 2.0f, n);
}
