// histogram, expert: 256-bin histogram of n u8 values.
//
// Optimizations (each marked where it sits):
//  - privatize: per-block shared histogram with one copy of every bin per lane of a warp,
//    interleaved (bin b of lane l at hist[b * 32 + l]): a warp's 32 atomics always fall in
//    32 different banks, whatever the values; the copies are summed and merged into the
//    global bins with one atomicAdd per non-empty bin per block
//  - vectorize: 16-byte loads (uint4 = 16 values), with a scalar tail (and a scalar
//    path if x is not 16-byte aligned)
//  - grid-stride: a grid sized to fill the GPU once, so the merge cost is paid by few blocks
//  - unroll: UNROLL uint4 loads in flight per thread
//  - block-size, launch-bounds, restrict
// The bins are zeroed on the stream inside launch(), before the kernel adds to them.
#include <cuda_runtime.h>
#include <stdint.h>

constexpr int BINS = 256;
constexpr int LANES = 32;                    // copies of each bin: one per lane of a warp
// block-size
constexpr int THREADS = 512;                 // threads per block
constexpr int VEC = 16;                      // u8 values per 16-byte load
constexpr int UNROLL = 2;                    // uint4 loads in flight per thread
constexpr int BLOCKS_PER_SM = 4;             // 4 x 512 threads fill an SM

// Count the four bytes of one 32-bit word.
__device__ __forceinline__ void count_word(unsigned w, int* hist)
{
    atomicAdd(&hist[(w & 0xffu) * LANES], 1);
    atomicAdd(&hist[((w >> 8) & 0xffu) * LANES], 1);
    atomicAdd(&hist[((w >> 16) & 0xffu) * LANES], 1);
    atomicAdd(&hist[((w >> 24) & 0xffu) * LANES], 1);
}

// launch-bounds
__global__ void __launch_bounds__(THREADS)
histogram_kernel(const uint8_t* __restrict__ x, int32_t* __restrict__ bins, int n, bool aligned)  // restrict
{
    // privatize: per-block shared histogram, a copy per lane, interleaved
    __shared__ int hists[BINS * LANES];
    for (int b = threadIdx.x; b < BINS * LANES; b += THREADS) hists[b] = 0;
    __syncthreads();
    int* hist = hists + threadIdx.x % LANES;

    const size_t stride = (size_t)gridDim.x * THREADS;
    const size_t gtid = (size_t)blockIdx.x * THREADS + threadIdx.x;
    const size_t n16 = aligned ? (size_t)n / VEC : 0;
    const uint4* x16 = reinterpret_cast<const uint4*>(x);

    size_t i = gtid;
    // grid-stride
    for (; i + (UNROLL - 1) * stride < n16; i += UNROLL * stride) {
        uint4 q[UNROLL];
        // unroll
#pragma unroll
        for (int u = 0; u < UNROLL; u++) q[u] = x16[i + u * stride];  // vectorize: 16-byte loads (uint4)
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            count_word(q[u].x, hist);
            count_word(q[u].y, hist);
            count_word(q[u].z, hist);
            count_word(q[u].w, hist);
        }
    }
    for (; i < n16; i += stride) {
        const uint4 q = x16[i];
        count_word(q.x, hist);
        count_word(q.y, hist);
        count_word(q.z, hist);
        count_word(q.w, hist);
    }
    // Scalar tail: the last n % VEC values, or everything when x is not aligned.
    for (size_t j = n16 * VEC + gtid; j < (size_t)n; j += stride) atomicAdd(&hist[x[j] * LANES], 1);
    __syncthreads();

    // Merge: one global atomic per non-empty bin of this block.
    // Thread b sums bin b's copies starting at lane b % 32, so a warp's reads hit 32 banks.
    for (int b = threadIdx.x; b < BINS; b += THREADS) {
        int count = 0;
#pragma unroll 8
        for (int l = 0; l < LANES; l++) count += hists[b * LANES + (l + b) % LANES];
        if (count != 0) atomicAdd(&bins[b], count);
    }
}

extern "C" void launch(const uint8_t* x, int32_t* bins, int n, cudaStream_t stream)
{
    cudaMemsetAsync(bins, 0, BINS * sizeof(int32_t), stream);
    if (n <= 0) return;
    int device = 0, sms = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (sms <= 0) sms = 1;
    const bool aligned = (uintptr_t)x % 16 == 0;
    const long long per_block = (long long)THREADS * VEC * UNROLL;  // values one pass of a block covers
    long long grid = ((long long)n + per_block - 1) / per_block;
    if (grid > (long long)sms * BLOCKS_PER_SM) grid = (long long)sms * BLOCKS_PER_SM;
    if (grid < 1) grid = 1;
    histogram_kernel<<<(int)grid, THREADS, 0, stream>>>(x, bins, n, aligned);
}
