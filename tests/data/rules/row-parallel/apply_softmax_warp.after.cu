// test: apply row-parallel@softmax_rows:9 | remove row-parallel@softmax_rows:10
// A softmax with three passes over each row, one thread per row -> a warp per row.
#include <cuda_runtime.h>

#define BLOCK 256

__global__ void softmax_rows(const float* x, float* y, int rows, int cols)
{
    int row = (blockIdx.x * BLOCK + threadIdx.x) / 32;
    const int kl_lane = threadIdx.x % 32;
    if (row < rows) {
        const float* xr = x + row * cols;
        float* yr = y + row * cols;
        float mx = -INFINITY;
        for (int c = kl_lane; c < cols; c += 32) {
            mx = fmaxf(mx, xr[c]);
        }
        for (int kl_o = 16; kl_o > 0; kl_o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, kl_o));
        float sum = 0.0f;
        for (int c = kl_lane; c < cols; c += 32) {
            sum += expf(xr[c] - mx);
        }
        for (int kl_o = 16; kl_o > 0; kl_o >>= 1) sum += __shfl_xor_sync(0xffffffff, sum, kl_o);
        for (int c = kl_lane; c < cols; c += 32) {
            yr[c] = expf(xr[c] - mx) / sum;
        }
    }
}

extern "C" void launch(const float* x, float* y, int rows, int cols, cudaStream_t stream)
{
    int grid = (rows + BLOCK - 1) / BLOCK;
    softmax_rows<<<grid * 32, BLOCK, 0, stream>>>(x, y, rows, cols);
}
