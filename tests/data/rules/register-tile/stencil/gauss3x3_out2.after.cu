// test: remove register-tile@gauss_rows:15:OUTS
// 3x3 Gaussian, clamp to the edge; each thread computes OUTS outputs down a column in a register array,
// each input row read once and added to the outputs whose window holds it
#include <cuda_runtime.h>

constexpr int OUTS = 1;                        // outputs per thread down
constexpr int TB_X = 16, TB_Y = 16;
constexpr int ROWS_PER_BLOCK = TB_Y * OUTS;

__device__ __forceinline__ float tap(int i, int j) { return (i == 1 ? 2.0f : 1.0f) * (j == 1 ? 2.0f : 1.0f) / 16.0f; }

__device__ void gauss_rows(const float* in, float* out, int w, int h, int x, int y0)
{
    float acc[OUTS];
    for (int o = 0; o < OUTS; o++) acc[o] = 0.0f;
    const int xl = max(x - 1, 0), xr = min(x + 1, w - 1);
    for (int r = 0; r < OUTS + 2; r++) {
        const int yy = min(max(y0 + r - 1, 0), h - 1);
        const float a = in[yy * w + xl], b = in[yy * w + x], c = in[yy * w + xr];
        for (int o = 0; o < OUTS; o++) {
            const int i = r - o;
            if (i >= 0 && i < 3) acc[o] += tap(i, 0) * a + tap(i, 1) * b + tap(i, 2) * c;
        }
    }
    for (int o = 0; o < OUTS; o++)
        if (y0 + o < h) out[(y0 + o) * w + x] = acc[o];
}

__global__ void gauss3x3(const float* in, float* out, int w, int h)
{
    const int x = blockIdx.x * TB_X + threadIdx.x;
    const int y0 = blockIdx.y * ROWS_PER_BLOCK + threadIdx.y * OUTS;
    if (x < w && y0 < h) gauss_rows(in, out, w, h, x, y0);
}

extern "C" void launch(const float* in, float* out, int h, int w, cudaStream_t stream)
{
    dim3 block(TB_X, TB_Y);
    dim3 grid((w + TB_X - 1) / TB_X, (h + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    gauss3x3<<<grid, block, 0, stream>>>(in, out, w, h);
}
