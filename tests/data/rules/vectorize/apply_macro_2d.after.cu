#include <stdint.h>
// test: apply vectorize@scale_rows:19 | remove vectorize@scale_rows:22
// A 2-D grid (a thread per (row, group of columns)), the index through a macro, a store into a
// second array and a per-row scale read through a __device__ helper.
#include <cuda_runtime.h>

#define IDX(r, c, ld) ((r) * (ld) + (c))
#define GROUP 32

__device__ __forceinline__ float row_scale(const float* s, int r) { return s[r] * 0.5f; }

__global__ void scale_rows(const float* __restrict__ in, const float* __restrict__ s, float* __restrict__ out,
                           int rows, int cols)
{
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    const int c0 = (blockIdx.x * blockDim.x + threadIdx.x) * GROUP;
    if (r >= rows || c0 >= cols) return;
    const int c1 = min(c0 + GROUP, cols);
    const float k = row_scale(s, r);
    {
        int c = c0;
        if (((uintptr_t)&in[IDX(r, c, cols)] & 15) == 0 && ((uintptr_t)&out[IDX(r, c, cols)] & 15) == 0) {
            for (; c + 3 < c1; c += 4) {
                const float4 kl_in = *reinterpret_cast<const float4*>(&in[IDX(r, c, cols)]);
                float4 kl_out;
                {
                    const float t = kl_in.x * k;
                    kl_out.x = t > 0.0f ? t : 0.0f;
                }
                {
                    const float t = kl_in.y * k;
                    kl_out.y = t > 0.0f ? t : 0.0f;
                }
                {
                    const float t = kl_in.z * k;
                    kl_out.z = t > 0.0f ? t : 0.0f;
                }
                {
                    const float t = kl_in.w * k;
                    kl_out.w = t > 0.0f ? t : 0.0f;
                }
                *reinterpret_cast<float4*>(&out[IDX(r, c, cols)]) = kl_out;
            }
        }
        for (; c < c1; c++) {
            const float t = in[IDX(r, c, cols)] * k;
            out[IDX(r, c, cols)] = t > 0.0f ? t : 0.0f;
        }
    }
}

extern "C" void launch(const float* in, const float* s, float* out, int rows, int cols, cudaStream_t stream)
{
    dim3 block(8, 16);
    dim3 grid(((cols + GROUP - 1) / GROUP + 7) / 8, (rows + 15) / 16);
    scale_rows<<<grid, block, 0, stream>>>(in, s, out, rows, cols);
}
