// preproc_conditionals: a kernel defined two ways under #if / #else, a helper under
// #ifdef, and a nested #ifndef.
#include <cuda_runtime.h>

#if defined(USE_FAST_MATH)
__global__ void activate(const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 1.0f / (1.0f + __expf(-x[i]));
}
#else
__global__ void activate(const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 1.0f / (1.0f + expf(-x[i]));
}
#endif

#ifdef WITH_CLAMP
#ifndef CLAMP_MAX
#define CLAMP_MAX 6.0f
#endif
__device__ float clamp_hi(float v) { return v > CLAMP_MAX ? CLAMP_MAX : v; }
#endif

extern "C" void launch(const float *x, float *y, int n, cudaStream_t stream)
{
    activate<<<(n + 127) / 128, 128, 0, stream>>>(x, y, n);
}
