// test: apply grid-stride@clamp:10 waves=16 | remove grid-stride@clamp:10
#include <cuda_runtime.h>

#define BLOCK 128
#define GID(b, t) ((b) * BLOCK + (t))

template <typename T>
__global__ void clamp(T *x, T lo, T hi, int n)
{
    for (int i = GID(blockIdx.x, threadIdx.x); i < n; i += blockDim.x * gridDim.x) x[i] = x[i] < lo ? lo : (x[i] > hi ? hi : x[i]);
}

extern "C" void launch(float *x, int n, cudaStream_t stream)
{
    int grid = (n + BLOCK - 1) / BLOCK;
    int kl_dev = 0, kl_sms = 0;
    cudaGetDevice(&kl_dev);
    cudaDeviceGetAttribute(&kl_sms, cudaDevAttrMultiProcessorCount, kl_dev);
    clamp<float><<<(grid < kl_sms * 16 ? grid : kl_sms * 16), BLOCK, 0, stream>>>(x, 0.0f, 1.0f, n);
}
