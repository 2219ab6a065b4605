// test: apply vectorize@axpy_chunks:13 width=2 | remove vectorize@axpy_chunks:15
// Each thread owns a chunk of 64 elements; size_t indices, __restrict__ pointers, a store and
// a load of the same array at the same index.
#include <cuda_runtime.h>
#include <stdint.h>

constexpr int CHUNK = 64;

__global__ void axpy_chunks(const float* __restrict__ x, float* __restrict__ y, float a, size_t n)
{
    const size_t first = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * CHUNK;
    const size_t last = first + CHUNK < n ? first + CHUNK : n;
    for (size_t i = first; i < last; ++i)
        y[i] = a * x[i] + y[i];
}

extern "C" void launch(const float* x, float* y, float a, int n, cudaStream_t stream)
{
    const size_t chunks = ((size_t)n + CHUNK - 1) / CHUNK;
    axpy_chunks<<<(unsigned)((chunks + 255) / 256), 256, 0, stream>>>(x, y, a, (size_t)n);
}
