// test: apply smem-tile@blur5:15 | remove smem-tile@blur5:16:img_s
// A 5 x 5 stencil whose rows outside the image are skipped with `continue` (its negation guards the
// load), the offsets running over x in the outer loop, a 16 x 16 block, no output guard around
// the loop (the early return moves after the load and its barrier).
#include <cuda_runtime.h>

#define B 16

__global__ void blur5(const float* img, const float* filt, float* out, int h, int w)
{
    const int x = blockIdx.x * B + threadIdx.x;
    const int y = blockIdx.y * B + threadIdx.y;
    if (x >= w || y >= h) return;
    float acc = 0.0f;
    for (int j = 0; j < 5; j++) {
        const int xx = x + j - 2;
        if (xx < 0 || xx >= w) continue;
        for (int i = 0; i < 5; i++) {
            const int yy = y + i - 2;
            if (yy >= 0 && yy < h) acc += filt[i * 5 + j] * img[yy * w + xx];
        }
    }
    out[y * w + x] = acc;
}

extern "C" void launch(const float* img, const float* filt, float* out, int h, int w, cudaStream_t stream)
{
    dim3 grid((w + B - 1) / B, (h + B - 1) / B);
    blur5<<<grid, dim3(B, B), 0, stream>>>(img, filt, out, h, w);
}
