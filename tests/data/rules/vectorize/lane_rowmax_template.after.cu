// test: apply vectorize@row_max_warp:13 | remove vectorize@row_max_warp:15 exact
// A row-wise max, a warp per row, the warp size a template parameter and the lane a modulo;
// the index written out (x[row * cols + c]), no pointer local.
#include <cuda_runtime.h>

template <int WARP>
__global__ void row_max_warp(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)
{
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) / WARP;
    const int lane = threadIdx.x % WARP;
    if (row >= rows) return;
    float best = -3.402823466e38f;
    // vectorize: 4 elements per access of 'x' (float4); the loop below does the last cols % 4, or all when an address is not aligned
    const int nv = reinterpret_cast<unsigned long long>(&x[row * cols + 0]) % 16 == 0 ? cols / 4 : 0;
    for (int v = lane; v < nv; v += 32) {
        const int c = v * 4;
        const float4 kl_x = *reinterpret_cast<const float4*>(&x[row * cols + c]);
        {
            best = fmaxf(best, kl_x.x);
        }
        {
            best = fmaxf(best, kl_x.y);
        }
        {
            best = fmaxf(best, kl_x.z);
        }
        {
            best = fmaxf(best, kl_x.w);
        }
    }
    for (int c = lane + nv * 4; c < cols; c += WARP) {
        best = fmaxf(best, x[row * cols + c]);
    }
    for (int o = WARP / 2; o > 0; o /= 2) best = fmaxf(best, __shfl_down_sync(0xffffffffu, best, o));
    if (lane == 0) y[row] = best;
}

extern "C" void launch(const float* x, float* y, int rows, int cols, cudaStream_t stream)
{
    const int threads = 128;
    row_max_warp<32><<<(rows * 32 + threads - 1) / threads, threads, 0, stream>>>(x, y, rows, cols);
}
