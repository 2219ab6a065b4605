// test: apply smem-tile@box3:17 | remove smem-tile@box3:18:in_s
// A 3 x 3 stencil of compile-time extent (no fallback), a template element type, a function-like
// macro for indexing, a 32 x 8 block: the tile is (BY + 2) x (BX + 2), loaded before the guard.
#include <cuda_runtime.h>

#define BX 32
#define BY 8
#define AT(r, c, ld) ((r) * (ld) + (c))

template <typename T>
__global__ void box3(const T* in, const T* wts, T* out, int h, int w)
{
    int col = blockIdx.x * BX + threadIdx.x;
    int row = blockIdx.y * BY + threadIdx.y;
    if (row < h && col < w) {
        T acc = 0;
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
    box3<float><<<grid, dim3(BX, BY), 0, stream>>>(in, wts, out, h, w);
}
