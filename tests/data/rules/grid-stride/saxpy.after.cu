// test: apply grid-stride@saxpy:6 waves=8 | remove grid-stride@saxpy:6
#include <cuda_runtime.h>

__global__ void saxpy(const float *x, float *y, float a, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        y[i] = a * x[i] + y[i];
    }
}

extern "C" void launch(const float *x, float *y, float a, int n, cudaStream_t stream)
{
    int kl_dev = 0, kl_sms = 0;
    cudaGetDevice(&kl_dev);
    cudaDeviceGetAttribute(&kl_sms, cudaDevAttrMultiProcessorCount, kl_dev);
    saxpy<<<((n + 255) / 256 < kl_sms * 8 ? (n + 255) / 256 : kl_sms * 8), 256, 0, stream>>>(x, y, a, n);
}
