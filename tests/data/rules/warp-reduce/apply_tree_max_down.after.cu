// test: apply warp-reduce@absmax:14 shuffle=down | remove warp-reduce@absmax:16
// A max tree under a macro block size with __launch_bounds__, every thread reading the result.
#include <cuda_runtime.h>

#define BLOCK 128

__global__ void __launch_bounds__(BLOCK) absmax(const float* x, float* y, int n)
{
    __shared__ float m[BLOCK];
    float v = 0.0f;
    for (int i = threadIdx.x; i < n; i += BLOCK) v = fmaxf(v, fabsf(x[i]));
    m[threadIdx.x] = v;
    __syncthreads();
    {
        float kl_v = m[threadIdx.x];
        for (int o = 16; o > 0; o >>= 1) kl_v = fmaxf(kl_v, __shfl_down_sync(0xffffffff, kl_v, o));
        __shared__ float kl_warp[32];
        if (threadIdx.x % 32 == 0) kl_warp[threadIdx.x / 32] = kl_v;
        __syncthreads();
        if (threadIdx.x < 32) {
            kl_v = kl_warp[threadIdx.x < BLOCK / 32 ? threadIdx.x : 0];
            for (int o = BLOCK / 64; o > 0; o >>= 1) kl_v = fmaxf(kl_v, __shfl_down_sync(0xffffffff, kl_v, o));
            if (threadIdx.x == 0) m[0] = kl_v;
        }
        __syncthreads();
    }
    const float scale = m[0] > 0.0f ? 1.0f / m[0] : 0.0f;
    for (int i = threadIdx.x; i < n; i += BLOCK) y[i] = x[i] * scale;
}

extern "C" void launch(const float* x, float* y, int n, cudaStream_t stream)
{
    absmax<<<1, BLOCK, 0, stream>>>(x, y, n);
}
