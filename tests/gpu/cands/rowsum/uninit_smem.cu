// rowsum, broken: threads past the row's end never write their slot of shared memory, but the
// tree reads every slot, so a narrow row sums whatever an earlier block left there.
#include <cuda_runtime.h>

#define BLOCK 256

__global__ void rowsum_stale(const float *x, float *y, int cols)
{
    __shared__ float part[BLOCK];
    const float *row = x + (long)blockIdx.x * cols;
    if (threadIdx.x < cols) {
        float s = 0.0f;
        for (int c = threadIdx.x; c < cols; c += BLOCK) s += row[c];
        part[threadIdx.x] = s;
    }
    __syncthreads();
    for (int k = BLOCK / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) y[blockIdx.x] = part[0];
}

extern "C" void launch(const float *x, float *y, int rows, int cols, cudaStream_t stream)
{
    rowsum_stale<<<rows, BLOCK, 0, stream>>>(x, y, cols);
}
