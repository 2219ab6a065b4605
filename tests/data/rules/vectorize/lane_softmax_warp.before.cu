// test: apply vectorize@softmax_warp:24 | remove vectorize@softmax_warp:26 exact
// A warp per row (written by hand): a lane index from a bit mask, pointer locals for the row,
// __expf, shuffle reductions between the loops; the store loop becomes float4, the rest stays.
#include <cuda_runtime.h>

#define WARPS_PER_BLOCK 8

__global__ void softmax_warp(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)
{
    const int warp = blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (warp >= rows) return;
    const float* row = x + (size_t)warp * cols;
    float* out = y + (size_t)warp * cols;
    float m = -INFINITY;
    for (int c = lane; c < cols; c += 32)
        m = fmaxf(m, row[c]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float s = 0.f;
    for (int c = lane; c < cols; c += 32)
        s += __expf(row[c] - m);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float inv = 1.f / s;
    for (int c = lane; c < cols; c += 32) {
        out[c] = __expf(row[c] - m) * inv;
    }
}

extern "C" void launch(const float* x, float* y, int rows, int cols, cudaStream_t stream)
{
    softmax_warp<<<(rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK, 32 * WARPS_PER_BLOCK, 0, stream>>>(x, y, rows, cols);
}
