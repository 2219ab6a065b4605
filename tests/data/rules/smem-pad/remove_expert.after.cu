#include <cuda_runtime.h>

#define TILE_DIM 32
#define BLOCK_ROWS 8

__global__ void transpose_expert(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)
{
    __shared__ float tile[TILE_DIM][TILE_DIM];
    int c = blockIdx.x * TILE_DIM + threadIdx.x;
    int r = blockIdx.y * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        if (c < cols && r + j < rows) tile[threadIdx.y + j][threadIdx.x] = x[(r + j) * cols + c];
    __syncthreads();
    c = blockIdx.y * TILE_DIM + threadIdx.x;
    r = blockIdx.x * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        if (c < rows && r + j < cols) y[(r + j) * rows + c] = tile[threadIdx.x][threadIdx.y + j];
}
