// test: apply row-parallel@softmax_rows:9 | remove row-parallel@softmax_rows:10
// A softmax with three passes over each row, one thread per row -> a warp per row.
#include <cuda_runtime.h>

#define BLOCK 256

__global__ void softmax_rows(const float* x, float* y, int rows, int cols)
{
    int row = blockIdx.x * BLOCK + threadIdx.x;
    if (row < rows) {
        const float* xr = x + row * cols;
        float* yr = y + row * cols;
        float mx = -INFINITY;
        for (int c = 0; c < cols; c++) {
            mx = fmaxf(mx, xr[c]);
        }
        float sum = 0.0f;
        for (int c = 0; c < cols; ++c) {
            sum += expf(xr[c] - mx);
        }
        for (int c = 0; c < cols; c++) {
            yr[c] = expf(xr[c] - mx) / sum;
        }
    }
}

extern "C" void launch(const float* x, float* y, int rows, int cols, cudaStream_t stream)
{
    int grid = (rows + BLOCK - 1) / BLOCK;
    softmax_rows<<<grid, BLOCK, 0, stream>>>(x, y, rows, cols);
}
