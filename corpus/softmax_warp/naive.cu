// softmax_warp: one warp per row (a block is 32 x 4 threads, threadIdx.y picks the row), the
// lanes stride over the row; the max and the sum are combined with xor-shuffles in helper
// functions. Three passes over the row in global memory.
#include <cuda_runtime.h>
#include <math.h>

constexpr int kWarpSize = 32;
constexpr int kRowsPerBlock = 4;

__device__ float warp_max(float v)
{
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

__device__ float warp_sum(float v)
{
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__global__ void softmax_warp_per_row(const float* src, float* dst, int num_rows, int row_len)
{
    const int lane = threadIdx.x;
    const int row = blockIdx.x * kRowsPerBlock + threadIdx.y;
    if (row >= num_rows) return;  // the whole warp leaves together
    const float* s = src + (size_t)row * row_len;
    float* d = dst + (size_t)row * row_len;

    float m = -INFINITY;
    for (int c = lane; c < row_len; c += kWarpSize) m = fmaxf(m, s[c]);
    m = warp_max(m);
    float sum = 0.0f;
    for (int c = lane; c < row_len; c += kWarpSize) sum += __expf(s[c] - m);
    sum = warp_sum(sum);
    const float inv = 1.0f / sum;
    for (int c = lane; c < row_len; c += kWarpSize) d[c] = __expf(s[c] - m) * inv;
}

extern "C" void launch(const float* src, float* dst, int num_rows, int row_len, cudaStream_t stream)
{
    const dim3 block(kWarpSize, kRowsPerBlock);
    const dim3 grid((num_rows + kRowsPerBlock - 1) / kRowsPerBlock);
    softmax_warp_per_row<<<grid, block, 0, stream>>>(src, dst, num_rows, row_len);
}
