#include <cstddef>

constexpr int TILE = 32;

__device__ __forceinline__ int lane_id() { return threadIdx.x & 31; }

// Each warp stages a 32x32 block; lane l then reduces row l of the stage.
__global__ void row_sums(const float *__restrict__ src, float *__restrict__ dst, size_t n)
{
    __shared__ float stage[TILE][TILE + 1];
    size_t base = (size_t)blockIdx.x * TILE * TILE;
    for (int r = 0; r < TILE; r++) {
        size_t i = base + (size_t)r * TILE + threadIdx.x;
        stage[r][threadIdx.x] = i < n ? src[i] : 0.0f;
    }
    __syncwarp();
    float s = 0.0f;
    for (int c = 0; c < TILE; c++)
        s += stage[threadIdx.x][c];
    if (base / TILE + threadIdx.x < n / TILE)
        dst[base / TILE + threadIdx.x] = s;
}
