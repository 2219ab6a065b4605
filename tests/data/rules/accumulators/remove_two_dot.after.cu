// test: remove accumulators@dot2:12:part
// A dot product of doubles with two partial sums a grid apart, zeroed one by one, added together
// at the end; one atomic per thread.
#include <cuda_runtime.h>

#define NACC 2

__global__ void dot2(const double* __restrict__ a, const double* __restrict__ b, double* __restrict__ out, int n)
{
    const int g = blockDim.x * gridDim.x;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    double part = 0.0;
    for (; i + g < n; i += 2 * g) {
        part += a[i] * b[i];
        part += a[i + g] * b[i + g];
    }
    if (i < n) part += a[i] * b[i];
    double total = 0.0;
    total += part;
    atomicAdd(out, total);
}

extern "C" void launch(const double* a, const double* b, double* out, int n, cudaStream_t stream)
{
    cudaMemsetAsync(out, 0, sizeof(double), stream);
    dot2<<<264, 256, 0, stream>>>(a, b, out, n);
}
