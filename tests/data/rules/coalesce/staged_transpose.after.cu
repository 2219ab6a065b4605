// transpose, naive: one thread per element, read x[r][c] and write y[c][r] straight to global memory.
#include <cuda_runtime.h>

#define BLOCK 16

__global__ void transpose_naive(const float* x, float* y, int rows, int cols)
{
    // coalesce: staged through a shared tile, so that the read and the write both move along threadIdx.x
    __shared__ float tile[BLOCK][BLOCK];
    {
        int c = blockIdx.x * BLOCK + threadIdx.x;
        int r = blockIdx.y * BLOCK + threadIdx.y;
        if (r < rows && c < cols) {
            tile[threadIdx.y][threadIdx.x] = x[r * cols + c];
        }
    }
    __syncthreads();
    {
        int c = blockIdx.x * BLOCK + threadIdx.y;
        int r = blockIdx.y * BLOCK + threadIdx.x;
        if (r < rows && c < cols) {
            y[c * rows + r] = tile[threadIdx.x][threadIdx.y];
        }
    }
}

extern "C" void launch(const float* x, float* y, int rows, int cols, cudaStream_t stream)
{
    dim3 block(BLOCK, BLOCK);
    dim3 grid((cols + BLOCK - 1) / BLOCK, (rows + BLOCK - 1) / BLOCK);
    transpose_naive<<<grid, block, 0, stream>>>(x, y, rows, cols);
}
