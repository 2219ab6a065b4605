// test: remove coarsen@l1_norm_partial:17:items
// The L1 norm of n floats: each thread loads ITEMS values a block apart into registers (a
// template count, as block-load helpers write it), the whole tile without bounds tests and the
// last one guarded; the block's sum goes to one atomicAdd. Launched with ITEMS = 8.
#include <cuda_runtime.h>

template <int THREADS, int ITEMS>
__global__ void __launch_bounds__(THREADS) l1_norm_partial(const float* __restrict__ x, float* __restrict__ out, long n)
{
    __shared__ float red[THREADS];
    const long tile = (long)THREADS * ITEMS;
    const long base = blockIdx.x * tile + threadIdx.x;
    float s = 0.0f;
    if (base + (ITEMS - 1) * THREADS < n) {
        float r[ITEMS];
#pragma unroll
        for (int it = 0; it < ITEMS; it++) r[it] = x[base + it * THREADS];
        for (int it = 0; it < ITEMS; it++) s += fabsf(r[it]);
    } else {
        for (int it = 0; it < ITEMS; it++)
            if (base + it * THREADS < n) s += fabsf(x[base + it * THREADS]);
    }
    red[threadIdx.x] = s;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h /= 2) {
        if ((int)threadIdx.x < h) red[threadIdx.x] += red[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, red[0]);
}

extern "C" void launch(const float* x, float* out, int n, cudaStream_t stream)
{
    constexpr int threads = 128, items = 8;
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    const long blocks = ((long)n + threads * items - 1) / (threads * items);
    l1_norm_partial<threads, items><<<(unsigned)(blocks > 0 ? blocks : 1), threads, 0, stream>>>(x, out, n);
}
