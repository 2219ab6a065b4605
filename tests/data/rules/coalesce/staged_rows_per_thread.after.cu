// transpose, naive, each thread later moving four rows of the tile (rows_per_thread=4).
#include <cuda_runtime.h>

#define BLOCK 16
#define BLOCK_ROWS 4

__global__ void transpose_naive(const float* x, float* y, int rows, int cols)
{
    // coalesce: staged through a shared tile, so that the read and the write both move along threadIdx.x; each thread moves BLOCK / BLOCK_ROWS of its rows
    __shared__ float tile[BLOCK][BLOCK];
    for (int j = 0; j < BLOCK; j += BLOCK_ROWS) {
        const unsigned int ty = threadIdx.y + j;
        int c = blockIdx.x * BLOCK + threadIdx.x;
        int r = blockIdx.y * BLOCK + ty;
        if (r < rows && c < cols) {
            tile[ty][threadIdx.x] = x[r * cols + c];
        }
    }
    __syncthreads();
    for (int j = 0; j < BLOCK; j += BLOCK_ROWS) {
        const unsigned int ty = threadIdx.y + j;
        int c = blockIdx.x * BLOCK + ty;
        int r = blockIdx.y * BLOCK + threadIdx.x;
        if (r < rows && c < cols) {
            y[c * rows + r] = tile[threadIdx.x][ty];
        }
    }
}

extern "C" void launch(const float* x, float* y, int rows, int cols, cudaStream_t stream)
{
    dim3 block(BLOCK, BLOCK_ROWS);
    dim3 grid((cols + BLOCK - 1) / BLOCK, (rows + BLOCK - 1) / BLOCK);
    transpose_naive<<<grid, block, 0, stream>>>(x, y, rows, cols);
}
