// test: remove block-size@transpose_tiled:15:TILExBLOCK_ROWS | apply block-size@transpose_tiled:15:TILExBLOCK_ROWS bx=64 by=8
// The transpose walk's root: the expert without coalesce, smem-pad, unroll, launch-bounds, restrict.
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
__global__ void transpose_tiled(const float* x, float* y, int rows, int cols)  // restrict
{
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;

    const int c = col0 + tx;
    for (int r = ty; r < TILE; r += BLOCK_ROWS) {
        const int gr = row0 + r;
        if (gr < rows && c < cols) y[(size_t)c * rows + gr] = x[(size_t)gr * cols + c];
    }
}

extern "C" void launch(const float* x, float* y, int rows, int cols, cudaStream_t stream)
{
    if (rows <= 0 || cols <= 0) return;
    const dim3 block(TILE, BLOCK_ROWS);
    const dim3 grid((cols + TILE - 1) / TILE, (rows + TILE - 1) / TILE);
    transpose_tiled<<<grid, block, 0, stream>>>(x, y, rows, cols);
}
