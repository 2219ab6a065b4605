// presets: a weighted 2-D correlation with a run-time radius (a (2 rad + 1)^2 weight table), an
// index macro, zero outside the image, a 32 x 8 block (smem-tile: the stencil presets fit).
#include <cuda_runtime.h>

#define BW 32
#define BH 8
#define AT(img, yy, xx, pitch) img[(yy) * (pitch) + (xx)]

__global__ void wcorr(const float *src, const float *wt, float *dst, int width, int height, int rad)
{
    int px = blockIdx.x * BW + threadIdx.x;
    int py = blockIdx.y * BH + threadIdx.y;
    if (px < width && py < height) {
        int span = 2 * rad + 1;
        float sum = 0.0f;
        for (int dy = -rad; dy <= rad; dy++) {
            for (int dx = -rad; dx <= rad; dx++) {
                int sy = py + dy, sx = px + dx;
                if (sy < 0 || sy >= height || sx < 0 || sx >= width) continue;
                sum += wt[(dy + rad) * span + (dx + rad)] * AT(src, sy, sx, width);
            }
        }
        AT(dst, py, px, width) = sum;
    }
}

extern "C" void launch(const float *src, const float *wt, float *dst, int width, int height, int rad, cudaStream_t stream)
{
    dim3 block(BW, BH);
    dim3 grid((width + BW - 1) / BW, (height + BH - 1) / BH);
    wcorr<<<grid, block, 0, stream>>>(src, wt, dst, width, height, rad);
}
