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
    for (int c = c0; c < c1; c++) {
        const float t = in[IDX(r, c, cols)] * k;
        out[IDX(r, c, cols)] = t > 0.0f ? t : 0.0f;
    }
}

extern "C" void launch(const float* in, const float* s, float* out, int rows, int cols, cudaStream_t stream)
{
    dim3 block(8, 16);
    dim3 grid(((cols + GROUP - 1) / GROUP + 7) / 8, (rows + 15) / 16);
    scale_rows<<<grid, block, 0, stream>>>(in, s, out, rows, cols);
}
