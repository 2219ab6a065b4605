// transpose staged the other way round: the tile is written down its columns (the store conflicts
// on banks) and read along its rows; 32 x 8 threads, 4 rows each; sizes are multiples of 32
#include <cuda_runtime.h>

#define TILE_DIM 32
#define BLOCK_ROWS 8

__global__ void transpose_colstore(float *odata, const float *idata, int width, int height)
{
    int x = blockIdx.x * TILE_DIM + threadIdx.x;
    int y = blockIdx.y * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        odata[x * height + (y + j)] = idata[(y + j) * width + x];
}

extern "C" void launch(const float *in, float *out, int height, int width, cudaStream_t stream)
{
    transpose_colstore<<<dim3(width / TILE_DIM, height / TILE_DIM), dim3(TILE_DIM, BLOCK_ROWS), 0, stream>>>(out, in, width, height);
}
