// test: apply smem-tile@blur_naive:17 | remove smem-tile@blur_naive:18:img_s
// blur's naive (k a run-time value, the filter an input): a (BLOCK + 2 * 4)^2 halo tile, the
// original loop kept as the path for k > 9; the hoisted locals leave the output guard.
// blur, naive: one thread per output pixel, image and filter read from global memory,
// pixels outside the image skipped (zero padding).
#include <cuda_runtime.h>

#define BLOCK 16

__global__ void blur_naive(const float* img, const float* filt, float* out, int h, int w, int k)
{
    int x = blockIdx.x * BLOCK + threadIdx.x;
    int y = blockIdx.y * BLOCK + threadIdx.y;
    // smem-tile: 'img' with its halo in shared memory (the loop reads global memory unless k <= 2 * 4 + 1)
    __shared__ float img_s[BLOCK + 2 * 4][BLOCK + 2 * 4];
    int r = k / 2;
    float acc = 0.0f;
    if (k <= 2 * 4 + 1) {
        for (int sy = threadIdx.y; sy < BLOCK + k - 1; sy += BLOCK) {
            int i = sy - (int)threadIdx.y;
            int yy = y + i - r;
            for (int sx = threadIdx.x; sx < BLOCK + k - 1; sx += BLOCK) {
                int j = sx - (int)threadIdx.x;
                int xx = x + j - r;
                img_s[sy][sx] = yy >= 0 && yy < h && xx >= 0 && xx < w ? img[yy * w + xx] : 0.0f;
            }
        }
        __syncthreads();
    }
    if (y < h && x < w) {
        if (k <= 2 * 4 + 1) {
            for (int i = 0; i < k; i++) {
                int yy = y + i - r;
                for (int j = 0; j < k; j++) {
                    int xx = x + j - r;
                    if (yy >= 0 && yy < h && xx >= 0 && xx < w) {
                        acc += filt[i * k + j] * img_s[threadIdx.y + i][threadIdx.x + j];
                    }
                }
            }
        } else {
            for (int i = 0; i < k; i++) {
                int yy = y + i - r;
                for (int j = 0; j < k; j++) {
                    int xx = x + j - r;
                    if (yy >= 0 && yy < h && xx >= 0 && xx < w) {
                        acc += filt[i * k + j] * img[yy * w + xx];
                    }
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
