// test: remove interior-path@smooth3x3:14
// 3x3 box average with clamped edges, one output per thread; blocks away from the grid's border
// read their neighbours without clamping, the others clamp every index.
#include <cuda_runtime.h>

#define BW 32
#define BH 8

__global__ void smooth3x3(const float* in, float* out, int w, int h)
{
    const int x = blockIdx.x * BW + threadIdx.x;
    const int y = blockIdx.y * BH + threadIdx.y;
    // interior blocks: every neighbour of every pixel lies inside the image
    if (blockIdx.x > 0 && blockIdx.x < gridDim.x - 1 && blockIdx.y > 0 && blockIdx.y < gridDim.y - 1 &&
        (blockIdx.x + 1) * BW < w && (blockIdx.y + 1) * BH < h) {
        float s = 0.0f;
        for (int dy = -1; dy <= 1; dy++)
            for (int dx = -1; dx <= 1; dx++) s += in[(y + dy) * w + x + dx];
        out[y * w + x] = s * (1.0f / 9.0f);
    } else {
        if (x >= w || y >= h) return;
        float s = 0.0f;
        for (int dy = -1; dy <= 1; dy++) {
            const int yy = min(max(y + dy, 0), h - 1);
            for (int dx = -1; dx <= 1; dx++) {
                const int xx = min(max(x + dx, 0), w - 1);
                s += in[yy * w + xx];
            }
        }
        out[y * w + x] = s * (1.0f / 9.0f);
    }
}

extern "C" void launch(const float* in, float* out, int h, int w, cudaStream_t stream)
{
    const dim3 grid((w + BW - 1) / BW, (h + BH - 1) / BH);
    smooth3x3<<<grid, dim3(BW, BH), 0, stream>>>(in, out, w, h);
}
