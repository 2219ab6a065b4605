// test: remove tree-addressing@block_total:12 | apply tree-addressing@block_total:12 exact
// A block sum in a __device__ helper called by two kernels of 512 threads; the tree divides its
// stride by two, and every thread reads the sum from element 0.
#include <cuda_runtime.h>

#define NT 512

__device__ double block_total(double mine, double* scratch)
{
    scratch[threadIdx.x] = mine;
    __syncthreads();
    for (int stride = NT / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) scratch[threadIdx.x] += scratch[threadIdx.x + stride];
        __syncthreads();
    }
    const double total = scratch[0];
    __syncthreads();
    return total;
}

__global__ void sum_rows(const double* __restrict__ a, double* __restrict__ row_sums, int cols)
{
    __shared__ double scratch[NT];
    double mine = 0.0;
    for (int c = threadIdx.x; c < cols; c += NT) mine += a[(size_t)blockIdx.x * cols + c];
    const double t = block_total(mine, scratch);
    if (threadIdx.x == 0) row_sums[blockIdx.x] = t;
}

__global__ void sum_all(const double* __restrict__ row_sums, double* __restrict__ out, int rows)
{
    __shared__ double scratch[NT];
    double mine = 0.0;
    for (int r = threadIdx.x; r < rows; r += NT) mine += row_sums[r];
    const double t = block_total(mine, scratch);
    if (threadIdx.x == 0) out[0] = t;
}

extern "C" void launch(const double* a, double* row_sums, double* out, int rows, int cols, cudaStream_t stream)
{
    sum_rows<<<rows, NT, 0, stream>>>(a, row_sums, cols);
    sum_all<<<1, NT, 0, stream>>>(row_sums, out, rows);
}
