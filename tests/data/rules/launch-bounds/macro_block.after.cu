// test: apply launch-bounds@scale:4 | remove launch-bounds@scale:4
#include <cuda_runtime.h>
#define THREADS 128
__global__ void __launch_bounds__(THREADS) scale(const float *x, float *y, float a, int n)
{
    int i = blockIdx.x * THREADS + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
extern "C" void launch(const float *x, float *y, float a, int n, cudaStream_t stream)
{
    scale<<<(n + THREADS - 1) / THREADS, THREADS, 0, stream>>>(x, y, a, n);
}
