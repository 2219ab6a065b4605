// test: remove grid-stride@scale:8 | apply grid-stride@scale:8 waves=8
#include <cuda_runtime.h>
constexpr int THREADS = 256;

// the step written gridDim-first, the bound cast: not the standard text, proven instead
__global__ void scale(float* y, const float* x, int n)
{
    for (size_t j = (size_t)blockIdx.x * THREADS + threadIdx.x; j < (size_t)n; j += gridDim.x * THREADS) y[j] = 2.0f * x[j];
}

extern "C" void launch(float* y, const float* x, int n, cudaStream_t stream)
{
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    scale<<<sms * 4, THREADS, 0, stream>>>(y, x, n);
}
