// test: remove block-size@stencil5:6:BXxBY | apply block-size@stencil5:6:BXxBY bx=32 by=8
// A 5-point stencil: the block's tile and a one-cell halo staged in shared memory.
#include <cuda_runtime.h>
#include <stddef.h>

constexpr int BX = 32;   // threads across
constexpr int BY = 8;    // threads down

__global__ void stencil5(const float *in, float *out, int h, int w)
{
    __shared__ float tile[BY + 2][BX + 2];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int x0 = blockIdx.x * BX - 1, y0 = blockIdx.y * BY - 1;
    for (int sy = ty; sy < BY + 2; sy += BY)
        for (int sx = tx; sx < BX + 2; sx += BX) {
            const int gx = x0 + sx, gy = y0 + sy;
            tile[sy][sx] = gx >= 0 && gx < w && gy >= 0 && gy < h ? in[(size_t)gy * w + gx] : 0.0f;
        }
    __syncthreads();
    const int x = x0 + 1 + tx, y = y0 + 1 + ty;
    if (x < w && y < h)
        out[(size_t)y * w + x] = 0.5f * tile[ty + 1][tx + 1] +
                                 0.125f * (tile[ty][tx + 1] + tile[ty + 2][tx + 1] + tile[ty + 1][tx] + tile[ty + 1][tx + 2]);
}

extern "C" void launch(const float *in, float *out, int h, int w, cudaStream_t stream)
{
    const dim3 grid((w + BX - 1) / BX, (h + BY - 1) / BY);
    stencil5<<<grid, dim3(BX, BY), 0, stream>>>(in, out, h, w);
}
