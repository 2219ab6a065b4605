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
#pragma unroll 4
    for (int c = tid; c < cols; c += BLOCK) acc += r[c];
    atomicAdd(&sums[blockIdx.x], acc);
}

extern "C" void launch(const float* in, float* sums, int rows, int cols, cudaStream_t stream)
{
    cudaMemsetAsync(sums, 0, rows * sizeof(float), stream);
    row_sums<<<rows, BLOCK, 0, stream>>>(in, sums, cols);
}
