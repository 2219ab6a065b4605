// test: remove row-parallel@row_sum:8 | apply row-parallel@row_sum:7
// A warp per row written by hand: lane-strided loop, shuffle sum, lane 0 stores.
#include <cuda_runtime.h>

__global__ void row_sum(const float* x, float* y, int rows, int cols)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < rows) {
        float s = 0.0f;
        for (int c = 0; c < cols; c++) s += x[(size_t)row * cols + c];
        y[row] = s;
    }
}

extern "C" void launch(const float* x, float* y, int rows, int cols, cudaStream_t stream)
{
    int blocks = (rows + 127) / 128;
    row_sum<<<blocks, 128, 0, stream>>>(x, y, rows, cols);
}
