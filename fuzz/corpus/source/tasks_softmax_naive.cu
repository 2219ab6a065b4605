// softmax, naive: one thread per row, three passes over the row in global memory
// (max, sum of exponentials, normalised write).
#include <cuda_runtime.h>

#define BLOCK 256

__global__ void softmax_naive(const float* x, float* y, int rows, int cols)
{
    int row = blockIdx.x * BLOCK + threadIdx.x;
    if (row < rows) {
        const float* xr = x + row * cols;
        float* yr = y + row * cols;
        float mx = xr[0];
        for (int c = 1; c < cols; c++) {
            mx = fmaxf(mx, xr[c]);
        }
        float sum = 0.0f;
        for (int c = 0; c < cols; c++) {
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
    softmax_naive<<<grid, BLOCK, 0, stream>>>(x, y, rows, cols);
}
