// test: apply block-size@copy_rows:5:TILE_DIMxBLOCK_ROWS bx=32 by=16 | remove block-size@copy_rows:5:TILE_DIMxBLOCK_ROWS
// a 2-D copy with a scale, 32 x 8 threads per 32 x 32 tile: each thread walks 4 rows through a row local
#include <cuda_runtime.h>

#define TILE_DIM 32
#define BLOCK_ROWS 8

__global__ void copy_rows(float *dst, const float *src, float s, int w, int h)
{
    const int col = blockIdx.x * TILE_DIM + threadIdx.x;
    const int row0 = blockIdx.y * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
        const int row = row0 + j;
        if (row < h && col < w) dst[row * w + col] = s * src[row * w + col];
    }
}

extern "C" void launch(const float *src, float *dst, float s, int h, int w, cudaStream_t stream)
{
    dim3 threads(TILE_DIM, BLOCK_ROWS);
    dim3 blocks((w + TILE_DIM - 1) / TILE_DIM, (h + TILE_DIM - 1) / TILE_DIM);
    copy_rows<<<blocks, threads, 0, stream>>>(dst, src, s, w, h);
}
