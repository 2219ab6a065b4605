// test: remove grid-stride@sumsq_atomic:12
// The sum of squares into one float by atomics: a grid-stride `while` loop issuing four loads per
// iteration (a grid apart), then a `while` loop over what is left, one grid at a time.
#include <cuda_runtime.h>

#define THREADS 256

__global__ void sumsq_atomic(const float* __restrict__ x, float* __restrict__ out, long long n)
{
    long long i = (long long)blockIdx.x * THREADS + threadIdx.x;
    if (i < n) {
        atomicAdd(out, x[i] * x[i]);
    }
}

extern "C" void launch(const float* x, float* out, int n, cudaStream_t stream)
{
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    sumsq_atomic<<<((long long)n + THREADS - 1) / THREADS, THREADS, 0, stream>>>(x, out, (long long)n);
}
