// rowsum, broken: the tree reduction has no barrier between its levels (a shared-memory race).
#include <cuda_runtime.h>

#define BLOCK 256

__global__ void rowsum_race(const float *x, float *y, int cols)
{
    __shared__ float part[BLOCK];
    const float *row = x + (long)blockIdx.x * cols;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) s += row[c];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int k = BLOCK / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];
        // missing: __syncthreads();
    }
    if (threadIdx.x == 0) y[blockIdx.x] = part[0];
}

extern "C" void launch(const float *x, float *y, int rows, int cols, cudaStream_t stream)
{
    rowsum_race<<<rows, BLOCK, 0, stream>>>(x, y, cols);
}
