// test: apply smem-tile@blur_naive:16 max_radius=3 outputs_x=4 | remove smem-tile@blur_naive:14:img_s
// The blur naive kernel with four outputs per thread along x: a register tile over rows of the halo tile read as float4.
// blur, naive: one thread per output pixel, image and filter read from global memory,
// pixels outside the image skipped (zero padding).
#include <cuda_runtime.h>

#define BLOCK 16

__global__ void blur_naive(const float* img, const float* filt, float* out, int h, int w, int k)
{
    int x = (blockIdx.x * 4) * BLOCK + (threadIdx.x * 4);
    int y = blockIdx.y * BLOCK + threadIdx.y;
    // smem-tile: 'img' with its halo in shared memory, 4 outputs per thread along x (a register tile); the loop reads global memory unless k <= 2 * 3 + 1
    __shared__ __align__(16) float img_s[BLOCK + 6][(BLOCK - 1) * 4 + 12];
    __shared__ float kl_f_s[49];  // the factor `filt[i * k + j]` per offset pair
    int r = k / 2;
    float acc = 0.0f;
    if (k <= 2 * 3 + 1) {
        for (int sy = threadIdx.y; sy < BLOCK + k - 1; sy += BLOCK) {
            int i = sy - (int)threadIdx.y;
            int yy = y + i - r;
            for (int sx = threadIdx.x; sx < (BLOCK - 1) * 4 + 12; sx += BLOCK) {
                int j = sx - (int)(threadIdx.x * 4);
                int xx = x + j - r;
                img_s[sy][sx] = yy >= 0 && yy < h && xx >= 0 && xx < w ? img[yy * w + xx] : 0.0f;
            }
        }
        for (int kl_c = threadIdx.y * BLOCK + threadIdx.x; kl_c < k * k; kl_c += BLOCK * BLOCK) {
            int i = kl_c / k;
            int j = kl_c % k;
            kl_f_s[kl_c] = filt[i * k + j];
        }
        __syncthreads();
        float kl_acc[4];
        #pragma unroll
        for (int kl_c = 0; kl_c < 4; kl_c++) kl_acc[kl_c] = 0.0f;
        for (int i = 0; i < k; i++) {
            float kl_row[12];
            #pragma unroll
            for (int kl_c = 0; kl_c < 3; kl_c++) {
                const float4 kl_v = *reinterpret_cast<const float4*>(&img_s[threadIdx.y + i][threadIdx.x * 4 + 4 * kl_c]);
                kl_row[4 * kl_c + 0] = kl_v.x;
                kl_row[4 * kl_c + 1] = kl_v.y;
                kl_row[4 * kl_c + 2] = kl_v.z;
                kl_row[4 * kl_c + 3] = kl_v.w;
            }
            for (int j = 0; j < k; j++) {
                const float kl_f = kl_f_s[i * k + j];
                #pragma unroll
                for (int kl_c = 0; kl_c < 4; kl_c++) kl_acc[kl_c] += kl_f * kl_row[kl_c + j];
            }
        }
        for (int kl_c = 0; kl_c < 4; kl_c++) {
            int x = (blockIdx.x * 4) * BLOCK + (threadIdx.x * 4 + kl_c);
            int y = blockIdx.y * BLOCK + threadIdx.y;
            acc = kl_acc[kl_c];
            if (y < h && x < w) {
                out[y * w + x] = acc;
            }
        }
    } else {
        for (int kl_c = 0; kl_c < 4; kl_c++) {
            int x = (blockIdx.x * 4) * BLOCK + (threadIdx.x * 4 + kl_c);
            int y = blockIdx.y * BLOCK + threadIdx.y;
            int r = k / 2;
            float acc = 0.0f;
            if (y < h && x < w) {
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
    }
}

extern "C" void launch(const float* img, const float* filt, float* out, int h, int w, int k, cudaStream_t stream)
{
    dim3 block(BLOCK, BLOCK);
    dim3 grid(((w + BLOCK - 1) / BLOCK + 3) / 4, (h + BLOCK - 1) / BLOCK);
    blur_naive<<<grid, block, 0, stream>>>(img, filt, out, h, w, k);
}
