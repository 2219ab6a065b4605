// test: remove specialize@launch:53 | apply specialize@rowsum:8:cols values=64
// Row sums of a rows x cols matrix: short rows by one warp (a shuffle helper), middle rows by a
// block, and everything else by a thread per row that loops over the row (an if / else-if chain).
#include <cuda_runtime.h>

constexpr int BLOCK = 256;

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
    rowsum<<<(rows + BLOCK - 1) / BLOCK, BLOCK, 0, stream>>>(x, y, rows, cols);
}
