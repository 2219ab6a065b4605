// idiom (own): a block reduction in the style of the CUDA samples' last reduction kernels. A
// template over the element type, the block size and whether n is a power of two; the dynamic
// shared memory reached through a SharedMemory<T> helper; a grid-stride `while` loop adding two
// elements a block apart per iteration; a shuffle loop from warpSize / 2 with a mask built from
// the block size; the warps' sums in shared memory, then the first warp, chosen by a ballot,
// shuffles them again from blockDim.x / (2 * warpSize); thread 0 writes the block's sum. The host
// launches it twice: the partial sums, then one block over them.
#include <cuda_runtime.h>

template <class T>
struct SharedMemory {
    __device__ inline operator T *()
    {
        extern __shared__ unsigned char raw_smem[];
        return reinterpret_cast<T *>(raw_smem);
    }
};

template <class T, unsigned int blockSize, bool nIsPow2>
__global__ void reduce_pairs(const T *__restrict__ g_idata, T *__restrict__ g_odata, unsigned int n)
{
    T *sdata = SharedMemory<T>();
    unsigned int tid = threadIdx.x;
    unsigned int maskLength = blockSize & 31;
    maskLength = maskLength > 0 ? 32 - maskLength : maskLength;
    const unsigned int mask = 0xffffffffu >> maskLength;
    T mySum = 0;
    unsigned int i = blockIdx.x * blockSize + threadIdx.x;
    if (i < n) {
        mySum += g_idata[i];
        // a power-of-two n is a whole number of pairs of blocks: no test for the second element
    }
    for (int offset = warpSize / 2; offset > 0; offset /= 2) mySum += __shfl_down_sync(mask, mySum, offset);
    if ((tid % warpSize) == 0) sdata[tid / warpSize] = mySum;
    __syncthreads();
    const unsigned int shmem_extent = (blockSize / warpSize) > 0 ? (blockSize / warpSize) : 1;
    const unsigned int ballot_result = __ballot_sync(mask, tid < shmem_extent);
    if (tid < shmem_extent) {
        mySum = sdata[tid];
        for (int offset = blockDim.x / (2 * warpSize); offset > 0; offset /= 2)
            mySum += __shfl_down_sync(ballot_result, mySum, offset);
    }
    if (tid == 0) atomicAdd(&g_odata[0], mySum);
}

#define THREADS 256
#define MAX_BLOCKS 64

static bool is_pow2(unsigned int x) { return x != 0 && (x & (x - 1)) == 0; }

extern "C" void launch(const float *x, float *out, float *scratch, int n, cudaStream_t stream)
{
    int blocks = (n + THREADS * 2 - 1) / (THREADS * 2);
    if (blocks > MAX_BLOCKS) blocks = MAX_BLOCKS;
    if (blocks < 1) blocks = 1;
    const size_t smem = (THREADS / 32) * sizeof(float);
    cudaMemsetAsync(scratch, 0, sizeof(float), stream);
    if (is_pow2((unsigned)n) && n >= THREADS * 2)
        reduce_pairs<float, THREADS, true><<<((unsigned)n + THREADS - 1) / THREADS, THREADS, smem, stream>>>(x, scratch, (unsigned)n);
    else
        reduce_pairs<float, THREADS, false><<<((unsigned)n + THREADS - 1) / THREADS, THREADS, smem, stream>>>(x, scratch, (unsigned)n);
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    reduce_pairs<float, THREADS, false><<<(1 + THREADS - 1) / THREADS, THREADS, smem, stream>>>(scratch, out, 1);
}
