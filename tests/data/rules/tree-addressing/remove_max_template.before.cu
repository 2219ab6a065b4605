// test: remove tree-addressing@block_max:18 | apply tree-addressing@block_max:18 exact
// The largest element of each block: a templated block size, the tree halving with a shift over the
// whole block, thread 0 keeping the block's maximum.
#include <cuda_runtime.h>
#include <math.h>

template <int THREADS>
__global__ void block_max(const float* __restrict__ v, float* __restrict__ block_out, int count)
{
    __shared__ float best[THREADS];
    const unsigned int lane = threadIdx.x;
    const int k = blockIdx.x * THREADS + threadIdx.x;
    float x = -INFINITY;
    if (k < count) x = v[k];
    best[lane] = x;
    __syncthreads();
    // pair element t with t + half, half the block each round
    for (unsigned int half = blockDim.x / 2; half > 0; half >>= 1) {
        if (lane < half) best[lane] = fmaxf(best[lane], best[lane + half]);
        __syncthreads();
    }
    if (lane == 0) block_out[blockIdx.x] = best[0];
}

extern "C" void launch(const float* v, float* block_out, int count, cudaStream_t stream)
{
    block_max<128><<<(count + 127) / 128, 128, 0, stream>>>(v, block_out, count);
}
