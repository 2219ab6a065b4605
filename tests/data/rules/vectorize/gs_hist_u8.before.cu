// test: apply vectorize@hist:12 width=16 | remove vectorize@hist:14
// A byte histogram over a grid-stride loop (one shared copy of the bins): 16 bytes per load.
#include <cstdint>

#define THREADS 256

__global__ void hist(const uint8_t* data, unsigned int* counts, int n)
{
    __shared__ unsigned int local[256];
    for (int b = threadIdx.x; b < 256; b += THREADS) local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * THREADS + threadIdx.x; i < n; i += THREADS * gridDim.x) {
        atomicAdd(&local[data[i]], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += THREADS) atomicAdd(&counts[b], local[b]);
}

void run(const uint8_t* d, unsigned int* c, int n, cudaStream_t s)
{
    hist<<<264, THREADS, 0, s>>>(d, c, n);
}
