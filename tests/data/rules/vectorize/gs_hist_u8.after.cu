// test: apply vectorize@hist:12 width=16 | remove vectorize@hist:14
// A byte histogram over a grid-stride loop (one shared copy of the bins): 16 bytes per load.
#include <cstdint>

#define THREADS 256

__global__ void hist(const uint8_t* data, unsigned int* counts, int n)
{
    __shared__ unsigned int local[256];
    for (int b = threadIdx.x; b < 256; b += THREADS) local[b] = 0;
    __syncthreads();
    // vectorize: 16 elements per load of 'data' (uint4); the loop below does the last n % 16, or all when an address is not aligned
    const int nv = (reinterpret_cast<unsigned long long>(data) % 16 == 0) ? n / 16 : 0;
    for (int v = blockIdx.x * THREADS + threadIdx.x; v < nv; v += THREADS * gridDim.x) {
        const uint4 data_v = reinterpret_cast<const uint4*>(data)[v];
        atomicAdd(&local[(uint8_t)data_v.x], 1u);
        atomicAdd(&local[(uint8_t)(data_v.x >> 8)], 1u);
        atomicAdd(&local[(uint8_t)(data_v.x >> 16)], 1u);
        atomicAdd(&local[(uint8_t)(data_v.x >> 24)], 1u);
        atomicAdd(&local[(uint8_t)data_v.y], 1u);
        atomicAdd(&local[(uint8_t)(data_v.y >> 8)], 1u);
        atomicAdd(&local[(uint8_t)(data_v.y >> 16)], 1u);
        atomicAdd(&local[(uint8_t)(data_v.y >> 24)], 1u);
        atomicAdd(&local[(uint8_t)data_v.z], 1u);
        atomicAdd(&local[(uint8_t)(data_v.z >> 8)], 1u);
        atomicAdd(&local[(uint8_t)(data_v.z >> 16)], 1u);
        atomicAdd(&local[(uint8_t)(data_v.z >> 24)], 1u);
        atomicAdd(&local[(uint8_t)data_v.w], 1u);
        atomicAdd(&local[(uint8_t)(data_v.w >> 8)], 1u);
        atomicAdd(&local[(uint8_t)(data_v.w >> 16)], 1u);
        atomicAdd(&local[(uint8_t)(data_v.w >> 24)], 1u);
    }
    for (int i = blockIdx.x * THREADS + threadIdx.x + nv * 16; i < n; i += THREADS * gridDim.x) {
        atomicAdd(&local[data[i]], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += THREADS) atomicAdd(&counts[b], local[b]);
}

void run(const uint8_t* d, unsigned int* c, int n, cudaStream_t s)
{
    hist<<<264, THREADS, 0, s>>>(d, c, n);
}
