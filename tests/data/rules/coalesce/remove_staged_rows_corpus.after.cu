// transpose_tiled: a 32 x 32 tile staged in shared memory by 32 x 8 threads, each thread
// stepping through the tile BLOCK_ROWS rows at a time, so that both the global read and the
// global write run along rows. The tile is not padded (its column reads conflict on banks).
#include <cuda_runtime.h>

#define TILE_DIM 32
#define BLOCK_ROWS 8

__global__ void transpose_smem(const float* in, float* out, int height, int width)
{
    int x = blockIdx.x * TILE_DIM + threadIdx.x;
    int y = blockIdx.y * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        if (x < width && y + j < height) out[(size_t)x * height + (y + j)] = in[(size_t)(y + j) * width + x];
}

extern "C" void launch(const float* in, float* out, int height, int width, cudaStream_t stream)
{
    dim3 block(TILE_DIM, BLOCK_ROWS);
    dim3 grid((width + TILE_DIM - 1) / TILE_DIM, (height + TILE_DIM - 1) / TILE_DIM);
    transpose_smem<<<grid, block, 0, stream>>>(in, out, height, width);
}
