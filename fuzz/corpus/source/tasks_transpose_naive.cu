// transpose, naive: one thread per element, read x[r][c] and write y[c][r] straight to global memory.
#include <cuda_runtime.h>

#define BLOCK 16

__global__ void transpose_naive(const float* x, float* y, int rows, int cols)
{
    int c = blockIdx.x * BLOCK + threadIdx.x;
    int r = blockIdx.y * BLOCK + threadIdx.y;
    if (r < rows && c < cols) {
        y[c * rows + r] = x[r * cols + c];
    }
}

extern "C" void launch(const float* x, float* y, int rows, int cols, cudaStream_t stream)
{
    dim3 block(BLOCK, BLOCK);
    dim3 grid((cols + BLOCK - 1) / BLOCK, (rows + BLOCK - 1) / BLOCK);
    transpose_naive<<<grid, block, 0, stream>>>(x, y, rows, cols);
}
