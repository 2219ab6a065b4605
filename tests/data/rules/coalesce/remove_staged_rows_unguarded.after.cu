// transpose without bounds tests: the sizes are multiples of the 32 x 32 tile
#include <cuda_runtime.h>

#define TILE_DIM 32
#define BLOCK_ROWS 8

__global__ void transposeNoBankConflicts(float *odata, const float *idata, int width, int height)
{
    int x = blockIdx.x * TILE_DIM + threadIdx.x;
    int y = blockIdx.y * TILE_DIM + threadIdx.y;

    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        odata[x*height + (y + j)] = idata[(y+j)*width + x];
}

extern "C" void launch(const float *in, float *out, int height, int width, cudaStream_t stream)
{
    dim3 dimGrid(width / TILE_DIM, height / TILE_DIM);
    dim3 dimBlock(TILE_DIM, BLOCK_ROWS);
    transposeNoBankConflicts<<<dimGrid, dimBlock, 0, stream>>>(out, in, width, height);
}
