// test: remove specialize@launch:53 | apply specialize@rowsum:8:cols values=64
// Row sums of a rows x cols matrix: short rows by one warp (a shuffle helper), middle rows by a
// block, and everything else by a thread per row that loops over the row (an if / else-if chain).
#include <cuda_runtime.h>

constexpr int WARP = 32;
constexpr int BLOCK = 256;

__device__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// A warp per row: rows of at most WARP values.
__global__ void rowsum_warp(const float* x, float* y, int rows, int cols)
{
    const int row = blockIdx.x;
    const int lane = threadIdx.x;
    float v = lane < cols ? x[(size_t)row * cols + lane] : 0.0f;
    v = warp_sum(v);
    if (lane == 0) y[row] = v;
}

// A block per row: rows of at most BLOCK values.
__global__ void rowsum_block(const float* x, float* y, int rows, int cols)
{
    __shared__ float part[BLOCK / WARP];
    const int row = blockIdx.x;
    float v = threadIdx.x < cols ? x[(size_t)row * cols + threadIdx.x] : 0.0f;
    v = warp_sum(v);
    if (threadIdx.x % WARP == 0) part[threadIdx.x / WARP] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int w = 0; w < BLOCK / WARP; w++) s += part[w];
        y[row] = s;
    }
}

__global__ void rowsum(const float* x, float* y, int rows, int cols)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    float s = 0.0f;
    for (int c = 0; c < cols; c++) s += x[(size_t)row * cols + c];
    y[row] = s;
}

extern "C" void launch(const float* x, float* y, int rows, int cols, cudaStream_t stream)
{
    if (rows <= 0 || cols <= 0) return;
    if (cols <= WARP)
        rowsum_warp<<<rows, WARP, 0, stream>>>(x, y, rows, cols);
    else if (cols <= BLOCK)
        rowsum_block<<<rows, BLOCK, 0, stream>>>(x, y, rows, cols);
    else
        rowsum<<<(rows + BLOCK - 1) / BLOCK, BLOCK, 0, stream>>>(x, y, rows, cols);
}
