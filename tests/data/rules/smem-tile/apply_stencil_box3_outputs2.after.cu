// test: apply smem-tile@box3f:16 outputs_x=2 | remove smem-tile@box3f:15:in_s
// A 3 x 3 float stencil of compile-time extent, macro indexing, a 32 x 8 block, the weight first in the
// product: two outputs per thread along x, rows read as float2, the grid half as wide.
#include <cuda_runtime.h>

#define BX 32
#define BY 8
#define AT(r, c, ld) ((r) * (ld) + (c))

__global__ void box3f(const float* in, const float* wts, float* out, int h, int w)
{
    int col = (blockIdx.x * 2) * BX + (threadIdx.x * 2);
    int row = blockIdx.y * BY + threadIdx.y;
    // smem-tile: 'in' with its halo in shared memory, 2 outputs per thread along x (a register tile)
    __shared__ __align__(16) float in_s[BY + 2][(BX - 1) * 2 + 4];
    __shared__ float kl_f_s[9];  // the factor `wts[dy * 3 + dx]` per offset pair
    float acc = 0.0f;
    for (int sy = threadIdx.y; sy < BY + 2; sy += BY) {
        int dy = sy - (int)threadIdx.y;
        for (int sx = threadIdx.x; sx < (BX - 1) * 2 + 4; sx += BX) {
            int dx = sx - (int)(threadIdx.x * 2);
            int r = row + dy - 1, c = col + dx - 1;
            in_s[sy][sx] = r >= 0 && r < h && c >= 0 && c < w ? in[AT(r, c, w)] : 0.0f;
        }
    }
    for (int kl_c = threadIdx.y * BX + threadIdx.x; kl_c < 3 * 3; kl_c += BX * BY) {
        int dy = kl_c / 3;
        int dx = kl_c % 3;
        kl_f_s[kl_c] = wts[dy * 3 + dx];
    }
    __syncthreads();
    float kl_acc[2];
    #pragma unroll
    for (int kl_c = 0; kl_c < 2; kl_c++) kl_acc[kl_c] = 0.0f;
    for (int dy = 0; dy < 3; dy++) {
        float kl_row[4];
        #pragma unroll
        for (int kl_c = 0; kl_c < 2; kl_c++) {
            const float2 kl_v = *reinterpret_cast<const float2*>(&in_s[threadIdx.y + dy][threadIdx.x * 2 + 2 * kl_c]);
            kl_row[2 * kl_c + 0] = kl_v.x;
            kl_row[2 * kl_c + 1] = kl_v.y;
        }
        for (int dx = 0; dx < 3; dx++) {
            const float kl_f = kl_f_s[dy * 3 + dx];
            #pragma unroll
            for (int kl_c = 0; kl_c < 2; kl_c++) kl_acc[kl_c] += kl_f * kl_row[kl_c + dx];
        }
    }
    for (int kl_c = 0; kl_c < 2; kl_c++) {
        int col = (blockIdx.x * 2) * BX + (threadIdx.x * 2 + kl_c);
        int row = blockIdx.y * BY + threadIdx.y;
        acc = kl_acc[kl_c];
        if (row < h && col < w) {
            out[AT(row, col, w)] = acc;
        }
    }
}

extern "C" void launch(const float* in, const float* wts, float* out, int h, int w, cudaStream_t stream)
{
    dim3 grid(((w + BX - 1) / BX + 1) / 2, (h + BY - 1) / BY);
    box3f<<<grid, dim3(BX, BY), 0, stream>>>(in, wts, out, h, w);
}
