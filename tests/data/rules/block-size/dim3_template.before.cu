// test: apply block-size@add:4:TPB threads=64 | apply block-size@add:4:TPB threads=256
#include <cuda_runtime.h>

static const int TPB = 256;

template <typename T>
__device__ __forceinline__ T twice(T v) { return v + v; }

template <typename T>
__global__ void add(const T *a, const T *b, T *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = twice(a[i]) + b[i];
}

extern "C" void launch(const float *a, const float *b, float *c, int n, cudaStream_t stream)
{
    dim3 block(TPB);
    dim3 grid((n + TPB - 1) / TPB);
    add<float><<<grid, block, 0, stream>>>(a, b, c, n);
}
