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
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) m[threadIdx.x] = fmaxf(m[threadIdx.x], m[threadIdx.x + s]);
        __syncthreads();
    }
    const float scale = m[0] > 0.0f ? 1.0f / m[0] : 0.0f;
    for (int i = threadIdx.x; i < n; i += BLOCK) y[i] = x[i] * scale;
}

extern "C" void launch(const float* x, float* y, int n, cudaStream_t stream)
{
    absmax<<<1, BLOCK, 0, stream>>>(x, y, n);
}
