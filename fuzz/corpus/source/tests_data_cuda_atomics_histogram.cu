// atomics_histogram: a privatised histogram in shared memory (shared atomics), merged
// into global bins, and a do-while compare-and-swap loop for a float maximum.
#include <cstdint>
#include <cuda_runtime.h>

#define BINS 256

__device__ float atomic_max_float(float *addr, float value)
{
    int *as_int = reinterpret_cast<int *>(addr);
    int old = *as_int, assumed;
    do {
        assumed = old;
        if (__int_as_float(assumed) >= value) break;
        old = atomicCAS(as_int, assumed, __float_as_int(value));
    } while (old != assumed);
    return __int_as_float(old);
}

__global__ void histogram(const uint8_t *__restrict__ data, unsigned *__restrict__ bins, float *peak, int n)
{
    __shared__ unsigned local[BINS];
    for (int b = threadIdx.x; b < BINS; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&local[data[i]], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < BINS; b += blockDim.x) {
        atomicAdd(&bins[b], local[b]);
        atomic_max_float(peak, (float)local[b]);
    }
}

extern "C" void launch(const uint8_t *data, unsigned *bins, float *peak, int n, cudaStream_t stream)
{
    histogram<<<64, 256, 0, stream>>>(data, bins, peak, n);
}
