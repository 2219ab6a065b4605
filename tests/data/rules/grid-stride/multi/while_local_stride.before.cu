// test: remove grid-stride@saxpy_while:10
// y = a * x + y with a grid-stride `while` loop stepping through a local stride; the grid capped at
// a few waves of the SMs by the launch.
#include <cuda_runtime.h>

__global__ void saxpy_while(float a, const float* __restrict__ x, float* __restrict__ y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int stride = blockDim.x * gridDim.x;
    while (i < n) {
        y[i] = a * x[i] + y[i];
        i += stride;
    }
}

extern "C" void launch(const float* x, float* y, int n, cudaStream_t stream)
{
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    int blocks = (n + 255) / 256;
    if (blocks > sms * 4) blocks = sms * 4;
    saxpy_while<<<blocks, 256, 0, stream>>>(2.0f, x, y, n);
}
