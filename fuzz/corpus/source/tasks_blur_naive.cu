// blur, naive: one thread per output pixel, image and filter read from global memory,
// pixels outside the image skipped (zero padding).
#include <cuda_runtime.h>

#define BLOCK 16

__global__ void blur_naive(const float* img, const float* filt, float* out, int h, int w, int k)
{
    int x = blockIdx.x * BLOCK + threadIdx.x;
    int y = blockIdx.y * BLOCK + threadIdx.y;
    if (y < h && x < w) {
        int r = k / 2;
        float acc = 0.0f;
        for (int i = 0; i < k; i++) {
            int yy = y + i - r;
            for (int j = 0; j < k; j++) {
                int xx = x + j - r;
                if (yy >= 0 && yy < h && xx >= 0 && xx < w) {
                    acc += filt[i * k + j] * img[yy * w + xx];
                }
            }
        }
        out[y * w + x] = acc;
    }
}

extern "C" void launch(const float* img, const float* filt, float* out, int h, int w, int k, cudaStream_t stream)
{
    dim3 block(BLOCK, BLOCK);
    dim3 grid((w + BLOCK - 1) / BLOCK, (h + BLOCK - 1) / BLOCK);
    blur_naive<<<grid, block, 0, stream>>>(img, filt, out, h, w, k);
}
