// sumsq, naive: one element per thread; each block adds its 256 squares in shared memory with
// the interleaved-addressing tree (stride doubling, tid % (2*s) == 0), thread 0 adds the block's
// sum to a double accumulator in device memory with atomicAdd, and a one-thread kernel writes the
// total as f32. Three launches on the stream; the accumulator is reset by the first.
#include <cuda_runtime.h>

#define BLOCK_SIZE 256

__device__ double g_total;

__global__ void reset_total() { g_total = 0.0; }

__global__ void block_sumsq(const float* x, int n)
{
    __shared__ float sdata[BLOCK_SIZE];
    const unsigned tid = threadIdx.x;
    const unsigned i = blockIdx.x * BLOCK_SIZE + threadIdx.x;
    const float v = i < (unsigned)n ? x[i] : 0.0f;
    sdata[tid] = v * v;
    __syncthreads();
    for (unsigned s = BLOCK_SIZE / 2; s > 0; s /= 2) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(&g_total, (double)sdata[0]);
}

__global__ void write_total(float* out) { out[0] = (float)g_total; }

extern "C" void launch(const float* x, float* out, int n, cudaStream_t stream)
{
    reset_total<<<1, 1, 0, stream>>>();
    block_sumsq<<<(n + BLOCK_SIZE - 1) / BLOCK_SIZE, BLOCK_SIZE, 0, stream>>>(x, n);
    write_total<<<1, 1, 0, stream>>>(out);
}
