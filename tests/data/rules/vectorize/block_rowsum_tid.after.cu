// test: apply vectorize@row_sums:14 | remove vectorize@row_sums:15 exact
// A row-wise sum, a block per row, the thread index held in a local and the step a macro (the
// block size the launch uses), the partials combined with atomics; the loop's body a statement.
#include <cuda_runtime.h>

#define BLOCK 256

__global__ void row_sums(const float* __restrict__ in, float* __restrict__ sums, int cols)
{
    const unsigned tid = threadIdx.x;
    const float* r = in + (size_t)blockIdx.x * cols;
    float acc = 0.0f;
    // vectorize: 4 elements per access of 'r' (float4); the loop below does the last cols % 4, or all when an address is not aligned
    const int nv = reinterpret_cast<unsigned long long>(&r[0]) % 16 == 0 ? cols / 4 : 0;
    for (int v = tid; v < nv; v += BLOCK) {
        const int c = v * 4;
        const float4 kl_r = *reinterpret_cast<const float4*>(&r[c]);
        { acc += kl_r.x; }
        { acc += kl_r.y; }
        { acc += kl_r.z; }
        { acc += kl_r.w; }
    }
#pragma unroll 4
    for (int c = tid + nv * 4; c < cols; c += BLOCK) acc += r[c];
    atomicAdd(&sums[blockIdx.x], acc);
}

extern "C" void launch(const float* in, float* sums, int rows, int cols, cudaStream_t stream)
{
    cudaMemsetAsync(sums, 0, rows * sizeof(float), stream);
    row_sums<<<rows, BLOCK, 0, stream>>>(in, sums, cols);
}
