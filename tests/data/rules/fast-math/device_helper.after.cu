// test: apply fast-math@sigmoid:3 | remove fast-math@sigmoid:3
#include <cuda_runtime.h>
__device__ __forceinline__ float sigmoid(float v) { return __fdividef(1.0f, (1.0f + __expf(-v))); }
template <typename T>
__global__ void act(const T *x, T *y, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = (T)sigmoid((float)x[i]);
}
extern "C" void launch(const float *x, float *y, int n, cudaStream_t stream)
{
    act<float><<<(n + 255) / 256, 256, 0, stream>>>(x, y, (size_t)n);
}
