// test: apply grid-stride@gelu:8 waves=4 | remove grid-stride@gelu:8
#include <cuda_runtime.h>

__device__ __forceinline__ float gelu1(float v) { return 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v))); }

__global__ void gelu(const float *x, float *y, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        const float v = x[i];
        y[i] = gelu1(v);
    }
}

extern "C" void launch(const float *x, float *y, int n, cudaStream_t stream)
{
    const int threads = 128;
    const int blocks = (n + threads - 1) / threads;
    int kl_dev = 0, kl_sms = 0;
    cudaGetDevice(&kl_dev);
    cudaDeviceGetAttribute(&kl_sms, cudaDevAttrMultiProcessorCount, kl_dev);
    gelu<<<(blocks < kl_sms * 4 ? blocks : kl_sms * 4), threads, 0, stream>>>(x, y, (size_t)n);
}
