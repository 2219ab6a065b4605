// template_reduce: a templated block reduction with shared memory, barriers,
// an unrolled tree and a __device__ warp-shuffle helper.
#include <cuda_runtime.h>

template <typename T>
__device__ __forceinline__ T warp_sum(T v)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

template <int BLOCK, typename T = float>
__global__ void __launch_bounds__(BLOCK) block_sum(const T *__restrict__ in, T *__restrict__ out, int n)
{
    __shared__ T partial[BLOCK / 32];
    T acc = T(0);
    for (int i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += gridDim.x * BLOCK)
        acc += in[i];
    acc = warp_sum(acc);
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        acc = lane < BLOCK / 32 ? partial[lane] : T(0);
        acc = warp_sum(acc);
        if (lane == 0) atomicAdd(out, acc);
    }
}

extern "C" void launch(const float *in, float *out, int n, cudaStream_t stream)
{
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    block_sum<256, float><<<120, 256, 0, stream>>>(in, out, n);
}
