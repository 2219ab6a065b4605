// test: remove block-reduce@dot:35 | apply block-reduce@dot:25:out
#include <cuda_runtime.h>

// A shared-memory tree over the block (blockDim.x a power of two).
__device__ double tree_sum(double v)
{
    __shared__ double t[1024];
    t[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) t[threadIdx.x] += t[threadIdx.x + s];
        __syncthreads();
    }
    double r = t[0];
    __syncthreads();
    return r;
}

// dot product, two accumulators per thread, one atomic per block
__global__ void dot(const double* a, const double* b, double* out, int n)
{
    double acc[2];
#pragma unroll
    for (int k = 0; k < 2; k++) acc[k] = 0.0;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int g = blockDim.x * gridDim.x;
    for (; i + g < n; i += 2 * g) {
        acc[0] += a[i] * b[i];
        acc[1] += a[i + g] * b[i + g];
    }
    if (i < n) acc[0] += a[i] * b[i];
    double part = 0.0;
    for (int k = 0; k < 2; k++) part += acc[k];
    // block-reduce: the block's sum, added once
    const double sum = tree_sum(part);
    if (threadIdx.x == 0) atomicAdd(out, sum);
}

extern "C" void launch(const double* a, const double* b, double* out, int n, cudaStream_t stream)
{
    cudaMemsetAsync(out, 0, sizeof(double), stream);
    dot<<<1024, 256, 0, stream>>>(a, b, out, n);
}
