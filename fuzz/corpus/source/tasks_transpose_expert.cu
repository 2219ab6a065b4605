// transpose, expert: y (cols x rows) = x (rows x cols) transposed, row-major f32.
//
// Optimizations (each marked where it sits):
//  - coalesce: shared-memory staged transpose; both the global read and the global write
//    are along rows (TILE consecutive floats)
//  - smem-tile: TILE x TILE tile per block
//  - smem-pad: +1 column against bank conflicts (the column read of the tile hits 32 banks)
//  - several elements per thread: TILE / BLOCK_ROWS per thread, all loads in flight
//  - unroll, launch-bounds, restrict
// Edge tiles are bounds-checked on both the read and the write, so any rows x cols works.
#include <cuda_runtime.h>

constexpr int TILE = 64;                     // tile edge, floats
constexpr int BLOCK_ROWS = 4;                // block is TILE x BLOCK_ROWS threads
constexpr int PAD = 1;                       // extra column in shared memory

// launch-bounds
__global__ void __launch_bounds__(TILE * BLOCK_ROWS)
transpose_tiled(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)  // restrict
{
    // smem-tile: TILE x TILE staging tile
    // smem-pad: +1 column against bank conflicts
    __shared__ float tile[TILE][TILE + PAD];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;

    // coalesce: shared-memory staged transpose (read rows of x)
    const int c = col0 + tx;
    // unroll
#pragma unroll
    for (int r = ty; r < TILE; r += BLOCK_ROWS) {
        const int gr = row0 + r;
        if (gr < rows && c < cols) tile[r][tx] = x[(size_t)gr * cols + c];
    }
    __syncthreads();
    // ... and write rows of y: y[col0 + r][row0 + tx] = x[row0 + tx][col0 + r]
    const int yc = row0 + tx;
#pragma unroll
    for (int r = ty; r < TILE; r += BLOCK_ROWS) {
        const int yr = col0 + r;
        if (yr < cols && yc < rows) y[(size_t)yr * rows + yc] = tile[tx][r];
    }
}

extern "C" void launch(const float* x, float* y, int rows, int cols, cudaStream_t stream)
{
    if (rows <= 0 || cols <= 0) return;
    const dim3 block(TILE, BLOCK_ROWS);
    const dim3 grid((cols + TILE - 1) / TILE, (rows + TILE - 1) / TILE);
    transpose_tiled<<<grid, block, 0, stream>>>(x, y, rows, cols);
}
