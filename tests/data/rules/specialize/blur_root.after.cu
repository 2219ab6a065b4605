// test: remove specialize@launch:127 | apply specialize@blur_generic:17:k values=5,7
// blur, expert: k x k cross-correlation of an h x w f32 image, zero padding, same-size output.
//
// Optimizations (each marked where it sits):
//  - unroll, launch-bounds, restrict
// The filter is copied to constant memory on the stream before the kernel, so launches
// with different filters must not run concurrently (the gate launches on one stream).
#include <cuda_runtime.h>
#include <stdint.h>

constexpr int BX = 32;                        // threads across
constexpr int BY = 8;                         // threads down
constexpr int THREADS = BX * BY;

// Any other k: one output per thread, image and filter from global memory (through L1/L2).
constexpr int GX = 32, GY = 8;
__global__ void blur_generic(const float* img, const float* filt, float* out, int h, int w,
             int k)
{
    const int x = blockIdx.x * GX + threadIdx.x;
    const int y = blockIdx.y * GY + threadIdx.y;
    if (x >= w || y >= h) return;
    const int r = k / 2;
    float acc = 0.0f;
    for (int i = 0; i < k; i++) {
        const int yy = y + i - r;
        if (yy < 0 || yy >= h) continue;
        for (int j = 0; j < k; j++) {
            const int xx = x + j - r;
            if (xx >= 0 && xx < w) acc += filt[i * k + j] * img[(size_t)yy * w + xx];
        }
    }
    out[(size_t)y * w + x] = acc;
}

extern "C" void launch(const float* img, const float* filt, float* out, int h, int w, int k, cudaStream_t stream)
{
    if (h <= 0 || w <= 0 || k <= 0) return;
    const dim3 grid((w + GX - 1) / GX, (h + GY - 1) / GY);
    blur_generic<<<grid, dim3(GX, GY), 0, stream>>>(img, filt, out, h, w, k);
}
