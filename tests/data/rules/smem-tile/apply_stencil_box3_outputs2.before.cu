// test: apply smem-tile@box3f:16 outputs_x=2 | remove smem-tile@box3f:15:in_s
// A 3 x 3 float stencil of compile-time extent, macro indexing, a 32 x 8 block, the weight first in the
// product: two outputs per thread along x, rows read as float2, the grid half as wide.
#include <cuda_runtime.h>

#define BX 32
#define BY 8
#define AT(r, c, ld) ((r) * (ld) + (c))

__global__ void box3f(const float* in, const float* wts, float* out, int h, int w)
{
    int col = blockIdx.x * BX + threadIdx.x;
    int row = blockIdx.y * BY + threadIdx.y;
    if (row < h && col < w) {
        float acc = 0.0f;
        for (int dy = 0; dy < 3; dy++) {
            for (int dx = 0; dx < 3; dx++) {
                int r = row + dy - 1, c = col + dx - 1;
                if (r >= 0 && r < h && c >= 0 && c < w) acc += wts[dy * 3 + dx] * in[AT(r, c, w)];
            }
        }
        out[AT(row, col, w)] = acc;
    }
}

extern "C" void launch(const float* in, const float* wts, float* out, int h, int w, cudaStream_t stream)
{
    dim3 grid((w + BX - 1) / BX, (h + BY - 1) / BY);
    box3f<<<grid, dim3(BX, BY), 0, stream>>>(in, wts, out, h, w);
}
