// A tiled transpose in the blog style with constexpr sizes: a 32 x 32 tile padded by one column,
// 32 x 8 threads that step through it 8 rows at a time, bounds tests on both sides, the output's
// block offsets recomputed after the barrier.
#include <cuda_runtime.h>

constexpr int TILE_DIM = 32;
constexpr int BLOCK_ROWS = 8;

__global__ void transpose_padded(float *odata, const float *idata, int width, int height)
{
    __shared__ float tile[TILE_DIM][TILE_DIM + 1];
    int x = blockIdx.x * TILE_DIM + threadIdx.x;
    int y = blockIdx.y * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
        if (x < width && (y + j) < height) {
            tile[threadIdx.y + j][threadIdx.x] = idata[(size_t)(y + j) * width + x];
        }
    }
    __syncthreads();
    x = blockIdx.y * TILE_DIM + threadIdx.x;
    y = blockIdx.x * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
        if (x < height && (y + j) < width) {
            odata[(size_t)(y + j) * height + x] = tile[threadIdx.x][threadIdx.y + j];
        }
    }
}

extern "C" void launch(const float *in, float *out, int height, int width, cudaStream_t stream)
{
    const dim3 threads(TILE_DIM, BLOCK_ROWS);
    const dim3 blocks((width + TILE_DIM - 1) / TILE_DIM, (height + TILE_DIM - 1) / TILE_DIM);
    transpose_padded<<<blocks, threads, 0, stream>>>(out, in, width, height);
}
