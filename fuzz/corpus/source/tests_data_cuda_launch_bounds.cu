// launch_bounds: kernels with one and two __launch_bounds__ arguments, before and
// after the return type, and restrict-qualified pointers.
#include <cuda_runtime.h>

#define THREADS 128
#define MIN_BLOCKS 4

__global__ void __launch_bounds__(256, 2) scale(const float *__restrict__ x, float *__restrict__ y, float s, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = s * x[i];
}

__global__ __launch_bounds__(THREADS, MIN_BLOCKS) void offset(float *__restrict__ y, float d, int n)
{
    int i = blockIdx.x * THREADS + threadIdx.x;
    if (i < n) y[i] += d;
}

extern "C" void launch(const float *x, float *y, int n, cudaStream_t stream)
{
    scale<<<(n + 255) / 256, 256, 0, stream>>>(x, y, 3.0f, n);
    offset<<<(n + THREADS - 1) / THREADS, THREADS, 0, stream>>>(y, 1.0f, n);
}
