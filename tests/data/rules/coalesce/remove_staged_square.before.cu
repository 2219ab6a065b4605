#include <cuda_runtime.h>

#define TILE 32

// Staged transpose with a square block, one element per thread, a padded tile.
__global__ void transpose_square(const float* __restrict__ in, float* __restrict__ out, int rows, int cols)
{
    __shared__ float buf[TILE][TILE + 1];   // smem-pad: +1
    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int bx = blockIdx.x * TILE;
    int by = blockIdx.y * TILE;
    int col = bx + tx;
    int row = by + ty;
    if (row < rows && col < cols) buf[ty][tx] = in[row * cols + col];
    __syncthreads();
    // write the block's tile transposed: out[bx + ty][by + tx]
    int orow = bx + ty;
    int ocol = by + tx;
    if (orow < cols && ocol < rows) out[orow * rows + ocol] = buf[tx][ty];
}

extern "C" void launch(const float* in, float* out, int rows, int cols, cudaStream_t stream)
{
    dim3 block(TILE, TILE);
    dim3 grid((cols + TILE - 1) / TILE, (rows + TILE - 1) / TILE);
    transpose_square<<<grid, block, 0, stream>>>(in, out, rows, cols);
}
