// test: remove warp-reduce@Sum:31 | apply warp-reduce@Sum:33
// A dot product of doubles in the style of a block-reduction library: a warp helper that is a
// struct's static member (shuffle-down from warpSize / 2), a block helper with its own temporary
// storage whose first warp reduces the warps' partials into a variable of its own; a grid-stride
// `while` loop with two loads per iteration; the block sums added by a second one-block launch.
#include <cuda_runtime.h>

#define BLOCK 256

struct WarpReduce {
    static __device__ __forceinline__ double Reduce(double v)
    {
        for (int offset = warpSize / 2; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffff, v, offset);
        return v;
    }
};

template <int THREADS>
struct BlockReduce {
    struct TempStorage {
        double partial[THREADS / 32];
    };
    TempStorage& storage;
    __device__ explicit BlockReduce(TempStorage& s) : storage(s) {}

    // The block's sum, in thread 0; 0 in the threads of the other warps.
    __device__ double Sum(double v)
    {
        const int lane = threadIdx.x & 31;
        const int warp = threadIdx.x >> 5;
        v = WarpReduce::Reduce(v);
        if (lane == 0) storage.partial[warp] = v;
        __syncthreads();
        double block_total = 0.0;
        if (warp == 0) {
            block_total = (lane < THREADS / 32) ? storage.partial[lane] : 0.0;
            block_total = WarpReduce::Reduce(block_total);
        }
        return block_total;
    }
};

__global__ void dot_partials(const double* a, const double* b, double* partial, long long n)
{
    __shared__ BlockReduce<BLOCK>::TempStorage temp;
    double acc0 = 0.0, acc1 = 0.0;
    long long i = (long long)blockIdx.x * BLOCK * 2 + threadIdx.x;
    const long long step = (long long)gridDim.x * BLOCK * 2;
    while (i + BLOCK < n) {
        acc0 += a[i] * b[i];
        acc1 += a[i + BLOCK] * b[i + BLOCK];
        i += step;
    }
    if (i < n) acc0 += a[i] * b[i];
    const double total = BlockReduce<BLOCK>(temp).Sum(acc0 + acc1);
    if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

__global__ void dot_final(const double* partial, double* out, int m)
{
    __shared__ BlockReduce<BLOCK>::TempStorage temp;
    double s = 0.0;
    for (int k = threadIdx.x; k < m; k += BLOCK) s += partial[k];
    const double total = BlockReduce<BLOCK>(temp).Sum(s);
    if (threadIdx.x == 0) *out = total;
}

extern "C" void launch(const double* a, const double* b, double* out, double* scratch, long long n, cudaStream_t stream)
{
    int blocks = (int)((n + 2 * BLOCK - 1) / (2 * BLOCK));
    if (blocks > 1024) blocks = 1024;
    if (blocks < 1) blocks = 1;
    dot_partials<<<blocks, BLOCK, 0, stream>>>(a, b, scratch, n);
    dot_final<<<1, BLOCK, 0, stream>>>(scratch, out, blocks);
}
