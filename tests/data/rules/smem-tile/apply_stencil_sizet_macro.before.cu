// test: apply smem-tile@conv_kxk:18 max_radius=2 | remove smem-tile@conv_kxk:19:src_s
// size_t coordinates, long offsets, a pitch and a macro for indexing, an early return, a 64 x 4
// block and max_radius=2: a (TH + 4) x (TW + 4) tile for ks <= 5, the global loop otherwise. The
// names sy and sx are taken, so the load's coordinates are kl_sy and kl_sx.
#include <cuda_runtime.h>

#define TW 64
#define TH 4
#define IDX(r, c) ((size_t)(r) * pitch + (c))

__global__ void conv_kxk(const float* src, const float* f, float* dst, int rows, int cols, int pitch, int ks)
{
    const size_t x = (size_t)blockIdx.x * TW + threadIdx.x;
    const size_t y = (size_t)blockIdx.y * TH + threadIdx.y;
    if (x >= (size_t)cols || y >= (size_t)rows) return;
    const int half = ks / 2;
    float s = 0.0f;
    for (int a = 0; a < ks; ++a) {
        const long sy = (long)y + a - half;
        for (int b = 0; b < ks; ++b) {
            const long sx = (long)x + b - half;
            if (sy >= 0 && sy < rows && sx >= 0 && sx < cols)
                s += f[a * ks + b] * src[IDX(sy, sx)];
        }
    }
    dst[IDX(y, x)] = s;
}

extern "C" void launch(const float* src, const float* f, float* dst, int rows, int cols, int pitch, int ks,
                       cudaStream_t stream)
{
    dim3 grid((cols + TW - 1) / TW, (rows + TH - 1) / TH);
    conv_kxk<<<grid, dim3(TW, TH), 0, stream>>>(src, f, dst, rows, cols, pitch, ks);
}
