#include <cuda_runtime.h>

#define TILE 32

// Staged transpose with a square block, one element per thread, a padded tile.
__global__ void transpose_square(const float* __restrict__ in, float* __restrict__ out, int rows, int cols)
{
    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int bx = blockIdx.x * TILE;
    int by = blockIdx.y * TILE;
    int col = bx + tx;
    int row = by + ty;
    if (row < rows && col < cols) out[col * rows + row] = in[row * cols + col];
}

extern "C" void launch(const float* in, float* out, int rows, int cols, cudaStream_t stream)
{
    dim3 block(TILE, TILE);
    dim3 grid((cols + TILE - 1) / TILE, (rows + TILE - 1) / TILE);
    transpose_square<<<grid, block, 0, stream>>>(in, out, rows, cols);
}
