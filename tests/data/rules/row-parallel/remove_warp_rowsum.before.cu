// test: remove row-parallel@row_sum:8 | apply row-parallel@row_sum:7
// A warp per row written by hand: lane-strided loop, shuffle sum, lane 0 stores.
#include <cuda_runtime.h>

__global__ void row_sum(const float* x, float* y, int rows, int cols)
{
    int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (row < rows) {
        float s = 0.0f;
        for (int c = lane; c < cols; c += 32) s += x[(size_t)row * cols + c];
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
        if (lane == 0) y[row] = s;
    }
}

extern "C" void launch(const float* x, float* y, int rows, int cols, cudaStream_t stream)
{
    int blocks = (rows + 127) / 128;
    row_sum<<<blocks * 32, 128, 0, stream>>>(x, y, rows, cols);
}
