// test: remove warp-reduce@Reduce:31 | apply warp-reduce@Reduce:32
// The largest |x| in the style of a reduction library: a namespace of helpers, a block helper
// holding a pointer to its temporary storage in which every thread reads the warps' maxima; a
// grid-stride `while` loop with four loads per iteration into four accumulators, then a `while`
// loop over what is left.
#include <cuda_runtime.h>
#include <math.h>

constexpr int kBlock = 128;

namespace lib {

__device__ __forceinline__ float warp_max(float v)
{
    for (int offset = warpSize / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, offset));
    return v;
}

struct BlockMax {
    struct TempStorage {
        float maxima[32];
    };
    TempStorage* temp;
    __device__ explicit BlockMax(TempStorage* t) : temp(t) {}

    // The block's maximum, in every thread.
    __device__ float Reduce(float v)
    {
        const unsigned lane = threadIdx.x % warpSize;
        const unsigned warp = threadIdx.x / warpSize;
        v = warp_max(v);
        if (lane == 0) temp->maxima[warp] = v;
        __syncthreads();
        float m = 0.0f;
        for (unsigned w = 0; w < blockDim.x / warpSize; ++w) m = fmaxf(m, temp->maxima[w]);
        __syncthreads();
        return m;
    }
};

}  // namespace lib

__global__ void absmax_partials(const float* x, float* partial, int n)
{
    __shared__ lib::BlockMax::TempStorage temp;
    float m0 = 0.0f, m1 = 0.0f, m2 = 0.0f, m3 = 0.0f;
    int i = blockIdx.x * kBlock * 4 + threadIdx.x;
    while (i + 3 * kBlock < n) {
        m0 = fmaxf(m0, fabsf(x[i]));
        m1 = fmaxf(m1, fabsf(x[i + kBlock]));
        m2 = fmaxf(m2, fabsf(x[i + 2 * kBlock]));
        m3 = fmaxf(m3, fabsf(x[i + 3 * kBlock]));
        i += gridDim.x * kBlock * 4;
    }
    while (i < n) {
        m0 = fmaxf(m0, fabsf(x[i]));
        i += kBlock;
    }
    lib::BlockMax block(&temp);
    const float m = block.Reduce(fmaxf(fmaxf(m0, m1), fmaxf(m2, m3)));
    if (threadIdx.x == 0) partial[blockIdx.x] = m;
}

__global__ void absmax_final(const float* partial, float* out, int m)
{
    __shared__ lib::BlockMax::TempStorage temp;
    float v = 0.0f;
    for (int k = threadIdx.x; k < m; k += kBlock) v = fmaxf(v, partial[k]);
    lib::BlockMax block(&temp);
    v = block.Reduce(v);
    if (threadIdx.x == 0) out[0] = v;
}

extern "C" void launch(const float* x, float* out, float* scratch, int n, cudaStream_t stream)
{
    int blocks = (n + 4 * kBlock - 1) / (4 * kBlock);
    if (blocks > 512) blocks = 512;
    if (blocks < 1) blocks = 1;
    absmax_partials<<<blocks, kBlock, 0, stream>>>(x, scratch, n);
    absmax_final<<<1, kBlock, 0, stream>>>(scratch, out, blocks);
}
