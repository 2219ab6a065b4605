// test: remove block-reduce@reduce_sum_kernel:35 | apply block-reduce@reduce_sum_kernel:26:out
#include <cuda_runtime.h>

constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
constexpr int MAX_BLOCKS = 4096;

__device__ float g_partials[MAX_BLOCKS];
__device__ unsigned int g_blocks_done = 0;

// Sum over the block: shuffles, then across warps; valid in every thread.
__device__ __forceinline__ float block_sum(float v, float* part)
{
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    float r = 0.0f;
    for (int w = 0; w < WARPS; w++) r += part[w];
    __syncthreads();
    return r;
}

__global__ void reduce_sum_kernel(const float* x, float* out, int n)
{
    __shared__ float part[WARPS];
    __shared__ bool is_last;
    const size_t stride = (size_t)gridDim.x * THREADS;
    const size_t gtid = (size_t)blockIdx.x * THREADS + threadIdx.x;
    float acc[2];
    for (int u = 0; u < 2; u++) acc[u] = 0.0f;

    for (size_t j = gtid; j < (size_t)n; j += stride) acc[0] += x[j];
    float mine = 0.0f;
    for (int u = 0; u < 2; u++) mine += acc[u];
    const float block_total = block_sum(mine, part);

    if (threadIdx.x == 0) {
        g_partials[blockIdx.x] = block_total;
        __threadfence();
        const unsigned ticket = atomicAdd(&g_blocks_done, 1u);
        is_last = (ticket == gridDim.x - 1);
    }
    __syncthreads();
    if (!is_last) return;

    // The last block: add the partials in a fixed order.
    __threadfence();
    float s = 0.0f;
    for (int b = threadIdx.x; b < (int)gridDim.x; b += THREADS) s += __ldcg(&g_partials[b]);
    const float total = block_sum(s, part);
    if (threadIdx.x == 0) {
        out[0] = total;
        g_blocks_done = 0;
    }
}

extern "C" void launch(const float* x, float* out, int n, cudaStream_t stream)
{
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    int grid = sms * 4 < MAX_BLOCKS ? sms * 4 : MAX_BLOCKS;
    reduce_sum_kernel<<<grid, THREADS, 0, stream>>>(x, out, n);
}
