// docs/experiments/corpus-roots (2026-12-04): the sumsq expert's first walk's root (17 steps, float atomicAdd of the block sums
// left by two-pass's removal then) with the vector form of coarsen removed (one float per thread):
// wrong at the 1e-5 tolerance, which led two-pass's removal to a double accumulator.
// See README.md here for the measurements and the commands.
// sumsq, expert: the sum of squares of n f32 values into out[0], in two passes.
//
// Pass 1 (sumsq_partials<BLOCK_THREADS, LOADS>): a grid sized by the occupancy calculator to fill
// the GPU once; every thread runs a grid-stride `while` loop over the 16-byte-aligned body of x
// with LOADS independent float4 loads in flight per iteration (each into its own accumulator);
// the few elements before the first 16-byte boundary and after the last whole float4 are added
// by block 0. Each block's sum goes to a slot of g_block_sums.
// Pass 2 (sumsq_final): one block adds the block sums in a fixed order and writes out[0].
// Both reduce with BlockSum, a block-reduction helper with its own temporary storage: a warp
// shuffle-down loop starting at warpSize / 2, the warps' sums handed to warp 0 through shared
// memory, and the same shuffle loop over them. Every order is fixed, so the result is
// deterministic; there is no atomic, no memset, and nothing to reset between launches.
// Assumes x is 4-byte aligned (as any float* is); launches on one stream must not overlap
// (g_block_sums is shared by them; the gate launches on one stream).
#include <cuda_runtime.h>
#include <stdint.h>

namespace reduce {

// The warp's sum, valid in lane 0.
template <typename T>
__device__ __forceinline__ T WarpSum(T value)
{
    for (int offset = warpSize / 2; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffffu, value, offset);
    return value;
}

// The block's sum, valid in thread 0. Every thread of the block must call Sum().
template <typename T, int BLOCK_THREADS>
struct BlockSum {
    static constexpr int kWarps = BLOCK_THREADS / 32;
    static_assert(BLOCK_THREADS % 32 == 0 && kWarps <= 32, "whole warps, at most 32 of them");
    struct TempStorage {
        T warp_sums[kWarps];
    };

    TempStorage& temp;
    __device__ __forceinline__ explicit BlockSum(TempStorage& storage) : temp(storage) {}

    __device__ __forceinline__ T Sum(T value)
    {
        const int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
        __shared__ T kl_red[256];
        kl_red[threadIdx.x] = value;
        __syncthreads();
        for (int s = 1; s < blockDim.x; s <<= 1) {
            if (threadIdx.x % (2 * s) == 0) kl_red[threadIdx.x] = kl_red[threadIdx.x] + kl_red[threadIdx.x + s];
            __syncthreads();
        }
        value = kl_red[0];
        __syncthreads();
        T total = T(0);
        if (warp == 0) {
            total = value;
        }
        return total;
    }
};

}  // namespace reduce

constexpr int kThreads = 256;       // threads per block, pass 1
constexpr int kLoads = 4;           // float4 loads in flight per thread
constexpr int kMaxBlocks = 2048;    // slots of g_block_sums
constexpr int kFinalThreads = 256; // threads of the one block of pass 2

__device__ float g_block_sums[kMaxBlocks];

__device__ __forceinline__ float squares(float4 v) { return v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w; }
__device__ __forceinline__ float squares(float v) { return v * v; }

// body: x + head, 16-byte aligned, nbody float4s; x[0, head) and x[tail_start, n) are the edges.
template <int BLOCK_THREADS, int LOADS>
__global__ void sumsq_partials(const float* x, const float4* body, long long nbody, int head, int tail_start,
               int n)
{
    typedef reduce::BlockSum<float, BLOCK_THREADS> BlockSumT;
    __shared__ typename BlockSumT::TempStorage temp;

    float acc = 0.0f;

    // Tile t of block b covers float4s [(b + t * gridDim.x) * TILE, ... + TILE); the thread takes
    // threadIdx.x + u * BLOCK_THREADS of it for u < LOADS (each of those loads is coalesced).
    constexpr long long TILE = (long long)BLOCK_THREADS * 1;
    const long long step = (long long)gridDim.x * TILE;
    long long i = (long long)blockIdx.x * TILE + threadIdx.x;
    if (i + (1 - 1) * BLOCK_THREADS < nbody) {  // whole tiles: no bounds test per load
        float v[1];
        for (int u = 0; u < 1; ++u) v[u] = x[head + (i + u * BLOCK_THREADS)];
        for (int u = 0; u < 1; ++u) acc += squares(v[u]);
        i += step;
    }
    // This thread's last tile, cut by the end (its next one would start past the end).
    for (int u = 0; u < 1; ++u) {
        const long long j = i + u * BLOCK_THREADS;
        if (j < nbody) acc += squares(x[head + j]);
    }
    // The unaligned head and the tail: fewer than 4 elements each.
    if (blockIdx.x == 0) {
        if ((int)threadIdx.x < head) acc += x[threadIdx.x] * x[threadIdx.x];
        if ((int)threadIdx.x < n - tail_start) acc += x[tail_start + threadIdx.x] * x[tail_start + threadIdx.x];
    }

    float mine = 0.0f;
    mine += acc;
    const float block_sum = BlockSumT(temp).Sum(mine);
    if (threadIdx.x == 0) atomicAdd(&g_block_sums[0], block_sum);
}

template <int BLOCK_THREADS>
__global__ void sumsq_final(int nblocks, float* out, int kl_rows)
{
    const int kl_row = blockIdx.x * blockDim.x + threadIdx.x;
    if (kl_row >= kl_rows) return;
    typedef reduce::BlockSum<float, BLOCK_THREADS> BlockSumT;
    float s = 0.0f;
    for (int b = 0; b < nblocks; b++) s += g_block_sums[b];
    const float total = s;
    out[0] = total;
}

extern "C" void launch(const float* x, float* out, int n, cudaStream_t stream)
{
    // Split x into an unaligned head, a body of whole float4s, and a tail.
    int head = (int)(((16u - (unsigned)((uintptr_t)x & 15u)) & 15u) / sizeof(float));
    if (head > n) head = n;
    const long long nbody = (long long)(n - head) / 4;
    const int tail_start = head + (int)(nbody * 4);

    int device = 0, sms = 0, per_sm = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sumsq_partials<kThreads, kLoads>, kThreads, 0);
    const long long tile = (long long)kThreads * kLoads;
    long long grid = (long long)(sms > 0 ? sms : 1) * (per_sm > 0 ? per_sm : 1);
    const long long needed = (nbody + tile - 1) / tile;
    if (grid > needed) grid = needed;
    if (grid > kMaxBlocks) grid = kMaxBlocks;
    if (grid < 1) grid = 1;

    float *kl_sum = nullptr;
    cudaGetSymbolAddress((void **)&kl_sum, g_block_sums);
    cudaMemsetAsync(kl_sum, 0, sizeof(float), stream);
    sumsq_partials<kThreads, kLoads><<<4 * (4 * (nbody > 0 ? (nbody + 4 * kThreads - 1) / (4 * kThreads) : 1)), kThreads, 0, stream>>>(
        x, reinterpret_cast<const float4*>(x + head), 4 * (nbody), head, tail_start, n);
    sumsq_final<kFinalThreads><<<(1 + kFinalThreads - 1) / kFinalThreads, kFinalThreads, 0, stream>>>(1, out, 1);
}
