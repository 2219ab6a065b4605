// test: remove two-pass@dot_blocks:23
// A dot product of doubles in two passes: each block's sum of products in a slot of a __device__
// array, then one block of 128 threads adds the slots (each thread a stride of them, then a tree)
// and writes the result.
#include <cuda_runtime.h>

#define THREADS 256
#define SLOTS 1024

__device__ double slots[SLOTS];

__global__ void dot_blocks(const double* __restrict__ a, const double* __restrict__ b, int n)
{
    __shared__ double part[THREADS];
    double mine = 0.0;
    for (int i = blockIdx.x * THREADS + threadIdx.x; i < n; i += THREADS * gridDim.x) mine += a[i] * b[i];
    part[threadIdx.x] = mine;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h /= 2) {
        if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(&slots[0], part[0]);
}

__global__ void add_slots(double* __restrict__ out, int used)
{
    __shared__ double part[128];
    double s = 0.0;
    for (int k = threadIdx.x; k < used; k += 128) s += slots[k];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int h = 64; h > 0; h /= 2) {
        if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = part[0];
}

extern "C" void launch(const double* a, const double* b, double* out, int n, cudaStream_t stream)
{
    int blocks = (n + THREADS - 1) / THREADS;
    if (blocks > SLOTS) blocks = SLOTS;
    if (blocks < 1) blocks = 1;
    double *kl_sum = nullptr;
    cudaGetSymbolAddress((void **)&kl_sum, slots);
    cudaMemsetAsync(kl_sum, 0, sizeof(double), stream);
    dot_blocks<<<blocks, THREADS, 0, stream>>>(a, b, n);
    add_slots<<<1, 128, 0, stream>>>(out, 1);
}
