// test: remove coarsen@pair_total:12
// A sum of n doubles, two values a block apart per thread in a template over the block size; the
// block's sum by a shared tree, and one atomicAdd per block.
#include <cuda_runtime.h>

template <int TB>
__global__ void pair_total(const double* __restrict__ v, double* __restrict__ total, int n)
{
    __shared__ double part[TB];
    double m = 0.0;
    const int t = threadIdx.x;
    const int e = blockIdx.x * (TB) + t;
    if (e < n) {
        m += v[e];
    }
    part[t] = m;
    __syncthreads();
    for (int h = TB / 2; h > 0; h >>= 1) {
        if (t < h) part[t] += part[t + h];
        __syncthreads();
    }
    if (t == 0) atomicAdd(total, part[0]);
}

extern "C" void launch(const double* v, double* total, int n, cudaStream_t stream)
{
    cudaMemsetAsync(total, 0, sizeof(double), stream);
    pair_total<256><<<(n + 256 - 1) / 256, 256, 0, stream>>>(v, total, n);
}
