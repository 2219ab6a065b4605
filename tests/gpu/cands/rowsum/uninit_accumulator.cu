// rowsum, broken: one block per row, each warp adds its partial sum into a shared accumulator
// with atomicAdd — an accumulator nobody set to zero. On a GPU whose shared memory happens to
// hold zeros it passes; after anything else ran it sums garbage. The gate fills shared memory
// with a poison before the candidate's launches, so it fails every time, not now and then.
#include <cuda_runtime.h>

__global__ void rowsum_acc(const float *__restrict__ x, float *__restrict__ y, int cols)
{
    __shared__ float total; // never initialised
    const float *row = x + (size_t)blockIdx.x * cols;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += row[c];
    for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
    if ((threadIdx.x & 31) == 0) atomicAdd(&total, s);
    __syncthreads();
    if (threadIdx.x == 0) y[blockIdx.x] = total;
}

extern "C" void launch(const float *x, float *y, int rows, int cols, cudaStream_t stream)
{
    rowsum_acc<<<rows, 128, 0, stream>>>(x, y, cols);
}
